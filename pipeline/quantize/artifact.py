"""What a checkpoint holds, read from safetensors headers only (no torch, no weights loaded)."""

import json
import struct
from dataclasses import dataclass
from pathlib import Path

from pipeline.config.schemes import Scheme

_BYTES = {
    "F64": 8,
    "F32": 4,
    "I64": 8,
    "I32": 4,
    "F16": 2,
    "BF16": 2,
    "I16": 2,
    "U8": 1,
    "I8": 1,
    "F8_E4M3": 1,
    "F8_E5M2": 1,
    "BOOL": 1,
}


@dataclass(frozen=True)
class TensorInfo:
    dtype: str
    shape: tuple[int, ...]
    nbytes: int

    @property
    def numel(self) -> int:
        n = 1
        for d in self.shape:
            n *= d
        return n


def tensors(folder: Path) -> dict[str, TensorInfo]:
    found = {}
    for path in sorted(folder.glob("*.safetensors")):
        with open(path, "rb") as f:
            (size,) = struct.unpack("<Q", f.read(8))
            header = json.loads(f.read(size))
        for name, meta in header.items():
            if name == "__metadata__":
                continue
            start, end = meta["data_offsets"]
            found[name] = TensorInfo(meta["dtype"], tuple(meta["shape"]), end - start)
    return found


def tensor_bytes(folder: Path) -> int:
    """Bytes of a checkpoint's tensors, from the safetensors headers (no weights loaded)."""
    return sum(info.nbytes for info in tensors(folder).values())


def quantized_modules(table: dict[str, TensorInfo]) -> set[str]:
    return {name.rsplit(".", 1)[0] for name in table if name.endswith(".weight_scale")}


def module_params(table: dict[str, TensorInfo], module: str, bits: int) -> int:
    """Weight parameters of one quantized module: its FP8/INT8 `weight`, or its `weight_packed`
    (int32 words holding 32 / bits values each)."""
    packed = table.get(f"{module}.weight_packed")
    if packed is not None:
        per_word = {"I32": 32, "I64": 64, "U8": 8, "I8": 8}[packed.dtype] // bits
        return packed.numel * per_word
    return table[f"{module}.weight"].numel


def size_metrics(artifact: Path, original: Path, scheme: Scheme | None) -> dict:
    """Bytes of quantized vs unquantized tensors, and ratios to bf16 and to the scheme's ideal.

    theoretical = quantized weights at the scheme's bit width + every other tensor at 16 bits;
    ratio_to_theoretical > 1 is the cost of scales, zero points and packing metadata (the
    quantize stage adds the ideal with scales, from the planner's geometry).
    """
    new, old = tensors(artifact), tensors(original)
    modules = quantized_modules(new)
    bits = scheme.weight_bits if scheme else 16
    quant_bytes = sum(
        info.nbytes for name, info in new.items() if name.rsplit(".", 1)[0] in modules
    )
    tensor_bytes = sum(info.nbytes for info in new.values())
    # counted from the artifact's own tensors: the original may store them under other names
    # (transformers 5 fuses MoE experts, llm-compressor writes them one by one)
    quantized_params = sum(module_params(new, m, bits) for m in modules)
    all_params = sum(info.numel for info in old.values())
    theoretical = quantized_params * bits / 8 + (all_params - quantized_params) * 2
    bf16 = all_params * 2
    return {
        "artifact_bytes": sum(p.stat().st_size for p in artifact.rglob("*") if p.is_file()),
        "tensor_bytes": tensor_bytes,
        "quantized_tensor_bytes": quant_bytes,
        "unquantized_tensor_bytes": tensor_bytes - quant_bytes,
        "quantized_modules": len(modules),
        "quantized_params": quantized_params,
        "total_params": all_params,
        "bf16_bytes": bf16,
        "ratio_to_bf16": round(tensor_bytes / bf16, 4),
        "theoretical_bytes": int(theoretical),
        "ratio_to_theoretical": round(tensor_bytes / theoretical, 4),
        "quantized_dtypes": sorted(
            {info.dtype for n, info in new.items() if n.rsplit(".", 1)[0] in modules}
        ),
    }


def shard_bytes(folder: Path) -> list[int]:
    """Sizes of a checkpoint's safetensors files, largest first."""
    return sorted((p.stat().st_size for p in folder.glob("*.safetensors")), reverse=True)


def tensor_files(folder: Path) -> dict[str, Path]:
    """Which safetensors file holds each tensor (headers only)."""
    found: dict[str, Path] = {}
    for path in sorted(folder.glob("*.safetensors")):
        with open(path, "rb") as f:
            (size,) = struct.unpack("<Q", f.read(8))
            found |= dict.fromkeys(
                (n for n in json.loads(f.read(size)) if n != "__metadata__"), path
            )
    return found


def weight_shape(table: dict[str, TensorInfo], module: str, bits: int) -> tuple[int, ...]:
    """(out, in) of a quantized module's weight, from its stored tensors' headers (an unpacked
    weight's shape as stored)."""
    packed = table.get(f"{module}.weight_packed")
    if packed is None:
        return table[f"{module}.weight"].shape
    rows, words = packed.shape
    per_word = {"I32": 32, "I64": 64, "U8": 8, "I8": 8}[packed.dtype] // bits
    return rows, words * per_word
