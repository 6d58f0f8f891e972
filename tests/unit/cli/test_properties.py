"""Property-based: for any recipe mutation or command-line arguments, the outcome is exit 0, or
exit 2 with one `error:` line on stderr, and nothing is created under RUNS_DIR (hypothesis)."""

import contextlib
import io
import os
import tempfile
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from pipeline.cli.main import main
from tests.conftest import REPO

RECIPES = {p.stem: yaml.safe_load(p.read_text()) for p in (REPO / "recipes").glob("*.yaml")}
ODD_VALUES = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=30),
    st.lists(st.integers(-3, 3), max_size=3),
    st.dictionaries(st.text(max_size=8), st.integers(), max_size=2),
)
FUZZ = settings(max_examples=100, deadline=None, suppress_health_check=list(HealthCheck))


def _paths(tree, prefix=()):
    """Every key path of a nested mapping."""
    if isinstance(tree, dict):
        for key, value in tree.items():
            yield (*prefix, key)
            yield from _paths(value, (*prefix, key))


def _mutate(tree: dict, path: tuple, action: str, value) -> dict:
    tree = yaml.safe_load(yaml.safe_dump(tree))  # a deep copy
    parent = tree
    for key in path[:-1]:
        parent = parent[key]
    if action == "delete":
        parent.pop(path[-1])
    elif action == "rename":
        parent[f"{path[-1]}_typo"] = parent.pop(path[-1])
    else:
        parent[path[-1]] = value
    return tree


def _run(argv: list[str]) -> tuple[int, list[str], Path]:
    with tempfile.TemporaryDirectory() as tmp:
        runs = Path(tmp) / "runs"
        old = os.environ.get("RUNS_DIR")
        os.environ["RUNS_DIR"] = str(runs)
        err = io.StringIO()
        try:
            with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
                try:
                    code = main([a.replace("{tmp}", tmp) for a in argv])
                except SystemExit as e:  # argparse's refusals
                    code = e.code
        finally:
            os.environ.pop("RUNS_DIR") if old is None else os.environ.update(RUNS_DIR=old)
        created = runs.exists()
    return code, err.getvalue().strip().splitlines(), created


def _assert_clean(code, lines, created):
    event(f"exit {code}")
    assert code in (0, 2, 4), (code, lines)  # 4: a dry run whose plan this host refuses
    if code in (2, 4):
        errors = [x for x in lines if x.startswith("error: ")]
        assert len(errors) == 1 and "Traceback" not in "\n".join(lines), lines
    assert not created


@FUZZ
@given(
    name=st.sampled_from(sorted(RECIPES)),
    data=st.data(),
    action=st.sampled_from(["delete", "rename", "replace"]),
    value=ODD_VALUES,
)
def test_any_recipe_mutation_is_a_plan_or_one_line(name, data, action, value):
    paths = list(_paths(RECIPES[name]))
    path = data.draw(st.sampled_from(paths))
    mutated = _mutate(RECIPES[name], path, action, value)
    with tempfile.NamedTemporaryFile("w", suffix=".yaml", delete=False) as f:
        yaml.safe_dump(mutated, f)
    try:
        _assert_clean(*_run(["quantize", "--recipe", f.name, "--dry-run"]))
    finally:
        os.unlink(f.name)


@pytest.mark.parametrize("iters", ["", "200", 2.5, True, -1])
def test_autorounds_iters_of_the_wrong_kind_is_one_line(iters):
    """Found by the fuzz test above (CI, 2026-12-04): `iters: ""` met `>` and crashed."""
    mutated = _mutate(RECIPES["autoround"], _iters_path(), "replace", iters)
    with tempfile.NamedTemporaryFile("w", suffix=".yaml", delete=False) as f:
        yaml.safe_dump(mutated, f)
    try:
        code, lines, created = _run(["quantize", "--recipe", f.name, "--dry-run"])
    finally:
        os.unlink(f.name)
    assert (code, created) == (2, False), lines
    (line,) = lines  # one line, no traceback
    assert line.startswith("error: ") and "AutoRoundModifier.iters must be a whole number" in line


def _iters_path() -> tuple:
    (path,) = [p for p in _paths(RECIPES["autoround"]) if p[-1] == "iters"]
    return path


NUMBER_TEXT = st.one_of(
    st.integers(-(2**40), 2**40).map(str),
    st.floats(allow_nan=True, allow_infinity=True).map(str),
    st.sampled_from(["", "abc", "1e400", "-0", "0x10", "1,2"]),
)


@FUZZ
@given(
    flag=st.sampled_from(
        [
            "--users",
            "--context",
            "--gpu-memory-utilization",
            "--overhead-gib",
            "--max-num-batched-tokens",
            "--gpu",
            "--kv-dtype",
            "--model",
            "--recipe",
        ]
    ),  # fmt: skip
    value=st.one_of(NUMBER_TEXT, st.text(max_size=40)),
)
def test_any_plan_argument_is_a_table_or_one_line(flag, value):
    _assert_clean(*_run(["plan", "--model", "llama3-8b", flag, value]))


@FUZZ
@given(
    flag=st.sampled_from(["--num-samples", "--max-seq-length", "--model", "--recipe"]),
    value=st.one_of(NUMBER_TEXT, st.text(max_size=40)),
)
def test_any_quantize_argument_is_a_plan_or_one_line(flag, value):
    _assert_clean(*_run(["quantize", "--dry-run", flag, value]))
