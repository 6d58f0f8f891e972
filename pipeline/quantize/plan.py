"""What a quantize run will do and need, from the model config alone (`--dry-run`).

Memory arithmetic (bytes):
  weights (bf16)        = params × 2
  artifact              = quantized Linear params × bits / 8 + scales (+ zero points)
                          + every other param × 2
  GPU peak, sequential  = the largest decoder layer in bf16 (a MoE layer: all its experts) +
                          GPTQ Hessians of that layer (Σ in_features² × 4 over its Linears,
                          each expert's too) + one sample's activations
  CPU RAM               = weights (bf16) + cached layer inputs (samples × seq × hidden × 2)
llm-compressor's sequential pipeline keeps the model in CPU RAM and onloads one decoder layer
at a time to the GPU, which is how a 70B model is calibrated on one 80 GB GPU.
"""

import yaml

from pipeline.config.engine_defaults import GPU_MEMORY_UTILIZATION
from pipeline.config.engine_name import ENGINE, SERVE_COMMAND
from pipeline.config.recipe import RecipeFile, parsed
from pipeline.config.schemes import config_group, schemes_from_args
from pipeline.core.errors import UserError
from pipeline.planning.geometry import Geometry
from pipeline.planning.weights import artifact_bytes, targeted
from pipeline.quantize import memory

GIB = 2**30
_CALIBRATING = {"GPTQModifier", "AWQModifier", "SmoothQuantModifier", "AutoRoundModifier"}
# weight observers that weigh by activations (llm-compressor then requires data)
_IMATRIX = {"imatrix_mse", "nvfp4_expanded_imatrix"}


def needs_calibration(recipe: RecipeFile) -> bool:
    """As llm-compressor 0.14 decides (QuantizationMixin._set_requires_calibration_data): a
    calibrating modifier, a kv_cache_scheme, observed activation scales (static or "local"
    inputs, static outputs) or an imatrix weight observer. Without importing it (`make plan`
    stays fast); tests/e2e/quantize/test_calibration_rule.py asks llm-compressor itself."""
    return any(_modifier_needs_data(name, args) for name, args in recipe.modifiers())


def _modifier_needs_data(name: str, args: dict) -> bool:
    if name in _CALIBRATING or args.get("kv_cache_scheme"):
        return True
    observer = args.get("weight_observer") or (args.get("observer") or {}).get("weights")
    if observer in _IMATRIX:
        return True
    # every preset of the modifier, not only the first (`scheme: {W4A16: [...], FP8: [...]}`)
    if any(s.calibrated_activations for s, _ in schemes_from_args(args)):
        return True
    return any(_group_needs_data(g or {}) for g in (args.get("config_groups") or {}).values())


def _group_needs_data(group: dict) -> bool:
    """A config group's own args; compressed-tensors' `dynamic` defaults to False (static)."""
    inputs, outputs = group.get("input_activations"), group.get("output_activations")
    if inputs is not None and (inputs or {}).get("dynamic", False) in (False, "local"):
        return True
    if outputs is not None and not (outputs or {}).get("dynamic", False):
        return True
    return (group.get("weights") or {}).get("observer") in _IMATRIX


def check_fit(recipe: RecipeFile, g: Geometry, model_name: str) -> None:
    """Refuse, before loading weights, a scheme whose groups or blocks do not divide a Linear
    (compressed-tensors only warns of blocks, then the save fails: "non contiguous tensor")."""
    scheme = recipe.scheme()
    if scheme and scheme.block:
        rows, cols = scheme.block
        for lin in targeted(recipe, g):
            if lin.in_features % cols or lin.out_features % rows:
                raise UserError(
                    f"recipe {recipe.name}: {scheme.name}'s {rows}×{cols} blocks do not divide "
                    f"{model_name} {lin.name} ({lin.out_features}×{lin.in_features}); take a "
                    f"per-channel recipe (fp8) or add '{lin.name.split('.')[-1]}' to ignore"
                )
    if not scheme or not scheme.group_size:
        return
    for lin in targeted(recipe, g):
        if lin.in_features % scheme.group_size:
            raise UserError(
                f"recipe {recipe.name}: group size {scheme.group_size} does not divide "
                f"{model_name} {lin.name}.in_features={lin.in_features}; choose a group size "
                f"that divides it or add '{lin.name.split('.')[-1]}' to ignore"
            )


