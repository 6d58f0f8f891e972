"""`make advise`: which recipe to deploy, on how many GPUs, at what cost and what quality loss.

Per candidate (the original, each recipe; vLLM's online FP8 among them) × KV-cache dtype × the
tensor-parallel sizes from the fewest GPUs that hold USERS × CONTEXT (the capacity planner) up
to 8× that: the decode step of USERS sequences at CONTEXT tokens and the prefill of one
CONTEXT-token prompt, bounded by pipeline/perf/bound.py on the GPU; the cheapest deployment
that meets the SLO is the candidate's row. Rows are ranked by $ per answer (the eval's measured
tokens per answer × $ per token: a recipe whose answers grow costs more than its $ per token
says) where every candidate has one, else by $ per 1M output tokens, among those that meet the
SLO and the quality gate (MAX_KL); the rest follow with the reason.

Every figure says where it comes from: `measured` (this model and recipe's latest eval / serve
in the runs folder; serve figures only where they ran on the hardware asked about), `bound`
(the roofline: no engine does better) or `planned` (the capacity planner's memory arithmetic).
Quality not measured is "not evaluated", never a guess.
"""

from dataclasses import asdict, dataclass, field

from pipeline.config.engine_defaults import GPU_MEMORY_UTILIZATION
from pipeline.config.engine_name import ENGINE, PINNED, SERVE_COMMAND
from pipeline.core.rundir import RunDir
from pipeline.core.runs import Runs, key
from pipeline.eval import results as eval_results
from pipeline.perf import bound, prices
from pipeline.planning import deployment, gpus, parallel
from pipeline.planning.geometry import Geometry
from pipeline.planning.gpus import GPUS_PER_NODE, MAX_NODES, Hardware, Inventory
from pipeline.planning.weights import artifact_bytes
from pipeline.serve import results as serve_results

KV_DTYPES = ("auto", "fp8")
# what a card's deployment table and `make advise` assume unless told: the README's headline
REFERENCE_GPU, REFERENCE_USERS, REFERENCE_CONTEXT = "H100-80GB", 100, 4000
WIDEST = 8  # tensor-parallel sizes tried: from the fewest GPUs that fit to this many times it


