"""What the quantize stage costs beyond the library it drives: `pipeline quantize --force` beside
llm-compressor's `oneshot` alone on the same model, texts, tokenization and modifiers, in turn.

    .venv/bin/python benchmarks/quantize_overhead.py [--model tiny-llama] [--recipe gptq]
        [--repeats 3] [--num-samples N] [--max-seq-length L]

"Alone" is the bare library call a user would write (load in float32 on a CPU host as the stage
does, tokenize, `oneshot`, cast back, `save_pretrained(save_compressed=True)`), in a process of
its own, given the exact texts and modifiers the stage used (taken from the stage before the
timed runs). Each side runs `--repeats` times, alternating; printed: CPU seconds (user + system
of the process and its children) and wall seconds of each, and the ratio stage ÷ alone with
its range. docs/figures.md's overhead figures come from here.
"""

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict
from pathlib import Path

from pipeline.core.paths import REPO


def job_of(opts: argparse.Namespace, runs: Path) -> dict:
    """The oneshot.Job the stage builds for this command (its texts, caps and modifiers)."""
    from pipeline.core.runs import Runs
    from pipeline.quantize import stage as quantize_stage
    from pipeline.quantize.request import QuantizeRequest
    from pipeline.quantize.stage import QuantizeStage

    how = {"num_samples": opts.num_samples, "max_seq_length": opts.max_seq_length}
    q = QuantizeStage.prepare(QuantizeRequest.named(opts.model, opts.recipe, **how), Runs(runs))
    q.load_texts()
    return asdict(quantize_stage.job_spec(q))


def alone(spec_path: str, out: str) -> None:
    """llm-compressor by itself: what the stage's oneshot path does, nothing around it."""
    import torch
    from datasets import Dataset
    from llmcompressor import oneshot
    from transformers import AutoModelForCausalLM, AutoTokenizer

    job = json.loads(Path(spec_path).read_text())
    upcast = job["texts"] is not None and not torch.accelerator.is_available()
    model = AutoModelForCausalLM.from_pretrained(
        job["model_path"], dtype=torch.float32 if upcast else "auto"
    )
    tokenizer = AutoTokenizer.from_pretrained(job["model_path"])
    kwargs = {}
    if job["texts"]:
        cal = job["calibration"]
        enc = tokenizer(job["texts"], max_length=cal["max_seq_length"], truncation=True,
                        add_special_tokens=not cal["chat_template"])  # fmt: skip
        kwargs = {
            "dataset": Dataset.from_dict(dict(enc)),
            "num_calibration_samples": job["samples"],
            "max_seq_length": cal["max_seq_length"],
            "shuffle_calibration_samples": False,
        }
    torch.manual_seed(job["calibration"]["seed"])
    oneshot(model=model, recipe=job["recipe_yaml"], **kwargs)
    if upcast:
        model.to(getattr(torch, job["saved_dtype"]))
    model.save_pretrained(out, save_compressed=True)
    tokenizer.save_pretrained(out)


def timed(command: list[str], env: dict) -> tuple[float, float]:
    """(CPU seconds of the process and its children, wall seconds)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.monotonic()
    done = subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True)
    wall = time.monotonic() - t0
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(command)}: exit {done.returncode}\n{done.stderr[-3000:]}")
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return cpu, wall


def _spread(values) -> str:
    return f"{statistics.median(values):6.1f} s [{min(values):.1f}–{max(values):.1f}]"


def main() -> None:
    if sys.argv[1:2] == ["--alone"]:
        return alone(*sys.argv[2:4])
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="tiny-llama")
    parser.add_argument("--recipe", default="gptq")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--num-samples", type=int)
    parser.add_argument("--max-seq-length", type=int)
    opts = parser.parse_args()
    extra = []
    for flag in ("num_samples", "max_seq_length"):
        if getattr(opts, flag) is not None:
            extra += [f"--{flag.replace('_', '-')}", str(getattr(opts, flag))]
    with tempfile.TemporaryDirectory() as tmp:
        runs, spec = Path(tmp) / "runs", Path(tmp) / "job.json"
        spec.write_text(json.dumps(job_of(opts, runs)))
        env = {**os.environ, "RUNS_DIR": str(runs)}
        stage_cmd = [sys.executable, "-m", "pipeline", "quantize", "--model", opts.model,
                     "--recipe", opts.recipe, *extra, "--force"]  # fmt: skip
        alone_cmd = [sys.executable, __file__, "--alone", str(spec), str(Path(tmp) / "alone")]
        stage, bare = [], []
        for _ in range(opts.repeats):
            stage.append(timed(stage_cmd, env))
            bare.append(timed(alone_cmd, env))
    what = f"{opts.model} × {opts.recipe} {' '.join(extra)}".strip()
    print(f"{what}, {opts.repeats} runs of each in turn ({os.cpu_count()} cores):")
    for label, runs_of in (("stage", stage), ("llm-compressor alone", bare)):
        cpu, wall = zip(*runs_of, strict=True)
        print(f"  {label:<21} CPU {_spread(cpu)}  wall {_spread(wall)}")
    for i, name in ((0, "CPU"), (1, "wall")):
        ratios = [s[i] / b[i] for s, b in zip(stage, bare, strict=True)]
        print(f"  stage ÷ alone, {name}: {statistics.median(ratios):.2f}× "
              f"[{min(ratios):.2f}–{max(ratios):.2f}]")  # fmt: skip


if __name__ == "__main__":
    main()
