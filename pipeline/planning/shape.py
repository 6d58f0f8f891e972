"""The Geometry record: a model's shape as every planner reads it. geometry.py computes it from
a config.json (and re-exports it); it lives here so that weights.py, which geometry.py counts a
shipped-FP8 original with, can take it without the two modules importing each other.
"""

from dataclasses import dataclass

from pipeline.models import architecture, kv_layout
from pipeline.planning.linears import Linears


@dataclass(frozen=True)
class Geometry:
    layers: int
    hidden: int
    intermediate: int  # the dense MLP's width (an MoE's dense layers; its experts are narrower)
    heads: int  # attention (query) heads
    kv_heads: int  # as vLLM splits them across TP ranks (latent attention: 1, replicated)
    latent_attention: bool  # DeepSeek's MLA: one compressed latent instead of K and V heads
    attention_dim: int  # q·k width a head attends with (MLA: latent rank + rotary dims)
    head_dim: int  # a head's width as the checkpoint's q/k/v projections hold it
    vocab: int
    vocab_matrices: int  # embeddings and lm_head: 1 where tied (one matrix), else 2
    experts: int  # routed experts per MoE layer (0: a dense model)
    active_experts: int  # of them, what each token runs
    moe_layers: int  # decoder layers with routed experts
    params: int  # every parameter, as transformers counts them
    other_params: int  # of them, not in a Linear: embeddings, norms, biases
    decoder_layer_params: int  # the largest decoder layer's: what sequential onloading holds
    original_bytes: int  # the weights vLLM loads for the original, as they ship
    fp8_blocks: tuple[int, int] | None  # the FP8 blocks the original ships in (None: 16-bit)
    dtype: str  # the dtype the checkpoint was saved in, as torch names it
    max_position: int | None  # max_position_embeddings
    kv_groups: tuple[kv_layout.LayerGroup, ...]  # the KV cache per layer kind
    kv_modelled: str  # which layers the KV figures model (kv_layout.describe)
    checkpoint_linears: tuple[architecture.Linear, ...]  # as the checkpoint names them
    largest_layer: tuple[tuple[architecture.Linear, int], ...]  # each, × in the largest layer
    linears: Linears  # as vLLM fuses and splits them (layout.py checks them)

    @property
    def shipped(self) -> str:
        """The format the original ships in, as the plans say it."""
        block = self.fp8_blocks
        return f"FP8 in {block[0]} × {block[1]} blocks (as shipped)" if block else "16-bit"
