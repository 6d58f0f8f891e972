"""What this host's vLLM build can run; prints one JSON line. Serving env only.

vLLM's x86 CPU wheel ships three kernel libraries and loads one by CPU features: the AVX2 one
has no W4A16 GEMM (`cpu_gemm_wna16`), so GPTQ/AWQ artifacts serve only on AVX-512 CPUs (or GPUs).
Its CPU attention stores an FP8 KV cache only with AVX-512 or AMX (vllm/v1/attention/backends/
cpu_attn.py raises "FP8 KV cache on CPU requires x86 with AVX-512 or AMX" otherwise).
FP8 mixture-of-experts layers need an FP8 MoE kernel for the host: on CPU, vLLM 0.32 has two
(CPUExpertsFp8W8A8, CPUExpertsFp8), each saying whether it supports this device and the
scheme; where neither does, the engine fails with "Unsupported FP8 MoE backend: NONE" (seen on
AVX2 and AVX-512 hosts without AMX). `fp8_moe` is None when the probe itself fails.
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
                "fp8_moe": True if cuda else _cpu_fp8_moe(),
            }
        )
    )


def _cpu_fp8_moe() -> bool | None:
    """Does a CPU FP8 MoE kernel take FP8 channel-wise weights with dynamic per-token
    activations (FP8_DYNAMIC) on this host? Private vLLM API: None if it moved."""
    try:
        from vllm.model_executor.layers.fused_moe.oracle import fp8 as oracle
        from vllm.model_executor.layers.quantization.utils import quant_utils as q

        backends = (oracle.Fp8MoeBackend.CPU_W8A8, oracle.Fp8MoeBackend.CPU)
        kernels = [k for b in backends for k in oracle.backend_to_kernel_cls(b)]
        return any(
            k._supports_current_device()
            and k._supports_quant_scheme(q.kFp8StaticChannelSym, q.kFp8DynamicTokenSym)
            for k in kernels
        )
    except Exception:
        return None


if __name__ == "__main__":
    main()
