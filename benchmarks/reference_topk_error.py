"""How much KL the compact reference loses against full-vocabulary KL, per top-k.

    .venv/bin/python benchmarks/reference_topk_error.py [RUNS_DIR] [recipe ...]

For each quantized tiny-llama artifact already in RUNS_DIR (default ./runs), scores the
held-out split with the original and the quantized model (hf backend, full logits in memory),
and prints mean KL from the full vocabulary next to the top-k estimate for several k, with the
relative error and the reference's bytes per token. The estimate is a lower bound (the tail
merges the rest of the vocabulary into one outcome), so the error is always ≥ 0.
"""

import sys
from pathlib import Path

import torch
from transformers import AutoTokenizer

from pipeline import corpus, drift, eval_data
from pipeline.backends import hf
from pipeline.tiny.build import ensure

KS = (4, 8, 16, 32, 64, 128)


def main() -> None:
    runs = Path(sys.argv[1] if len(sys.argv) > 1 else "runs")
    recipes = sys.argv[2:] or ["fp8", "gptq", "w4a16-rtn"]
    original_dir = ensure()
    tok = AutoTokenizer.from_pretrained(original_dir)
    windows = eval_data.windows(tok, corpus.read_split("heldout"), 512, 8192)
    targets = windows[:, 1:]
    original = list(hf.logprobs(hf.load(original_dir), windows))
    print(f"{'recipe':<10} {'full KL':>10} " + " ".join(f"{'k=' + str(k):>16}" for k in KS))
    for recipe in recipes:
        artifact = runs / "tiny-llama" / recipe / "artifact"
        if not artifact.is_dir():
            print(f"{recipe:<10} (no artifact: make quantize RECIPE={recipe})")
            continue
        quant = list(hf.logprobs(hf.load(artifact), windows))
        full = (
            torch.cat(
                [
                    (p.double().exp() * (p.double() - q.double())).sum(-1)
                    for p, q in zip(original, quant, strict=True)
                ]
            )
            .mean()
            .item()
        )
        cells = []
        for k in KS:
            parts = [
                drift.per_token(drift.compact(p, targets[i], k), q, targets[i])["kl"]
                for i, (p, q) in enumerate(zip(original, quant, strict=True))
            ]
            approx = torch.cat(parts).mean().item()
            cells.append(f"{approx:.3e} ({100 * (full - approx) / full:4.1f}%)")
        print(f"{recipe:<10} {full:>10.3e} " + " ".join(f"{c:>16}" for c in cells))
    print("bytes/token: " + ", ".join(f"k={k}: {k * 8 + 8}" for k in KS))


if __name__ == "__main__":
    main()
