"""Does a subset of the held-out windows give the noise floor as well as all of them? The
original scored twice (batch 4, the reference's; batch 2, the floor's) on every held-out window,
then the floor's mean KL over the first N windows against all of them, and each pass's seconds.
(The eval's own floor compares the second pass with the stored compact reference, so it also
holds the reference's rounding; this one compares the two passes' full distributions.)

    .venv/bin/python benchmarks/floor_subset.py [--model smollm2-135m] [--recipe fp8]

docs/figures.md's "the noise floor on a subset of windows" row comes from here.
"""

import argparse
import time

import torch

from pipeline.config import recipe
from pipeline.data import corpus
from pipeline.eval import windows as cut
from pipeline.eval.backends import hf
from pipeline.models import aliases, hf_load


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default="smollm2-135m")
    p.add_argument("--recipe", default="fp8")
    args = p.parse_args()
    from transformers import AutoTokenizer

    path, _ = aliases.materialize(aliases.resolve(args.model))
    s = recipe.load(args.recipe).spec.eval
    tok = AutoTokenizer.from_pretrained(path)
    held = cut.windows(tok, corpus.read_split("heldout"), s.context_length, s.max_tokens)
    model = hf_load.from_pretrained(path, torch.float32)
    passes = {}
    for batch in (4, 2):
        t0 = time.monotonic()
        passes[batch] = list(hf.logprobs(model, held, batch_size=batch))
        print(f"batch {batch}: {len(held)} windows in {time.monotonic() - t0:.1f} s", flush=True)
    per_window = []
    for p4, p2 in zip(passes[4], passes[2], strict=True):
        per_window.append((p4.exp() * (p4 - p2)).sum(-1).mean().item())
    every = sum(per_window) / len(per_window)
    print(f"floor mean KL, all {len(per_window)} windows: {every:.3e}")
    if every == 0:  # float32 on a CPU: batching changes no sum here
        print("every window bit-identical at both batch sizes: any subset gives the floor (0)")
        return
    for n in (4, 8, 16):
        part = sum(per_window[:n]) / n
        print(f"first {n:>2} windows: {part:.3e} ({part / every:.2f}× all)")


if __name__ == "__main__":
    main()
