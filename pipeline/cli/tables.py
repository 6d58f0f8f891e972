"""Plain-text tables the CLI prints (tabulate lays out the columns; the cells are ours)."""

from tabulate import tabulate

from pipeline.config.engine_name import ENGINE
from pipeline.eval import describe
from pipeline.eval.results import EvalResults, TaskRow
from pipeline.serve.results import Pair, ServeResults


def _plain(rows: list, headers: tuple[str, ...], align: str) -> str:
    """Columns as wide as their widest cell; `align`: l or r per column."""
    sides = tuple({"l": "left", "r": "right"}[a] for a in align)
    return tabulate(rows, headers, tablefmt="plain", colalign=sides, disable_numparse=True)


EVAL_HEADERS = ("split", "tokens", "ppl orig", "ppl quant", "ratio", "mean KL", "p99 KL",
                "max KL", "same top %", "RMS Δp %")  # fmt: skip


def eval_table(results: EvalResults) -> str:
    rows = [
        (
            split,
            m.tokens,
            f"{m.ppl_original:.2f}",
            f"{m.ppl_quantized:.2f}",
            f"{m.ppl_ratio:.4f}±{m.ppl_ratio_se:.4f}",
            f"{m.kl_mean:.2e}±{m.kl_mean_se:.1e}",
            f"{m.kl_p99:.4f}",
            f"{m.kl_max:.3f}",
            f"{m.same_top_pct:.2f}±{m.same_top_pct_se:.2f}",
            f"{m.rms_dp_pct:.3f}",
        )
        for split, m in results.splits.items()
    ]
    lines = [_plain(rows, EVAL_HEADERS, "lrrrrrrrrr")]
    if results.tasks:
        lines.append(task_table(results.tasks))
    if results.gates.checks:
        marks = [
            f"{c.gate} {c.limit:g} ({c.value:.4g}: {describe.gate_mark(c)})"
            for c in results.gates.checks
        ]
        lines.append("gates (heldout): " + ", ".join(marks))
    lines += describe.lines(results)  # the floor, each task paired, non-inferiority's words
    return "\n".join(lines)


def task_table(rows: list[TaskRow]) -> str:
    cells = [
        (
            r.task,
            r.metric,
            r.samples or "",
            _score(r.original, r.original_stderr),
            _score(r.quantized, r.quantized_stderr),
            _pct(r.recovery),
        )
        for r in rows
    ]
    headers = ("task (lm-eval)", "metric", "n", "original", "quantized", "recovery")
    return _plain(cells, headers, "llrrrr")


def _score(value: float, stderr: float | None) -> str:
    return f"{value:.4f}±{stderr:.4f}" if stderr is not None else f"{value:.4f}"


def serve_table(results: ServeResults) -> str:
    """Memory, per concurrency throughput and latency (original, quantized, paired ratio with its
    range over the repeats), then SLO capacity."""
    c = results.comparison
    rows = [
        ("checkpoint (MiB)", c.memory.checkpoint_bytes, 1 / 2**20),
        (f"weights in {ENGINE} (GiB)", c.memory.weights_gib, 1.0),
        ("engine PSS after load (MiB)", c.memory.engine_bytes_after_load, 1 / 2**20),
        ("engine PSS after bench (MiB)", c.memory.engine_bytes_after_bench, 1 / 2**20),
        ("KV cache (tokens)", c.memory.kv_cache_tokens, 1.0),
        (f"max concurrency @ {results.quantized.max_model_len:,}", c.memory.max_concurrency, 1.0),
    ]
    cells = [
        (label, _num(pair.original, scale), _num(pair.quantized, scale), _x(pair.ratio))
        for label, pair, scale in rows
    ]
    lines = [_plain(cells, ("memory", "original", "quantized", "ratio"), "lrrr")]
    how = (
        f"paired: both served at once, {c.repeats} alternating runs each per level; "
        "ratio = median of the paired ratios [lowest–highest]"
        if c.paired
        else "against the cached original (measured alone at another time; no spread)"
    )
    lines.append(f"per concurrency ({how})")
    metrics: tuple[tuple[str, str], ...] = (
        ("out tok/s", "output_tok_s"),
        ("TTFT p50 ms", "ttft_median_ms"),
        ("TTFT p99 ms", "ttft_p99_ms"),
        ("TPOT p50 ms", "tpot_median_ms"),
        ("ITL p50 ms", "itl_median_ms"),
        ("ITL p99 ms", "itl_p99_ms"),
        ("E2E p50 ms", "e2el_median_ms"),
    )
    if any(row.output_tok_s_per_gpu for row in c.levels):  # GPU hosts: the seed's metric
        metrics = (metrics[0], ("tok/s/GPU", "output_tok_s_per_gpu"), *metrics[1:])
    level_cells = [
        (
            row.concurrency,
            label,
            _num(pair.original, 1.0),
            _num(pair.quantized, 1.0),
            _x(pair.ratio, pair.note),
            _range(pair),
        )
        for row in c.levels
        for label, pair in ((label, getattr(row, key)) for label, key in metrics)
    ]
    headers = ("c", "metric", "original", "quantized", "ratio", "range")
    lines.append(_plain(level_cells, headers, "rlrrrr"))
    lines.append(
        "  ratio = quantized / original (throughput: higher is better; latency: lower). "
        f"Original: {results.original.served_name}."
    )
    notes = {getattr(row, key).note for row in c.levels for _, key in metrics}
    lines += [f"  — {note}" for note in sorted(n for n in notes if n)]
    lines.append(slo_lines(results))
    lines += cost_lines(results)
    return "\n".join(lines)


