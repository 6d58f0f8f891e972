"""Which experts the calibration data reached. A router sends each token to its top-k experts;
an expert no calibration token was routed to is calibrated only because llm-compressor runs
every expert on every token (moe_calibrate_all_experts), and its quantization statistics come
from tokens it would never see: worth knowing before trusting a W4A16 MoE.

Counted with a forward pre-hook on llm-compressor's linearized experts modules (the router's
top-k indices are their second argument), so it needs no model-specific code.
"""

from dataclasses import dataclass, field


@dataclass
class Routing:
    counts: dict = field(default_factory=dict)  # experts module name -> tokens per expert
    hooks: list = field(default_factory=list)

    def summary(self) -> dict | None:
        """None for a dense model; else {moe_layers, experts, tokens, min_share, unrouted}
        where unrouted maps a layer's experts module to the experts that got no token."""
        if not self.counts:
            return None
        unrouted = {
            name: [i for i, n in enumerate(c.tolist()) if n == 0] for name, c in self.counts.items()
        }
        shares = [c.min().item() / c.sum().item() for c in self.counts.values() if c.sum() > 0]
        return {
            "moe_layers": len(self.counts),
            "experts": len(next(iter(self.counts.values()))),
            "tokens_routed": int(sum(c.sum() for c in self.counts.values())),
            "min_share": min(shares) if shares else 0.0,
            "unrouted": {name: ids for name, ids in unrouted.items() if ids},
        }

    def remove(self) -> None:
        for handle in self.hooks:
            handle.remove()
        self.hooks.clear()


def track(model) -> Routing:
    """Linearize the model's experts (as oneshot would) and count routed tokens per expert."""
    import torch
    from llmcompressor.modeling.moe.linearize import get_linearized_moes, linearize_moe

    linearize_moe(model)  # a no-op for a dense model
    routing = Routing()

    def counter(name: str):
        def hook(module, args, kwargs):
            top_k = args[1] if len(args) > 1 else kwargs["top_k_index"]
            found = torch.bincount(top_k.flatten().cpu(), minlength=module.num_experts)
            routing.counts[name] = routing.counts.get(name, 0) + found

        return hook

    for name, module in get_linearized_moes(model):
        routing.hooks.append(module.register_forward_pre_hook(counter(name), with_kwargs=True))
    return routing


def describe(summary: dict | None) -> str | None:
    """One line for the quantize output; None when there is nothing to say."""
    if not summary:
        return None
    unrouted = summary["unrouted"]
    if not unrouted:
        return (
            f"calibration reached all {summary['experts']} experts of each of "
            f"{summary['moe_layers']} MoE layers (least used: {summary['min_share']:.1%} of "
            "a layer's routed tokens)"
        )
    missed = sum(len(ids) for ids in unrouted.values())
    first, ids = next(iter(unrouted.items()))
    return (
        f"WARNING {missed} experts in {len(unrouted)} MoE layers got no routed calibration "
        f"token (e.g. {first}: {', '.join(map(str, ids[:8]))}); they were calibrated on every "
        "token anyway (moe_calibrate_all_experts): more or more varied calibration data helps"
    )
