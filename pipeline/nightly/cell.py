"""One nightly cell: its stages through the pipeline's own CLI (a crash stays in the cell), then
its metrics read back from the run directory. A plain function of plain data, so a Ray worker
can run it as well as the local loop; what it returns is all the store needs."""

import json
import math
import os
import subprocess
import sys
from dataclasses import asdict
from pathlib import Path

from pipeline.fsutil import runs_root
from pipeline.nightly.matrix import Cell

REPO = Path(__file__).resolve().parents[2]
UNSUPPORTED = "this host's vLLM cannot"  # serve refused for a scheme/dtype this host lacks


def execute(cell: Cell, log_dir: str) -> dict:
    """{model, cell, recipe, overrides_sha, status, error, stages, metrics}."""
    log = Path(log_dir) / f"{cell.model}--{cell.name}.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    result = {
        "model": cell.model,
        "cell": cell.name,
        "recipe": cell.recipe,
        "overrides_sha": cell.overrides_sha,
        "status": "ok",
        "error": None,
        "stages": {},
    }
    for stage in cell.stages:
        code, tail = _stage(cell, stage, log)
        if code == 0:
            result["stages"][stage] = "done"
        elif stage == "eval" and code == 1 and "eval gate failed" in tail:
            result["stages"][stage] = "gate_failed"
            result["status"] = "gate_failed"
        elif stage == "serve" and code == 2 and UNSUPPORTED in tail:
            result["stages"][stage] = f"skipped: {tail.strip().splitlines()[-1]}"
        else:
            result["stages"][stage] = "failed"
            result["status"] = "failed"
            result["error"] = f"{stage}: {_last_error(tail)}"
            break
    result["metrics"] = [asdict(m) for m in collect(runs_root() / cell.model / cell.run_name)]
    return result


def _stage(cell: Cell, stage: str, log: Path) -> tuple[int, str]:
    cmd = [
        sys.executable,
        "-m",
        "pipeline",
        stage,
        "--model",
        cell.model,
        "--recipe",
        cell.recipe_arg,
    ]
    if stage == "eval" and cell.eval_backend:
        cmd += ["--backend", cell.eval_backend]
    if stage == "serve":
        cmd += list(cell.serve_args)
    with open(log, "a") as out:
        out.write(f"\n$ {' '.join(cmd)}\n")
        out.flush()
        start = out.tell()
        code = subprocess.run(
            cmd, cwd=REPO, stdout=out, stderr=subprocess.STDOUT, env=os.environ
        ).returncode
    with open(log, errors="replace") as f:
        f.seek(start)
        return code, f.read()[-4000:]


def _last_error(tail: str) -> str:
    lines = [x for x in tail.splitlines() if x.strip()]
    errors = [x for x in lines if x.startswith("error:") or "Error" in x]
    return (errors or lines or ["no output"])[-1].strip()[:500]


def collect(run_dir: Path) -> list:
    """Metrics a run directory holds: quality (with standard errors), memory, throughput."""
    from pipeline.nightly.store import Metric

    found = []
    manifest = _json(run_dir / "manifest.json") or {}
    q = manifest.get("stages", {}).get("quantize", {})
    if q.get("status") == "done":
        m = q["metrics"]
        found.append(Metric("checkpoint_bytes", m["tensor_bytes"], None, "lower", "memory"))
        found.append(Metric("ratio_to_bf16", m["ratio_to_bf16"], None, "lower", "memory"))
    ev = _json(run_dir / "eval" / "results.json")
    if ev and manifest.get("stages", {}).get("eval", {}).get("status") == "done":
        h = ev["splits"]["heldout"]
        found += [
            Metric("ppl_ratio", h["ppl_ratio"], h["ppl_ratio_se"], "lower", "quality"),
            Metric("kl_mean", h["kl_mean"], h["kl_mean_se"], "lower", "quality"),
            Metric("same_top_pct", h["same_top_pct"], h["same_top_pct_se"], "higher", "quality"),
        ]
        for t in ev.get("tasks", []):
            if t["recovery"] is not None:
                found.append(
                    Metric(
                        f"{t['task']}.recovery", t["recovery"], _recovery_se(t), "higher", "quality"
                    )
                )
    sv = _json(run_dir / "serve" / "results.json")
    if sv and manifest.get("stages", {}).get("serve", {}).get("status") == "done":
        from pipeline.serve_compare import compare

        cmp = compare(sv["original"], sv["quantized"])
        kv = cmp["memory"]["kv_cache_tokens"]["ratio"]
        if kv is not None:
            found.append(Metric("kv_cache_tokens_ratio", kv, None, "higher", "memory"))
        for lv in cmp["levels"]:
            c = lv["concurrency"]
            tok = lv["output_tok_s"]
            found.append(
                Metric(f"c{c}.output_tok_s", tok["quantized"], None, "higher", "throughput")
            )
            found.append(
                Metric(f"c{c}.original_tok_s", tok["original"], None, "higher", "throughput")
            )
            found.append(
                Metric(f"c{c}.output_tok_s_ratio", tok["ratio"], None, "higher", "throughput")
            )
            ttft = lv["ttft_median_ms"]["ratio"]
            if ttft is not None:
                found.append(Metric(f"c{c}.ttft_median_ratio", ttft, None, "lower", "throughput"))
    return found


def _recovery_se(task: dict) -> float | None:
    o, q, so, sq = (
        task["original"],
        task["quantized"],
        task["original_stderr"],
        task["quantized_stderr"],
    )
    if not o or not q or so is None or sq is None:
        return None
    return task["recovery"] * math.sqrt((so / o) ** 2 + (sq / q) ** 2)


def _json(path: Path) -> dict | None:
    return json.loads(path.read_text()) if path.is_file() else None