SMALLER_GROUPS = (64, 32)  # what checkpoints of models with 576- or 960-wide layers ship with


def fitted(recipe: RecipeFile, g: Geometry, model_name: str) -> RecipeFile:
    """The recipe as it quantizes this model: where its preset's groups (128) do not divide a
    targeted Linear's inputs (SmolLM2's 576), the same preset in the largest smaller group
    that divides them all, written as config_groups (llm-compressor's form for a preset's
    arguments changed); vLLM's W4A16 kernels take groups of 64 and 32 too. Else the recipe
    itself, or check_fit's refusal when no smaller group fits either."""
    scheme = recipe.scheme()
    widths = {lin.in_features for lin in targeted(recipe, g)} if scheme else set()
    if not scheme or not scheme.group_size or not any(w % scheme.group_size for w in widths):
        check_fit(recipe, g, model_name)  # blocks: no smaller one to take
        return recipe
    size = next((n for n in SMALLER_GROUPS if n < scheme.group_size
                 and not any(w % n for w in widths)), None)  # fmt: skip
    data = yaml.safe_load(recipe.text)
    stages = [group or {} for stage in data["quantization"].values() for group in stage.values()]
    modifiers = [args or {} for group in stages for args in group.values()]
    presets = [args for args in modifiers if isinstance(args.get("scheme"), str)]
    if size is None or len(recipe.schemes()) != 1 or not presets:  # a user's own groups stay
        check_fit(recipe, g, model_name)  # refuses, naming the Linear
    assert size is not None  # check_fit refused above when no smaller group divides them
    for args in presets:
        targets = args.get("targets", ["Linear"])
        args["config_groups"] = {"group_0": config_group(scheme, targets, size)}
        del args["scheme"]
    said = (f"# {recipe.name} on {model_name}: {scheme.name}'s groups of {scheme.group_size} "
            f"do not divide its {sorted(widths)}-wide inputs; groups of {size}\n")  # fmt: skip
    return parsed(recipe.path, data, said + yaml.safe_dump(data, sort_keys=False))


