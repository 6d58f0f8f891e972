"""Makes the CPU serving env run FP8 matmuls through torch's own emulation. Serving env.

torch 2.13 sends `torch._scaled_mm` of CPU tensors to oneDNN on hosts with AMX, and the oneDNN
it bundles has only its reference FP8 matmul there (ONEDNN_VERBOSE: `ref:any`): a 512 × 768 ×
256 product took 7.0 s against 0.025 s on the emulated path (dequantize, float32 matmul) that
torch takes on every other CPU, with the same result (max |Δ| 7.6e-6 on outputs of ~128).
vLLM's CPU FP8 linear (ChannelWiseTorchFP8ScaledMMLinearKernel) calls torch._scaled_mm, so an
FP8 artifact generated 0.6 tokens/s on such a host (5M-parameter model). This installs, into
the serving env's site-packages, a `.pth` hook that wraps torch._scaled_mm for CPU tensors to
run with oneDNN off — every process of the env (vLLM's engine processes too), from the moment
torch is imported; GPU tensors are untouched. Does nothing where torch is a CUDA build.

    .venv-serve/bin/python cpu_scaled_mm.py
"""

import sys
import sysconfig
from pathlib import Path

NAME = "quant_pipeline_cpu_scaled_mm"
HOOK = '''"""torch._scaled_mm on CPU tensors through torch's emulated path, not oneDNN's
reference FP8 kernel (written by quant-pipeline's pipeline/vllm_scripts/cpu_scaled_mm.py: its
docstring says why). Applied when torch is first imported."""

import importlib.machinery
import sys


def _patch(torch):
    original = torch._scaled_mm

    @torch.compiler.disable  # a graph break under torch.compile, not a traced context manager
    def scaled_mm(a, b, *args, **kwargs):
        if a.device.type != "cpu":
            return original(a, b, *args, **kwargs)
        enabled = torch._C._get_mkldnn_enabled()
        torch._C._set_mkldnn_enabled(False)  # (mkldnn.flags() would also reset oneDNN's TF32)
        try:
            return original(a, b, *args, **kwargs)
        finally:
            torch._C._set_mkldnn_enabled(enabled)

    scaled_mm.__wrapped__ = original
    torch._scaled_mm = scaled_mm


class _AfterTorch:
    """Finds torch as the path finder does, with a loader that patches it once executed (a
    find_spec alone, as transformers' is_torch_available makes, imports nothing)."""

    def find_spec(self, name, path=None, target=None):
        if name != "torch":
            return None
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        if spec is None or spec.loader is None:
            return spec
        run = spec.loader.exec_module

        def exec_module(module):
            run(module)
            if self in sys.meta_path:
                sys.meta_path.remove(self)
            _patch(module)

        spec.loader.exec_module = exec_module
        return spec


if "torch" not in sys.modules:
    sys.meta_path.insert(0, _AfterTorch())
'''


def main() -> int:
    import torch

    if torch.version.cuda is not None:
        return 0  # a CUDA build: its FP8 matmuls are the GPU's
    site = Path(sysconfig.get_paths()["purelib"])
    (site / f"{NAME}.py").write_text(HOOK)
    (site / f"{NAME}.pth").write_text(f"import {NAME}\n")
    print(f"torch._scaled_mm on CPU through torch's emulation: {site / NAME}.pth")
    return 0


if __name__ == "__main__":
    sys.exit(main())
