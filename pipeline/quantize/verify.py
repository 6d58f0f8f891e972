"""Does the artifact load back? Checked before the quantize stage says "done".

transformers reloads it (float32 on CPU) as a user's plain `from_pretrained` would and must map
every tensor: none unexpected, none of the model's parameters missing; a forward pass on a few
tokens must give finite logits. Where this transformers cannot load what llm-compressor writes
(seen with 5.17: Mixtral's experts saved one by one, FP8-block and NVFP4 experts), the artifact
is still what vLLM loads: the stage is done and records which tensors and why (the card then
names vLLM as the loader), and whether the pipeline's view (moe_view.py) loads. Large models are
not reloaded (it would hold a second copy of the model): their check reads headers, dtypes and
shapes, requires every scale finite and positive, and dequantizes a few rows of every quantized
weight stored as FP8 / INT8 / packed INT to compare them with the original's rows.

A model-free artifact is also checked against the planner: the Linears it quantized, counted by
their shapes, must be exactly the ones oneshot would (the planner's `targeted` list).
"""

from pathlib import Path

from pipeline.config.engine_name import ENGINE
from pipeline.core.errors import ArtifactCheckError, first_line
from pipeline.models import hf_load
from pipeline.planning.geometry import Geometry
from pipeline.planning.weights import targeted
from pipeline.quantize import artifact as art
from pipeline.quantize import moe_view

RELOAD_LIMIT = 1_000_000_000  # parameters; above it the spot check replaces the reload
SPOT_ROWS = 3  # rows of each quantized weight dequantized and compared with the original
# relative RMS error of a dequantized row above which the artifact is not what it claims
# (FP8 E4M3 ~0.02, INT8 ~0.005, INT4 in groups of 128 ~0.1 on Gaussian weights)
MAX_ROW_ERROR = {8: 0.1, 4: 0.3}


def check(artifact: Path, original: Path, params: int, bits: int) -> dict:
    """The check before "done": a transformers reload for small models, a spot check above
    (`bits`: the scheme's weight bits)."""
    if params <= RELOAD_LIMIT:
        return reload(artifact, params)
    checked = spot_check(artifact, original, params, bits)

    if moe_view.needed(artifact):  # known by its names: plain from_pretrained leaves experts out
        reason = (
            f"{checked['reason']}; plain from_pretrained does not load it: {moe_view.why(artifact)}"
        )
        return {**checked, "transformers": False, "reason": reason, "hf_view": True}
    return checked


def quantized_as_planned(artifact: Path, recipe, g: Geometry) -> None:
    """The quantized Linears, counted by (out, in) shape, must be the planner's targeted ones."""
    from collections import Counter

    scheme = recipe.scheme()
    table = art.tensors(artifact)
    found = Counter(
        tuple(art.weight_shape(table, m, scheme.weight_bits)) for m in art.quantized_modules(table)
    )
    planned: Counter[tuple[int, ...]] = Counter()
    for lin in targeted(recipe, g):
        planned[(lin.out_features, lin.in_features)] += lin.count
    if found != planned:
        extra, missing = dict(found - planned), dict(planned - found)
        raise ArtifactCheckError(
            f"artifact check: the model-free path quantized other Linears than oneshot would: "
            f"(out, in) shapes × count not planned {extra or 'none'}, planned but not quantized "
            f"{missing or 'none'}; quantize with --path oneshot"
        )


def spot_check(artifact: Path, original: Path, params: int, bits: int) -> dict:
    """Headers, finite positive scales, and a few dequantized rows per quantized weight."""
    import torch
    from safetensors import safe_open

    table, files = art.tensors(artifact), art.tensor_files(artifact)
    source = art.tensor_files(original)
    compared, worst = 0, 0.0
    for module in sorted(art.quantized_modules(table)):
        with safe_open(files[f"{module}.weight_scale"], "pt") as f:
            scale = f.get_tensor(f"{module}.weight_scale").float()
        if not (torch.isfinite(scale).all() and (scale > 0).all()):
            raise ArtifactCheckError(f"artifact check: {module}.weight_scale is not finite > 0")
        rows = _dequantized_rows(module, table, files, scale, bits)
        if rows is None or f"{module}.weight" not in source:
            continue
        index, values = rows
        with safe_open(source[f"{module}.weight"], "pt") as f:
            expected = f.get_slice(f"{module}.weight")[index].float()
        error = ((values - expected).norm(dim=1) / expected.norm(dim=1).clamp_min(1e-12)).max()
        worst, compared = max(worst, float(error)), compared + 1
        bound = MAX_ROW_ERROR.get(bits, 0.3)
        if error > bound:
            raise ArtifactCheckError(
                f"artifact check: {module} dequantizes {float(error):.1%} away from the "
                f"original (relative RMS of {len(index)} rows; at most {bound:.0%})"
            )
    return {
        "transformers": None,
        "reason": f"not reloaded ({params / 1e9:.1f}B params): headers and finite scales of "
        f"{len(art.quantized_modules(table))} quantized weights checked, {compared} dequantized "
        f"({SPOT_ROWS} rows each, worst relative RMS error {worst:.3f})",
        "spot_checked": compared,
        "worst_row_error": round(worst, 4),
    }


