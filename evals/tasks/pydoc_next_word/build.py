"""Writes pydoc_next_word.jsonl: a 4-way next-word task over held-out Python documentation.

    .venv/bin/python evals/tasks/pydoc_next_word/build.py

Each item: up to 24 words of held-out documentation, then the word that follows it and three
other words of the same documents as distractors (each a common word of the split, of the same
kind: lower-case, alphabetic, 3+ letters, so most are one token in a 32k+ vocabulary and lm-eval
scores an item in one forward pass). The task asks what a language model does: which word comes
next. Chance is 25%; a real model's answer depends on its whole next-token distribution, so
quantization that moves probability shows as flipped items. Answers are at least 10 words
apart (contexts overlap: the held-out split is 11k words); 500 items, enough for the paired test to see a 5-point drop (the
power is computed in docs/recipes.md).
"""

import json
import random
import re
from collections import Counter
from pathlib import Path

from pipeline.data import corpus

ITEMS, CONTEXT_WORDS, GAP, SEED = 500, 24, 10, 0
WORD = re.compile(r"^[a-z]{3,}$")
COMMON = 3  # a word seen at least this often in the split can be an answer or a distractor


def main() -> None:
    docs = [doc.split() for doc in corpus.read_split("heldout")]
    counts = Counter(w for words in docs for w in words if WORD.match(w))
    pool = sorted(w for w, n in counts.items() if n >= COMMON)
    candidates = []
    for words in docs:
        last = -GAP
        for end in range(CONTEXT_WORDS, len(words)):
            target = words[end]
            if end - last >= GAP and counts.get(target, 0) >= COMMON:
                candidates.append((" ".join(words[end - CONTEXT_WORDS : end]), target))
                last = end
    rng = random.Random(SEED)
    rng.shuffle(candidates)
    chosen = candidates[:ITEMS]
    out = Path(__file__).with_name("pydoc_next_word.jsonl")
    with out.open("w") as f:
        for context, target in chosen:
            choices = rng.sample([w for w in pool if w != target], 3)
            label = rng.randrange(4)
            choices.insert(label, target)
            f.write(json.dumps({"context": context, "choices": choices, "label": label}) + "\n")
    print(f"wrote {len(chosen)} items ({len(candidates)} candidates, pool {len(pool)}) to {out}")


if __name__ == "__main__":
    main()
