"""Plain-text tables the CLI prints."""

from pipeline.eval.results import EvalResults, TaskRow
from pipeline.serve.results import Pair, ServeResults


def eval_table(results: EvalResults) -> str:
    head = (
        f"{'split':<12} {'tokens':>7} {'ppl orig':>9} {'ppl quant':>10} {'ratio':>13} "
        f"{'mean KL':>17} {'p99 KL':>8} {'max KL':>7} {'same top %':>14} {'RMS Δp %':>9}"
    )
    lines = [head]
    for split, m in results.splits.items():
        lines.append(
            f"{split:<12} {m.tokens:>7} {m.ppl_original:>9.2f} {m.ppl_quantized:>10.2f} "
            f"{m.ppl_ratio:>6.4f}±{m.ppl_ratio_se:.4f} "
            f"{m.kl_mean:>9.2e}±{m.kl_mean_se:.1e} {m.kl_p99:>8.4f} {m.kl_max:>7.3f} "
            f"{m.same_top_pct:>7.2f}±{m.same_top_pct_se:.2f}  {m.rms_dp_pct:>8.3f}"
        )
    if results.tasks:
        lines.append(task_table(results.tasks))
    if results.gates.checks:
        marks = [
            f"{c.gate} {c.limit:g} ({c.value:.4g}: {'pass' if c.passed else 'FAIL'})"
            for c in results.gates.checks
        ]
        lines.append("gates (heldout): " + ", ".join(marks))
    return "\n".join(lines)


def task_table(rows: list[TaskRow]) -> str:
    lines = [
        f"{'task (lm-eval)':<24} {'metric':<10} {'n':>5} {'original':>14} {'quantized':>14} "
        f"{'recovery':>9}"
    ]
    for r in rows:
        lines.append(
            f"{r.task:<24} {r.metric:<10} {r.samples or '':>5} "
            f"{_score(r.original, r.original_stderr):>14} "
            f"{_score(r.quantized, r.quantized_stderr):>14} {_pct(r.recovery):>9}"
        )
    return "\n".join(lines)


def _score(value: float, stderr: float | None) -> str:
    return f"{value:.4f}±{stderr:.4f}" if stderr is not None else f"{value:.4f}"


def serve_table(results: ServeResults) -> str:
    """Memory and, per concurrency, throughput and latency: original, quantized, ratio."""
    c = results.comparison
    lines = [f"{'memory':<26} {'original':>14} {'quantized':>14} {'ratio':>8}"]
    rows = [
        ("checkpoint (MiB)", c.memory.checkpoint_bytes, 1 / 2**20),
        ("weights in vLLM (GiB)", c.memory.weights_gib, 1.0),
        ("KV cache (tokens)", c.memory.kv_cache_tokens, 1.0),
        (f"max concurrency @ {results.quantized.max_model_len:,}", c.memory.max_concurrency, 1.0),
    ]
    for label, pair, scale in rows:
        lines.append(
            f"{label:<26} {_num(pair.original, scale):>14} {_num(pair.quantized, scale):>14} "
            f"{_x(pair.ratio):>8}"
        )
    lines.append(
        f"{'concurrency':>11} {'out tok/s orig':>15} {'quant':>9} {'ratio':>7} "
        f"{'TTFT p50 ms':>12} {'ratio':>6} {'TTFT p99':>9} {'ratio':>6} "
        f"{'ITL p50 ms':>11} {'ratio':>6} {'ITL p99':>8} {'ratio':>6}"
    )
    for row in c.levels:
        t = row.output_tok_s
        cells = [
            f"{row.concurrency:>11}",
            f"{t.original:>15.1f} {t.quantized:>9.1f} {_x(t.ratio):>7}",
        ]
        for pair, width in (
            (row.ttft_median_ms, 12),
            (row.ttft_p99_ms, 9),
            (row.itl_median_ms, 11),
            (row.itl_p99_ms, 8),
        ):
            cells.append(f"{_latency(pair):>{width}} {_x(pair.ratio, pair.note):>6}")
        lines.append(" ".join(cells))
    lines.append(
        f"  latencies shown are the quantized model's; ratio = quantized / original "
        f"(throughput: higher is better; latency: lower). Original: {results.original.served_name}."
    )
    notes = {p.note for row in c.levels for p in (row.ttft_median_ms, row.itl_median_ms) if p.note}
    notes |= {p.note for row in c.levels for p in (row.ttft_p99_ms, row.itl_p99_ms) if p.note}
    lines += [f"  — {note}" for note in sorted(notes)]
    return "\n".join(lines)


def run_table(quality: EvalResults | None, serving: ServeResults | None, title: str) -> str:
    """One table for `make run`: drift (held-out), memory and peak throughput vs the original."""
    lines = [f"{title} vs the original"]
    if quality:
        h = quality.heldout
        lines.append(f"  perplexity ratio      {h.ppl_ratio:.4f} ± {h.ppl_ratio_se:.4f}")
        lines.append(f"  mean KL               {h.kl_mean:.3g} ± {h.kl_mean_se:.2g}")
        lines.append(f"  same top token        {h.same_top_pct:.2f}% ± {h.same_top_pct_se:.2f}")
        for t in quality.tasks:
            lines.append(f"  {t.task + ' recovery':<21} {_pct(t.recovery)}")
    if serving:
        mem = serving.comparison.memory
        top = max(serving.comparison.levels, key=lambda r: r.concurrency, default=None)
        lines.append(f"  checkpoint            {_x(mem.checkpoint_bytes.ratio)} of the original")
        lines.append(f"  KV cache capacity     {_x(mem.kv_cache_tokens.ratio)} the original's")
        if top:
            lines.append(
                f"  output tok/s @ c={top.concurrency:<4} {_x(top.output_tok_s.ratio)}; "
                f"TTFT p50 {_x(top.ttft_median_ms.ratio)}; ITL p50 "
                f"{_x(top.itl_median_ms.ratio)} (quantized / original)"
            )
    if quality:
        lines.append(f"  eval gates            {'passed' if quality.gates.passed else 'FAILED'}")
    return "\n".join(lines)


def _latency(pair: Pair) -> str:
    return f"{pair.quantized:.1f}" if pair.quantized is not None else "n/a"


def _num(value, scale: float) -> str:
    if value is None:
        return "n/a"
    v = value * scale
    return f"{v:,.0f}" if v >= 1000 else f"{v:,.2f}"


def _x(ratio, note: str | None = None) -> str:
    if ratio is None:
        return "—" if note else "n/a"
    return f"{ratio:.3f}×"


def _pct(ratio) -> str:
    return f"{100 * ratio:.1f}%" if ratio is not None else "n/a"
