"""What people see of each stage when it finishes (the flow calls these), and `run`'s summary."""

from pipeline.cli.tables import eval_table, run_table, serve_table
from pipeline.config.engine_name import ENGINE, SERVE_COMMAND
from pipeline.core.outcome import Outcome
from pipeline.eval.results import load as eval_results
from pipeline.quantize import routing
from pipeline.serve.results import load as serve_results

MIB = 2**20


def _state(entry, cached: bool) -> str:
    return f"cached (since {entry.ended}; --force redoes it)" if cached else _done(entry)


def _done(entry) -> str:
    """The stage's own time, and the command's since its process started (imports, loading
    and checks before the stage: a first command's tens of seconds)."""
    import time

    import psutil

    since = time.time() - psutil.Process().create_time()
    took = entry.metrics["wall_seconds"]
    return f"done in {took:.1f} s ({since:.0f} s since the command started)"


def quantize(stage, entry, cached: bool) -> None:
    m = entry.metrics
    label = f"quantize {stage.ref.name} × {stage.recipe.name}"
    if cached:
        print(f"{label}: cached (inputs unchanged since {entry.ended}; --force redoes it)")
    else:
        print(f"{label}: {_done(entry)}")
    if m.get("online"):
        flags = " ".join(m.get("engine_args", []))
        print(f"  online    no artifact: {SERVE_COMMAND} {stage.artifact} {flags}")
        print(f"  manifest  {stage.rundir.manifest_path}")
        return
    print(f"  artifact  {stage.artifact}")
    if ext := m.get("external"):
        print(f"  format    {ext['quant_method']} ({ext['packing']}) by {ext['producer']}")
        print(f"  hf eval   {ext['hf_path']}")
    print(
        f"  size      {m['tensor_bytes'] / MIB:.2f} MiB tensors, {m['ratio_to_bf16']:.3f}× bf16, "
        f"{m['ratio_to_theoretical']:.3f}× its weights' bits alone"
        + (f", {m['ratio_to_ideal']:.3f}× with its scales" if "ratio_to_ideal" in m else "")
    )
    if "planned_peak_rss_bytes" in m:
        gib = 2**30
        print(
            f"  path      {m['path']}"
            + (f", {m['shards']} shards" if m.get("shards") else "")
            + f"; {m['params_per_second'] / 1e6:,.1f}M params/s, "
            f"{m['bytes_per_second'] / 2**20:,.0f} MiB/s of bf16 weights"
        )
        print(
            f"  memory    peak RSS {m['peak_rss_bytes'] / gib:.2f} GiB, planned "
            f"{m['planned_peak_rss_bytes'] / gib:.2f} GiB ({m['peak_rss_ratio_to_plan']:.2f}× plan)"
        )
    if resumed := m.get("resumed"):
        print(f"  resumed   at {resumed['at']}: {resumed['kept']} kept from a run that stopped "
              f"(~{resumed['kept_seconds']:.0f} s of its work not redone)")  # fmt: skip
    if (m.get("reload") or {}).get("spot_checked") is not None:
        print(f"  check     {m['reload']['reason']}")
    for modifier, args in (entry.inputs.get("capped") or {}).items():
        shown = ", ".join(f"{k} {v}" for k, v in args.items())
        print(f"  capped    {modifier} {shown} (tiny-llama is a CPU test model)")
    if line := routing.describe(m.get("routing")):
        print(f"  routing   {line}")
    reload = m.get("reload") or {}
    if reload.get("transformers") is False:
        use = "" if reload.get("hf_view") else f": evaluate and serve it with {ENGINE}"
        print(f"  note      plain from_pretrained: {reload['reason']}{use}")
    print(f"  manifest  {stage.rundir.manifest_path}")
    if not cached and stage.log.is_file():
        print(f"  log       {stage.log} (libraries' messages; -v shows them here)")


def eval_(stage, entry, cached: bool) -> None:
    results = stage.load_results(entry)
    q = stage.quantize
    kv = (
        ""
        if results.kv_cache in ("16-bit", f"auto ({ENGINE})")
        else f", KV cache {results.kv_cache}"
    )
    print(
        f"eval {q.ref.name} × {q.recipe.name}: {_state(entry, cached)}; backend "
        f"{results.backend} ({results.dtype}{kv}), reference keeps "
        f"{100 * results.reference_mass:g}% of the original's probability per token"
    )
    if stage.backend_reason and results.backend == stage.backend:
        print(f"  backend   {results.backend}, chosen by auto: {stage.backend_reason}")
    print(eval_table(results))
    print(f"  results   {stage.rundir.path / entry.outputs['results']}")
    if not cached and stage.log.is_file():
        print(f"  log       {stage.log} (libraries' messages; -v shows them here)")


def serve(stage, entry, cached: bool) -> None:
    results = stage.load_results(entry)
    q = stage.quantize
    if results.comparison.paired:
        base = "served beside it, benchmarked alternately"
    else:
        base = "its cached reference" if results.original_cached else "measured alone"
    print(f"serve {q.ref.name} × {q.recipe.name}: {_state(entry, cached)}; original model: {base}")
    print(serve_table(results))
    print(f"  results   {stage.rundir.path / entry.outputs['results']}")


STAGES = {"quantize": quantize, "eval": eval_, "serve": serve}


def run_summary(outcome: Outcome) -> str:
    """`make run`'s closing table, from the results the outcome points at."""

    by = {s.stage: s for s in outcome.stages if s.status in ("done", "cached", "gate_failed")}
    quality = eval_results(_path(by["eval"])) if "eval" in by else None
    if quality:  # as the flow re-checked them against the recipe now
        quality.gates.passed = by["eval"].status != "gate_failed"
    serving = serve_results(_path(by["serve"])) if "serve" in by else None
    if not quality and not serving:
        return ""
    lines = [run_table(quality, serving, f"{outcome.model} × {outcome.recipe}")]
    for s in outcome.stages:
        if s.status == "unsupported":
            lines.append(f"  {s.stage:<21} not run on this host: {s.message}")
    return "\n".join(lines)


def _path(stage_outcome):
    from pathlib import Path

    return Path(stage_outcome.paths["results"])
