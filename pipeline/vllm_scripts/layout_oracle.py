"""vLLM 0.32 as the oracle of pipeline/planning/layout.py: does it load a quantized Linear split
`tp` ways? Serving env only; one JSON document in, one out:

    .venv-serve/bin/python pipeline/vllm_scripts/layout_oracle.py < cases.json

    in:  {"configs": {"fp8-block": {"preset": "FP8_BLOCK", "ignore": ["lm_head"]}
                                 | {"quantization_config": {... a compressed-tensors
                                                            artifact's, as config.json has it}}},
          "cases": [{"id": "…", "config": "fp8-block", "tp": 8, "expert_parallel": false,
                     "layer": {"style": "qkv", "name": "self_attn.qkv_proj", "parts": [...],
                               "hidden": 4096, "heads": 32, "kv_heads": 8, "head_size": 128,
                               "v_head_size": 128}
                            | {"style": "merged column" | "column" | "row" | "replicated"
                               | "merged replicated", "name", "parts", "input_size",
                               "output_sizes": [...]}
                            | {"style": "experts", "name", "parts", "hidden", "intermediate",
                               "experts"}}]}
    out: {"vllm": "0.32.0", "configs": {name: {"weights": {...}}},
          "results": [{"id", "verdict": "loads" | "refused" | "misaligned" | "error", "reason",
                       "input_per_partition", "output_partition_sizes", "local_experts"}]}
    ("refused": vLLM raised ValueError or asserted; "error": the oracle itself failed, which is
    never a verdict)

What is vLLM's own code here, and what is not:
  - dense Linears (vLLM's own): the layer class the model code uses (QKVParallelLinear,
    MergedColumnParallelLinear, ColumnParallelLinear, RowParallelLinear, ReplicatedLinear,
    deepseek_v2.py DeepSeekV2FusedQkvAProjLinear), built on the meta device with the artifact's
    quantization config (CompressedTensorsConfig.from_config) under a stand-in TP group of
    `tp` ranks (parallel_state._TP). The layer's constructor computes its partitions and calls
    the compressed-tensors scheme's create_weights, which runs vLLM's checks:
    fp8_utils.validate_fp8_block_shape (FP8 blocks) and, inline in
    compressed_tensors_wNa16.py create_weights, verify_group_size_divides_partition (groups).
    Stubbed (they choose a kernel for the device, not the shapes): choose_mp_linear_kernel,
    init_*_kernel and expose_input_quant_key in the scheme modules; the model dtype (bfloat16)
    comes from a stand-in current config for CompressedTensorsW8A8Fp8.
  - routed experts: vLLM's own FusedMoEParallelConfig.make (TP or EP) and determine_expert_map;
    the intermediate per partition, `intermediate_size // tp_size` with its assert, is
    FusedMoEConfig.__post_init__'s expression reproduced here. FP8 blocks: vLLM's
    validate_fp8_block_shape_moe called, as compressed_tensors_moe_w8a8_fp8.py create_weights
    calls it. Groups: the checks are inline in CompressedTensorsWNA16MoEMethod.create_weights,
    which is called on a stand-in method object (its __init__ picks a kernel backend for the
    device; skipped) carrying what __init__ sets from the artifact's weight arguments.
  - FP4 (NVFP4, MXFP4): vLLM has no check. After the layer builds, vLLM's own
    GroupQuantScaleParameter.load_row_parallel_weight loads, on each rank, a checkpoint-shaped
    row of ceil(input / group) scales, each holding its group's index; "misaligned" when a
    rank's scales are not the groups its weight columns fall in (that expectation is ours).
    The experts' w2 scales load through FusedMoE's own loader with the same narrow
    (shard size × rank); reproduced with the dense one.
"""

import contextlib
import json
import math
import re
import sys
import types
from collections.abc import Iterator
from fractions import Fraction

KERNEL_CHOOSER = re.compile(r"^(init_\w*_kernel|choose_\w*_kernel|expose_input_quant_key)$")