def build(
    recipe: RecipeFile,
    g: Geometry,
    model: dict,
    calibration: dict,
    gpus: list,
    route: dict | None = None,
) -> dict:
    """`route`: {"path": "model-free" | "oneshot", "workers": N, "shards": [bytes, …] or None}."""

    route = route or {"path": "oneshot", "workers": 1, "shards": None}
    params = g.params
    if recipe.online:
        return {
            "model": model,
            "recipe": {"name": recipe.name, "online": recipe.online},
            "online": {
                "engine_args": recipe.engine_args(),
                "weights_bf16": params * 2,
                "in_engine_estimate": artifact_bytes(recipe, g),
            },
        }
    needs_data = needs_calibration(recipe)
    layer_bytes = g.decoder_layer_params * 2
    uses_gptq = any(name == "GPTQModifier" for name, _ in recipe.modifiers())
    # GPTQ keeps a float32 Hessian (in × in) per Linear of the layer on the device: every expert
    hessians = sum(lin.in_features**2 * 4 * n for lin, n in g.largest_layer)
    hessians = hessians if uses_gptq else 0
    seq = calibration.get("max_seq_length", 0)
    samples = calibration.get("samples", 0)
    acts = seq * max(g.hidden, g.intermediate) * 2 * 4
    scheme = recipe.scheme()
    artifact = artifact_bytes(recipe, g)
    on_gpu = bool(gpus)
    cal_terms = memory.calibration_bytes(g, samples if needs_data else 0, seq, uses_gptq, on_gpu)
    cpu = memory.peak_cpu_bytes(params, artifact, route, on_gpu, cal_terms)
    model_free = route["path"] == "model-free"
    gpu_peak = _device_peak(route, cpu, layer_bytes + hessians + acts, ["a GPU"])
    return {
        "model": model,
        "recipe": {
            "name": recipe.name,
            "path": str(recipe.path),
            "scheme": scheme.name if scheme else None,
            "modifiers": [name for name, _ in recipe.modifiers()],
            "ignore": recipe.ignored(),
            "kv_cache_scheme": recipe.kv_cache_scheme(),
        },
        "architecture": {
            "params": params,
            "layers": g.layers,
            "hidden_size": g.hidden,
            "attention_heads": g.heads,
            "kv_heads": g.kv_heads,
            "head_dim": g.head_dim,
            "experts": g.experts,
            "experts_per_token": g.active_experts if g.experts else None,
            "moe_layers": g.moe_layers,
        },
        "calibration": calibration if needs_data else {"samples": 0, "note": "data-free"},
        "path": route["path"],
        "workers": route.get("workers", 1),
        "pipeline": "model-free" if model_free else "sequential" if needs_data else "datafree",
        "placement": _placement(route, gpus),
        "memory_bytes": {
            "weights_bf16": params * 2,
            "artifact_estimate": artifact,
            "cpu_ram_peak_estimate": cpu["total"],
            "cpu_ram_terms": cpu["terms"],
            "device_peak_estimate": _device_peak(route, cpu, layer_bytes + hessians + acts, gpus),
            "gpu_peak_estimate": gpu_peak,  # what one GPU would hold, on any host
        },
        "assumed": cpu["assumed"],
        "on_gpu": on_gpu,
        "fits_one_80gb_gpu": gpu_peak < 80 * 10**9 * GPU_MEMORY_UTILIZATION,
    }


def _placement(route: dict, gpus: list) -> str:
    if route["path"] == "model-free":
        where = f"{len(gpus)} GPU(s)" if gpus else "the CPU"
        return (
            f"no model in memory: one safetensors shard at a time per worker "
            f"({route.get('workers', 1)}) on {where}"
        )
    return f"model in CPU RAM; one decoder layer at a time on {'cuda:0' if gpus else 'cpu'}" + (
        "" if gpus else " (no GPU here: calibration runs on the CPU, the model in float32)"
    )


def _device_peak(route: dict, cpu: dict, layer_peak: int, gpus: list) -> int:
    """On a GPU host: one shard per worker (model-free) or one layer's working set (oneshot);
    on a CPU host the device is the CPU: its peak is the CPU RAM figure."""
    if not gpus:
        return cpu["total"]
    if route["path"] == "model-free":
        return cpu["terms"]["shards in flight"]
    return layer_peak


