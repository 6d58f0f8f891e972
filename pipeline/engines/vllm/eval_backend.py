"""Log-probabilities from vLLM: the kernels that will actually serve the artifact.

vLLM lives in the serving env (.venv-serve), so this runs pipeline/vllm_scripts/
prompt_logprobs.py there as a subprocess (its own process group, always stopped), once per
model over all windows, reading the arrays it writes batch by batch as they appear.
With a vocabulary up to FULL_VOCAB_LIMIT it asks for every token's log-prob (exact); above
that for the top TOP_LOGPROBS (the reference's default reference_max_k), and the unseen tokens
share the remaining mass evenly.
"""

import json
import math
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from pipeline.config.engine_defaults import BATCH_WINDOWS  # bounds a batch's memory
from pipeline.core import environment, procs
from pipeline.engines.vllm import serving_env, sizing
from pipeline.engines.vllm.serving_env import SERVE_PYTHON, VLLM_SCRIPTS
from pipeline.planning import geometry
from pipeline.planning.deployment import Load
from pipeline.quantize.artifact import tensor_bytes

NAME = "vllm"
SCRIPT = VLLM_SCRIPTS / "prompt_logprobs.py"
ANSWERS_SCRIPT = VLLM_SCRIPTS / "greedy_answers.py"
FULL_VOCAB_LIMIT = 32768
TOP_LOGPROBS = 4096


@dataclass
class Handle:
    model_dir: Path
    vocab_size: int
    kv_cache_dtype: str = "auto"
    quantization: str | None = None  # online quantization at load (`--quantization fp8`)
    engine: sizing.Engine | None = None  # sized when the windows' length is known


def engine_for(
    model_dir: Path, context: int, gpus: list[str], users: int = BATCH_WINDOWS
) -> sizing.Engine:
    """This model's engine for `users` sequences of `context` tokens on `gpus`: the original
    may need more GPUs than the artifact (its weights, from the safetensors headers)."""
    import json

    config = json.loads((Path(model_dir) / "config.json").read_text())
    weights = tensor_bytes(Path(model_dir))
    load = Load(weights, "auto", users, context)
    budget = sizing.llm_budget(users)  # vllm.LLM's batch
    return sizing.engine(geometry.of(config), load, gpus, Path(model_dir).name, budget)


def load(model_dir: Path, kv_cache_dtype: str = "auto", quantization: str | None = None) -> Handle:
    serving_env.require("eval backend vllm")
    config = json.loads((Path(model_dir) / "config.json").read_text())
    return Handle(Path(model_dir), int(config["vocab_size"]), kv_cache_dtype, quantization)


def logprobs(
    handle: Handle, windows: torch.Tensor, batch_size: int = BATCH_WINDOWS
) -> Iterator[torch.Tensor]:
    """Per window, as vLLM finishes each batch: [context − 1, vocab] log-probs."""
    top = -1 if handle.vocab_size <= FULL_VOCAB_LIMIT else TOP_LOGPROBS
    batches = math.ceil(len(windows) / batch_size)
    handle.engine = engine_for(handle.model_dir, windows.shape[1] + 1, environment.gpus())
    with tempfile.TemporaryDirectory() as tmp:
        np.save(f"{tmp}/windows.npy", windows.numpy())
        cmd = [
            str(SERVE_PYTHON),
            str(SCRIPT),
            str(handle.model_dir),
            f"{tmp}/windows.npy",
            tmp,
            str(top),
            str(batch_size),
            handle.kv_cache_dtype,
            handle.quantization or "none",
            json.dumps(handle.engine.vllm_kwargs()),
        ]
        log = Path(tmp) / "vllm.log"
        with procs.group(cmd, log, serving_env.offline_env()) as proc:
            for b in range(batches):
                path = Path(tmp) / f"batch-{b:05d}.npz"
                while not path.is_file():
                    if proc.poll() is not None and not path.is_file():
                        raise RuntimeError(
                            f"vLLM prompt_logprobs failed (exit {proc.returncode}):\n"
                            + procs.tail(log)
                        )
                    time.sleep(0.2)
                out = dict(np.load(path))
                path.unlink()
                yield from _windows(out, handle.vocab_size)


