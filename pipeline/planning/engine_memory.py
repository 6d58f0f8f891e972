"""What a vLLM 0.32 engine keeps of each GPU beside its weights and its KV cache, by vLLM's own
rule — the parts its start-up profile reserves before it sizes the KV cache:

    KV per GPU = gpu_memory_utilization × memory − weights / (TP × PP)
                 − non-torch − activation peak − CUDA graphs

(v1/worker/gpu_worker.py determine_available_memory: available_kv_cache_memory_bytes =
requested_memory − non_kv_cache_memory − cudagraph_memory_estimate_applied, where
utils/mem_utils.py memory_profiling gives non_kv_cache_memory = total_consumed (weights +
non-torch) + transient_peak_headroom (torch's allocated peak of the profile run over what stays
allocated after it). A model whose KV is less than one request of max_model_len needs is
refused at start-up (v1/core/kv_cache_utils.py check_enough_kv_cache_memory).

  activation peak  the profile run (v1/worker/gpu/model_runner.py profile_run): _dummy_run of
                   max_num_batched_tokens (T) tokens, then _dummy_sampler_run over the last
                   token of min(max_num_seqs, T) dummy requests (R). The forward runs one
                   decoder layer at a time, so its peak is one layer's: the residual and the
                   normed input (2 × hidden) + the widest sub-block's tensors on this rank —
                   MLP: gate_up's output (2 × I / TP) and SiluAndMul's (I / TP);
                   attention: q/k/v (their width / TP) and the attention output; routed
                   experts: the Triton experts' workspaces (fused_moe/experts/triton_moe.py
                   workspace_shapes: T × top-k × (max(I_e, hidden) + max(2 I_e, hidden)))
                   + their output. × 2 bytes (bf16/fp16 activations; FP8 and INT4 weights
                   too). The sampler's part: the kept hidden states (T × hidden), the sampled
                   rows (R × hidden) and their logits (R × vocab, gathered whole on each rank;
                   v2's sampler copies them to fp32 only when a request needs logits
                   processing, which the dummy batch does not: sample/sampler.py). The peak is
                   the larger of the two. Measured on CPU with torch's MemTracker over
                   transformers' LlamaDecoderLayer, which holds the same tensors at its MLP
                   peak (tests/unit/planning/test_engine_memory.py: exact at Llama-3-8B's and
                   -70B's shapes).
                   Llama-3-8B, H100, `vllm serve` (T 8,192): 8,192 × 2 × (2 × 4,096 +
                   3 × 14,336) = 800 MiB; the recorded log's 1.38 GiB "peak activation" is this
                   transient (0.86) + the CUDA-graph estimate (0.52), as gpu_worker.py adds them.
  CUDA graphs      profile_cudagraph_memory (v1/worker/gpu/cudagraph_utils.py) captures every
                   size once into a throwaway pool and reserves what that took: the first
                   capture allocates the pool (one layer's activations at the largest capture
                   size), each further size costs a per-graph amount that grows with the
                   layers it replays (vLLM floors it at 1 MiB, gpu_model_runner.py).
                   Sizes: [1, 2, 4] + 8…248 by 8 + 256… by 16 up to min(2 × max_num_seqs, 512)
                   (config/vllm.py _set_cudagraph_sizes), captured FULL for decode batches of
                   ≤ max_num_seqs and PIECEWISE for all (FULL_AND_PIECEWISE, the default).
                   PER_LAYER_GRAPH_BYTES is read off the one H100 log we have
                   (tests/gpu_hosts/vllm-h100-server.log: 0.52 GiB estimated for 32 layers,
                   51 + 51 sizes: (0.52 GiB − 50 MiB) / 100 / 32 ≈ 0.15 MiB). That log was
                   written from vLLM 0.32's sources, not captured (its header says so): no GPU
                   of ours has measured this, NON_TORCH_BYTES or CUDA_RESERVED_BYTES.
                   enforce_eager: none.
  non-torch        CUDA, cuBLAS and attention-backend memory allocated after the engine's
                   baseline snapshot (0.53 GiB in that log at TP 1).
  collectives      not here: at TP > 1 vLLM 0.32 starts its distributed environment before it
                   takes that snapshot (gpu_worker.py init_device: "This ensures NCCL buffers
                   are allocated before we measure available memory"), so NCCL's and custom
                   all-reduce's buffers (per rank: meta + 8 MiB, a 16 MiB legacy buffer, 8 MiB
                   of rank data; custom_all_reduce.py) come out of the memory left beside the
                   share, with the CUDA context, not out of the KV cache.

The share is of the memory CUDA reports (gpu_worker.py: requested_memory = utilization ×
init_snapshot.total_memory, torch.accelerator.get_memory_info), which is less than nvidia-smi's
total: 79.19 GiB for the H100's 81,559 MiB in the recorded log. CUDA_RESERVED_BYTES is that gap,
applied to every GPU (usable_bytes): no other GPU's figure is recorded.

Batch defaults (engine/arg_utils.py get_batch_defaults, per usage context): `vllm serve`
8,192 tokens / 1,024 sequences on ≥ 70 GiB GPUs other than A100s, 16,384 / 1,024 from 160 GiB,
else 2,048 / 256; `vllm.LLM` 16,384 / 1,024, 16,384 / 1,024, 8,192 / 256. Unless given, the
tokens are then clamped to max_num_seqs × max_model_len
(_set_default_max_num_seqs_and_batched_tokens_args).

    engine_memory.per_gpu(g, tp=1, pp=1, batch=engine_memory.batch("H100-80GB", 81_559 * 2**20,
                          8192)).line()
    → 'activations 0.78 + CUDA graphs 0.52 + non-torch 0.53 = 1.83 GiB (8,192 tokens, 1,024 seqs)'
"""

