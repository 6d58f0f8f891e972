"""The bytes a recipe's artifact holds, from the model's geometry alone: which Linears it quantizes
(llm-compressor's targets and ignore list), each at its scheme's bits plus its scales, zero
points and global scales; everything else 16-bit. `make plan`, `make advise`, the chain plan,
the quantize plan and the serve stage's prediction all count weights here.
"""

from __future__ import annotations

import re
from dataclasses import replace

from pipeline.config.recipe import RecipeFile
from pipeline.config.schemes import Scheme
from pipeline.models import architecture
from pipeline.planning.shape import Geometry


def targeted(recipe: RecipeFile, g: Geometry) -> list[architecture.Linear]:
    """The Linears a recipe quantizes. MoE routers never are: llm-compressor leaves them (and
    transformers 5 does not make them Linears), and vLLM runs them in 16 bits."""
    ignored = recipe.ignored()
    return [
        lin
        for lin in g.checkpoint_linears
        if not matches(lin.name, ignored) and not architecture.is_router(lin)
    ]


def matches(name: str, patterns: list[str], class_name: str | None = None) -> bool:
    """Does llm-compressor's target / ignore list match this module? (its class name too)"""
    for pattern in patterns:
        if pattern == class_name:
            return True
        if pattern.startswith("re:") and re.search(pattern[3:], name):
            return True
        if name == pattern or name.endswith("." + pattern):
            return True
    return False


def assigned(recipe: RecipeFile, g: Geometry) -> list[tuple[architecture.Linear, Scheme]]:
    """Each quantized Linear with its scheme. A mixed-precision recipe (several config groups,
    targets by layer) has its Linears split per decoder layer, named as in the checkpoint."""
    found = recipe.schemes()
    if len(found) <= 1:
        return [(lin, s) for s, _ in found for lin in targeted(recipe, g)]
    pairs = []
    ignored, layers = recipe.ignored(), g.layers
    for lin in g.checkpoint_linears:
        if architecture.is_router(lin) or lin.name == "lm_head":
            continue  # an LM head in a mixed recipe: not yet planned (none is generated)
        one = replace(lin, count=max(1, lin.count // layers))
        for name in (f"model.layers.{i}.{lin.name}" for i in range(layers)):
            scheme = next((s for s, targets in found if matches(name, targets, "Linear")), None)
            if scheme and not matches(name, ignored):
                pairs.append((one, scheme))
    return pairs


def artifact_bytes(recipe: RecipeFile, g: Geometry, scales: bool = True) -> int:
    """The artifact's tensor bytes: quantized weights at their bits (+ their scales, zero points
    and global scales), everything else 16-bit."""
    pairs = assigned(recipe, g)
    qparams = sum(lin.params for lin, _ in pairs)
    total = g.params
    quantized = sum(linear_bytes(lin, s, scales) for lin, s in pairs)
    return int(quantized + (total - qparams) * 2)


def linear_bytes(lin: architecture.Linear, scheme: Scheme, scales: bool = True) -> float:
    """One quantized Linear's stored bytes: weights at their bits, + scales and zero points."""
    return lin.params * scheme.weight_bits / 8 + (_scale_bytes(lin, scheme) if scales else 0)


def bits_per_weight(recipe: RecipeFile, g: Geometry) -> float:
    """Average bits per weight of the decoder's Linears, scales included (16-bit ones count 16;
    embeddings and the LM head are left out: every recipe keeps them 16-bit)."""
    pairs = [(lin, s) for lin, s in assigned(recipe, g) if lin.name != "lm_head"]
    params = sum(
        lin.params
        for lin in g.checkpoint_linears
        if lin.name != "lm_head" and not architecture.is_router(lin)
    )
    qparams = sum(lin.params for lin, _ in pairs)
    quantized = sum(lin.params * s.weight_bits + _scale_bytes(lin, s) * 8 for lin, s in pairs)
    return (quantized + (params - qparams) * 16) / params


def _scale_bytes(lin: architecture.Linear, scheme: Scheme) -> float:
    scales = scheme.scale_count(lin.out_features, lin.in_features) * lin.count
    zero_points = 0 if scheme.symmetric else scales * scheme.weight_bits / 8
    return scales * scheme.scale_bytes + zero_points + scheme.global_scales * 4 * lin.count