def _dequantized_rows(
    module: str, table: dict[str, art.TensorInfo], files: dict[str, Path], scale, bits: int
):
    """(row indices, dequantized rows) for FP8 / INT8 weights and packed INT4/INT8 with
    per-channel or grouped scales; None for formats read only by their headers (FP4, blocks)."""
    import torch
    from safetensors import safe_open

    weight = table.get(f"{module}.weight")
    packed = table.get(f"{module}.weight_packed")
    info = weight or packed
    if info is None:  # quantized_modules() found its weight_scale: it has one or the other
        raise ArtifactCheckError(f"artifact check: {module} has neither weight nor weight_packed")
    out = info.shape[0]
    index = sorted({0, out // 2, out - 1})[:SPOT_ROWS]
    if scale.ndim != 2 or scale.shape[0] != out or f"{module}.weight_zero_point" in table:
        return None  # blocks (FP8_BLOCK) or asymmetric: header checks only
    name = f"{module}.weight" if weight else f"{module}.weight_packed"
    with safe_open(files[name], "pt") as f:
        stored = f.get_slice(name)[index]
    if weight is not None and weight.dtype in ("F8_E4M3", "I8"):
        values = stored.float()
    elif packed is not None and packed.dtype == "I32":
        from compressed_tensors.compressors.pack_quantized.helpers import (
            unpack_from_int32,
        )

        columns = stored.shape[1] * (32 // bits)
        values = unpack_from_int32(stored, bits, torch.Size([len(index), columns])).float()
    else:
        return None
    groups = scale[index]
    values = (values.reshape(len(index), groups.shape[1], -1) * groups[..., None]).flatten(1)
    return index, values


def reload(artifact: Path, params: int) -> dict:
    """{"transformers": True | False | None, "reason": …}: what plain
    `AutoModelForCausalLM.from_pretrained(artifact)` does, as a user who downloads the artifact
    would run it. Where it does not but the pipeline's view does (moe_view.py), "hf_view": True:
    the hf eval backend runs the view. Raises on non-finite logits or a failing forward pass."""
    if params > RELOAD_LIMIT:
        return {"transformers": None, "reason": f"not reloaded here ({params / 1e9:.1f}B params)"}
    import tempfile

    plain = _reload(artifact)
    if plain["transformers"]:
        return plain
    engine_only = {**plain, "reason": f"{plain['reason']}; {ENGINE} loads it"}
    if not moe_view.needed(artifact):
        return engine_only
    with tempfile.TemporaryDirectory() as tmp:  # the view the hf eval backend loads
        view = _reload(moe_view.ensure(artifact, Path(tmp) / "view"))
    if not view["transformers"]:
        return engine_only
    why = moe_view.why(artifact)
    return {**plain, "reason": f"{plain['reason']}: {why}; {ENGINE} loads it", "hf_view": True}


SHOWN_KEYS = 4  # unexpected / missing names kept in the manifest


def _reload(artifact: Path) -> dict:
    import torch
    import transformers

    try:
        model, info = hf_load.from_pretrained(artifact, torch.float32, output_loading_info=True)
    except RuntimeError as e:  # transformers' own conversion fails (seen: FP8 block MoE experts)
        if "CONVERSION" not in str(e):
            raise  # anything else: the artifact is not done
        return {
            "transformers": False,
            "reason": f"transformers {transformers.__version__} cannot load it "
            f"({type(e).__name__}: {_conversion_error(e)})",
        }
    missing, unexpected = sorted(info["missing_keys"]), sorted(info["unexpected_keys"])
    if missing or unexpected:
        parts = []
        if unexpected:
            parts.append(f"{len(unexpected)} tensors ignored (e.g. {unexpected[0]})")
        if missing:
            parts.append(f"{len(missing)} parameters left randomly initialised (e.g. {missing[0]})")
        return {
            "transformers": False,
            "reason": f"transformers {transformers.__version__} does not map this artifact: "
            + ", ".join(parts),
            "unexpected": {"count": len(unexpected), "first": unexpected[:SHOWN_KEYS]},
            "missing": {"count": len(missing), "first": missing[:SHOWN_KEYS]},
        }
    vocab = model.config.get_text_config().vocab_size
    ids = torch.arange(1, 9).remainder(vocab)[None]
    try:
        with torch.inference_mode():
            logits = model(input_ids=ids).logits
    except Exception as e:  # e.g. a config whose shapes the modeling code cannot run
        raise ArtifactCheckError(
            f"artifact check: transformers {transformers.__version__} reloads the artifact but "
            f"its forward pass fails ({type(e).__name__}: {first_line(e)}); check the model's "
            "config.json against its family (the original would fail the same way)"
        ) from None
    if not torch.isfinite(logits).all():
        raise ArtifactCheckError("artifact check: the reloaded artifact gives non-finite logits")
    return {"transformers": True, "reason": None}


def _conversion_error(error: Exception) -> str:
    """transformers' exception only points at its load report ("look at the CONVERSION
    entries"): the first failed conversion, read from the report's own frame."""
    tb = error.__traceback__
    while tb is not None:
        info = tb.tb_frame.f_locals.get("loading_info")
        errors = getattr(info, "conversion_errors", None)
        if errors:
            target, text = next(iter(errors.items()))
            lines = [line.strip() for line in str(text).splitlines() if line.strip()]
            cause = next((x for x in reversed(lines) if not x.startswith("Error:")), "")
            return f"converting {target}: {cause}"
        tb = tb.tb_next
    return first_line(error)
