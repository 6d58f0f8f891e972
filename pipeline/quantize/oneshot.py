"""llm-compressor's oneshot: in this process, or with `--nproc N` in N processes under torchrun.

llm-compressor 0.14 runs oneshot distributed when a process group exists: each rank calibrates
on its share of the samples (the data set is split by rank), GPTQ reduces every Linear's Hessian
to the rank that owns it, quantizes there and broadcasts the result; all ranks then take part in
saving (rank 0 writes). Measured on tiny-llama with 2 CPU processes (gloo): the same tensors and
scales as one process, a few int4 values rounded the other way (the Hessian's partial sums add in
another order), and the same drift within its standard error. Rank 0 keeps each finished layer
(layer_checkpoints.py) as one process does, the others follow its record in memory, and a
resumed run replays the kept layers on every rank; the parent commits each kept layer as it
appears (a run folder in object storage travels with them).
"""

import json
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from pipeline.config import recipe
from pipeline.core import quiet
from pipeline.core.checkpoints import PROGRESS, Checkpoints
from pipeline.core.errors import PipelineError
from pipeline.data.texts import packed
from pipeline.quantize import layer_checkpoints, layer_progress, routing
from pipeline.quantize.compat import patch_llmcompressor_for_cpu


@dataclass(frozen=True)
class Job:
    """What every process needs, as JSON: no process re-reads the data source."""

    model_path: str
    recipe_yaml: str  # the modifiers, as oneshot takes them (and writes to recipe.yaml)
    calibration: dict  # recipe.Calibration, resolved (caps, packing)
    texts: list[str] | None
    samples: int
    saved_dtype: str  # the checkpoint's dtype, for saving after a float32 calibration on CPU


def upcasts(calibrating: bool) -> bool:
    """Whether the model is calibrated in float32 (a CPU host: torch 2.13's bf16 matmuls are ~7x
    slower there) rather than in its checkpoint's dtype."""
    import torch

    return calibrating and not torch.accelerator.is_available()


def run(
    job: Job, out: Path, steps=None, track_routing: bool = True, layers=None, checkpoints=None
) -> dict | None:
    """Quantize into `out`; for a calibrated MoE, which experts the calibration tokens reached.
    `layers`: a progress bar the sequential pipeline drives, one tick per decoder layer;
    `checkpoints`: where each finished layer is kept, and an earlier attempt's resumed from
    (layer_checkpoints.py)."""
    import contextlib

    import torch
    from llmcompressor import oneshot
    from llmcompressor.logger import LoggerConfig, configure_logger
    from transformers import AutoTokenizer

    step = steps.set_postfix_str if steps else (lambda *a, **k: None)
    if quiet.verbose():
        # The recipe check imported llm-compressor with its logs off; -v shows them (and GPTQ
        # needs the METRIC log level that only an enabled configuration registers).
        configure_logger(LoggerConfig())
    patch_llmcompressor_for_cpu()
    step("loading model", refresh=False)
    # Into CPU RAM: llm-compressor's sequential pipeline onloads one layer at a time to the GPU.
    # Without a GPU, calibrate in float32 (torch 2.13's bf16 matmuls are ~7x slower than fp32
    # on CPU) and cast back to the checkpoint's dtype before saving: the same bytes result.
    # A data-free recipe runs no matmul: it loads in the checkpoint's dtype on CPU too (half
    # the memory, and the same arithmetic as on a GPU and on the model-free path).
    upcast = upcasts(job.texts is not None)
    model = _load(job.model_path, torch.float32 if upcast else "auto")
    tokenizer = AutoTokenizer.from_pretrained(job.model_path)
    if steps:
        steps.update()
    kwargs, routed = {}, None
    cal = recipe.Calibration(**job.calibration)
    if job.texts:
        routed = routing.track(model) if track_routing else None
        kwargs = {
            "dataset": _tokenized(job.texts, cal, tokenizer),
            "num_calibration_samples": job.samples,
            "max_seq_length": cal.max_seq_length,
            "shuffle_calibration_samples": False,  # already shuffled with the recipe's seed
        }
    step("calibrating + quantizing", refresh=False)
    torch.manual_seed(cal.seed)

    with contextlib.ExitStack() as hooks:
        kept = {"replay": 0}
        if checkpoints is not None and job.texts:  # the sequential pipeline: layer by layer
            kept = hooks.enter_context(layer_checkpoints.resumable(model, checkpoints))
        if layers:
            hooks.enter_context(layer_progress.layers(layers, lambda: kept["replay"]))
        oneshot(model=model, recipe=job.recipe_yaml, **kwargs)
    if routed:
        routed.remove()
    if steps:
        steps.update()
    step("saving", refresh=False)
    saved = getattr(torch, job.saved_dtype)
    if upcast and saved != torch.float32:
        _cast_back(model, saved)
    model.save_pretrained(out, save_compressed=True)  # every rank: saving is collective
    if _rank() in (None, 0):
        tokenizer.save_pretrained(out)
    return routed.summary() if routed else None


