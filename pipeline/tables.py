"""Plain-text tables the CLI prints."""


def eval_table(results: dict) -> str:
    head = (
        f"{'split':<12} {'tokens':>7} {'ppl orig':>9} {'ppl quant':>10} {'ratio':>13} "
        f"{'mean KL':>17} {'p99 KL':>8} {'max KL':>7} {'same top %':>14} {'RMS Δp %':>9}"
    )
    lines = [head]
    for split, m in results["splits"].items():
        lines.append(
            f"{split:<12} {m['tokens']:>7} {m['ppl_original']:>9.2f} {m['ppl_quantized']:>10.2f} "
            f"{m['ppl_ratio']:>6.4f}±{m['ppl_ratio_se']:.4f} "
            f"{m['kl_mean']:>8.5f}±{m['kl_mean_se']:.5f} {m['kl_p99']:>8.4f} {m['kl_max']:>7.3f} "
            f"{m['same_top_pct']:>7.2f}±{m['same_top_pct_se']:.2f}  {m['rms_dp_pct']:>8.3f}"
        )
    checks = results["gates"]["checks"]
    if checks:
        marks = [
            f"{c['gate']} {c['limit']:g} ({c['value']:.4g}: {'pass' if c['passed'] else 'FAIL'})"
            for c in checks
        ]
        lines.append("gates (heldout): " + ", ".join(marks))
    return "\n".join(lines)
