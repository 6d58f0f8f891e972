"""GPTQ packing → compressed-tensors, checked against GPTQ's own dequantization formula on
tensors packed here from known integers (sym / asym, v1 / v2, act-order)."""

import pytest
import torch

from pipeline.external.gptq_converter import GPTQConverter, _unpack_int32


def _pack(values: torch.Tensor, bits: int, dim: int) -> torch.Tensor:
    """GPTQ's packing: 32 / bits unsigned values per int32 word along `dim`, low bits first."""
    per = 32 // bits
    v = values.to(torch.int64)
    if dim == 0:
        v = v.reshape(v.shape[0] // per, per, v.shape[1])
        words = sum(v[:, k, :] << (bits * k) for k in range(per))
    else:
        v = v.reshape(v.shape[0], v.shape[1] // per, per)
        words = sum(v[:, :, k] << (bits * k) for k in range(per))
    return ((words + 2**31) % 2**32 - 2**31).to(torch.int32)  # as int32 bit patterns


def _checkpoint(bits, group, sym, v1, act_order, in_f=256, out_f=64, seed=0):
    g = torch.Generator().manual_seed(seed)
    top = 2**bits
    q = torch.randint(0, top, (in_f, out_f), generator=g)
    groups = in_f // group
    z = (
        torch.full((groups, out_f), top // 2)
        if sym
        else torch.randint(0, top, (groups, out_f), generator=g)
    )
    s = torch.rand(groups, out_f, generator=g).half() / 10 + 0.01
    g_idx = torch.arange(in_f) // group
    if act_order:
        g_idx = g_idx[torch.randperm(in_f, generator=g)]
    stored = (z - 1) % top if v1 else z
    tensors = {
        "m.qweight": _pack(q, bits, 0),
        "m.qzeros": _pack(stored, bits, 1),
        "m.scales": s,
        "m.g_idx": g_idx.int(),
    }
    expected = ((q - z[g_idx]).float() * s[g_idx].float()).T  # [out, in]
    return tensors, expected


def _dequantize(out: dict, bits: int, group: int) -> torch.Tensor:
    """compressed-tensors' pack-quantized: signed values (and zero points), scales per group."""
    shape = out["m.weight_shape"].tolist()
    half = 2 ** (bits - 1)
    q = _unpack_int32(out["m.weight_packed"].T.contiguous(), bits, dim=0).T[:, : shape[1]] - half
    zp = 0
    if "m.weight_zero_point" in out:
        zp = _unpack_int32(out["m.weight_zero_point"], bits, dim=0)[: shape[0]] - half
        zp = zp.repeat_interleave(group, dim=1)
    scale = out["m.weight_scale"].float().repeat_interleave(group, dim=1)
    return (q - zp).float() * scale


def test_unpack_inverts_pack():
    values = torch.randint(0, 16, (64, 8))
    assert torch.equal(_unpack_int32(_pack(values, 4, 0), 4, dim=0), values)
    assert torch.equal(_unpack_int32(_pack(values, 4, 1), 4, dim=1), values)


@pytest.mark.parametrize("bits", [4, 8])
@pytest.mark.parametrize("sym, v1", [(True, True), (False, True), (False, False)])
def test_grouped_layers_convert_exactly(bits, sym, v1):
    tensors, expected = _checkpoint(bits, 128, sym, v1, act_order=False)
    conv = GPTQConverter(bits, 128, sym, v1, ["lm_head"])
    out = conv.process(dict(tensors))
    assert not any(n.endswith(("qweight", "qzeros", "scales", "g_idx")) for n in out)
    assert torch.equal(_dequantize(out, bits, 128), expected)
    config = conv.update_config(None)
    weights = config.config_groups["group_0"].weights
    assert (weights.num_bits, weights.group_size, weights.symmetric) == (bits, 128, sym)


def test_act_order_layers_are_written_dequantized_in_float32():
    tensors, expected = _checkpoint(4, 64, True, True, act_order=True)
    conv = GPTQConverter(4, 64, True, True, ["lm_head"])
    out = conv.process(dict(tensors))
    assert out["m.weight"].dtype == torch.float32
    assert torch.equal(out["m.weight"], expected)
    assert "re:^m$" in conv.update_config(None).ignore  # left out of the quantized groups


def test_symmetric_with_other_zero_points_is_refused():
    tensors, _ = _checkpoint(4, 128, sym=False, v1=True, act_order=False)
    with pytest.raises(ValueError, match="symmetric GPTQ with zero points"):
        GPTQConverter(4, 128, True, True, []).process(dict(tensors))


def test_three_bits_is_refused():
    with pytest.raises(ValueError, match="3-bit"):
        GPTQConverter(3, 128, True, True, [])