@dataclass
class Row:
    recipe: str
    kv_dtype: str | None = None
    gpus: int | None = None  # TP × PP (planned); None: does not fit
    pipeline_stages: int = 1  # PP: one stage per node beyond the first (vLLM's Ray executor)
    max_users: int | None = None  # planned
    weights_bytes: int = 0  # planned
    compute: str = "bf16"  # the tensor cores the step runs on
    itl_ms: float | None = None
    ttft_ms: float | None = None
    tokens_s_per_gpu: float | None = None
    usd_per_hour: float | None = None
    usd_per_million: float | None = None
    tokens_per_answer: float | None = None  # measured: the eval's greedy answers, mean length
    usd_per_answer: float | None = None  # $/1M × tokens per answer: a longer answer costs more
    performance_source: str = "bound"
    meets_slo: bool | None = None
    quality: dict = field(default_factory=lambda: {"source": "not evaluated"})
    rejected: str | None = None  # why the row is not ranked
    expert_parallel: bool = False  # --enable-expert-parallel: the plain TP split is refused
    engine_flags: str | None = None  # the planned layout's serve flags
    refused: list[str] = field(default_factory=list)  # why vLLM refuses smaller/plain layouts

    def describe(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class Measured:
    """Where a model's measured results are read: its run folders under `runs`, each fetched
    without weights (results and manifests) and read as fetched."""

    runs: Runs
    model: str

    def run_dir(self, recipe_dir: str) -> RunDir:
        self.runs.pull(key(self.model, recipe_dir), weights=False)  # results, not weights
        return RunDir(self.model, recipe_dir, self.runs.unsynced())

    def every_run_dir(self) -> list[RunDir]:
        self.runs.pull(self.model, weights=False)  # in object storage: every run's results
        fetched = self.runs.unsynced()
        found = sorted((self.runs.local / self.model).glob("*"))
        return [RunDir(self.model, p.name, fetched) for p in found]


@dataclass(frozen=True)
class Ask:
    users: int
    context: int
    slo_ttft_ms: float | None = None
    slo_itl_ms: float | None = None
    max_kl: float | None = None
    utilization: float = GPU_MEMORY_UTILIZATION
    overhead_gib: float | None = None  # a flat allowance per GPU (None: vLLM's rule)

    def load(self, weights: int, kv_dtype: str) -> deployment.Load:
        return deployment.Load(weights, kv_dtype, self.users, self.context)

    def budget(self) -> deployment.Budget:
        flat = None if self.overhead_gib is None else int(self.overhead_gib * 2**30)
        return deployment.Budget(self.utilization, flat)


def advise(
    measured: Measured | None,
    g: Geometry,
    recipes: list,
    hw: Hardware,
    price: prices.Price | None,
    ask: Ask,
) -> list[Row]:
    """Rows ranked; `measured` None: bounds and plans only (no run folder is read)."""
    rows = [_best(measured, g, r, hw, price, ask) for r in [None, *recipes]]
    _price_answers(rows)
    for row in rows:
        row.rejected = _rejected(row, ask)
    candidates = [r for r in rows if not r.rejected]
    per_answer = bool(candidates) and all(r.usd_per_answer is not None for r in candidates)
    ranked = sorted(candidates, key=lambda r: (*_cost(r, per_answer), r.gpus or 0))
    return ranked + [r for r in rows if r.rejected]


def ranked_by(rows: list[Row]) -> str:
    """What the ranking read: $ per answer where every ranked row has a measured answer
    length, else $ per 1M output tokens."""
    candidates = [r for r in rows if not r.rejected]
    if candidates and all(r.usd_per_answer is not None for r in candidates):
        return "$ per answer (measured answer length × $ per token)"
    return "$ per 1M output tokens (answer lengths not measured for every row)"


def _cost(row: Row, per_answer: bool) -> tuple[bool, float]:
    value = row.usd_per_answer if per_answer else row.usd_per_million
    return value is None, value or 0.0


def _price_answers(rows: list[Row]) -> None:
    """Tokens per answer from each recipe's eval (the original's from any of them: every eval
    generates the original's answers to the same prompts), and the $ per answer they give."""
    original = next(
        (r.quality["original_tokens_per_answer"] for r in rows
         if r.quality.get("original_tokens_per_answer") is not None), None,
    )  # fmt: skip
    for row in rows:
        tokens = original if row.recipe == "original" else row.quality.get("tokens_per_answer")
        row.tokens_per_answer = tokens
        if tokens is not None and row.usd_per_million is not None:
            row.usd_per_answer = row.usd_per_million * tokens / 1e6


def _best(measured: Measured | None, g, recipe, hw, price, ask) -> Row:
    name = recipe.name if recipe else "original"
    weights = artifact_bytes(recipe, g) if recipe else g.original_bytes
    footprint = bound.footprint(g, recipe)
    kv_dtypes = ["fp8"] if recipe and recipe.kv_cache_scheme() else list(KV_DTYPES)
    candidates = []
    for kv in kv_dtypes:
        for tp, pp in _layouts(g, weights, kv, hw, ask, recipe):
            candidates.append(
                _deployment(recipe, g, footprint, weights, kv, tp, pp, hw, price, ask)
            )
    row = _cheapest(candidates) or Row(name, weights_bytes=weights, compute=footprint.compute)
    row.refused = _refused(g, recipe, row)
    if measured is None:
        return row
    row.quality = _quality(measured, name)
    if served := _measured_serve(measured, name, hw, price, ask):
        row.__dict__.update(served)
    return row


def _deployment(recipe, g, fp, weights, kv, tp, pp, hw, price, ask) -> Row:
    decode = bound.decode(g, fp, hw, ask.users, ask.context, kv, tp, pp)
    prefill = bound.prefill(g, fp, hw, 1, ask.context, kv, tp, pp)
    ep = deployment.split(g, recipe, tp).expert_parallel
    load, budget = ask.load(weights, kv), ask.budget()
    planned = deployment.at(g, load, _inventory(hw), tp, pp, budget, ep)
    gpus = tp * pp
    tokens_s = ask.users / decode.seconds
    row = Row(
        recipe=recipe.name if recipe else "original",
        expert_parallel=ep,
        engine_flags=planned.engine_flags(),
        kv_dtype=kv,
        gpus=gpus,
        pipeline_stages=pp,
        max_users=planned.max_users,
        weights_bytes=weights,
        compute=decode.compute,
        itl_ms=decode.seconds * 1e3,
        ttft_ms=prefill.seconds * 1e3,
        tokens_s_per_gpu=tokens_s / gpus,
    )
    if price:
        row.usd_per_hour = price.usd_per_hour * gpus
        row.usd_per_million = price.per_million(gpus, tokens_s)
    row.meets_slo = _meets(row.ttft_ms, row.itl_ms, ask)
    return row


def _cheapest(rows: list[Row]) -> Row | None:
    if not rows:
        return None
    meeting = [r for r in rows if r.meets_slo] or rows
    return min(meeting, key=lambda r: (r.usd_per_million or 0, r.gpus, r.kv_dtype != "auto"))


def _layouts(g, weights, kv, hw, ask, recipe=None) -> list[tuple[int, int]]:
    """(TP, PP): the fewest GPUs that hold the weights and USERS × CONTEXT of KV, and wider
    TPs within a node that vLLM loads the recipe's artifact at; beyond a node, the planner's
    TP × PP alone."""
    gpus = _inventory(hw)
    fewest = deployment.fewest(g, ask.load(weights, kv), gpus, ask.budget(), recipe)
    if fewest is None:
        return []
    tp, pp = fewest.tensor_parallel_size, fewest.pipeline_parallel_size
    if not hw.link_bytes_s:  # a CPU host: one engine
        return [(1, 1)] if fewest.gpus == 1 else []
    if pp > 1:
        return [(tp, pp)]
    sizes = parallel.tensor_parallel_sizes(g, min(gpus.per_node, tp * WIDEST))
    loads = [s for s in sizes if s >= tp and deployment.split(g, recipe, s).loads]
    return [(size, 1) for size in loads]


def _refused(g, recipe, row: Row) -> list[str]:
    """Why vLLM refuses the TPs up to the row's (plain, or however split): the layouts passed
    over, and why the row's own needs expert parallel."""
    if recipe is None or not row.gpus:
        return []
    tp = row.gpus // row.pipeline_stages
    found = []
    for size in parallel.tensor_parallel_sizes(g, tp):
        split = deployment.split(g, recipe, size)
        if split.reason and (not split.loads or size == tp):
            found.append(deployment.passed_over(size, split.reason))
    return found


def _inventory(hw: Hardware) -> Inventory:
    return Inventory(hw)  # nodes of GPUS_PER_NODE, up to MAX_NODES of them


def _meets(ttft_ms: float | None, itl_ms: float | None, ask: Ask) -> bool | None:
    if ask.slo_ttft_ms is None and ask.slo_itl_ms is None:
        return None
    checks = []
    if ask.slo_ttft_ms is not None:
        checks.append(ttft_ms is not None and ttft_ms <= ask.slo_ttft_ms)
    if ask.slo_itl_ms is not None:
        checks.append(itl_ms is not None and itl_ms <= ask.slo_itl_ms)
    return all(checks)


def _rejected(row: Row, ask: Ask) -> str | None:
    if row.gpus is None:
        return (
            f"does not fit {ask.users} × {ask.context:,} tokens on {MAX_NODES} nodes "
            f"of {GPUS_PER_NODE} GPUs"
        )
    if row.meets_slo is False:
        return "misses the SLO"
    kl = row.quality.get("kl_mean")
    if ask.max_kl is not None and kl is not None and kl > ask.max_kl:
        return f"mean KL {kl:.3g} > MAX_KL {ask.max_kl:g}"
    return None


def _quality(measured: Measured, recipe_name: str) -> dict:
    """The latest eval of this model × recipe in the runs folder (the original: no drift)."""
    if recipe_name == "original":
        return {"source": "reference", "kl_mean": 0.0, "kl_mean_se": 0.0, "same_top_pct": 100.0}

    rundir = measured.run_dir(recipe_name)
    entry = rundir.stage("eval")
    if not entry or entry.status != "done" or "results" not in entry.outputs:
        return {"source": "not evaluated"}
    try:
        found = eval_results.EvalResults.model_validate_json(
            (rundir.path / entry.outputs["results"]).read_text()
        )
    except (OSError, ValueError):
        return {"source": "not evaluated"}
    split = found.splits.get("heldout") or next(iter(found.splits.values()))
    tasks = [t.quantized for t in found.tasks]
    answers = found.generation
    return {
        "source": "measured",
        "kl_mean": split.kl_mean,
        "kl_mean_se": split.kl_mean_se,
        "same_top_pct": split.same_top_pct,
        "task_score": sum(tasks) / len(tasks) if tasks else None,
        "backend": found.backend,
        "tokens_per_answer": answers.mean_tokens_quantized if answers else None,
        "original_tokens_per_answer": answers.mean_tokens_original if answers else None,
        "answer_length_ratio": answers.length_ratio if answers else None,
    }


def _measured_serve(measured: Measured, recipe_name, hw: Hardware, price, ask) -> dict | None:
    """This model × recipe's latest serve, where it ran on `hw`: output tokens/s per GPU (or
    per host) at the highest concurrency tested ≤ USERS, its ITL and TTFT, and the $ they
    give."""

    for rundir in _serve_dirs(measured, recipe_name):
        entry = rundir.stage("serve")
        if not entry or entry.status != "done" or not _same_hardware(entry.environment, hw):
            continue
        try:
            found = serve_results.load(rundir.path / entry.outputs["results"])
        except (OSError, ValueError, KeyError):
            continue
        side = found.original if recipe_name == "original" else found.quantized
        levels = sorted(side.levels, key=lambda lv: lv.concurrency)
        level = ([lv for lv in levels if lv.concurrency <= ask.users] or levels[:1])[-1:]
        if not level:
            continue
        lv, units = level[0], side.gpus or 1
        # its own name: `measured` is the runs this looks through
        found_serve: dict = {
            "performance_source": f"measured (serve, concurrency {lv.concurrency})",
            "itl_ms": lv.itl_median_ms,
            "ttft_ms": lv.ttft_median_ms,
            "tokens_s_per_gpu": lv.output_tok_s / units,
            "gpus": units,
        }
        if price:
            found_serve["usd_per_hour"] = price.usd_per_hour * units
            found_serve["usd_per_million"] = price.per_million(units, lv.output_tok_s)
        found_serve["meets_slo"] = _meets(lv.ttft_median_ms, lv.itl_median_ms, ask)
        return found_serve
    return None


def _serve_dirs(measured: Measured, recipe_name: str) -> list[RunDir]:
    """Where a side was served: its own run dir; the original, beside any recipe."""
    if recipe_name != "original":
        return [measured.run_dir(recipe_name)]
    return measured.every_run_dir()


def _same_hardware(environment: dict, hw: Hardware) -> bool:
    """A serve measured on this hardware: the same GPU type, or this CPU host."""

    found = environment.get("gpus") or []
    if hw.name.startswith("this host"):
        return not found
    return bool(found) and gpus.match(found[0]) == hw


def render(rows: list[Row], header: str, price: prices.Price | None) -> str:
    lines = [
        header,
        f"{'recipe':<12} {'KV':>4} {'GPUs':>5} {'users':>6} {'tok/s/GPU':>10} {'ITL ms':>7} "
        f"{'TTFT ms':>8} {'$/h':>7} {'$/1M tok':>9} {'tok/ans':>7} {'$/1k ans':>8}  "
        f"{'perf':<8} {'mean KL ± SE':<20} {'same-top':>8}  note",
    ]
    for r in rows:
        q = r.quality
        if q["source"] == "reference":
            kl, same = "reference (no drift)", "100%"
        elif "kl_mean" in q:
            kl = f"{q['kl_mean']:.2e} ± {q['kl_mean_se']:.1e}"
            same = f"{q['same_top_pct']:.1f}%"
        else:
            kl, same = q["source"], "-"
        lines.append(
            f"{r.recipe:<12} {_kv(r.kv_dtype):>4} {_gpus(r):>5} {_n(r.max_users):>6} "
            f"{_f(r.tokens_s_per_gpu, '.1f'):>10} {_f(r.itl_ms, '.2f'):>7} "
            f"{_f(r.ttft_ms, '.1f'):>8} {_f(r.usd_per_hour, '.2f'):>7} "
            f"{_f(r.usd_per_million, '.3f'):>9} {_f(r.tokens_per_answer, '.0f'):>7} "
            f"{_f(r.usd_per_answer and r.usd_per_answer * 1e3, '.3f'):>8}  "
            f"{r.performance_source.split(' ')[0]:<8} "
            f"{kl:<20} {same:>8}  {r.rejected or ''}"
        )
    lines.append(
        "perf: bound = roofline (no engine does better), measured = this model's serve on this "
        "hardware; GPUs and users: planned (KV for users × context; TP×PP: pipeline stages on "
        f"nodes of 8, {ENGINE}'s Ray executor); KL: measured with the recipe's own KV cache; "
        "tok/ans: the eval's greedy answers to its prompts (measured), $/1k ans = $/1M tok × "
        f"tok/ans / 1000; ranked by {ranked_by(rows)}"
    )
    lines.append(f"price: {price.usd_per_hour:g} $/h per GPU, {price.source}" if price else
                 "price: none for this GPU (--gpu-hour-usd)")  # fmt: skip
    return "\n".join(lines + _layout_notes(rows))


def _layout_notes(rows: list[Row]) -> list[str]:
    """Rows whose layout is not vLLM's plain TP split: their flags and why."""
    lines = []
    for r in rows:
        if r.refused:
            lines.append(f"{r.recipe} ({_kv(r.kv_dtype)}): {PINNED} would refuse —")
            lines += [f"  {reason}" for reason in r.refused]
            if r.engine_flags:
                lines.append(f"  → `{SERVE_COMMAND} … {r.engine_flags}`")
    return lines


def _gpus(r: Row) -> str:
    if r.gpus and r.pipeline_stages > 1:
        return f"{r.gpus // r.pipeline_stages}×{r.pipeline_stages}"
    return _n(r.gpus)


def _kv(kv: str | None) -> str:
    if kv is None:
        return "-"
    return "16" if kv == "auto" else kv


def _n(value) -> str:
    return "-" if value is None else f"{value:,}"


def _f(value, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def describe_ask(ask: Ask) -> str:
    parts = [f"{ask.users} users × {ask.context:,} tokens of context"]
    if ask.slo_ttft_ms is not None:
        parts.append(f"TTFT ≤ {ask.slo_ttft_ms:g} ms")
    if ask.slo_itl_ms is not None:
        parts.append(f"ITL ≤ {ask.slo_itl_ms:g} ms")
    if ask.max_kl is not None:
        parts.append(f"mean KL ≤ {ask.max_kl:g}")
    return ", ".join(parts)