def cost_lines(results: ServeResults) -> list[str]:
    """$ per 1M output tokens per level and at SLO capacity; measured decode vs the bound."""
    lines = []
    if cost := results.cost:
        units = cost.units
        lines.append(
            f"$ per 1M output tokens ({cost.usd_per_hour:g} $/h per {_unit(cost.hardware)} "
            f"× {units['original']} original, {units['quantized']} quantized; "
            f"{cost.price_source})"
        )
        rows = [(f"c={lv.concurrency}", lv.usd_per_million_output_tokens) for lv in cost.levels]
        rows.append(("at SLO capacity", cost.at_slo_capacity))
        for label, pair in rows:
            lines.append(
                f"  {label:<16} {_usd(pair.original):>10} {_usd(pair.quantized):>10} "
                f"{_x(pair.ratio):>8} {_range(pair):>13}"
            )
    if check := results.bound:
        lines.append(
            f"decode vs the roofline bound on {check.hardware} ({check.context:,} cached "
            "tokens): bound step ms / measured TPOT ms = measured ÷ bound"
        )
        for side in ("original", "quantized"):
            for lv in getattr(check, side):
                ratio = "n/a" if lv.measured_over_bound is None else f"{lv.measured_over_bound:.2f}"
                tpot = _num(lv.tpot_median_ms, 1.0)
                lines.append(
                    f"  {side:<10} c={lv.concurrency:<4} {lv.decode_step_bound_ms:>9.2f} "
                    f"{tpot:>9} {ratio:>6}  ({lv.bound_by}-bound)"
                )
    return lines


def _unit(hardware: str) -> str:
    return "host" if hardware == "CPU host" else f"{hardware} GPU"


def _usd(value) -> str:
    return "n/a" if value is None else f"${value:,.3f}" if value < 100 else f"${value:,.0f}"


def slo_lines(results: ServeResults) -> str:
    slo = results.slo
    levels = ",".join(map(str, results.settings.concurrency))
    lines = [
        f"SLO: TTFT ≤ {slo.ttft_ms:g} ms and TPOT ≤ {slo.tpot_ms:g} ms for "
        f"{100 * slo.attainment:g}% of requests (levels measured: {levels})"
    ]
    for name, side in (("original", slo.original), ("quantized", slo.quantized)):
        if side.capacity is None:
            met = "met at no level measured"
        else:
            goodput = side.goodput_requests_s
            met = f"met up to {_capacity(side)}" + (
                f" (goodput {goodput:.2f} req/s)" if goodput is not None else ""
            )
        bound = side.memory_bound_concurrency
        limit = f"; limited by {side.limited_by}" if side.limited_by else ""
        lines.append(
            f"  {name:<10} {met}; memory-bound concurrency "
            f"{f'{bound:,}' if bound is not None else 'n/a'} (KV pool / "
            f"{results.settings.input_len + results.settings.output_len}-token requests){limit}"
        )
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
        if mem.engine_bytes_after_bench.ratio is not None:
            lines.append(
                f"  engine memory (PSS)   {_x(mem.engine_bytes_after_bench.ratio)} the original's"
            )
        if top:
            tok_s = top.output_tok_s
            spread = f" [{_range(tok_s)}]" if tok_s.spread else ""
            lines.append(
                f"  output tok/s @ c={top.concurrency:<4} {_x(tok_s.ratio)}{spread}; "
                f"TTFT p50 {_x(top.ttft_median_ms.ratio, top.ttft_median_ms.note)}; TPOT p50 "
                f"{_x(top.tpot_median_ms.ratio, top.tpot_median_ms.note)} (quantized / original"
                f"{', paired' if serving.comparison.paired else ', cached original'})"
            )
        sides = (("original", serving.slo.original), ("quantized", serving.slo.quantized))
        capacities = [f"{name} {_capacity(side)}" for name, side in sides]
        lines.append(f"  SLO capacity          {', '.join(capacities)}")
        if serving.cost and serving.cost.levels:
            top_cost = max(serving.cost.levels, key=lambda lv: lv.concurrency)
            p = top_cost.usd_per_million_output_tokens
            lines.append(
                f"  $ / 1M out tokens     {_x(p.ratio)} the original's @ c={top_cost.concurrency} "
                f"({_usd(p.quantized)} vs {_usd(p.original)})"
            )
    if quality:
        lines.append(f"  eval gates            {'passed' if quality.gates.passed else 'FAILED'}")
    return "\n".join(lines)


def _capacity(side) -> str:
    """c=16 (the highest level that met the SLO), c=16+ (the highest measured), or none."""
    if side.capacity is None:
        return "none"
    return f"c={side.capacity}{'+' if side.capacity_is_lower_bound else ''}"


def _range(pair: Pair) -> str:
    return f"{pair.spread[0]:.3f}–{pair.spread[1]:.3f}" if pair.spread else ""


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
