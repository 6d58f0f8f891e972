"""Next-token log-probs of fixed token windows, from vLLM (prompt_logprobs). Serving env only.

    .venv-serve/bin/python prompt_logprobs.py MODEL_DIR WINDOWS.npy OUT_DIR TOP BATCH KV_DTYPE \
        QUANTIZATION ENGINE_JSON

QUANTIZATION: "none", or an online method vLLM applies as it loads the weights ("fp8").
ENGINE_JSON: tensor_parallel_size, gpu_memory_utilization, max_num_seqs, enforce_eager, as the
pipeline's planner sized them (pipeline/engines/vllm/sizing.py).

TOP = -1 asks for the whole vocabulary (exact; fine for small vocabularies), else the TOP most
likely tokens per position plus the actual next token. Windows go through vLLM BATCH at a time,
each batch written as OUT_DIR/batch-NNNNN.npz (renamed into place when complete):
- TOP = -1: `dense`, [windows, positions, vocab] float32 log-probs of positions 1…n−1;
- else `ids` and `logprobs`, [windows, positions, TOP + 1], column 0 the actual next token.
"""

import json
import os
import sys

import numpy as np


def main() -> None:
    from vllm import LLM, SamplingParams

    model, windows_path, out_dir = sys.argv[1], sys.argv[2], sys.argv[3]
    top, batch, kv_cache_dtype = int(sys.argv[4]), int(sys.argv[5]), sys.argv[6]
    quantization = None if sys.argv[7] == "none" else sys.argv[7]
    engine = json.loads(sys.argv[8])
    windows = np.load(windows_path)
    _keep_arrays()
    llm = LLM(
        model=model,
        dtype="bfloat16",
        kv_cache_dtype=kv_cache_dtype,  # fp8: k/v scales from the checkpoint when it has them
        quantization=quantization,
        max_model_len=windows.shape[1] + 1,
        max_logprobs=top,
        seed=0,
        **engine,  # on CPU eager: numerics match the compiled path; skips minutes of compiling
    )
    params = SamplingParams(max_tokens=1, temperature=0, prompt_logprobs=top, detokenize=False)
    for b, first in enumerate(range(0, len(windows), batch)):
        prompts = [{"prompt_token_ids": w.tolist()} for w in windows[first : first + batch]]
        outputs = llm.generate(prompts, params, use_tqdm=False)
        arrays = [_positions(out.prompt_logprobs) for out in outputs]
        _write(arrays, top, os.path.join(out_dir, f"batch-{b:05d}.npz"))
    print("prompt_logprobs: done", flush=True)


def _keep_arrays() -> None:
    """vLLM turns every prompt log-prob into Python objects (most of this script's time with a
    whole vocabulary, ~100 bytes an entry); keep the engine's arrays instead. vLLM is pinned
    (requirements/serve-*.txt): a changed internal fails here, loudly, not in the numbers."""
    from vllm.v1.engine.logprobs import LogprobsProcessor

    if not hasattr(LogprobsProcessor, "_update_prompt_logprobs"):
        raise RuntimeError("vLLM's LogprobsProcessor changed: update prompt_logprobs.py")

    def update(self, tensors) -> None:
        token_ids, logprobs, *_ = tensors  # [positions, TOP + 1], column 0 the prompt token
        self.prompt_logprobs.append((token_ids.numpy().copy(), logprobs.numpy().copy()))

    LogprobsProcessor._update_prompt_logprobs = update


def _positions(chunks: list) -> tuple[np.ndarray, np.ndarray]:
    """One request's (ids, log-probs) of positions 1…n−1; chunks[0] is position 0's None."""
    parts = chunks[1:]  # one part per prefill chunk, in order
    return np.concatenate([p[0] for p in parts]), np.concatenate([p[1] for p in parts])


def _write(arrays: list[tuple[np.ndarray, np.ndarray]], top: int, path: str) -> None:
    ids = np.stack([a[0] for a in arrays])
    logprobs = np.stack([a[1] for a in arrays]).astype(np.float32)
    tmp = path + ".partial.npz"
    if top == -1:  # every token is there: place them by id
        dense = np.empty((*ids.shape[:2], ids.shape[2] - 1), dtype=np.float32)
        np.put_along_axis(dense, ids[..., 1:], logprobs[..., 1:], axis=-1)
        np.savez(tmp, dense=dense)
    else:
        np.savez(tmp, ids=ids.astype(np.int32), logprobs=logprobs)
    os.replace(tmp, path)


if __name__ == "__main__":  # vLLM spawns its engine process: the guard is required
    main()
