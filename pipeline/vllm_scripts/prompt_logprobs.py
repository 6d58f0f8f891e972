"""Next-token log-probs of fixed token windows, from vLLM (prompt_logprobs). Serving env only.

    .venv-serve/bin/python prompt_logprobs.py MODEL_DIR WINDOWS.npy OUT.npz TOP

TOP = -1 asks for the whole vocabulary (exact; fine for small vocabularies), else the TOP most
likely tokens per position plus the actual next token. Writes flat arrays: for window w and
position i (1…n−1), entries start[w, i−1]:end[w, i−1] of `ids` / `logprobs`.
"""

import sys

import numpy as np


def main() -> None:
    from vllm import LLM, SamplingParams

    model, windows_path, out_path, top = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
    windows = np.load(windows_path)
    llm = LLM(
        model=model,
        dtype="bfloat16",
        max_model_len=windows.shape[1] + 1,
        max_logprobs=top,
        enforce_eager=True,  # numerics match the compiled path; skips minutes of CPU compilation
        seed=0,
    )
    params = SamplingParams(
        max_tokens=1, temperature=0, prompt_logprobs=top, flat_logprobs=True, detokenize=False
    )
    prompts = [{"prompt_token_ids": w.tolist()} for w in windows]
    outputs = llm.generate(prompts, params)
    ids, logprobs, starts, ends = [], [], [], []
    offset = 0
    for out in outputs:
        flat = out.prompt_logprobs  # FlatLogprobs; position 0 has no prediction
        ids.append(np.asarray(flat.token_ids, dtype=np.int32))
        logprobs.append(np.asarray(flat.logprobs, dtype=np.float32))
        starts.append(np.asarray(flat.start_indices[1:], dtype=np.int64) + offset)
        ends.append(np.asarray(flat.end_indices[1:], dtype=np.int64) + offset)
        offset += len(flat.token_ids)
    np.savez(
        out_path,
        ids=np.concatenate(ids),
        logprobs=np.concatenate(logprobs),
        start=np.stack(starts),
        end=np.stack(ends),
    )
    print("prompt_logprobs: done", flush=True)


if __name__ == "__main__":  # vLLM spawns its engine process: the guard is required
    main()
