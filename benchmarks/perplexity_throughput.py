"""Perplexity throughput: the hf eval backend vs lm-eval's HF model, same model, same tokens.

    .venv/bin/python benchmarks/perplexity_throughput.py [TOKENS] [REPEATS]

Scores the same held-out token windows (512 tokens, BOS first) of tiny-llama in float32 on CPU
with (a) pipeline.eval.backends.hf.logprobs, which also keeps every position's full log-probs for
KL, and (b) lm-eval's HFLM.loglikelihood_rolling on the decoded text (max_length 512, so its
rolling windows are the same). Runs alternate, REPEATS times each; prints tokens/s (median and
range), the perplexities (a check that both did the same work) and the ratio.
"""

import math
import statistics
import sys
import time

import torch
from transformers import AutoTokenizer

from pipeline.data.texts import load_all
from pipeline.eval import windows as token_windows
from pipeline.eval.backends import hf
from pipeline.models.tiny.build import ensure

BATCH = 4


def ours(model, windows: torch.Tensor) -> tuple[float, int]:
    nll, n = 0.0, 0
    for i, logp in enumerate(hf.logprobs(model, windows, batch_size=BATCH)):
        nll -= logp.gather(-1, windows[i, 1:, None]).sum().item()
        n += logp.shape[0]
    return nll, n


def lm_eval_rolling(lm, texts: list[str]) -> tuple[float, int]:
    from lm_eval.api.instance import Instance

    requests = [
        Instance("loglikelihood_rolling", doc={}, arguments=(t,), idx=i)
        for i, t in enumerate(texts)
    ]
    scores = lm.loglikelihood_rolling(requests, disable_tqdm=True)
    n = sum(len(lm.tok_encode(t)) for t in texts)
    return -sum(scores), n


def main() -> None:
    from lm_eval.models.huggingface import HFLM

    budget = int(sys.argv[1]) if len(sys.argv) > 1 else 8192
    repeats = int(sys.argv[2]) if len(sys.argv) > 2 else 3
    torch.set_num_threads(torch.get_num_threads())
    model_dir = ensure()
    tok = AutoTokenizer.from_pretrained(model_dir)
    texts = load_all("python-docs", None, "heldout", "text")
    windows = token_windows.windows(tok, texts, 512, budget)
    decoded = [tok.decode(w[1:]) for w in windows]
    model = hf.load(model_dir)
    lm = HFLM(
        pretrained=str(model_dir), dtype="float32", device="cpu", batch_size=BATCH, max_length=512
    )
    runs = {
        "hf backend": (lambda: ours(model, windows)),
        "lm-eval HFLM": (lambda: lm_eval_rolling(lm, decoded)),
    }
    rates: dict[str, list[float]] = {name: [] for name in runs}
    ppl = {}
    for _ in range(repeats):
        for name, fn in runs.items():
            start = time.perf_counter()
            nll, n = fn()
            rates[name].append(n / (time.perf_counter() - start))
            ppl[name] = (math.exp(nll / n), n)
    print(
        f"{len(windows)} windows × 512 tokens, float32, {torch.get_num_threads()} threads, "
        f"batch {BATCH}, {repeats} runs each"
    )
    for name, r in rates.items():
        print(
            f"  {name:<14} {statistics.median(r):>9,.0f} tokens/s (range {min(r):,.0f}-"
            f"{max(r):,.0f}); perplexity {ppl[name][0]:.2f} over {ppl[name][1]:,} tokens"
        )
    ratio = [a / b for a, b in zip(rates["hf backend"], rates["lm-eval HFLM"], strict=True)]
    print(
        f"  ratio hf backend / lm-eval: {statistics.median(ratio):.2f}× "
        f"(range {min(ratio):.2f}-{max(ratio):.2f})"
    )


if __name__ == "__main__":
    main()