def render(plan: dict) -> str:
    if "online" in plan:
        online = plan["online"]
        return (
            f"model        {plan['model'].get('id') or plan['model']['name']}\n"
            f"recipe       {plan['recipe']['name']}: online {plan['recipe']['online']}, nothing "
            f"to quantize ahead: {ENGINE} quantizes the 16-bit checkpoint as it loads it\n"
            f"serve with   {SERVE_COMMAND} <model> {' '.join(online['engine_args'])}\n"
            f"weights      {online['weights_bf16'] / GIB:.1f} GiB bf16 checkpoint → "
            f"~{online['in_engine_estimate'] / GIB:.1f} GiB in {ENGINE}'s memory"
        )
    mem = plan["memory_bytes"]
    arch = plan["architecture"]
    cal = plan["calibration"]
    lines = [
        f"model        {plan['model'].get('id') or plan['model']['name']}"
        f" ({arch['params'] / 1e9:.2f}B params, {arch['layers']} layers, hidden "
        f"{arch['hidden_size']}, heads {arch['attention_heads']}/{arch['kv_heads']} kv, "
        f"head dim {arch['head_dim']})",
        f"recipe       {plan['recipe']['name']}: {' + '.join(plan['recipe']['modifiers'])}, "
        f"scheme {plan['recipe']['scheme']}, ignore {plan['recipe']['ignore']}"
        + _kv_note(plan["recipe"].get("kv_cache_scheme")),
        *_moe_lines(plan["architecture"], plan["pipeline"] == "sequential"),
        "calibration  "
        + (
            f"{cal['samples']} samples × {cal['max_seq_length']} tokens from {cal['dataset']}"
            f" ({cal['split']})"
            if cal.get("samples")
            else "none (data-free scheme)"
        ),
        f"pipeline     {plan['pipeline']}; {plan['placement']}" + _processes(plan),
        f"weights      {mem['weights_bf16'] / GIB:.1f} GiB bf16 → "
        f"~{mem['artifact_estimate'] / GIB:.1f} GiB artifact "
        f"({mem['artifact_estimate'] / mem['weights_bf16']:.2f}×)",
        f"memory       CPU RAM peak ~{mem['cpu_ram_peak_estimate'] / GIB:.1f} GiB; "
        + _device(plan),
        "  CPU RAM    "
        + " + ".join(f"{k} {v / GIB:.1f}" for k, v in mem["cpu_ram_terms"].items())
        + " GiB"
        + (f" (assumed: {', '.join(plan['assumed'])})" if plan.get("assumed") else ""),
    ]
    if fit := plan.get("host_fit"):
        # its memory only: the disk is judged below, beside the files
        said = "fits in memory" if fit == "fits" else f"would refuse (exit 4): {fit}"
        lines.append(f"this host    {said}")
    return "\n".join(lines)


def _device(plan: dict) -> str:
    """The GPU figure judged against a GPU; on a CPU host the CPU is the device, and what a GPU
    host's device would hold is said as such (a CPU figure is never judged as a GPU's)."""
    mem = plan["memory_bytes"]
    fits = f"fits one 80 GB GPU: {'yes' if plan['fits_one_80gb_gpu'] else 'no'}"
    gpu = mem.get("gpu_peak_estimate", mem["device_peak_estimate"])
    if plan.get("on_gpu", True):
        return f"device peak ~{mem['device_peak_estimate'] / GIB:.1f} GiB ({fits})"
    return (
        f"no GPU here (the CPU is the device); a GPU host's device peak ~{gpu / GIB:.1f} GiB "
        f"({fits})"
    )


def _processes(plan: dict) -> str:
    n = plan.get("processes", 1)
    if n == 1:
        return f"; {plan['processes_why']}" if plan.get("processes_why") else ""
    copies = f"× {n} processes" in plan["memory_bytes"]["cpu_ram_terms"]
    return (
        f"; {n} processes under torchrun (one GPU each on GPU hosts), each calibrating 1/{n} "
        "of the samples on one layer at a time ("
        + (f"each with its own copy of the model in CPU RAM: {n} copies" if copies
           else "the model one copy in CPU RAM, rank 0's shared offload")
        + ")"
    )  # fmt: skip


def _moe_lines(arch: dict, calibrated: bool) -> list[str]:
    if not arch.get("experts"):
        return []
    line = (
        f"experts      {arch['experts']} per MoE layer ({arch['experts_per_token']} active per "
        f"token) in {arch['moe_layers']} of {arch['layers']} layers, all quantized; routers "
        "kept in 16 bits"
    )
    if calibrated:
        line += "; every expert sees every calibration token (moe_calibrate_all_experts)"
    return [line]


def _kv_note(kv: dict | None) -> str:
    if not kv:
        return ""
    how = "dynamic" if kv.get("dynamic") else "calibrated"
    kind = f"{kv.get('type', 'int')}{kv.get('num_bits')}"
    return f", KV cache {kind} ({how} {kv.get('strategy')} scales)"
