"""Load a checkpoint in vLLM and generate greedily; prints one JSON line. Serving env only.

.venv-serve/bin/python pipeline/vllm_scripts/generate.py MODEL_DIR "prompt" ...
"""

import json
import sys


def main() -> None:
    from vllm import LLM, SamplingParams

    model, prompts = sys.argv[1], sys.argv[2:] or ["The Python language"]
    # enforce_eager: a load-and-generate check, not a benchmark; skips minutes of compilation
    llm = LLM(model=model, dtype="bfloat16", max_model_len=512, seed=0, enforce_eager=True)
    outs = llm.generate(prompts, SamplingParams(temperature=0, max_tokens=16))
    quant = llm.llm_engine.model_config.quantization
    print(json.dumps({"quantization": quant, "texts": [o.outputs[0].text for o in outs]}))


if __name__ == "__main__":  # vLLM spawns its engine process: the guard is required
    main()
