"""Fixtures of the end-to-end tests. The tiny model is built once per checkout (cached in
.cache/), and each recipe is quantized (evaluated, served) once per test session into a
session-wide RUNS_DIR; on several workers, a recipe's quantize and hf eval once per test run."""

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from pipeline.config.flags import to_argv
from tests.conftest import cli
from tests.parallel import made_once, shared_folder


@pytest.fixture(scope="session")
def tiny_model() -> Path:
    from pipeline.models.tiny.build import ensure

    return ensure()


@pytest.fixture(scope="session")
def session_runs(tmp_path_factory, request) -> Path:
    """The session's run root; on several workers its tiny-llama references are the run's
    (tests/parallel.py: the original is scored once per test run, not once per worker)."""
    runs = tmp_path_factory.mktemp("runs")
    shared = shared_folder(request.config, "tiny-llama-reference")
    if shared is not None:
        (runs / "tiny-llama" / "original").mkdir(parents=True)
        (runs / "tiny-llama" / "original" / "reference").symlink_to(shared)
    return runs


@pytest.fixture(scope="session")
def quantized(session_runs, tiny_model, request):
    """quantized(recipe) → the run dir, quantizing on first use (once per test run: on several
    workers, the others copy the first's fresh run directory, tests/parallel.py);
    quantized.printed[recipe]: what the quantize printed (stdout, then stderr)."""
    done: dict[str, Path] = {}
    printed: dict[str, str] = {}

    def get(recipe: str) -> Path:
        if recipe in done:
            return done[recipe]
        run = session_runs / "tiny-llama" / recipe
        with made_once(request.config, f"quantized-{recipe}") as shared:
            if shared is not None and shared.is_dir() and not run.exists():
                shutil.copytree(shared / "tiny-llama" / recipe, run)
                printed[recipe] = (shared / "printed.txt").read_text()
            else:
                fresh = not run.exists()
                result = cli("quantize", "--recipe", recipe, runs=session_runs)
                assert result.returncode == 0, result.stderr[-3000:]
                printed[recipe] = result.stdout + result.stderr
                if shared is not None and fresh and not shared.exists():
                    _share(run, shared, printed[recipe])
        done[recipe] = run
        return run

    get.printed = printed
    return get


