"""What each compressed-tensors preset scheme stores, without importing compressed-tensors.

Used where loading torch would be wasteful: recipe checks against a model config, `--dry-run`
plans and the theoretical artifact size. Names follow compressed-tensors' PRESET_SCHEMES.
"""

from dataclasses import dataclass


@dataclass(frozen=True)
class Scheme:
    name: str
    weight_bits: int
    weight_type: str  # "int" or "float"
    group_size: int | None  # None: one scale per output channel (or per tensor / block)
    symmetric: bool
    activation_bits: int | None  # None: activations stay 16-bit

    @property
    def label(self) -> str:
        acts = f"A{self.activation_bits}" if self.activation_bits else "A16"
        kind = "FP" if self.weight_type == "float" else "W"
        return f"{kind}{self.weight_bits}" + ("" if kind == "FP" else acts)


PRESETS: dict[str, Scheme] = {
    s.name: s
    for s in (
        Scheme("W8A16", 8, "int", None, True, None),
        Scheme("W4A16", 4, "int", 128, True, None),
        Scheme("W4A16_ASYM", 4, "int", 128, False, None),
        Scheme("W8A8", 8, "int", None, True, 8),
        Scheme("W4A8", 4, "int", 128, True, 8),
        Scheme("FP8", 8, "float", None, True, 8),
        Scheme("FP8_DYNAMIC", 8, "float", None, True, 8),
        Scheme("FP8_BLOCK", 8, "float", None, True, 8),
    )
}


def scheme_from_args(args: dict) -> Scheme | None:
    """The weight scheme a modifier's arguments ask for: a preset name or a config_groups dict."""
    scheme = args.get("scheme")
    if isinstance(scheme, str):
        return PRESETS.get(scheme.upper())
    if isinstance(scheme, dict) and scheme:
        # {"W4A16": ["Linear"]}: preset name mapped to targets
        return PRESETS.get(str(next(iter(scheme))).upper())
    groups = args.get("config_groups")
    if isinstance(groups, dict) and groups:
        group = next(iter(groups.values()))
        weights = group.get("weights") or {}
        acts = group.get("input_activations") or None
        return Scheme(
            name="custom",
            weight_bits=int(weights.get("num_bits", 8)),
            weight_type=str(weights.get("type", "int")),
            group_size=weights.get("group_size"),
            symmetric=bool(weights.get("symmetric", True)),
            activation_bits=int(acts["num_bits"]) if acts else None,
        )
    return None
