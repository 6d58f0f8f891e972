"""GPTQ-packed checkpoints (AutoGPTQ, GPTQModel, AutoRound's `auto_gptq` packing) as
compressed-tensors, through compressed-tensors' own checkpoint converter framework
(`compressed_tensors.entrypoints.convert`, which ships an AutoAWQ converter but none for GPTQ).

GPTQ stores each quantized Linear as
    qweight [in·bits/32, out] int32   values packed along the input dimension, low bits first
    qzeros  [groups, out·bits/32]     zero points packed along the output dimension
    scales  [groups, out]             16-bit
    g_idx   [in]                      the group of each input column (act-order reorders them)
and W[o, i] = (q[i, o] − z[g_idx[i], o]) · s[g_idx[i], o]. AutoGPTQ's format ("gptq", v1)
stores z − 1; GPTQModel's "gptq_v2" stores z. compressed-tensors' pack-quantized stores signed
values packed along the input dimension of [out, in] with [out, groups] scales; it has no form
for act-order groups, so those layers are written dequantized in float32 (the same function:
the hf backend runs dequantized weights in float32 either way).
"""

import torch

BITS = (2, 4, 8)  # 3-bit GPTQ packs across int32 words: not converted


class GPTQConverter:
    def __init__(self, bits: int, group_size: int, sym: bool, v1: bool, ignore: list[str]):
        if bits not in BITS:
            raise ValueError(f"GPTQ {bits}-bit checkpoints are not converted (only {BITS})")
        self.bits, self.group_size, self.sym, self.v1 = bits, group_size, sym, v1
        self.ignore = ignore
        self.dequantized: list[str] = []  # act-order layers written as float32

    # -- compressed-tensors Converter protocol --------------------------------------------
    def process(self, tensors: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        from compressed_tensors.compressors.pack_quantized.helpers import pack_to_int32

        for name in [n for n in tensors if n.endswith(".qweight")]:
            module = name.removesuffix(".qweight")
            q, z, s, g_idx = self._unpack(tensors, module)
            if not _contiguous_groups(g_idx, self.group_size, q.shape[0]):
                weight = (q - z[g_idx]).float() * s[g_idx].float()  # [in, out]
                tensors[f"{module}.weight"] = weight.T.contiguous()
                self.dequantized.append(module)
                continue
            half = 1 << (self.bits - 1)
            tensors[f"{module}.weight_packed"] = pack_to_int32(
                (q - half).T.to(torch.int8), self.bits
            )
            tensors[f"{module}.weight_scale"] = s.T.contiguous()
            tensors[f"{module}.weight_shape"] = torch.tensor([q.shape[1], q.shape[0]])
            if self.sym:
                if not bool((z == half).all()):
                    raise ValueError(f"{module}: symmetric GPTQ with zero points other than {half}")
            else:
                zp = (z - half).T.contiguous().to(torch.int8)
                tensors[f"{module}.weight_zero_point"] = pack_to_int32(zp, self.bits, packed_dim=0)
        return tensors

    def validate(self, tensors: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        for name in tensors:
            if name.endswith(".qweight"):
                module = name.removesuffix(".qweight")
                for part in ("qzeros", "scales"):
                    if f"{module}.{part}" not in tensors:
                        raise ValueError(f"{name} without {module}.{part}")
        return {n: t for n, t in tensors.items() if not n.endswith(_PARTS)}

    def update_config(self, config):
        from compressed_tensors.quantization import (
            QuantizationArgs,
            QuantizationConfig,
            QuantizationScheme,
        )

        weights = QuantizationArgs(
            num_bits=self.bits,
            type="int",
            symmetric=self.sym,
            group_size=self.group_size if self.group_size > 0 else None,
            strategy="group" if self.group_size > 0 else "channel",
        )
        scheme = QuantizationScheme(targets=["Linear"], weights=weights, format="pack-quantized")
        ignore = self.ignore + [f"re:^{m}$" for m in self.dequantized]
        return QuantizationConfig(
            config_groups={"group_0": scheme},
            ignore=ignore,
            format="pack-quantized",
            quantization_status="compressed",
        )

    def update_model_config(self, model_config: dict) -> dict:
        return model_config

    def get_dependencies(self, weight_name: str) -> set[str]:
        if not weight_name.endswith(".qweight"):
            return set()
        module = weight_name.removesuffix(".qweight")
        return {f"{module}.{p}" for p in ("qzeros", "scales", "g_idx")}

    # -- GPTQ layout ----------------------------------------------------------------------
    def _unpack(self, tensors: dict, module: str):
        qweight = tensors.pop(f"{module}.qweight")
        qzeros = tensors.pop(f"{module}.qzeros")
        scales = tensors.pop(f"{module}.scales")
        g_idx = tensors.pop(f"{module}.g_idx", None)
        q = _unpack_int32(qweight, self.bits, dim=0)  # [in, out]
        z = _unpack_int32(qzeros, self.bits, dim=1)  # [groups, out]
        if self.v1:
            z = (z + 1) & ((1 << self.bits) - 1)
        in_features = q.shape[0]
        if g_idx is None:
            size = self.group_size if self.group_size > 0 else in_features
            g_idx = torch.arange(in_features) // size
        return q, z, scales, g_idx.long()


_PARTS = (".qweight", ".qzeros", ".scales", ".g_idx")


def _unpack_int32(packed: torch.Tensor, bits: int, dim: int) -> torch.Tensor:
    """int32 words → their `32 / bits` unsigned values, low bits first, along `dim`."""
    per = 32 // bits
    shifts = torch.arange(0, 32, bits, dtype=torch.int32)
    mask = (1 << bits) - 1
    if dim == 0:
        values = (packed[:, None, :] >> shifts[None, :, None]) & mask
        return values.reshape(packed.shape[0] * per, packed.shape[1])
    values = (packed[:, :, None] >> shifts[None, None, :]) & mask
    return values.reshape(packed.shape[0], packed.shape[1] * per)


def _contiguous_groups(g_idx: torch.Tensor, group_size: int, in_features: int) -> bool:
    size = group_size if group_size > 0 else in_features
    return bool((g_idx == torch.arange(in_features) // size).all())
