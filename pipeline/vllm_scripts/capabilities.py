"""What this host's vLLM build can run; prints one JSON line. Serving env only.

vLLM's x86 CPU wheel ships three kernel libraries and loads one by CPU features: the AVX2 one
has no W4A16 GEMM (`cpu_gemm_wna16`), so GPTQ/AWQ artifacts serve only on AVX-512 CPUs (or GPUs).
"""

import json


def main() -> None:
    import torch
    from vllm.platforms import current_platform

    current_platform.import_kernels()
    cuda = torch.cuda.is_available()
    print(
        json.dumps(
            {
                "device": "cuda" if cuda else "cpu",
                "avx512": bool(torch.cpu._is_avx512_supported()),
                "w4a16": cuda or hasattr(torch.ops._C, "cpu_gemm_wna16"),
            }
        )
    )


if __name__ == "__main__":
    main()
