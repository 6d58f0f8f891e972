"""Does every shipped recipe's gate decide on the default model? `pipeline eval` (the package's
console script, whose exit codes are the documented ones) of each recipe in recipes/, in turn,
in one run root: exit code, verdict line and seconds per recipe.

    .venv/bin/python benchmarks/shipped_verdicts.py [--model tiny-llama] [--runs DIR]

0 is pass, 3 a gate failed or could not decide (the line says which), 4 this host cannot (the
line says why). docs/figures.md's "every shipped recipe's eval" row comes from here.
"""

import argparse
import os
import subprocess
import tempfile
import time
from pathlib import Path

from pipeline.core.paths import REPO

PIPELINE = REPO / ".venv" / "bin" / "pipeline"


def verdict(printed: str) -> str:
    """The gates line, or the one-line error, of what eval printed."""
    lines = printed.splitlines()
    said = [x for x in lines if x.startswith("gates")] or [x for x in lines if "error" in x]
    return said[0] if said else "(no gates line)"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default="tiny-llama")
    p.add_argument("--runs", help="a run root to reuse (default: a fresh one)")
    args = p.parse_args()
    runs = args.runs or tempfile.mkdtemp(prefix="verdicts-")
    env = {**os.environ, "RUNS_DIR": runs}
    codes = {}
    for path in sorted((REPO / "recipes").glob("*.yaml")):
        started = time.monotonic()
        command = [str(PIPELINE), "eval", "--model", args.model, "--recipe", path.stem]
        done = subprocess.run(command, env=env, cwd=REPO, capture_output=True, text=True)
        codes[path.stem] = done.returncode
        seconds = time.monotonic() - started
        said = verdict(done.stdout + done.stderr)
        print(f"{path.stem:<12} exit {done.returncode}  {seconds:5.0f} s  {said}", flush=True)
    tally = {code: sorted(r for r, c in codes.items() if c == code) for code in set(codes.values())}
    print("; ".join(f"exit {c}: {len(rs)} ({', '.join(rs)})" for c, rs in sorted(tally.items())))
    print(f"run root: {Path(runs)}")


if __name__ == "__main__":
    main()
