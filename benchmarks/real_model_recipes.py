"""Every shipped recipe on a real pretrained model: a row each of what a reader judges it by.

    .venv/bin/python benchmarks/real_model_recipes.py [--model smollm2-135m] [--runs DIR]
        [--recipes fp8,gptq] [--markdown out.md] [--force-eval]

Per recipe, in one run root: `pipeline quantize` (size against bf16, seconds, peak RSS against
its plan) then `pipeline eval` (its exit code and gates line, the held-out drift with its
standard errors, the lm-eval task's recovery with the paired 95% CI of the change, and the
generation drift: answers' length ratio with its CI and how many end with EOS). The original's
side of the eval is computed by the first recipe and reused by the rest, as a user's run root
would. A recipe this host cannot run shows its exit code and one-line reason. docs/figures.md's
"every recipe on SmolLM2-135M-Instruct" table comes from here.
"""

import argparse
import json
import os
import subprocess
import tempfile
import time
from pathlib import Path

from pipeline.core.paths import REPO

PIPELINE = REPO / ".venv" / "bin" / "pipeline"
COLUMNS = ("recipe", "size ×bf16", "quantize s", "peak RSS / plan", "mean KL ± SE",
           "ppl ratio ± SE", "same top %", "in top 5 %", "task recovery (Δ points, 95% CI)",
           "answers: length ×, EOS orig → quant", "verdict", "exit")  # fmt: skip


def verdict(gates_line: str) -> str:
    """ "pass", or the gates that failed and those that could not decide, by name."""
    if not gates_line.startswith("gates"):
        return gates_line
    checks = gates_line.split(": ", 1)[1].split("), ")
    failed = [c.split(" (")[0] for c in checks if "FAIL" in c]
    undecided = [c.split(" (")[0] for c in checks if "INCONCLUSIVE" in c.upper()]
    said = [f"FAIL: {', '.join(failed)}"] if failed else []
    said += [f"inconclusive: {', '.join(undecided)}"] if undecided else []
    return "; ".join(said) or "pass"


def said(printed: str, head: str) -> str:
    lines = [x for x in printed.splitlines() if x.startswith(head)]
    errors = [x for x in printed.splitlines() if x.startswith("error")]
    return (lines or errors or ["-"])[0]


def quantize_row(manifest: Path) -> list[str]:
    if not manifest.is_file():
        return ["-"] * 3
    m = json.loads(manifest.read_text())["stages"]["quantize"]
    if m.get("status") != "done":
        return ["-"] * 3
    q = m["metrics"]
    if "planned_peak_rss_bytes" not in q:  # an online recipe: vLLM quantizes as it loads
        return ["-"] * 3
    ratio = q.get("peak_rss_ratio_to_plan")
    rss = f"{q['peak_rss_bytes'] / 2**30:.2f} GiB / {q['planned_peak_rss_bytes'] / 2**30:.2f}"
    return [f"{q['tensor_bytes'] / q['bf16_bytes']:.3f}", f"{q['quantize_seconds']:.0f}",
            f"{rss} ({ratio:.2f}×)"]  # fmt: skip


def eval_row(results: Path | None) -> list[str]:
    if results is None or not results.is_file():
        return ["-"] * 6
    r = json.loads(results.read_text())
    h = r["splits"]["heldout"]
    tasks = []
    for t in r["tasks"]:
        p = t.get("paired") or {}
        ci = (f" ({100 * p['change']:+.1f}, [{100 * p['change_low']:+.1f}, "
              f"{100 * p['change_high']:+.1f}])") if p else ""  # fmt: skip
        tasks.append(f"{t['task']} {t['original']:.3f}→{t['quantized']:.3f}{ci}")
    g = r.get("generation") or {}
    answers = "-"
    if g:
        answers = (f"×{g['length_ratio']:.2f} [{g['length_ratio_low']:.2f}, "
                   f"{g['length_ratio_high']:.2f}], {100 * g['eos_rate_original']:.0f}% → "
                   f"{100 * g['eos_rate_quantized']:.0f}%")  # fmt: skip
    return [
        f"{h['kl_mean']:.2e} ± {h['kl_mean_se']:.1e}",
        f"{h['ppl_ratio']:.4f} ± {h['ppl_ratio_se']:.4f}",
        f"{h['same_top_pct']:.2f}",
        "-" if h.get("top5_pct") is None else f"{h['top5_pct']:.2f}",  # evals since it was added
        "; ".join(tasks) or "-",
        answers,
    ]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default="smollm2-135m")
    p.add_argument("--runs", help="a run root to reuse (default: a fresh one)")
    p.add_argument("--recipes", help="comma-separated (default: every shipped recipe)")
    p.add_argument("--markdown", type=Path, help="also write the table here")
    p.add_argument("--force-eval", action="store_true",
                   help="score again where a cached eval lacks a figure added since")  # fmt: skip
    args = p.parse_args()
    runs = Path(args.runs or tempfile.mkdtemp(prefix="real-model-"))
    env = {**os.environ, "RUNS_DIR": str(runs)}
    names = args.recipes.split(",") if args.recipes else sorted(
        path.stem for path in (REPO / "recipes").glob("*.yaml"))  # fmt: skip
    rows = []
    print(" | ".join(COLUMNS), flush=True)
    for name in names:
        started = time.monotonic()
        base = [str(PIPELINE), "--model", args.model, "--recipe", name]
        quantized = subprocess.run([base[0], "quantize", *base[1:]], env=env, cwd=REPO,
                                   capture_output=True, text=True)  # fmt: skip
        code, printed = quantized.returncode, quantized.stdout + quantized.stderr
        results = None
        if code == 0:
            again = ["--force"] if args.force_eval else []
            done = subprocess.run([base[0], "eval", *base[1:], *again], env=env, cwd=REPO,
                                  capture_output=True, text=True)  # fmt: skip
            code, printed = done.returncode, done.stdout + done.stderr
            found = [x.split()[-1] for x in printed.splitlines() if x.strip().startswith("results")]
            results = (REPO / found[-1]) if found else None
            if results is not None and not results.is_absolute():
                results = REPO / results
        manifest = runs / args.model / name / "manifest.json"
        line = said(printed, "gates") if code in (0, 3) else said(printed, "error")
        row = [name, *quantize_row(manifest), *eval_row(results), verdict(line).replace("|", "/"),
               str(code)]  # fmt: skip
        rows.append(row)
        print(" | ".join(row) + f"   ({time.monotonic() - started:.0f} s)", flush=True)
    table = ["| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    table += ["| " + " | ".join(row) + " |" for row in rows]
    if args.markdown:
        args.markdown.write_text("\n".join(table) + "\n")
    print("\n".join(table))
    print(f"run root: {runs}")


if __name__ == "__main__":
    main()
