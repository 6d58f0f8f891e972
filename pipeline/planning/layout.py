"""Whether vLLM 0.32 loads a quantized model split `tp` ways: the blocks and groups of a scheme
must not straddle a tensor-parallel shard. Torch-free; vLLM's own checks, restated:

  FP8 blocks (FP8_BLOCK, 128 × 128)   quantization/utils/fp8_utils.py validate_fp8_block_shape:
        a row-parallel input per rank (TP > 1) a multiple of block_k; a column-parallel output
        per rank (TP > 1) a multiple of block_n, each part of a fused qkv / gate_up on its own;
        unsplit (TP 1, or replicated), a fused layer's parts but the last. Routed experts
        (validate_fp8_block_shape_moe): the intermediate per rank a multiple of block_n at any
        TP, and of block_k when TP > 1 (the TP world size, expert parallel or not).
  Integer groups (W4A16, W8A16, AWQ)   compressed_tensors_wNa16.py create_weights: every
        quantized Linear's input per rank a multiple of the group (distributed/utils.py
        verify_group_size_divides_partition; row-parallel channel-wise scales are exempt). On a
        CUDA GPU the kernel is chosen first (kernels/linear/__init__.py choose_mp_linear_kernel):
        Marlin takes groups of -1/32/64/128 and refuses the same straddle; its thread-tile
        minimums (64 / 128) are padded away at weight prep in 0.32, not refused. Routed
        experts (compressed_tensors_moe_wna16.py create_weights): the hidden width and the
        intermediate per rank multiples of the group; asymmetric (zero points), also 2 × the
        intermediate per rank and the hidden width multiples of 32 / bits.
  FP4 (NVFP4 groups of 16, MXFP4 of 32)  no check at all: the scheme sizes a rank's scales as
        input // group and the loader takes that slice of the checkpoint's, so a group that
        straddles the shard leaves the ranks' scales misaligned with their weights (seen with
        vLLM's own loader: vllm_scripts/layout_oracle.py); counted as refused.
  Per-channel and per-tensor (FP8, FP8_DYNAMIC, W8A8, online FP8): no partition check; load.
  Other grouped schemes (W4A8: INT4 groups, INT8 activations) are held to the integer-group
  rule; no shipped recipe uses one and the oracle does not check them.

Unquantized Linears never straddle: the MoE routers (vLLM builds them without a quantization
config), Qwen2-MoE's shared_expert_gate, and the LM head every shipped recipe ignores.
Expert parallel (--enable-expert-parallel, TP > 1) places whole experts on ranks (determine_
expert_map: E // TP each, the first E % TP ranks one more; any count loads); attention, dense
and shared-expert MLPs stay tensor-parallel.

    layout.refusal(geometry.of(config), recipe.load("fp8-block").scheme(), tp=8)
    layout.recipe_refusal(geometry.of(config), recipe.load("gptq"), tp=8, expert_parallel=True)
"""

from collections.abc import Callable
from dataclasses import dataclass

from pipeline.config.engine_name import ENGINE
from pipeline.config.recipe import RecipeFile
from pipeline.config.schemes import Scheme
from pipeline.planning import weights
from pipeline.planning.geometry import Geometry
from pipeline.planning.linears import Linear, Linears, Shard, Style

EP_FLAG = "--enable-expert-parallel"


@dataclass(frozen=True)
class Straddle:
    """One Linear whose scheme's blocks or groups cross its TP shards."""

    linear: str  # vLLM's module name, e.g. "mlp.experts", "mlp.down_proj"
    what: str  # the width that straddles: "input", "output", "gate_proj output", "experts"…
    full: int  # the width before the split
    per_rank: int  # … on one rank
    unit: str  # "128-wide blocks", "groups of 128"
    tp: int
    loads: bool = False  # vLLM loads it without a check (FP4), its scales misplaced

    def text(self, label: str) -> str:
        if self.what == "experts":
            head = f"the {self.full}-wide experts ({self.linear})"
        else:
            head = f"{self.linear}'s {self.full}-wide {self.what}"
        if self.per_rank != self.full:
            said = f"TP {self.tp} slices {head} into {self.per_rank}: {label}'s {self.unit} "
            said += "straddle them"
        else:
            said = f"{head} is not a whole number of {label}'s {self.unit}, even unsplit"
        if self.loads:
            said += f" ({ENGINE} loads it without a check, each rank's scales misaligned)"
        return said


def refusal(
    shape: Geometry | Linears,
    scheme: Scheme | None,
    tp: int,
    expert_parallel: bool = False,
    label: str | None = None,
) -> str | None:
    """The one-line reason vLLM 0.32 would refuse this split of the model quantized with
    `scheme` (None: it loads; so does an unquantized model). `label` names the scheme in the
    reason (a recipe's name; default the scheme's). Assumes a TP vLLM's head rule accepts
    (parallel.tp_refusal); a split vLLM's `divide` asserts on is named too."""
    return _reason(_linears(shape), [(scheme, _every)], tp, expert_parallel, label)


def recipe_refusal(
    g: Geometry, recipe: RecipeFile, tp: int, expert_parallel: bool = False
) -> str | None:
    """`refusal` for a recipe: each of its schemes on the Linears it targets, less its ignore
    list (a mixed-precision recipe's config groups target Linears by name)."""
    pairs = _recipe_pairs(recipe, g.layers)
    return _reason(g.linears, pairs, tp, expert_parallel, recipe.name)


