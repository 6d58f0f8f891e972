"""What an eval backend's figures depend on beyond the model and the tokens: the device, the
dtype the backend computes in and the engine's build. Part of the keys of the stored reference
and of the original's task scores, so that a float32 CPU reference is not reused by a bf16 GPU
eval (KL and perplexity would then measure the dtype, not the quantization).

Torch-free and cheap (nvidia-smi, package metadata and a few small files): a cached eval must
stay under a second.
"""

import importlib.metadata

from pipeline.core import devices
from pipeline.engines.vllm import serving_env

# pipeline/vllm_scripts/prompt_logprobs.py and tasks._engine_args load every model in bfloat16
VLLM_DTYPE = "bfloat16"


def identity(backend: str) -> dict:
    """{backend, device, dtype, build} for `backend` ("hf" | "vllm") on this process's GPUs."""
    gpus = devices.seen()
    return {
        "backend": backend,
        "device": device(gpus),
        "dtype": dtype(backend, bool(gpus)),
        "build": build(backend),
    }


def device(gpus: list[devices.Gpu]) -> str:
    """ "cpu", or the visible GPUs as "<count> × <name>" (names joined if they differ)."""
    if not gpus:
        return "cpu"
    names = sorted({g.name for g in gpus})
    return f"{len(gpus)} × {' + '.join(names)}"


def dtype(backend: str, on_gpus: bool) -> str:
    """As the backend loads the model (pipeline/eval/backends/hf.py: float32 on CPU, the
    checkpoint's own dtype on GPUs — which the model's identity already fixes)."""
    if backend == "vllm":
        return VLLM_DTYPE
    return "checkpoint" if on_gpus else "float32"


def build(backend: str) -> dict:
    """The engine's version and CUDA build, from package metadata and files (no import)."""
    if backend == "vllm":
        return {
            "vllm": serving_env.version(),
            "stamp": serving_env.stamp(),
            "cuda": devices.torch_cuda(serving_env.torch_version_file()),
        }
    return {
        "torch": _version("torch"),
        "cuda": devices.torch_cuda(devices.main_torch_version_file()),
    }


def _version(name: str) -> str | None:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None
