"""Layer groups: the Linears of one decoder layer that vLLM runs as one fused layer (q/k/v,
gate/up) must share a format; the others (o_proj, down_proj, …) stand alone."""

import re
from dataclasses import dataclass

_FUSED = {
    "q_proj": "qkv_proj", "k_proj": "qkv_proj", "v_proj": "qkv_proj",
    "gate_proj": "gate_up_proj", "up_proj": "gate_up_proj",
}  # fmt: skip
_LAYER = re.compile(r"^(.*\.layers\.\d+)\.(.+)$")


@dataclass(frozen=True)
class Group:
    name: str  # e.g. model.layers.3.self_attn.qkv_proj
    members: tuple[str, ...]  # the Linears' module names
    shapes: tuple[tuple[int, int], ...]  # (out_features, in_features) of each

    @property
    def params(self) -> int:
        return sum(o * i for o, i in self.shapes)

    @property
    def target(self) -> str:
        """llm-compressor's target for exactly these modules."""
        return "re:^(" + "|".join(re.escape(m) for m in self.members) + ")$"


def key(module_name: str) -> str | None:
    """The group a decoder-layer Linear belongs to (None: outside the decoder layers)."""
    found = _LAYER.match(module_name)
    if not found:
        return None
    layer, rest = found.groups()
    parent, _, leaf = rest.rpartition(".")
    return f"{layer}.{parent + '.' if parent else ''}{_FUSED.get(leaf, leaf)}"


def of_model(model) -> list[Group]:
    """The decoder's Linear groups in module order. MoE experts that transformers 5 fuses into
    3-D tensors are not Linears and are not searched (nor are routers: llm-compressor never
    quantizes them)."""
    import torch

    found: dict[str, list[tuple[str, tuple[int, int]]]] = {}
    for name, module in model.named_modules():
        router = name.endswith((".gate", "shared_expert_gate"))
        if not isinstance(module, torch.nn.Linear) or router:
            continue
        if (k := key(name)) is not None:
            found.setdefault(k, []).append((name, (module.out_features, module.in_features)))
    return [
        Group(k, tuple(n for n, _ in members), tuple(s for _, s in members))
        for k, members in found.items()
    ]
