"""Are two artifacts the same tensors? Bit for bit, name by name (the resume tests, the
benchmarks and gpu-check's resume row compare a resumed run with an uninterrupted one)."""

from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # torch loads where tensors are compared
    import torch


def load(folder: Path) -> dict[str, "torch.Tensor"]:
    from safetensors.torch import load_file

    found: dict[str, torch.Tensor] = {}
    for path in sorted(folder.glob("*.safetensors")):
        found |= load_file(path)
    return found


def differences(a: Path, b: Path) -> list[str]:
    """What differs between the artifacts' tensors (empty: bit-identical)."""
    import torch

    left, right = load(a), load(b)
    found = [f"only in {a}: {n}" for n in sorted(set(left) - set(right))]
    found += [f"only in {b}: {n}" for n in sorted(set(right) - set(left))]
    for name in sorted(set(left) & set(right)):
        x, y = left[name], right[name]
        if x.dtype != y.dtype or x.shape != y.shape:
            found.append(f"{name}: {x.dtype}{tuple(x.shape)} vs {y.dtype}{tuple(y.shape)}")
        elif not torch.equal(x.reshape(-1).view(torch.uint8), y.reshape(-1).view(torch.uint8)):
            found.append(f"{name}: values differ")
    return found