from dataclasses import dataclass

from pipeline.planning.geometry import Geometry
from pipeline.planning.linears import Linear, Style

GIB = 2**30
MIB = 2**20
ACTIVATION_BYTES = 2  # bf16 / fp16 activations, whatever the weights' format
# from the H100 log written from vLLM's sources (not captured: see the docstring)
NON_TORCH_BYTES = int(0.53 * GIB)  # at TP 1
PER_LAYER_GRAPH_BYTES = int(0.15 * MIB)  # per captured size, per layer
MIN_GRAPH_BYTES = MIB  # vLLM's floor for one captured size (driver overhead)
MAX_CAPTURE_SIZE = 512  # default_max_graph_size (1,024 on Blackwell: not modelled)
CUDA_RESERVED_BYTES = 81_559 * MIB - int(79.19 * GIB)  # nvidia-smi's total − CUDA's (same log)


def usable_bytes(memory_bytes: int, utilization: float) -> int:
    """What vLLM requests of a GPU nvidia-smi lists with `memory_bytes`: utilization × the
    total CUDA reports."""
    return int(utilization * max(memory_bytes - CUDA_RESERVED_BYTES, 0))


@dataclass(frozen=True)
class Batch:
    """The dummy batch of vLLM's profile run: max_num_batched_tokens, max_num_seqs."""

    tokens: int
    seqs: int

    @property
    def rows(self) -> int:
        """The sampled rows of the profile run: one per dummy request."""
        return min(self.seqs, self.tokens)

    def capture_sizes(self) -> list[int]:
        """config/vllm.py _set_cudagraph_sizes, one token per decode step."""
        largest = min(2 * self.seqs, MAX_CAPTURE_SIZE, self.tokens)
        sizes = [1, 2, 4, *range(8, 256, 8), *range(256, largest + 1, 16)]
        return [s for s in sizes if s <= largest]


def batch(
    gpu_name: str,
    memory_bytes: int,
    max_model_len: int,
    offline: bool = False,
    tokens: int | None = None,
    seqs: int | None = None,
) -> Batch:
    """vLLM 0.32's batch for this GPU: `vllm serve`'s defaults (offline: `vllm.LLM`'s), the
    given tokens / seqs instead where set; default tokens ≤ seqs × max_model_len."""
    default_tokens, default_seqs = default_batch(gpu_name, memory_bytes, offline)
    seqs = seqs or default_seqs
    if tokens is None:
        tokens = min(default_tokens, seqs * max_model_len)
    return Batch(tokens, min(seqs, tokens))


def default_batch(gpu_name: str, memory_bytes: int, offline: bool = False) -> tuple[int, int]:
    """(max_num_batched_tokens, max_num_seqs) as get_batch_defaults sets them on this GPU."""
    if memory_bytes >= 160 * GIB:
        return 16_384, 1_024
    if memory_bytes >= 70 * GIB and "a100" not in gpu_name.lower():
        return (16_384 if offline else 8_192), 1_024
    return (8_192 if offline else 2_048), 256