def linear_straddle(
    one: Linear, scheme: Scheme, tp: int, expert_parallel: bool = False
) -> Straddle | None:
    """Where `scheme` straddles this Linear's shards at `tp` (None: it loads)."""
    if not one.quantized or one.style is Style.VOCAB:
        return None  # routers: no quantization config; the LM head: ignored by every recipe
    shard = one.shard(tp, expert_parallel)
    if scheme.block:
        return _block(one, shard, scheme.block, tp)
    if scheme.fp4 and scheme.group_size:
        return _fp4(one, shard, scheme.group_size, tp)
    if scheme.group_size and scheme.group_size > 0:
        return _groups(one, shard, scheme, tp)
    return None  # per channel / per tensor: vLLM checks no partition


def _block(one: Linear, shard: Shard, block: tuple[int, int], tp: int) -> Straddle | None:
    """fp8_utils.py validate_fp8_block_shape / validate_fp8_block_shape_moe."""
    n, k = block
    if one.style is Style.EXPERTS:
        width = shard.intermediate
        if width % n or (tp > 1 and width % k):
            unit = n if width % n else k
            return Straddle(one.name, "experts", one.outputs[0], width, f"{unit}-wide blocks", tp)
        return None
    if shard.input_split and shard.in_features % k:
        return Straddle(one.name, "input", one.in_features, shard.in_features,
                        f"{k}-wide blocks", tp)  # fmt: skip
    # split, every part's output is checked; unsplit and fused, all parts but the last
    parts = shard.outputs if shard.output_split else shard.outputs[:-1]
    for i, width in enumerate(parts):
        if width % n:
            what = _part(one, i)
            return Straddle(one.name, what, one.outputs[i], width, f"{n}-wide blocks", tp)
    return None


def _groups(one: Linear, shard: Shard, scheme: Scheme, tp: int) -> Straddle | None:
    """compressed_tensors_wNa16.py and compressed_tensors_moe_wna16.py create_weights."""
    g, unit = int(scheme.group_size or 0), f"groups of {scheme.group_size}"
    if one.style is Style.EXPERTS:
        width, pack = shard.intermediate, 32 // scheme.weight_bits
        if one.in_features % g or (not scheme.symmetric and one.in_features % pack):
            return Straddle(one.name, "hidden input", one.in_features, one.in_features, unit, tp)
        if width % g:
            return Straddle(one.name, "experts", one.outputs[0], width, unit, tp)
        if not scheme.symmetric and 2 * width % pack:  # packed zero points of gate + up
            return Straddle(one.name, "experts", one.outputs[0], width, f"{pack}-value words", tp)
        return None
    if shard.in_features % g:
        return Straddle(one.name, "input", one.in_features, shard.in_features, unit, tp)
    return None


def _fp4(one: Linear, shard: Shard, group: int, tp: int) -> Straddle | None:
    """No vLLM check: compressed_tensors_w4a4_{nvfp4,mxfp4}.py size a rank's scales as
    input_size_per_partition // group; parameter.py load_row_parallel_weight takes that slice."""
    unit = f"groups of {group}"
    width = shard.intermediate if one.style is Style.EXPERTS else shard.in_features
    full = one.outputs[0] if one.style is Style.EXPERTS else one.in_features
    what = "experts" if one.style is Style.EXPERTS else "input"
    if width % group:
        return Straddle(one.name, what, full, width, unit, tp, loads=width != full)
    return None


def _part(one: Linear, i: int) -> str:
    if len(one.outputs) == 1:
        return "output"
    return one.parts[i].rsplit(".", 1)[-1] + " output"


def _linears(shape: Geometry | Linears) -> Linears:
    return shape.linears if isinstance(shape, Geometry) else shape


Pick = Callable[[Linear], bool]  # does a scheme quantize this Linear?


def _every(one: Linear) -> bool:
    return True


def _first(
    lin: Linears, pairs: list[tuple[Scheme | None, Pick]], tp: int, expert_parallel: bool
) -> tuple[Straddle | str, Scheme | None] | None:
    for one in lin.distinct:
        if why := one.indivisible(tp, expert_parallel):
            return why, None
    for scheme, picks in pairs:
        for one in lin.distinct:
            if (
                scheme
                and picks(one)
                and (found := linear_straddle(one, scheme, tp, expert_parallel))
            ):
                return found, scheme
    return None


def _reason(
    lin: Linears,
    pairs: list[tuple[Scheme | None, Pick]],
    tp: int,
    expert_parallel: bool,
    label: str | None,
) -> str | None:
    found = _first(lin, pairs, tp, expert_parallel)
    if found is None:
        return None
    straddle, scheme = found
    if isinstance(straddle, str) or scheme is None:
        return str(straddle)
    said = straddle.text(label or scheme.name)
    if not expert_parallel and tp > 1 and lin.has_experts and not _first(lin, pairs, tp, True):
        said += f"; expert parallel ({EP_FLAG}) loads"
    return said


def _recipe_pairs(recipe: RecipeFile, layers: int) -> list[tuple[Scheme | None, Pick]]:
    """Each scheme of the recipe with which Linears it quantizes: a fused layer is quantized
    when its checkpoint parts are (vLLM's compressed-tensors config asks the same of them)."""
    found, ignored = recipe.schemes(), recipe.ignored()

    def kept(one: Linear) -> bool:
        return not all(weights.matches(p, ignored) for p in one.parts)

    if len(found) <= 1:
        return [(s, kept) for s, _ in found]
    return [(s, _targeted(targets, ignored, layers)) for s, targets in found]


def _targeted(targets: list[str], ignored: list[str], layers: int) -> Pick:
    """A mixed-precision group's Linears: some decoder layer's module it targets, not ignored."""

    def picks(one: Linear) -> bool:
        names = (f"model.layers.{i}.{p}" for i in range(layers) for p in one.parts)
        return any(
            weights.matches(n, targets, "Linear") and not weights.matches(n, ignored) for n in names
        )

    return picks