def main() -> None:
    import vllm

    request = json.load(sys.stdin)
    _stub_kernel_choosers()
    configs = {name: _quant_config(spec) for name, spec in request["configs"].items()}
    results = [_verdict(case, configs[case["config"]]) for case in request["cases"]]
    described = {name: _describe(c) for name, c in configs.items()}
    print(json.dumps({"vllm": vllm.__version__, "configs": described, "results": results}))


class _Group(types.SimpleNamespace):
    """Stands in for vLLM's TP GroupCoordinator: what the layers ask of it."""


@contextlib.contextmanager
def _tp(size: int, rank: int = 0) -> Iterator[None]:
    from vllm.distributed import parallel_state

    saved = parallel_state._TP
    parallel_state._TP = _Group(world_size=size, rank_in_group=rank)
    try:
        yield
    finally:
        parallel_state._TP = saved


class _StubKernel:
    """A kernel that accepts any shape: the device's choice, not the layout's."""

    def __init__(self, *args, **kwargs):
        pass

    def __getattr__(self, name):
        return None


def _stub_kernel_choosers() -> None:
    import torch
    from vllm.model_executor.layers.quantization.compressed_tensors import schemes

    for module in list(sys.modules.values()):
        if not getattr(module, "__name__", "").startswith(schemes.__name__ + "."):
            continue
        for name in list(vars(module)):
            if KERNEL_CHOOSER.match(name):
                chooses_class = name.startswith("choose_")
                setattr(module, name, _returns(_StubKernel if chooses_class else _StubKernel()))
        getter = "get_current_vllm_config"  # setattr: a type checker knows no module's attributes
        if hasattr(module, getter):
            model = types.SimpleNamespace(dtype=torch.bfloat16)
            setattr(module, getter, _returns(types.SimpleNamespace(model_config=model)))


def _returns(value):
    return lambda *args, **kwargs: value


def _quant_config(spec: dict):
    from vllm.model_executor.layers.quantization import get_quantization_config

    found = spec.get("quantization_config") or _from_preset(spec["preset"], spec["ignore"])
    return get_quantization_config(found["quant_method"]).from_config(found)


def _from_preset(preset: str, ignore: list[str]) -> dict:
    """The quantization_config llm-compressor writes for a preset (compressed-tensors' own
    preset and format inference; the serving env's compressed-tensors)."""
    import torch
    from compressed_tensors.compressors.format import infer_module_format
    from compressed_tensors.quantization import QuantizationConfig, preset_name_to_scheme

    scheme = preset_name_to_scheme(preset, ["Linear"])
    scheme.format = infer_module_format(torch.nn.Linear, scheme).value
    config = QuantizationConfig(
        config_groups={"group_0": scheme},
        ignore=ignore,
        format=scheme.format,
        quantization_status="compressed",
    )
    return config.model_dump(mode="json", exclude_none=True)


def _describe(config) -> dict:
    groups = getattr(config, "target_scheme_map", {}) or {}
    weights = next((g.get("weights") for g in groups.values() if g.get("weights")), None)
    if weights is None:
        return {"weights": None}
    return {"weights": weights.model_dump(mode="json", exclude_none=True)}


def _verdict(case: dict, config) -> dict:
    layer = case["layer"]
    found = {"id": case["id"]}
    try:
        if layer["style"] == "experts":
            found.update(_experts(layer, config, case["tp"], case["expert_parallel"]))
        else:
            found.update(_dense(layer, config, case["tp"]))
    except (ValueError, AssertionError) as e:  # vLLM's refusals: its checks and its asserts
        found.update(verdict="refused", reason=_first_line(e) or type(e).__name__)
    except Exception as e:  # the oracle's own failure: never read as a verdict
        found.update(verdict="error", reason=f"{type(e).__name__}: {_first_line(e)}")
    return found


def _first_line(e: BaseException) -> str:
    return str(e).strip().splitlines()[0] if str(e).strip() else ""


