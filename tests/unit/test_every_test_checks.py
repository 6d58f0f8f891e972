"""Every test function checks something: a test that only runs code passes with nothing checked.

Read from the source alone (`ast`): a `test_*` function of a test module under tests/ checks
when its body holds an `assert`; a `pytest.raises` / `warns` / `fail` / `skip`; a call to a
function named `assert_…`, `check[s]` / `check[s]_…` or `expect[s]` / `expect[s]_…` (numpy's,
a mock's, our own); or a call to a function of the same module whose own body holds one of
those (one level deep). A test that checks only through a fixture or another module's helper
goes in ALLOWED, with the reason."""

import ast
import re
from pathlib import Path

from tests.conftest import REPO

PYTEST_CHECKS = {"raises", "warns", "fail", "skip", "xfail", "deprecated_call"}
CHECK_NAME = re.compile(r"^(assert_|_?(check|expect)s?(_|$))")  # not checkpoint, expected
# (file under the repo, test function) → how it checks what it checks; none needed today
ALLOWED: dict[tuple[str, str], str] = {}


def _name(call: ast.Call) -> str:
    func = call.func
    return func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")


def _checks_itself(fn: ast.AST) -> bool:
    for node in ast.walk(fn):
        if isinstance(node, ast.Assert):
            return True
        if isinstance(node, ast.Call):
            func, name = node.func, _name(node)
            on_pytest = (
                isinstance(func, ast.Attribute) and getattr(func.value, "id", "") == "pytest"
            )
            if (on_pytest and name in PYTEST_CHECKS) or CHECK_NAME.match(name):
                return True
    return False


def unchecked(source: str) -> list[str]:
    """The `test_*` functions of a module's source that check nothing, by the rule above."""
    tree = ast.parse(source)
    defs = [n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)]
    helpers = {d.name for d in defs if not d.name.startswith("test_") and _checks_itself(d)}
    found = []
    for fn in defs:
        if not fn.name.startswith("test_") or _checks_itself(fn):
            continue
        called = {_name(n) for n in ast.walk(fn) if isinstance(n, ast.Call)}
        if not called & helpers:
            found.append(fn.name)
    return found


def _test_modules() -> list[Path]:
    tests = REPO / "tests"
    return sorted({*tests.rglob("test_*.py"), *tests.rglob("*_test.py")})


def test_the_rule_sees_a_test_that_checks_nothing():
    source = """
def _two(x):
    assert x == 2

def _build():
    return 2

def test_asserts():
    assert _build() == 2

def test_through_a_helper():
    _two(_build())

def test_raises():
    with pytest.raises(ValueError):
        int("x")

def test_numpy():
    np.testing.assert_allclose(1, 1)

def test_a_helper_of_a_helper():
    _build_and_see()

def _build_and_see():
    _two(_build())

def test_names_that_only_look_like_checks():
    checkpoint(expected(_checkout()))

def test_only_runs():
    _build()
"""
    assert unchecked(source) == [
        "test_a_helper_of_a_helper",  # one level deep only
        "test_names_that_only_look_like_checks",
        "test_only_runs",
    ]


def test_every_test_function_checks_something():
    modules = _test_modules()
    assert len(modules) > 100 and REPO / "tests/unit/test_every_test_checks.py" in modules
    flagged = [
        f"{path.relative_to(REPO).as_posix()}:{name}"
        for path in modules
        for name in unchecked(path.read_text())
    ]
    allowed = {f"{file}:{name}" for file, name in ALLOWED}
    assert sorted(set(flagged) - allowed) == [], "assert an outcome, or add to ALLOWED with why"
    assert sorted(allowed - set(flagged)) == [], "ALLOWED names a test that now checks itself"
