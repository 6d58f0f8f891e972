"""How much each group's quantization alone moves the model: mean KL against the original over a
small token set, with the group's weights quantized and dequantized in place (compressed-tensors'
own min-max scales and rounding, as llm-compressor's round-to-nearest would store them)."""

from collections.abc import Iterator
from contextlib import contextmanager

from pipeline.config.schemes import PRESETS, Scheme
from pipeline.core import progress
from pipeline.search.groups import Group

# Deferred imports: drift imports torch, needed only when a sensitivity is measured (not when
# cached)

# what a group can be: fewest bits first (the random control starts everyone at the first)
CANDIDATES: dict[str, Scheme | None] = {
    "W4A16": PRESETS["W4A16"],
    "W8A16": PRESETS["W8A16"],
    "BF16": None,  # left 16-bit
}


def group_bits(group: Group, scheme: Scheme | None) -> float:
    """The group's stored bits, scales and zero points included (inf: the format cannot hold
    one of its Linears, e.g. a group size that does not divide in_features)."""
    if scheme is None:
        return group.params * 16.0
    if scheme.group_size and any(i % scheme.group_size for _, i in group.shapes):
        return float("inf")
    total = 0.0
    for out, inp in group.shapes:
        scales = scheme.scale_count(out, inp)
        zero_points = 0 if scheme.symmetric else scales * scheme.weight_bits
        total += out * inp * scheme.weight_bits + scales * scheme.scale_bytes * 8 + zero_points
    return total


def measure(backend, model, groups: list[Group], windows, mass: float, max_k: int) -> list[dict]:
    """Per group: {candidate: {"kl": mean, "se": standard error}} over the windows' tokens."""
    from pipeline.eval import drift

    ref = drift.references(backend, model, windows, mass, max_k)
    modules = dict(model.named_modules())
    quantized = {n: s for n, s in CANDIDATES.items() if s is not None}
    bar = progress.bar(total=len(groups) * len(quantized), desc="sensitivity", unit="trial")
    found = []
    for group in groups:
        row = {name: {"kl": 0.0, "se": 0.0} for name, s in CANDIDATES.items() if s is None}
        for name, scheme in quantized.items():
            if group_bits(group, scheme) == float("inf"):
                row[name] = {"kl": float("inf"), "se": 0.0}
            else:
                with _quantized(modules, group, scheme):
                    kl = drift.kl_tokens(backend, model, ref, windows)
                row[name] = {"kl": kl.mean().item(), "se": (kl.std() / kl.numel() ** 0.5).item()}
            bar.update()
        found.append(row)
    bar.close()
    return found


@contextmanager
def _quantized(modules: dict, group: Group, scheme: Scheme) -> Iterator[None]:
    saved = {name: modules[name].weight.data for name in group.members}
    try:
        for name in group.members:
            modules[name].weight.data = _fake_quantize(saved[name], scheme)
        yield
    finally:
        for name, data in saved.items():
            modules[name].weight.data = data


def _fake_quantize(weight, scheme: Scheme):
    from compressed_tensors.quantization import preset_name_to_scheme
    from compressed_tensors.quantization.lifecycle.forward import fake_quantize
    from compressed_tensors.quantization.utils import calculate_qparams

    args = preset_name_to_scheme(scheme.name, ["Linear"]).weights
    w = weight.float()
    grouped = w.view(w.shape[0], -1, args.group_size)
    scale, zero_point = calculate_qparams(grouped.amin(-1), grouped.amax(-1), args)
    return fake_quantize(w, scale, zero_point, args).to(weight.dtype)