def _dense(layer: dict, config, tp: int) -> dict:
    import torch
    from vllm.config import VllmConfig, set_current_vllm_config

    config.packed_modules_mapping = _packed(layer)
    with _tp(tp), set_current_vllm_config(VllmConfig()), torch.device("meta"):
        built = _build(layer, config)
    per_rank_input = getattr(built, "input_size_per_partition", built.input_size)
    found = {
        "verdict": "loads",
        "input_per_partition": per_rank_input,
        "output_partition_sizes": list(built.output_partition_sizes),
    }
    group = _fp4_group(built)
    if group and (why := _fp4_misplaced(built.input_size, per_rank_input, group, tp)):
        found.update(verdict="misaligned", reason=why)
    return found


def _packed(layer: dict) -> dict:
    """The model class's packed_modules_mapping for this fused layer (llama.py, deepseek_v2.py
    declare them; vLLM hands them to the quantization config before building the model)."""
    leaf = layer["name"].rsplit(".", 1)[-1]
    parts = [p.rsplit(".", 1)[-1] for p in layer["parts"]]
    return {leaf: parts} if len(parts) > 1 else {}


def _build(layer: dict, config):
    from vllm.model_executor.layers import linear

    prefix, style = f"model.layers.0.{layer['name']}", layer["style"]
    common = {"bias": False, "quant_config": config, "prefix": prefix}
    if style == "qkv":
        return linear.QKVParallelLinear(
            layer["hidden"], layer["head_size"], layer["heads"], layer["kv_heads"],
            v_head_size=layer["v_head_size"], **common,
        )  # fmt: skip
    inputs, outputs = layer["input_size"], layer["output_sizes"]
    if style == "merged column":
        return linear.MergedColumnParallelLinear(inputs, outputs, **common)
    if style == "merged replicated":
        from vllm.model_executor.models.deepseek_v2 import DeepSeekV2FusedQkvAProjLinear

        return DeepSeekV2FusedQkvAProjLinear(inputs, outputs, quant_config=config, prefix=prefix)
    classes = {
        "column": linear.ColumnParallelLinear,
        "row": linear.RowParallelLinear,
        "replicated": linear.ReplicatedLinear,
    }
    return classes[style](inputs, sum(outputs), **common)


def _fp4_group(built) -> int | None:
    scheme = getattr(built, "scheme", None)
    if scheme is None:  # built without a quantization scheme
        return None
    fp4 = type(scheme).__name__ in ("CompressedTensorsW4A4Fp4", "CompressedTensorsW4A4Mxfp4")
    return scheme.group_size if fp4 else None


