"""gpu-check's resume row: tiny-llama's GPTQ quantize killed (SIGKILL to its process group) once
its embeddings and first decoder layer are kept (held there), then the same command. It must
say it resumes at layer 2 (1 done) and write the bytes of the uninterrupted run (the gptq row's,
in the same run root; made here first when that row did not run). On a CPU they are equal
(tests/e2e/quantize/test_quantize_stage.py runs this row); on a GPU the replay of the kept layers
runs the same kernels on the same inputs, and where that does not give the same bytes, the row
names the tensors.

    python -m pipeline.gpu_host.resume_check RUNS     # one JSON line; exit 0 when it holds
"""

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

from pipeline.core.checkpoints import PROGRESS
from pipeline.core.same_tensors import differences

QUANTIZE = ("quantize", "--recipe", "gptq")
KILLED_AT = "pass 0 subgraph 1"  # kept: the embeddings' subgraph, then the first decoder layer
RESUMED = re.compile(r"resuming at layer 2 of (\d+) \(1 done")
ANY_RESUME = re.compile(r"resuming at [^(]*\([^)]*\)")

# The command, held once unit `sys.argv[1]` is kept (Checkpoints.keep wrapped before the stage
# forks): the kill then lands at a known layer however fast the layers go (a GPU's take
# milliseconds: a poll of progress.json would kill somewhere later)
HELD = """
import runpy, sys, time
from pipeline.core.checkpoints import Checkpoints
keep, unit = Checkpoints.keep, sys.argv.pop(1)

def held(self, name, *args, **kwargs):
    keep(self, name, *args, **kwargs)
    if name == unit:
        time.sleep(600)

Checkpoints.keep = held
runpy.run_module("pipeline", run_name="__main__", alter_sys=True)
"""


def held_at(unit: str, argv: list[str], runs: Path, **popen) -> subprocess.Popen:
    """`python -m pipeline *argv` in a session of its own, held once `unit` is kept."""
    env = {**os.environ, "RUNS_DIR": str(runs)}
    return subprocess.Popen([sys.executable, "-c", HELD, unit, *argv], env=env, text=True,
                            start_new_session=True, **popen)  # fmt: skip


def kept_units(progress: Path) -> dict:
    try:
        return json.loads(progress.read_text()).get("done") or {}
    except (OSError, ValueError):
        return {}


def _killed_once_kept(runs: Path, argv: list[str]) -> int:
    """Subgraphs kept when the run was killed; 0 when it ended first."""
    proc = held_at(KILLED_AT, argv, runs, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    progress = runs / "tiny-llama" / "gptq" / "artifact.checkpoints" / PROGRESS
    while proc.poll() is None:
        if KILLED_AT in (done := kept_units(progress)):
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()
            return len(done)
        time.sleep(0.02)
    proc.communicate()
    return 0


def _quantize(runs: Path, argv: list[str]) -> subprocess.Popen:
    env = {**os.environ, "RUNS_DIR": str(runs)}
    return subprocess.Popen([sys.executable, "-m", "pipeline", *argv], env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            start_new_session=True)  # fmt: skip


def _finished(runs: Path, argv: list[str]) -> subprocess.CompletedProcess:
    proc = _quantize(runs, argv)
    out, err = proc.communicate()
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


def check(runs: Path, whole: Path | None = None, samples: int | None = None) -> dict:
    """{"why": None or why the row fails, "detail": what was seen}. `whole`: an uninterrupted
    run's artifact (made under `runs` when not given or missing); `samples`: fewer than the
    recipe's (a test's)."""
    argv = [*QUANTIZE, *(["--num-samples", str(samples)] if samples else [])]
    whole = whole or runs / "tiny-llama" / "gptq" / "artifact"
    if not whole.is_dir():
        done = _finished(runs, argv)
        if done.returncode != 0:
            return {"why": f"the uninterrupted run: exit {done.returncode}", "detail": ""}
    again = runs / "resume"
    kept = _killed_once_kept(again, argv)
    if not kept:
        return {"why": "the run ended before a layer was kept: nothing to resume", "detail": ""}
    done = _finished(again, argv)
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["no output"])[-1]
        return {"why": f"the resumed run: exit {done.returncode}: {last}", "detail": ""}
    said = RESUMED.search(done.stderr)
    if not said:
        other = ANY_RESUME.search(done.stderr)
        how = f"said `{other[0]}`" if other else "did not resume"
        why = f"killed with {kept} subgraphs kept (through layer 1); the re-run {how}"
        return {"why": why, "detail": ""}
    differ = differences(whole, again / "tiny-llama" / "gptq" / "artifact")
    if differ:
        shown = ", ".join(differ[:3]) + (f" (+{len(differ) - 3})" if len(differ) > 3 else "")
        return {"why": f"{said[0]}): {len(differ)} tensors differ: {shown}", "detail": ""}
    return {"why": None, "detail": f"{said[0]}); every tensor's bytes as the uninterrupted run's"}


if __name__ == "__main__":
    found = check(Path(sys.argv[1]))
    print(json.dumps(found))
    sys.exit(0 if found["why"] is None else 1)