@dataclass(frozen=True)
class EngineMemory:
    """One GPU's engine memory beside weights and KV, in bytes (a flat allowance: `given`)."""

    activations: int
    cuda_graphs: int
    non_torch: int
    batch: Batch | None = None  # None: a flat allowance the user gave (--overhead-gib)

    @property
    def total(self) -> int:
        return self.activations + self.cuda_graphs + self.non_torch

    def line(self) -> str:
        if self.batch is None:
            return f"{self.total / GIB:.2f} GiB as given (--overhead-gib)"
        return (
            f"activations {self.activations / GIB:.2f} + CUDA graphs "
            f"{self.cuda_graphs / GIB:.2f} + non-torch {self.non_torch / GIB:.2f} = "
            f"{self.total / GIB:.2f} GiB ({self.batch.tokens:,} tokens, {self.batch.seqs:,} seqs)"
        )

    def record(self) -> dict:
        return {
            "activations_bytes": self.activations,
            "cuda_graphs_bytes": self.cuda_graphs,
            "non_torch_bytes": self.non_torch,
            "total_bytes": self.total,
            "max_num_batched_tokens": self.batch.tokens if self.batch else None,
            "max_num_seqs": self.batch.seqs if self.batch else None,
        }


def flat(overhead_bytes: int) -> EngineMemory:
    """A flat allowance per GPU instead of vLLM's rule."""
    return EngineMemory(0, 0, overhead_bytes)


def per_gpu(
    g: Geometry,
    tp: int,
    pp: int,
    batch: Batch,
    expert_parallel: bool = False,
    eager: bool = False,
) -> EngineMemory:
    """vLLM's engine memory on one GPU of a TP × PP engine (see the module's docstring)."""
    per_token = max(layer_bytes_per_token(g, tp, expert_parallel))
    forward = batch.tokens * per_token
    activations = max(forward, sampler_bytes(g, tp, batch))
    graphs = 0 if eager else cuda_graph_bytes(per_token, -(-g.layers // pp), batch)
    return EngineMemory(activations, graphs, NON_TORCH_BYTES, batch)


def layer_bytes_per_token(g: Geometry, tp: int, expert_parallel: bool = False) -> list[int]:
    """Per token, the live activation bytes at each sub-block of a decoder layer on one rank:
    the residual and the normed input + what that sub-block holds."""
    kept = 2 * g.hidden
    found = [
        kept + _held(linear, tp, expert_parallel, g.hidden, g.active_experts)
        for kind in g.linears.kinds
        for linear in kind.linears
    ]
    return [ACTIVATION_BYTES * n for n in found]


def _held(linear: Linear, tp: int, ep: bool, hidden: int, top_k: int) -> int:
    shard = linear.shard(tp, ep)
    out = sum(shard.outputs)
    if linear.style is Style.MERGED_COLUMN:  # gate_up and its SiluAndMul output
        return out + shard.outputs[0]
    if linear.style is Style.QKV:  # q/k/v and the attention's output (the q heads' width)
        return out + shard.outputs[0] // linear.head_size * linear.v_head_size
    if linear.style is Style.EXPERTS:  # triton_moe.py workspace_shapes + the output
        width = shard.intermediate
        return top_k * (max(width, hidden) + max(2 * width, hidden)) + hidden
    return out


def sampler_bytes(g: Geometry, tp: int, batch: Batch) -> int:
    """The sampler's part of the profile run: hidden states kept, the sampled rows, their
    logits (the LM head's slice on this rank, then gathered whole)."""
    rows = batch.rows
    logits = rows * g.vocab * (1 + (1 / tp if tp > 1 else 0))
    return int(ACTIVATION_BYTES * ((batch.tokens + rows) * g.hidden + logits))


def cuda_graph_bytes(per_token: int, layers: int, batch: Batch) -> int:
    """vLLM's CUDA-graph estimate: the pool (one layer at the largest capture size) + each
    further size's graphs (FULL for decode sizes ≤ max_num_seqs, PIECEWISE for all)."""
    sizes = batch.capture_sizes()
    if not sizes:
        return 0
    full = [s for s in sizes if s <= batch.seqs]
    graphs = len(sizes) + len(full) - (2 if full else 1)
    pool = sizes[-1] * per_token
    return pool + graphs * max(MIN_GRAPH_BYTES, layers * PER_LAYER_GRAPH_BYTES)
