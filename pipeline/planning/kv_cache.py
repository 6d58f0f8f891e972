"""The KV cache's bytes as vLLM 0.32 allocates them: per element by cache dtype, per token and
per sequence (pipeline/models/kv_layout.py: per layer kind), what a pool admits, and the tokens
a sliding window keeps beyond its window (vLLM's default max_num_batched_tokens per GPU).
"""

from pipeline.core.errors import UserError
from pipeline.models import kv_layout
from pipeline.planning import engine_memory
from pipeline.planning.geometry import Geometry

GIB = 2**30
KV_BYTES = {"auto": 2, "bf16": 2, "fp16": 2, "fp8": 1, "fp8_e4m3": 1, "fp8_e5m2": 1}
CPU_SCHEDULED_TOKENS = 2_048  # vLLM 0.32's max_num_batched_tokens for `vllm serve` on CPU


def scheduled_tokens(gpu_name: str, gpu: int) -> int:
    """vLLM 0.32's default max_num_batched_tokens for `vllm serve` on this GPU (what a sliding
    window keeps beyond its window): 16,384 from 160 GiB, 8,192 on H100/H200-class, else 2,048
    (engine_memory.default_batch)."""
    return engine_memory.default_batch(gpu_name, gpu)[0]


def element_bytes(kv_dtype: str) -> int:
    if kv_dtype not in KV_BYTES:
        raise UserError(f"unknown KV-cache dtype '{kv_dtype}'; valid: {', '.join(KV_BYTES)}")
    return KV_BYTES[kv_dtype]


def bytes_per_token(g: Geometry, kv_dtype: str) -> int:
    return kv_layout.token_bytes(g.kv_groups, element_bytes(kv_dtype))


def bytes_per_sequence(g: Geometry, kv_dtype: str, tokens: int, scheduled: int, tp: int = 1) -> int:
    """One sequence of `tokens` on one rank of a TP-`tp` engine."""
    return kv_layout.sequence_bytes(g.kv_groups, element_bytes(kv_dtype), tokens, scheduled, tp)


def kv_tokens(
    pool_bytes: int, g: Geometry, kv_dtype: str, max_model_len: int, block: int, scheduled: int
) -> int:
    """What vLLM 0.32 logs as its "KV cache size: N tokens": how many max_model_len requests
    the pool admits (its blocks over the blocks one request may hold), × max_model_len. The
    pool's tokens for full attention; more where a sliding window caps what a request holds."""
    per_block = bytes_per_token(g, kv_dtype) * block
    size = element_bytes(kv_dtype)
    blocks_per_request = (
        kv_layout.sequence_bytes(g.kv_groups, size, max_model_len, scheduled, block=block)
        / per_block
    )
    return int(pool_bytes // per_block / blocks_per_request * max_model_len)


def max_requests(
    pool_bytes: int, g: Geometry, kv_dtype: str, tokens: int, block: int, scheduled: int
) -> int:
    """Requests of `tokens` tokens each the pool holds at once: the memory-bound concurrency."""
    size = element_bytes(kv_dtype)
    per_request = kv_layout.sequence_bytes(g.kv_groups, size, tokens, scheduled, block=block)
    return int(pool_bytes // per_request)
