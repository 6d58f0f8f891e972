"""What this host's vLLM build can run; prints one JSON line. Serving env only.

vLLM's x86 CPU wheel ships three kernel libraries and loads one by CPU features: the AVX2 one
has no W4A16 GEMM (`cpu_gemm_wna16`), so GPTQ/AWQ artifacts serve only on AVX-512 CPUs (or GPUs).
Its CPU attention stores an FP8 KV cache only with AVX-512 or AMX (vllm/v1/attention/backends/
cpu_attn.py raises "FP8 KV cache on CPU requires x86 with AVX-512 or AMX" otherwise).
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
            }
        )
    )


if __name__ == "__main__":
    main()
