"""What this host's vLLM build can run; prints one JSON line. Serving env only.

vLLM's x86 CPU wheel ships three kernel libraries and loads one by CPU features: the AVX2 one
has no W4A16 GEMM (`cpu_gemm_wna16`), so GPTQ/AWQ artifacts serve only on AVX-512 CPUs (or GPUs).
Its CPU attention stores an FP8 KV cache only with AVX-512 or AMX (vllm/v1/attention/backends/
cpu_attn.py raises "FP8 KV cache on CPU requires x86 with AVX-512 or AMX" otherwise).
Quantized mixture-of-experts layers need a MoE kernel for the scheme and host: vLLM 0.32 picks
one per scheme through an "oracle" (fused_moe/oracle/{fp8,int_wna16,int8}.py) whose CPU kernels
(CPUExpertsFp8*, CPUExpertsInt4, CPUExpertsInt8, Zentorch on AMD) each say whether they support
this device and the scheme; on x86 all of them need AMX. Where none does, the engine fails at
start-up ("Unsupported FP8 MoE backend: NONE", "No WNA16 MoE backend supports the deployment
configuration"; seen on AVX2 and AVX-512 hosts without AMX). Each `*_moe` is None when the
probe itself fails (a private API that moved).
Dense W8A16 (INT8 weights, 16-bit activations) needs a mixed-precision kernel for uint8b128: the
CPU's (CPUWNA16) takes only INT4, so it does not serve on CPU. FP8 weights in 128×128 blocks
(FP8_BLOCK) serve on CPU only through AMX kernels. Both are asked of vLLM's own kernel choosers
(None when the probe fails). FP4 (NVFP4, MXFP4) linear kernels exist for CUDA (native on
Blackwell, Marlin weight-only from Ampere, emulation on any GPU), ROCm and XPU; none for CPU.
Online FP8 (`vllm serve <bf16 model> --quantization fp8`) quantizes activations with
`_C::static_scaled_fp8_quant`, which the CPU wheel declares without arguments (a stub): the
worker fails at start-up with "expected at most 0 argument(s)" (seen on AVX2 and AVX-512).
"""

import json


def main() -> None:
    import torch
    from vllm.platforms import current_platform

    current_platform.import_kernels()
    cuda = torch.cuda.is_available()
    avx512 = bool(torch.cpu._is_avx512_supported())
    amx = bool(torch.cpu._is_amx_tile_supported())
    print(
        json.dumps(
            {
                "device": "cuda" if cuda else "cpu",
                "avx512": avx512,
                "amx": amx,
                "w4a16": cuda or hasattr(torch.ops._C, "cpu_gemm_wna16"),
                "fp8_kv_cache": cuda or avx512 or amx,
                "fp8_moe": True if cuda else _cpu_moe("fp8", _FP8),
                "w4a16_moe": True if cuda else _cpu_moe("int_wna16", _W4A16),
                "int8_moe": True if cuda else _cpu_moe("int8", _INT8),
                "online_fp8": cuda or _has_arguments("static_scaled_fp8_quant"),
                "w8a16": True if cuda else _mixed_precision("uint8b128"),
                "fp8_block": True if cuda else _cpu_fp8_block(),
                "nvfp4": True if cuda else _platform_kernels("_POSSIBLE_NVFP4_KERNELS"),
                "mxfp4": True if cuda else _platform_kernels("_POSSIBLE_MXFP4_KERNELS"),
            }
        )
    )


# oracle module: (its backend enum, the CPU backends, weight key, activation key) — the keys
# as the pipeline's schemes quantize: FP8 channel weights with dynamic per-token activations,
# INT4 group weights with 16-bit activations, INT8 channel weights with dynamic per-token INT8
_FP8 = ("Fp8MoeBackend", ("CPU_W8A8", "CPU"), "kFp8StaticChannelSym", "kFp8DynamicTokenSym")
_W4A16 = ("WNA16MoEBackend", ("ZEN_CPU", "CPU"), "kInt4Static", None)
_INT8 = ("Int8MoeBackend", ("CPU",), "kInt8StaticChannelSym", "kInt8DynamicTokenSym")


def _has_arguments(op: str) -> bool | None:
    """A real kernel, not the CPU wheel's zero-argument stub. None if the op is not there."""
    import torch

    try:
        return len(getattr(torch.ops._C, op).default._schema.arguments) > 0
    except (AttributeError, RuntimeError):
        return None


def _mixed_precision(weight_type: str) -> bool | None:
    """Can one of this platform's mixed-precision kernels run group-128 weights of this type
    with bf16 activations? Private vLLM API: None if it moved."""
    import torch

    try:
        from vllm.model_executor.kernels.linear import choose_mp_linear_kernel
        from vllm.model_executor.kernels.linear.mixed_precision.MPLinearKernel import (
            MPLinearLayerConfig,
        )
        from vllm.scalar_type import scalar_types

        config = MPLinearLayerConfig(
            full_weight_shape=(256, 256),
            partition_weight_shape=(256, 256),
            weight_type=getattr(scalar_types, weight_type),
            act_type=torch.bfloat16,
            group_size=128,
            zero_points=False,
        )
    except Exception:
        return None
    try:
        choose_mp_linear_kernel(config)
        return True
    except ValueError:  # "Failed to find a kernel that can implement …"
        return False


def _cpu_fp8_block() -> bool | None:
    """Does a CPU block-FP8 GEMM (W8A16 or W8A8) support this host? None if the API moved."""
    try:
        from vllm.model_executor.kernels.linear.scaled_mm import cpu

        kernels = (cpu.CPUFp8BlockScaledMMKernel, cpu.CPUFp8W8A8BlockScaledMMKernel)
        return any(k.is_supported()[0] for k in kernels)
    except Exception:
        return None


def _platform_kernels(table: str) -> bool | None:
    """Does one of this platform's kernels in vLLM's table (FP4 linear kernels) support this
    device? vLLM 0.32 lists none for CPU. None if the table moved."""
    try:
        from vllm.model_executor.kernels import linear
        from vllm.platforms import current_platform

        kernels = getattr(linear, table).get(current_platform._enum, [])
        return any(k.is_supported()[0] for k in kernels)
    except Exception:
        return None


def _cpu_moe(oracle_name: str, spec: tuple) -> bool | None:
    """Does one of this CPU's MoE kernels for the scheme support this device? Private vLLM
    API: None if it moved."""
    import importlib

    enum_name, backends, weight, activation = spec
    try:
        from vllm.model_executor.layers.quantization.utils import quant_utils as q

        oracle = importlib.import_module(
            f"vllm.model_executor.layers.fused_moe.oracle.{oracle_name}"
        )
        enum = getattr(oracle, enum_name)
        keys = (getattr(q, weight), getattr(q, activation) if activation else None)
        kernels = [k for b in backends for k in oracle.backend_to_kernel_cls(enum[b])]
        return any(
            k._supports_current_device() and k._supports_quant_scheme(*keys) for k in kernels
        )
    except Exception:
        return None


if __name__ == "__main__":
    main()
