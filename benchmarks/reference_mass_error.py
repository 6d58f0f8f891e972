"""How much KL the compact reference loses against full-vocabulary KL, per kept mass.

    .venv/bin/python benchmarks/reference_mass_error.py [RUNS_DIR] [recipe ...]

For each quantized tiny-llama artifact already in RUNS_DIR (default ./runs), scores the
held-out split with the original and the quantized model (hf backend, full logits in memory),
and prints mean KL from the full vocabulary next to the compact reference's estimate, for
references that keep a fixed top-k and ones that keep a probability mass, with the relative
error and the reference's bytes per token. The estimate is a lower bound (the tail merges the
rest of the vocabulary into one outcome), so the error is always ≥ 0.
"""

import sys
from pathlib import Path

import torch
from transformers import AutoTokenizer

from pipeline.data import corpus
from pipeline.eval import drift, reference
from pipeline.eval import windows as token_windows
from pipeline.eval.backends import hf
from pipeline.models.tiny.build import ensure

# (label, mass, max_k): fixed top-k keeps everything up to k; mass-based keeps up to the vocab
CHOICES = [("k=32", 1.0, 32), ("k=128", 1.0, 128)] + [
    (f"mass={m}", m, 1 << 20) for m in (0.9, 0.99, 0.999)
]


def main() -> None:
    runs = Path(sys.argv[1] if len(sys.argv) > 1 else "runs")
    recipes = sys.argv[2:] or ["fp8", "gptq", "w4a16-rtn"]
    original_dir = ensure()
    tok = AutoTokenizer.from_pretrained(original_dir)
    windows = token_windows.windows(tok, corpus.read_split("heldout"), 512, 8192)
    targets = windows[:, 1:]
    original = list(hf.logprobs(hf.load(original_dir), windows))
    refs = {
        label: [drift.compact(p, targets[i], mass, k) for i, p in enumerate(original)]
        for label, mass, k in CHOICES
    }
    print(f"{'recipe':<10} {'full KL':>10} " + " ".join(f"{c[0]:>20}" for c in CHOICES))
    for recipe in recipes:
        artifact = runs / "tiny-llama" / recipe / "artifact"
        if not artifact.is_dir():
            print(f"{recipe:<10} (no artifact: make quantize RECIPE={recipe})")
            continue
        quant = list(hf.logprobs(hf.load(artifact), windows))
        full = torch.cat(
            [
                (p.double().exp() * (p.double() - q.double())).sum(-1)
                for p, q in zip(original, quant, strict=True)
            ]
        ).mean()
        cells = []
        for label, _, _ in CHOICES:
            parts = [
                drift.per_token(ref, q, targets[i])["kl"]
                for i, (ref, q) in enumerate(zip(refs[label], quant, strict=True))
            ]
            approx = torch.cat(parts).mean()
            cells.append(f"{approx:.3e} ({100 * (full - approx) / full:5.2f}%)")
        print(f"{recipe:<10} {full:>10.3e} " + " ".join(f"{c:>20}" for c in cells))
    print("reference per token:")
    for label, _, _ in CHOICES:
        ref = drift.concat(refs[label])
        kept = drift.coverage(ref)
        print(
            f"  {label:<12} {reference.bytes_per_token(ref):>9,.0f} bytes, "
            f"{kept['tokens_kept_mean']:,.0f} tokens, {100 * kept['mass_kept_mean']:.2f}% of p"
        )


if __name__ == "__main__":
    main()
