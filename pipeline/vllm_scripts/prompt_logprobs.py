"""Next-token log-probs of fixed token windows, from vLLM (prompt_logprobs). Serving env only.

    .venv-serve/bin/python prompt_logprobs.py MODEL_DIR WINDOWS.npy OUT_DIR TOP BATCH KV_DTYPE \
        QUANTIZATION

QUANTIZATION: "none", or an online method vLLM applies as it loads the weights ("fp8").

TOP = -1 asks for the whole vocabulary (exact; fine for small vocabularies), else the TOP most
likely tokens per position plus the actual next token. Windows go through vLLM BATCH at a time
(vLLM returns log-probs as Python lists: ~100 bytes per entry, so a whole split at once would
need tens of GB), each batch written as OUT_DIR/batch-NNNNN.npz (renamed into place when
complete) with flat arrays: for window w of the batch and position i (1…n−1), entries
start[w, i−1]:end[w, i−1] of `ids` / `logprobs`.
"""

import os
import sys

import numpy as np


def main() -> None:
    from vllm import LLM, SamplingParams

    model, windows_path, out_dir = sys.argv[1], sys.argv[2], sys.argv[3]
    top, batch, kv_cache_dtype = int(sys.argv[4]), int(sys.argv[5]), sys.argv[6]
    quantization = None if sys.argv[7] == "none" else sys.argv[7]
    windows = np.load(windows_path)
    llm = LLM(
        model=model,
        dtype="bfloat16",
        kv_cache_dtype=kv_cache_dtype,  # fp8: k/v scales from the checkpoint when it has them
        quantization=quantization,
        max_model_len=windows.shape[1] + 1,
        max_logprobs=top,
        enforce_eager=True,  # numerics match the compiled path; skips minutes of CPU compilation
        seed=0,
    )
    params = SamplingParams(
        max_tokens=1, temperature=0, prompt_logprobs=top, flat_logprobs=True, detokenize=False
    )
    for b, first in enumerate(range(0, len(windows), batch)):
        prompts = [{"prompt_token_ids": w.tolist()} for w in windows[first : first + batch]]
        outputs = llm.generate(prompts, params, use_tqdm=False)
        _write(outputs, os.path.join(out_dir, f"batch-{b:05d}.npz"))
    print("prompt_logprobs: done", flush=True)


def _write(outputs, path: str) -> None:
    ids, logprobs, starts, ends = [], [], [], []
    offset = 0
    for out in outputs:
        flat = out.prompt_logprobs  # FlatLogprobs; position 0 has no prediction
        ids.append(np.asarray(flat.token_ids, dtype=np.int32))
        logprobs.append(np.asarray(flat.logprobs, dtype=np.float32))
        starts.append(np.asarray(flat.start_indices[1:], dtype=np.int64) + offset)
        ends.append(np.asarray(flat.end_indices[1:], dtype=np.int64) + offset)
        offset += len(flat.token_ids)
    tmp = path + ".partial.npz"
    np.savez(
        tmp,
        ids=np.concatenate(ids),
        logprobs=np.concatenate(logprobs),
        start=np.stack(starts),
        end=np.stack(ends),
    )
    os.replace(tmp, path)


if __name__ == "__main__":  # vLLM spawns its engine process: the guard is required
    main()