def _windows(out: dict, vocab: int) -> Iterator[torch.Tensor]:
    if "dense" in out:
        yield from torch.from_numpy(out["dense"])
        return
    for ids, values in zip(out["ids"], out["logprobs"], strict=True):
        yield _filled(torch.from_numpy(ids).long(), torch.from_numpy(values), vocab)


def _filled(ids: torch.Tensor, values: torch.Tensor, vocab: int) -> torch.Tensor:
    """[positions, k] returned log-probs → [positions, vocab]: the tokens vLLM did not return
    share the rest of the mass evenly (an actual token that is also in the top k is one entry)."""
    dense = torch.full((ids.shape[0], vocab), float("-inf")).scatter_(1, ids, values)
    seen = torch.isfinite(dense)
    unseen = (vocab - seen.sum(1)).clamp(min=1)
    rest = (1 - dense.double().exp().sum(1)).clamp(min=1e-12)
    fill = (rest / unseen).log().float()
    return torch.where(seen, dense, fill[:, None])


def describe(handle: Handle) -> dict:
    dtype = f"bfloat16, online {handle.quantization}" if handle.quantization else "bfloat16"
    engine = handle.engine.describe() if handle.engine else None
    kv = f"{handle.kv_cache_dtype} (vLLM)"
    return {"backend": NAME, "dtype": dtype, "kv_cache": kv, "engine": engine}


def generate(handle: Handle, prompts: list[list[int]], max_new_tokens: int,
             batch_sizes: list[int], pad_id: int, bar=None) -> list[list[list[int]]]:  # fmt: skip
    """Greedy continuations from the engine that serves the model, at each batch size in one
    engine start (`size` prompts per call; pad_id unused: vLLM does not pad). An EOS that
    ended an answer is its last id."""
    context = max(map(len, prompts)) + max_new_tokens
    handle.engine = engine_for(handle.model_dir, context, environment.gpus(), max(batch_sizes))
    with tempfile.TemporaryDirectory() as tmp:
        request = {"prompts": prompts, "max_new_tokens": max_new_tokens,
                   "batch_sizes": batch_sizes, "kv_cache_dtype": handle.kv_cache_dtype,
                   "quantization": handle.quantization, "max_model_len": context,
                   "engine": handle.engine.vllm_kwargs()}  # fmt: skip
        Path(tmp, "request.json").write_text(json.dumps(request))
        cmd = [str(SERVE_PYTHON), str(ANSWERS_SCRIPT), handle.model_dir.as_posix(), tmp]
        log = Path(tmp) / "vllm.log"
        code = procs.run(cmd, log, serving_env.offline_env())
        # the CPU engine may end with 134 after all work is done: the answers file decides
        if not Path(tmp, "answers.json").is_file():
            raise RuntimeError(f"vLLM generation failed (exit {code}):\n" + procs.tail(log))
        if bar is not None:  # one engine run: the bar moves once, at its end
            bar.update(len(prompts) * len(batch_sizes))
        return json.loads(Path(tmp, "answers.json").read_text())


def lm_eval_model_args(model_dir: Path, kv_cache_dtype: str, max_len: int, users: int) -> dict:
    """lm-eval's `vllm` model_args for this model: its context capped at `max_len`, its engine
    sized for `users` sequences on this host's GPUs (each side its own: the original may need
    more GPUs than the artifact)."""
    config = json.loads((model_dir / "config.json").read_text())
    max_len = min(int(config.get("max_position_embeddings", max_len)), max_len)
    engine = engine_for(model_dir, max_len, environment.gpus(), users=users)
    return {
        "pretrained": str(model_dir),
        "dtype": "bfloat16",
        "kv_cache_dtype": kv_cache_dtype,
        "max_model_len": max_len,
        "seed": 0,
        "add_bos_token": True,
        **engine.vllm_kwargs(),
    }
