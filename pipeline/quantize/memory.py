"""Peak CPU RAM of a quantize run (peak RSS of the whole process), from the config alone.

Each term is what the process holds at its peak; the figures were measured on Llama-3-8B's
layer shapes and vocabulary (`benchmarks/quantize_memory.py`, docs/real-size.md):

  runtime          the Python process with torch, transformers and llm-compressor imported
  model-free       + workers × the largest shard × SHARD_FACTOR: the shard's tensors as read,
                   their quantized copies until the shard is written, and the float32 working
                   copy of the tensor being quantized
  oneshot          + params × 2: the model in CPU RAM in the checkpoint's bf16 (on a GPU host
                   one layer at a time goes to the GPU); save_pretrained compresses it in place
  … calibrating    the model in float32 instead (params × 4: torch's bf16 matmuls are ~7x
    on a CPU       slower on CPU), + the artifact's size: cast back to bf16 and compressed at
                   save, those are new tensors while the float32 ones are still held
  reload check     + params × 4 + the artifact, up to verify.RELOAD_LIMIT parameters: the
                   artifact loaded back in float32 and run once before "done", while the
                   quantized model is still held (SmolLM2-135M: fp8 1.51 GiB, planned 0.93
                   without it)
  calibrating      + the cached inputs of every decoder layer boundary llm-compressor keeps on
                   the CPU: samples × seq × hidden × dtype bytes, twice (a layer's inputs and
                   its outputs while it propagates), + on CPU the layer's GPTQ Hessians
                   (Σ in_features² × 4) and its activations for one sample

The model-free figure does not grow with the model: a 70B checkpoint in 5 GB shards needs what
a 8B one in 5 GB shards does.
"""

from pipeline.planning.geometry import Geometry
from pipeline.quantize.verify import RELOAD_LIMIT

GIB = 2**30
# RUNTIME: a tiny model's whole quantize process; SHARD_FACTOR: the model-free path's peak per
# byte of its largest shard, between the hosts measured. Both from benchmarks/quantize_memory.py
# at Llama-3-8B's shapes (its latest figures, plan against peak: docs/figures.md)
RUNTIME = int(0.6 * GIB)
SHARD_FACTOR = 1.3
HUB_SHARD = 5 * 10**9  # hub checkpoints' usual shard size, where the shards are not on disk


def peak_cpu_bytes(
    params: int,
    artifact: int,
    route: dict,
    on_gpu: bool,
    calibration: dict,
) -> dict:
    """{"total": bytes, "terms": {name: bytes}, "assumed": [what was not known]}."""
    terms, assumed = {"runtime": RUNTIME}, []
    if route.get("path") == "model-free":
        shards = route.get("shards")
        largest = shards[0] if shards else min(HUB_SHARD, params * 2)
        if not shards and params * 2 > HUB_SHARD:
            assumed.append(f"shards of {HUB_SHARD / 1e9:.0f} GB, as on the hub")
        terms["shards in flight"] = int(route.get("workers", 1) * largest * SHARD_FACTOR)
    else:
        upcast = bool(calibration) and not on_gpu  # calibrating on a CPU: float32 matmuls
        terms["model (float32)" if upcast else "model (bf16)"] = params * (4 if upcast else 2)
        if upcast:  # cast back to bf16 and compressed at save: new tensors, not in place
            terms["cast back and compressed (save)"] = artifact
        terms |= calibration
    if params <= RELOAD_LIMIT:
        terms["reload check (float32)"] = params * 4 + artifact
    return {"total": sum(terms.values()), "terms": terms, "assumed": assumed}


def calibration_bytes(g: Geometry, samples: int, seq: int, gptq: bool, on_gpu: bool) -> dict:
    """The calibrating terms of `peak_cpu_bytes` (empty for a data-free recipe)."""
    if not samples:
        return {}
    hidden = g.hidden
    width = 2 if on_gpu else 4
    found = {"cached layer inputs and outputs": 2 * samples * seq * hidden * width}
    if not on_gpu:
        layer = [(lin, n) for lin, n in g.largest_layer if lin.name != "lm_head"]
        if gptq:
            found["GPTQ Hessians of one layer"] = sum(
                lin.in_features**2 * 4 * n for lin, n in layer
            )
        found["one sample's activations"] = seq * max(hidden, g.intermediate) * 4 * 4
    return found