def _fp4_misplaced(full: int, per_rank: int, group: int, tp: int) -> str | None:
    """Load a checkpoint-shaped row of group scales on every rank with vLLM's own loader and
    say where a rank's scales are not the groups of its weight columns."""
    import torch
    from vllm.model_executor.parameter import GroupQuantScaleParameter

    if per_rank == full:
        return None  # not split: every rank loads the whole row (a shape mismatch would raise)
    stored = torch.arange(math.ceil(full / group), dtype=torch.float32).reshape(1, -1)
    for rank in range(tp):
        with _tp(tp, rank):
            scales = GroupQuantScaleParameter(
                data=torch.empty(1, per_rank // group), input_dim=1, output_dim=0,
                weight_loader=None,
            )  # fmt: skip
            scales.load_row_parallel_weight(stored)
        got = [int(x) for x in scales.data[0].tolist()]
        needed = list(range(rank * per_rank // group, math.ceil((rank + 1) * per_rank / group)))
        if got != needed:
            return (
                f"rank {rank} holds input columns {rank * per_rank}-{(rank + 1) * per_rank - 1} "
                f"but loads the scales of groups {got[0]}-{got[-1]} (needs {needed[0]}-"
                f"{needed[-1]}; group {group})"
            )
    return None


def _experts(layer: dict, config, tp: int, expert_parallel: bool) -> dict:
    from vllm.model_executor.layers.fused_moe.config import FusedMoEParallelConfig
    from vllm.model_executor.layers.fused_moe.expert_map_manager import determine_expert_map

    parallel = types.SimpleNamespace(
        enable_expert_parallel=expert_parallel,
        all2all_backend="allgather_reducescatter",
        enable_eplb=False,
    )
    with _tp(tp):
        moe = FusedMoEParallelConfig.make(
            tp_size_=tp, pcp_size_=1, dp_size_=1, sp_size_=1, vllm_parallel_config=parallel
        )
    width = layer["intermediate"]
    assert width % moe.tp_size == 0, f"{width} % {moe.tp_size}"  # FusedMoEConfig.__post_init__
    per_rank = width // moe.tp_size
    local = [determine_expert_map(moe.ep_size, r, layer["experts"])[0] for r in range(moe.ep_size)]
    found = {
        "verdict": "loads",
        "input_per_partition": layer["hidden"],
        "output_partition_sizes": [per_rank, per_rank],
        "local_experts": [min(local), max(local)],
    }
    scheme = _expert_scheme_dict(layer, config)
    if scheme is None or scheme.get("weights") is None:
        return found  # unquantized experts
    with _tp(tp):
        found.update(_expert_checks(config, scheme, layer["hidden"], per_rank, width, tp) or {})
    return found


def _expert_scheme_dict(layer: dict, config) -> dict | None:
    """What vLLM reads for the experts: compressed_tensors_moe.py get_moe_method maps the
    "Linear" target onto RoutedExperts and asks get_scheme_dict for `<experts>.0.gate_proj`."""
    config._add_fused_moe_to_target_scheme_map()
    stand_in = type("RoutedExperts", (), {})()
    return config.get_scheme_dict(stand_in, f"model.layers.0.{layer['name']}.0.gate_proj")


def _expert_checks(config, scheme: dict, hidden: int, per_rank: int, width: int, tp: int):
    """The MoE method get_moe_method picks (its own predicates, its order) and its checks."""
    from compressed_tensors.quantization import QuantizationStrategy

    weights, acts = scheme["weights"], scheme.get("input_activations")
    if config._is_mxfp4(weights) or config._is_nvfp4_format(weights):
        # CompressedTensorsW4A4{Mxfp4,Nvfp4}MoEMethod.create_weights: w2 scales sized
        # intermediate_size_per_partition // group, no check
        why = _fp4_misplaced(width, per_rank, weights.group_size, tp)
        return {"verdict": "misaligned", "reason": why} if why else None
    if config._is_wNa16_group_channel(weights, acts):
        _wna16_moe_create_weights(weights, hidden, per_rank)
    elif weights.strategy == QuantizationStrategy.BLOCK:
        from vllm.model_executor.layers.quantization.utils.fp8_utils import (
            validate_fp8_block_shape_moe,
        )

        # as compressed_tensors_moe_w8a8_fp8.py create_weights calls it
        validate_fp8_block_shape_moe(per_rank, weights.block_structure)
    return None  # per channel / per tensor FP8 and INT8: no partition check


def _wna16_moe_create_weights(weights, hidden: int, per_rank: int) -> None:
    import torch
    from vllm.model_executor.layers.quantization.compressed_tensors.compressed_tensors_moe import (  # noqa: E501
        compressed_tensors_moe_wna16 as wna16,
    )

    method = object.__new__(wna16.CompressedTensorsWNA16MoEMethod)
    method.weight_quant, method.input_quant = weights, None
    method.symmetric, method.num_bits = weights.symmetric, weights.num_bits
    method.packed_factor = Fraction(32, weights.num_bits)
    method.strategy = weights.strategy
    method.group_size = -1 if weights.group_size is None else weights.group_size
    method.moe = types.SimpleNamespace(is_act_and_mul=True, has_bias=False)
    with torch.device("meta"):
        method.create_weights(
            torch.nn.Module(), num_experts=1, hidden_size=hidden,
            intermediate_size_per_partition=per_rank, params_dtype=torch.bfloat16,
        )  # fmt: skip


if __name__ == "__main__":
    main()
