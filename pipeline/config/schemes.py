"""What each compressed-tensors preset scheme stores, without importing compressed-tensors.

Used where loading torch would be wasteful: recipe checks against a model config, `--dry-run`
plans and the theoretical artifact size. Names follow compressed-tensors' PRESET_SCHEMES.
"""

from dataclasses import dataclass, replace


@dataclass(frozen=True)
class Scheme:
    name: str
    weight_bits: int
    weight_type: str  # "int" or "float"
    group_size: int | None  # None: one scale per output channel (or per tensor / block)
    symmetric: bool
    activation_bits: int | None  # None: activations stay 16-bit
    scale_bytes: int = 2  # bf16 scales; FP8 E4M3 (NVFP4) and E8M0 (MX) scales are 1 byte
    block: tuple[int, int] | None = None  # one scale per (rows, columns) block (FP8_BLOCK)
    per_tensor: bool = False  # one weight scale per tensor (static FP8)
    global_scales: int = 0  # float32 scales per Linear above the groups' (NVFP4: weight, input)
    # activation scales observed on calibration data (llm-compressor then requires it): static
    # FP8, and NVFP4's per-tensor global input scale
    calibrated_activations: bool = False

    @property
    def label(self) -> str:
        acts = f"A{self.activation_bits}" if self.activation_bits else "A16"
        if self.fp4:
            return self.fp4.upper() + ("" if self.activation_bits else "A16")
        kind = "FP" if self.weight_type == "float" else "W"
        return f"{kind}{self.weight_bits}" + ("" if kind == "FP" else acts)

    @property
    def fp4(self) -> str | None:
        """ "nvfp4" (E2M1 in groups of 16, FP8 scales) or "mxfp4" (groups of 32, E8M0 scales)."""
        if self.weight_type != "float" or self.weight_bits != 4:
            return None
        return "nvfp4" if self.group_size == 16 else "mxfp4"

    def scale_count(self, out_features: int, in_features: int) -> int:
        """Weight scales of one out × in Linear."""
        if self.block:
            rows, cols = self.block
            return -(-out_features // rows) * -(-in_features // cols)
        if self.group_size:
            return out_features * (in_features // self.group_size)
        return 1 if self.per_tensor else out_features


PRESETS: dict[str, Scheme] = {
    s.name: s
    for s in (
        Scheme("W8A16", 8, "int", 128, True, None),
        Scheme("W4A16", 4, "int", 128, True, None),
        Scheme("W4A16_ASYM", 4, "int", 128, False, None),
        Scheme("W8A8", 8, "int", None, True, 8),
        Scheme("W4A8", 4, "int", 128, True, 8),
        Scheme("FP8", 8, "float", None, True, 8, per_tensor=True, calibrated_activations=True),
        Scheme("FP8_DYNAMIC", 8, "float", None, True, 8),
        Scheme("FP8_BLOCK", 8, "float", None, True, 8, block=(128, 128)),
        # FP4 (E2M1): NVFP4 groups of 16 with FP8 E4M3 scales under a global scale per tensor
        # (weights; and input activations, calibrated); MX groups of 32, E8M0 scales
        Scheme("NVFP4A16", 4, "float", 16, True, None, scale_bytes=1, global_scales=1),
        Scheme(
            "NVFP4",
            4,
            "float",
            16,
            True,
            4,
            scale_bytes=1,
            global_scales=2,
            calibrated_activations=True,
        ),  # fmt: skip
        Scheme("MXFP4A16", 4, "float", 32, True, None, scale_bytes=1),
        Scheme("MXFP4", 4, "float", 32, True, 4, scale_bytes=1),
    )
}


# compressed-tensors 0.19's PRESET_SCHEMES names (a unit test keeps them equal); the pipeline
# sizes, plans and serves the subset in PRESETS
PRESET_NAMES = (
    "FP8", "FP8_BLOCK", "FP8_DYNAMIC", "INT8", "MXFP4", "MXFP4A16", "MXFP8", "MXFP8A16", "NVFP4",
    "NVFP4A16", "UNQUANTIZED", "W2A16", "W2A4", "W2A8", "W3A16", "W3A4", "W3A8", "W4A16",
    "W4A16_ASYM", "W4A4", "W4A8", "W4AFP8", "W5A16", "W5A8", "W6A16", "W6A8", "W7A16", "W7A8",
    "W8A16", "W8A8",
)  # fmt: skip


def check_name(name: object) -> str | None:
    """Why a `scheme:` value cannot be used (None: it can)."""
    key = str(name).upper()
    if key not in PRESET_NAMES:
        return f"unknown scheme '{name}'; compressed-tensors presets: {', '.join(PRESET_NAMES)}"
    if key not in PRESETS:
        return (
            f"scheme '{name}' is a compressed-tensors preset this pipeline does not plan or "
            f"serve yet; supported: {', '.join(PRESETS)} (or config_groups)"
        )
    return None


def scheme_from_args(args: dict) -> Scheme | None:
    """The (first) weight scheme a modifier's arguments ask for."""
    found = schemes_from_args(args)
    return found[0][0] if found else None


def schemes_from_args(args: dict) -> list[tuple[Scheme, list[str]]]:
    """Each weight scheme a modifier's arguments ask for, with its targets: a preset name (for
    the modifier's targets), presets mapped to targets, or config_groups (mixed precision)."""
    targets = args.get("targets", ["Linear"])
    targets = [targets] if isinstance(targets, str) else list(targets)
    scheme = args.get("scheme")
    if isinstance(scheme, str):
        found = PRESETS.get(scheme.upper())
        return [(found, targets)] if found else []
    if isinstance(scheme, dict):  # {"W4A16": ["Linear"]}: preset names mapped to targets
        pairs = [(PRESETS.get(str(k).upper()), v) for k, v in scheme.items()]
        return [(s, [v] if isinstance(v, str) else list(v)) for s, v in pairs if s]
    groups = args.get("config_groups")
    if isinstance(groups, dict):
        groups = [g or {} for g in groups.values()]
        return [(_group_scheme(g), list(g.get("targets") or [])) for g in groups]
    return []


def _group_scheme(group: dict) -> Scheme:
    """A config group's weights as a Scheme: the preset of that geometry's name when one matches."""
    weights = group.get("weights") or {}
    acts = group.get("input_activations") or None
    custom = Scheme(
        name="custom",
        weight_bits=int(weights.get("num_bits", 8)),
        weight_type=str(weights.get("type", "int")),
        group_size=weights.get("group_size"),
        symmetric=bool(weights.get("symmetric", True)),
        activation_bits=int(acts["num_bits"]) if acts else None,
    )
    for preset in PRESETS.values():
        if preset == replace(custom, name=preset.name):
            return preset
    for preset in PRESETS.values():  # a preset in other groups (quantize/plan.py: fitted)
        if preset.group_size and preset == replace(custom, name=preset.name,
                                                   group_size=preset.group_size):  # fmt: skip
            return replace(custom, name=f"{preset.name}_G{custom.group_size}")
    return custom


def config_group(scheme: Scheme, targets: list[str], group_size: int) -> dict:
    """An integer weight-only preset as a config group with another group size."""
    weights = {"num_bits": scheme.weight_bits, "type": scheme.weight_type,
               "symmetric": scheme.symmetric, "strategy": "group", "group_size": group_size,
               "dynamic": False}  # fmt: skip
    return {"targets": list(targets), "weights": weights}