def _share(run: Path, shared: Path, printed: str) -> None:
    """A copy of a run directory as one stage left it, for the other workers."""
    partial = shared.with_name(shared.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    shutil.copytree(run, partial / "tiny-llama" / run.name)
    (partial / "printed.txt").write_text(printed)
    partial.rename(shared)


def _adopt_eval(shared: Path, run: Path) -> bool:
    """Take the other worker's eval of the same artifact into this run directory (its entry
    in the manifest, through the pipeline's own API, and its results folder); False when this
    run directory already has an eval, or another artifact."""
    from pipeline.core.rundir import RunDir

    theirs = RunDir("tiny-llama", run.name, shared)
    mine = RunDir("tiny-llama", run.name, run.parent.parent)
    if mine.stage("eval") or mine.stage("quantize").fingerprint != (
        theirs.stage("quantize").fingerprint
    ):
        return False
    entry = theirs.stage("eval")
    shutil.copytree(theirs.path / "eval", run / "eval", dirs_exist_ok=True)
    mine.update({}, "eval", entry)
    return True


def _stages(run: Path) -> set[str]:
    return set(json.loads((run / "manifest.json").read_text())["stages"])


# Small but real serving: two concurrency levels, 8 requests each of 64 tokens in and 32 out
# (tiny-llama's FP8 decodes at ~28 tokens/s on a CPU: the recipes' 64 out doubled the sweep),
# no torch.compile
SWEEP_SETTINGS = {"concurrency": [1, 4], "num_prompts": 8, "input_len": 64, "output_len": 32,
                  "enforce_eager": True}  # fmt: skip
SWEEP = to_argv(SWEEP_SETTINGS)
# For tests about something else than pairing: one run per level against the original's cached
# reference (kept by served_fp8's paired run), so no second server starts
ONE_SIDE = [*SWEEP, "--repeats", "1", "--original", "cached"]


def needs_serving_env():
    from pipeline.engines.vllm import serving_env

    if not serving_env.available():
        pytest.skip("serving env not built (make setup)")


# Recipes whose tests read only their drift: evaluated without the recipe's lm-eval tasks and
# answers (the tests of those use gptq, fp8 and w4a16-rtn, evaluated as shipped). Same recipe
# name, so the same run folder and artifact; the eval's settings are its own. Not the recipes
# `make search` compares at 6 bits (tests/e2e/test_search.py): it evaluates them as shipped.
DRIFT_ONLY = {"fp8-kv", "w8a16"}


@pytest.fixture(scope="session")
def evaluated(quantized, session_runs, request, tmp_path_factory):
    """evaluated(recipe) → (results dict, first CLI result), evaluating once per session; on
    several workers once per test run (the others adopt the eval and what it printed). All with the
    hf backend, so that comparisons between recipes compare only the recipes."""
    done = {}
    drift_only = tmp_path_factory.mktemp("drift-only")

    def get(recipe: str):
        if recipe in done:
            return done[recipe]
        run = quantized(recipe)
        with made_once(request.config, f"evaluated-{recipe}") as shared:
            if shared is not None and shared.is_dir() and _adopt_eval(shared, run):
                said = json.loads((shared / "printed.txt").read_text())
                result = subprocess.CompletedProcess(**said)
            else:
                fresh = "eval" not in _stages(run)
                how = _drift_only(drift_only, recipe) if recipe in DRIFT_ONLY else recipe
                result = cli("eval", "--recipe", how, "--backend", "hf", runs=session_runs)
                assert result.returncode in (0, 3), result.stderr[-3000:]  # 3: a gate failed
                if shared is not None and fresh and not shared.exists():
                    keys = ("args", "returncode", "stdout", "stderr")
                    _share(run, shared, json.dumps({k: getattr(result, k) for k in keys}))
        done[recipe] = (json.loads(results_path(run, "eval").read_text()), result)
        return done[recipe]

    return get


def _drift_only(folder: Path, recipe: str) -> str:
    import yaml

    from tests.conftest import REPO

    data = yaml.safe_load((REPO / "recipes" / f"{recipe}.yaml").read_text())
    data["eval"] |= {"tasks": [], "generation": {"enabled": False}}
    path = folder / f"{recipe}.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return str(path)


@pytest.fixture(scope="session")
def served_fp8(quantized, session_runs):
    needs_serving_env()
    quantized("fp8")
    result = cli("serve", "--recipe", "fp8", *SWEEP, runs=session_runs, timeout=1200)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-3000:]
    path = results_path(session_runs / "tiny-llama" / "fp8", "serve")
    return json.loads(path.read_text()), result


@pytest.fixture(scope="session")
def real_shape() -> Path:
    """Llama-3-8B's layer shapes and vocabulary, one decoder layer, 1 GB shards
    (pipeline/models/realshape.py; cached per checkout). Built in its own process, as a user's
    checkpoint is: a build in the test process leaves it holding ~4 GiB, and the quantize
    measured next peaked 0.8 GiB higher (2.94 vs 2.12 GiB)."""
    import subprocess
    import sys

    from tests.conftest import REPO

    command = [sys.executable, "-m", "pipeline.models.realshape", "llama3-8b", "--layers", "1"]
    done = subprocess.run(command, cwd=REPO, capture_output=True, text=True, check=True)
    return Path(done.stdout.strip().splitlines()[-1])


def results_path(run_dir: Path, stage: str) -> Path:
    """The results.json of a stage's latest entry in a run directory's manifest."""
    manifest = json.loads((run_dir / "manifest.json").read_text())
    return run_dir / manifest["stages"][stage]["outputs"]["results"]
