"""Each side's vLLM engine as a stage's plan shows it: on this host (its GPUs, or one CPU engine
holding the weights in RAM), and on REFERENCE_GPU GPUs — what a GPU host would need, shown on
every host. Eval's vllm backend and serve plan their engines with it (eval/plan.py,
serve/plan.py); the arithmetic is the deployment planner's (sizing.py, deployment.py)."""

from dataclasses import dataclass, field

import psutil

from pipeline.config.recipe import RecipeFile
from pipeline.core.errors import NotOnThisHost
from pipeline.engines.vllm import shm_rings, sizing
from pipeline.planning import deployment, gpus, shm
from pipeline.planning.geometry import Geometry

GIB = 2**30
REFERENCE_GPU = "H100-80GB"
CPU_KV_POOL = GIB  # VLLM_CPU_KVCACHE_SPACE as the serve stage sets it by default
# vLLM's CPU engine beyond its weights and pool, as measured (docs/figures.md: "vLLM's CPU
# engine memory", tests/e2e/test_real_shape_chain.py)
CPU_ENGINE_RUNTIME = int(1.25 * GIB)


@dataclass(frozen=True)
class Traffic:
    """What each engine is sized for: `users` sequences of `context` tokens; offline: a
    `vllm.LLM` engine with max_num_seqs = users (eval), else `vllm serve`'s defaults."""

    users: int
    context: int
    offline: bool = False

    def budget(self) -> deployment.Budget:
        return sizing.llm_budget(self.users) if self.offline else sizing.DEFAULT_BUDGET


@dataclass
class Sides:
    """Each side's engine plan (by label: "original", the recipe's name) and what this host
    refuses of them."""

    engines: dict[str, dict] = field(default_factory=dict)
    refusals: list[str] = field(default_factory=list)


def on_this_host(
    g: Geometry, sides: dict[str, int], visible: list[str], traffic: Traffic, recipe: RecipeFile
) -> Sides:
    """Each side's engine on this host (`visible`: nvidia-smi's lines of the GPUs it sees) and on
    REFERENCE_GPU; the quantized side (any label but "original") loads `recipe`'s layouts."""
    found, parallel = Sides(), {}
    for side, weights in sides.items():
        mine = None if side == "original" else recipe
        ref = on_reference_gpus(g, weights, traffic, mine)
        try:
            load = deployment.Load(weights, "auto", traffic.users, traffic.context)
            engine = sizing.engine(g, load, visible, side, traffic.budget(), mine)
        except NotOnThisHost as e:
            found.refusals.append(str(e))
            found.engines[side] = {"refused": str(e), "on_gpus": ref}
            continue
        entry = {**engine.describe(), "on_gpus": ref}
        if visible:
            tp = engine.tensor_parallel_size
            entry["weights_per_gpu_bytes"] = int(weights / tp)
            entry |= _engine_memory(g, visible, tp, traffic)
            parallel[side] = tp
        elif why := _cpu_refusal(side, cpu_engine_bytes(g, weights), ref):
            found.refusals.append(why)
            entry |= {"cpu_ram_bytes": cpu_engine_bytes(g, weights), "refused": why}
        else:  # the CPU engine holds the weights in RAM
            entry["cpu_ram_bytes"] = cpu_engine_bytes(g, weights)
        found.engines[side] = entry
    shared = sum(
        shm_rings.vllm_bytes(tp) for tp in parallel.values()
    )  # the engines run side by side
    said = ", ".join(f"{side} at TP {tp}" for side, tp in parallel.items() if tp > 1)
    if why := shm.refusal(shared, f"vLLM ({said})"):
        found.refusals.append(why)
    return found


def _engine_memory(g: Geometry, visible: list[str], tp: int, traffic: Traffic) -> dict:
    """vLLM's engine memory per GPU of this host at `tp` (engine_memory.py)."""
    node = gpus.this_node(visible)
    if node is None:  # None only for no GPU lines: the caller plans CPU engines then
        raise ValueError("an engine's memory on GPUs asked for with no GPU visible")
    found = traffic.budget().engine(g, node, tp, 1, traffic.context)
    return {"engine_memory": found.record(), "engine_line": found.line()}


def cpu_engine_bytes(g: Geometry, weights: int) -> int:
    """A CPU engine's RAM: the weights, a second copy of each vocabulary matrix, the KV pool
    and the runtime. vLLM's CPU build packs every Linear for oneDNN and drops its weight, but
    keeps an embedding's (embed_tokens, lm_head) beside the packed copy it makes of it
    (UnquantizedEmbeddingMethod.process_weights_after_loading, remove_weight=False). Checked
    against PSS at Llama-3-8B's shapes by tests/e2e/test_real_shape_chain.py (opt-in; the
    figure: docs/figures.md)."""
    vocab_copies = g.vocab_matrices * g.vocab * g.hidden * 2  # kept in 16 bits by every recipe
    return weights + vocab_copies + CPU_KV_POOL + CPU_ENGINE_RUNTIME


def _cpu_refusal(side: str, need: int, ref: dict) -> str | None:
    available = psutil.virtual_memory().available
    if need <= available:
        return None
    return (
        f"{side}: vLLM's CPU engine needs ~{need / GIB:.1f} GiB of RAM (weights, KV pool, "
        f"vocabulary copies); this host has {available / GIB:.1f} GiB available; on GPUs it needs "
        f"{ref['tensor_parallel_size']} × {REFERENCE_GPU}"
    )


def on_reference_gpus(
    g: Geometry, weights: int, traffic: Traffic, recipe: RecipeFile | None = None
) -> dict:
    """What REFERENCE_GPU GPUs would need (the deployment planner, nodes of 8):
    tensor_parallel_size is the GPU count, TP × PP (None: more than 8 nodes hold). `recipe`
    (the quantized side's): a TP vLLM loads its artifact at, expert parallel where it must;
    the original (None) is never refused."""
    load = deployment.Load(weights, "auto", traffic.users, traffic.context)
    reference = gpus.named(REFERENCE_GPU)
    found = deployment.fewest(g, load, reference, traffic.budget(), recipe)
    if found is None:
        return {"gpu": REFERENCE_GPU, "tensor_parallel_size": None, "tp": None, "pp": None}
    tp, pp = found.tensor_parallel_size, found.pipeline_parallel_size
    placed = {"gpu": REFERENCE_GPU, "tensor_parallel_size": found.gpus, "tp": tp, "pp": pp}
    if found.engine:
        placed |= {"engine_memory": found.engine.record(), "engine_line": found.engine.line()}
    if found.expert_parallel:
        placed["expert_parallel"] = True
    if found.refused:  # why smaller or plain layouts would not start
        placed["refused"] = list(found.refused)
    return placed


def gpu_count(ref: dict) -> str:
    """GPUs a reference layout needs: 2, or 8×2 across nodes, or >64."""
    if not ref["tensor_parallel_size"]:
        return ">64"
    if ref["pp"] and ref["pp"] > 1:
        return f"{ref['tp']}×{ref['pp']}"
    return str(ref["tensor_parallel_size"])
