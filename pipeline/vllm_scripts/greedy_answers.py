"""Greedy answers to token-id prompts from vLLM, `batch` prompts per call. Serving env only.

    .venv-serve/bin/python greedy_answers.py MODEL_DIR DIR

DIR/request.json: prompts (token ids), max_new_tokens, batch_sizes, kv_cache_dtype,
quantization (null or vLLM's online method), max_model_len, engine (as
pipeline/engines/vllm/sizing.py sized it). Writes DIR/answers.json — per batch size, the generated
token ids per prompt (an EOS that ended one is its last id) — renamed into place when complete.
"""

import json
import os
import sys


def main() -> None:
    from vllm import LLM, SamplingParams

    model, folder = sys.argv[1], sys.argv[2]
    with open(os.path.join(folder, "request.json")) as f:
        request = json.load(f)
    llm = LLM(
        model=model,
        dtype="bfloat16",
        kv_cache_dtype=request["kv_cache_dtype"],
        quantization=request["quantization"],
        max_model_len=request["max_model_len"],
        seed=0,
        **request["engine"],
    )
    params = SamplingParams(max_tokens=request["max_new_tokens"], temperature=0, detokenize=False)
    prompts, runs = request["prompts"], []
    for size in request["batch_sizes"]:  # the same engine at each: one start-up
        answers = []
        for first in range(0, len(prompts), size):
            chunk = [{"prompt_token_ids": p} for p in prompts[first : first + size]]
            for out in llm.generate(chunk, params, use_tqdm=False):
                answers.append(list(out.outputs[0].token_ids))
        runs.append(answers)
    tmp = os.path.join(folder, "answers.json.tmp")
    with open(tmp, "w") as f:
        json.dump(runs, f)
    os.replace(tmp, os.path.join(folder, "answers.json"))
    print("greedy_answers: done", flush=True)


if __name__ == "__main__":  # vLLM spawns its engine process: the guard is required
    main()
