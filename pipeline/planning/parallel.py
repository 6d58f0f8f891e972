"""The tensor-parallel sizes vLLM accepts for a model, by vLLM 0.32's own rule.

`config/model.py` (verify_with_parallel_config): the attention heads must divide by TP.
`layers/linear.py` (QKVParallelLinear): with TP ≥ the KV heads, TP must be a multiple of them
(each KV head replicated TP / KV-heads times); below, the KV heads must divide by TP. Latent
attention (MLA) keeps one latent KV per rank (`get_num_kv_heads` returns 1): only the heads
count.
"""

from pipeline.planning.geometry import Geometry


def tp_refusal(tp: int, g: Geometry) -> str | None:
    """Why vLLM refuses this TP for the model (None: it accepts it)."""
    heads, kv = g.heads, g.kv_heads
    if heads % tp:
        return f"its {heads} attention heads do not divide by {tp}"
    if tp >= kv and tp % kv:
        return f"{tp} is not a multiple of its {kv} KV heads (each is replicated whole)"
    if tp < kv and kv % tp:
        return f"its {kv} KV heads do not divide by {tp}"
    return None


def tensor_parallel_sizes(g: Geometry, most: int) -> list[int]:
    """Every TP from 1 to `most` that vLLM accepts for the model, smallest first."""
    return [tp for tp in range(1, most + 1) if tp_refusal(tp, g) is None]
