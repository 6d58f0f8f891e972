"""gpu-check's resume row: tiny-llama's GPTQ quantize killed (SIGKILL to its process group) once
its embeddings and first decoder layer are kept, then the same command. It must say it resumes
at layer 2 and write the bytes of the uninterrupted run (the gptq row's, in the same run root;
made here first when that row did not run). On a CPU they are equal (tests and
benchmarks/quantize_resume.py); on a GPU the replay of the kept layers runs the same kernels on
the same inputs, and where that does not give the same bytes, the row names the tensors.

    python -m pipeline.core.gpu_resume_check RUNS     # one JSON line; exit 0 when it holds
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
RESUMED = re.compile(r"resuming at layer \d+ of \d+ \(\d+ done")
KEPT_WHEN_KILLED = 2  # subgraphs: the embeddings, then the first decoder layer


def _quantize(runs: Path) -> subprocess.Popen:
    env = {**os.environ, "RUNS_DIR": str(runs)}
    return subprocess.Popen([sys.executable, "-m", "pipeline", *QUANTIZE], env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            start_new_session=True)  # fmt: skip


def _killed_once_kept(runs: Path) -> int:
    """Subgraphs kept when the run was killed; 0 when it ended first."""
    proc = _quantize(runs)
    progress = runs / "tiny-llama" / "gptq" / "artifact.checkpoints" / PROGRESS
    while proc.poll() is None:
        try:
            kept = len(json.loads(progress.read_text()).get("done") or {})
        except (OSError, ValueError):
            kept = 0
        if kept >= KEPT_WHEN_KILLED:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()
            return kept
        time.sleep(0.02)
    proc.communicate()
    return 0


def _finished(runs: Path) -> subprocess.CompletedProcess:
    proc = _quantize(runs)
    out, err = proc.communicate()
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


def check(runs: Path) -> dict:
    """{"why": None or why the row fails, "detail": what was seen}."""
    whole = runs / "tiny-llama" / "gptq" / "artifact"
    if not whole.is_dir():
        done = _finished(runs)
        if done.returncode != 0:
            return {"why": f"the uninterrupted run: exit {done.returncode}", "detail": ""}
    again = runs / "resume"
    kept = _killed_once_kept(again)
    if not kept:
        return {"why": "the run ended before a layer was kept: nothing to resume", "detail": ""}
    done = _finished(again)
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["no output"])[-1]
        return {"why": f"the resumed run: exit {done.returncode}: {last}", "detail": ""}
    said = RESUMED.search(done.stderr)
    if not said:
        why = f"killed with {kept} subgraphs kept; the re-run did not resume"
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
