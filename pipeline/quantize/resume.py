"""What the quantize stage says and records about resuming: before any weight loads, the line
saying where an earlier attempt's checkpoints let it start (or why they were discarded); in
the manifest, that the run was resumed and from where.

Checkpoints are kept by the unit each path finishes: a decoder layer of llm-compressor's
sequential pipeline (every calibrating recipe, layer_checkpoints.py) or an output shard of the
model-free path (model_free.py); under `--nproc N` rank 0 keeps each layer every rank finished
alike, and every rank replays them. A data-free oneshot (minutes even at 70B) keeps none.
"""

from pipeline.core import quiet
from pipeline.core.checkpoints import Checkpoints
from pipeline.quantize import layer_checkpoints, model_free, oneshot


def start(job, checkpoints: Checkpoints | None) -> Checkpoints | None:
    """The checkpoints this run keeps and resumes from (None: it keeps none), after saying
    what an earlier attempt left."""
    if checkpoints is None:
        return None
    say = lambda line: print(line, file=quiet.terminal(), flush=True)  # noqa: E731
    if checkpoints.discarded:
        say(checkpoints.discarded)
    calibrating = job.path != "model-free" and bool(job.calibration.num_samples)
    if moved := checkpoints.replay_on(replay_record(calibrating, job.geometry.dtype)):
        say(moved)
    if job.path == "model-free":
        unit, (done, total, seconds), where = "shard", model_free.kept(checkpoints), ""
        units = done
    elif job.calibration.num_samples:
        if why := layer_checkpoints.unsupported(job.recipe):
            say(f"layers not kept for resuming: {why}")
            checkpoints.remove()
            return None
        kept = layer_checkpoints.kept(checkpoints, job.recipe)
        unit, (done, total, seconds, where) = "layer", kept
        units = len(layer_checkpoints.replayable(checkpoints))  # subgraphs, every pass's
    else:
        checkpoints.remove()  # nothing of this run is kept: no earlier attempt's either
        return None
    checkpoints.resumed = None
    if units:  # any kept state loads, if only the embeddings' subgraph: said and recorded
        saves = f"{seconds / 60:.0f} min" if seconds >= 90 else f"{seconds:.0f} s"
        at = f"{unit} {done + 1} of {total}{where}"
        if where == layer_checkpoints.SAVE_LEFT:
            at = f"the save (all {total} layers kept)"
        finished = f"{done} done" if done or where else "the embeddings' subgraph kept"
        say(f"resuming at {at} ({finished}, saves ~{saves})")
        checkpoints.resumed = {"at": at, "kept": done, "units": units,
                               "kept_seconds": round(seconds, 1)}  # fmt: skip
    return checkpoints


def replay_record(calibrating: bool, saved_dtype: str) -> dict:
    """What a kept layer's replay is bit-exact under: the device kind (a GPU's model; a CPU's
    vector unit, which picks oneDNN's kernels), the dtype the model is calibrated in, torch's
    build. A CPU node's float32 layers replayed into a GPU's bf16 retry would match neither
    uninterrupted run."""
    import torch

    device = f"cpu {torch.backends.cpu.get_cpu_capability()}"
    if torch.accelerator.is_available():
        accelerator = torch.accelerator.current_accelerator()
        assert accelerator is not None  # is_available(): there is one
        device = accelerator.type
        if device == "cuda":
            device += f" {torch.cuda.get_device_name()}"
    dtype = "float32" if oneshot.upcasts(calibrating) else saved_dtype
    return {"device": device, "dtype": dtype, "torch": torch.__version__}


def record(checkpoints: Checkpoints | None) -> dict | None:
    """The manifest's `resumed`: where the run started, and what the kept units had taken."""
    return checkpoints.resumed if checkpoints else None