def _cast_back(model, dtype) -> None:
    """The float32 CPU model back to the checkpoint's dtype, but for the FP4 global scales:
    compressed-tensors keeps those in float32 whatever the model's dtype (as a GPU run, which
    loads bf16, and the model-free path write them); rounding them to bf16 moves every block
    scale and packed value."""
    kept = {n: p.data for n, p in model.named_parameters() if n.endswith("global_scale")}
    model.to(dtype)
    for name, param in model.named_parameters():
        if name in kept:
            param.data = kept[name]
    model.config.dtype = dtype


def _load(model_path: str, dtype):
    """Each process on CPU loads the model itself; on GPUs, under torchrun, rank 0 loads it and
    shares it with the others (compressed-tensors' offloading: one copy in CPU RAM)."""
    from transformers import AutoModelForCausalLM

    if _rank() is None or dtype != "auto":
        return AutoModelForCausalLM.from_pretrained(model_path, dtype=dtype)
    from compressed_tensors.offload import load_offloaded_model

    with load_offloaded_model():
        return AutoModelForCausalLM.from_pretrained(
            model_path, dtype=dtype, device_map="auto_offload"
        )


def _rank() -> int | None:
    import torch.distributed as dist

    return dist.get_rank() if dist.is_available() and dist.is_initialized() else None


def _tokenized(texts: list[str], cal, tokenizer):
    from datasets import Dataset

    ids = calibration_ids(texts, cal, tokenizer)
    return Dataset.from_dict({"input_ids": ids, "attention_mask": [[1] * len(x) for x in ids]})


def calibration_ids(texts: list[str], cal, tokenizer) -> list[list[int]]:
    """The token ids oneshot calibrates on: packed into equal samples, or each text truncated
    to max_seq_length (no padding: every attention mask is all ones)."""
    special = not cal.chat_template  # a chat template already starts with BOS
    if cal.pack:
        enc = tokenizer(texts, add_special_tokens=special)
        return packed(enc["input_ids"], cal.max_seq_length, cal.num_samples)
    enc = tokenizer(texts, max_length=cal.max_seq_length, truncation=True,
                    add_special_tokens=special)  # fmt: skip
    return enc["input_ids"]


def run_distributed(
    job: Job, out: Path, nproc: int, log: Path, checkpoints: Checkpoints | None = None
) -> None:
    """`torchrun --standalone --nproc-per-node N`, its output appended to the stage's log; the
    layers rank 0 keeps in `checkpoints` committed as they appear."""
    kept = None
    if checkpoints is not None:
        kept = {"folder": str(checkpoints.folder), "fingerprint": checkpoints.fingerprint,
                "inputs": checkpoints.inputs}  # fmt: skip
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
        json.dump({"job": asdict(job), "checkpoints": kept}, f)
    command = [
        sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={nproc}",
        "-m", "pipeline.quantize.oneshot", f.name, str(out),
    ]  # fmt: skip
    try:
        log.parent.mkdir(parents=True, exist_ok=True)
        with open(log, "a") as sink:
            code = _wait(subprocess.Popen(command, stdout=sink, stderr=subprocess.STDOUT),
                         checkpoints)  # fmt: skip
    finally:
        os.unlink(f.name)
    if code:
        raise PipelineError(
            f"distributed quantize: torchrun with {nproc} processes exited {code}; see {log}"
        )


def _wait(proc: subprocess.Popen, checkpoints: Checkpoints | None, every: float = 2.0) -> int:
    """torchrun's exit status; each time rank 0's progress.json changes, `on_keep` (the run
    folder's commit). Interrupted (Ctrl-C, SIGTERM as an exception), torchrun is stopped first."""
    progress = checkpoints.folder / PROGRESS if checkpoints else None
    seen = None
    try:
        while proc.poll() is None:
            time.sleep(every)
            if progress is None or checkpoints is None or checkpoints.on_keep is None:
                continue
            stamp = progress.stat().st_mtime_ns if progress.is_file() else None
            if stamp != seen:
                seen = stamp
                checkpoints.on_keep()
    except BaseException:
        proc.terminate()  # torchrun passes it to its ranks
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
        raise
    if progress is not None and checkpoints is not None and checkpoints.on_keep is not None:
        checkpoints.on_keep()  # the last layers kept before it exited
    return proc.returncode


def _die_with_torchrun() -> None:
    """torchrun starts each rank in a session of its own, so a kill -9 of the pipeline's
    process group would leave the ranks writing on into the stage's folders: Linux's
    parent-death signal ends a rank with torchrun's agent."""
    if not sys.platform.startswith("linux"):
        return
    import ctypes
    import signal

    agent = os.getppid()
    ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    if os.getppid() != agent:  # the agent died before the signal was set
        os._exit(1)


def _worker(spec: str, out: str) -> None:
    import torch
    import torch.distributed as dist

    _die_with_torchrun()
    if torch.accelerator.is_available():
        from compressed_tensors.distributed import init_dist

        init_dist()  # NCCL (XCCL), one device per local rank
    else:
        dist.init_process_group("gloo")
    try:
        given = json.loads(Path(spec).read_text())
        kept = None
        if found := given["checkpoints"]:  # rank 0 writes; the others follow in memory
            kept = Checkpoints(Path(found["folder"]), found["fingerprint"], found["inputs"],
                               writes=dist.get_rank() == 0)  # fmt: skip
        run(Job(**given["job"]), Path(out), track_routing=False, checkpoints=kept)
        dist.barrier()
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    _worker(*sys.argv[1:])
