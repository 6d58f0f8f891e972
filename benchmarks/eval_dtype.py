"""Why the hf eval backend scores in float32 on CPU: what bfloat16 would buy and cost.

    .venv/bin/python benchmarks/eval_dtype.py [ARTIFACT_DIR ...]  # runs/tiny-llama/fp8/artifact

Same held-out windows (512 tokens, 8,192 scored) of tiny-llama, alternating runs: tokens/s of
the forward pass in float32 and in bfloat16 (log-softmax in float32 for both), then the mean
KL of each artifact against the original computed in each dtype, and the original's bfloat16
against its float32 (the rounding floor bfloat16 adds to every KL).
"""

import statistics
import sys
import time

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from pipeline.data.texts import load_all
from pipeline.eval import windows as token_windows
from pipeline.models.tiny.build import ensure

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}


def logprobs(model, windows: torch.Tensor) -> torch.Tensor:
    with torch.inference_mode():
        parts = [
            model(input_ids=b).logits[:, :-1].float().log_softmax(-1) for b in windows.split(4)
        ]
    return torch.cat(parts)


def mean_kl(logp: torch.Tensor, logq: torch.Tensor) -> float:
    return (logp.exp() * (logp - logq)).sum(-1).mean().item()


def load(path, dtype):
    return AutoModelForCausalLM.from_pretrained(path, dtype=dtype).eval()


def main() -> None:
    model_dir = ensure()
    tok = AutoTokenizer.from_pretrained(model_dir)
    windows = token_windows.windows(
        tok, load_all("python-docs", None, "heldout", "text"), 512, 8192
    )
    models = {name: load(model_dir, dtype) for name, dtype in DTYPES.items()}
    rates: dict[str, list[float]] = {name: [] for name in DTYPES}
    for _ in range(3):
        for name, model in models.items():
            start = time.perf_counter()
            logprobs(model, windows)
            rates[name].append(windows.shape[0] * 511 / (time.perf_counter() - start))
    print(f"{len(windows)} windows × 512 tokens, {torch.get_num_threads()} threads, 3 runs each")
    for name, r in rates.items():
        spread = f"range {min(r):,.0f}-{max(r):,.0f}"
        print(f"  {name:<9} {statistics.median(r):>8,.0f} tokens/s ({spread})")
    ratio = [b / f for f, b in zip(rates["float32"], rates["bfloat16"], strict=True)]
    spread = f"range {min(ratio):.2f}-{max(ratio):.2f}"
    print(f"  bfloat16 / float32: {statistics.median(ratio):.2f}× ({spread})")
    original = {name: logprobs(m, windows) for name, m in models.items()}
    floor = mean_kl(original["float32"], original["bfloat16"])
    print(f"  original bfloat16 vs float32: mean KL {floor:.2e}")
    for artifact in sys.argv[1:]:
        kl = {
            n: mean_kl(original[n], logprobs(load(artifact, d), windows)) for n, d in DTYPES.items()
        }
        print(
            f"  {artifact}: mean KL float32 {kl['float32']:.2e}, bfloat16 {kl['bfloat16']:.2e} "
            f"({kl['bfloat16'] / kl['float32']:.2f}×)"
        )


if __name__ == "__main__":
    main()
