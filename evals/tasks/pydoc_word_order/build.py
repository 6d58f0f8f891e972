"""Writes pydoc_word_order.jsonl: a 4-way word-order task over held-out Python documentation.

    .venv/bin/python evals/tasks/pydoc_word_order/build.py

Each item: 40 words of held-out documentation (text tiny-llama never trained on), the true next
8 words, and three shuffles of those same words as distractors: the task asks for word order,
which even a tiny model learns (BLiMP-style), rather than for knowledge. Chance is 25%.
A small, local stand-in for hub tasks like HellaSwag, so that the lm-eval integration runs offline.
"""

import json
import random
from pathlib import Path

from pipeline.data import corpus

ITEMS, CONTEXT_WORDS, ANSWER_WORDS, SEED = 200, 40, 8, 0


def main() -> None:
    span = CONTEXT_WORDS + ANSWER_WORDS
    passages = []
    for doc in corpus.read_split("heldout"):
        words = doc.split()
        passages += [words[i : i + span] for i in range(0, len(words) - span + 1, span)]
    rng = random.Random(SEED)
    rng.shuffle(passages)
    chosen = passages[:ITEMS]
    out = Path(__file__).with_name("pydoc_word_order.jsonl")
    with out.open("w") as f:
        for words in chosen:
            truth = " ".join(words[CONTEXT_WORDS : CONTEXT_WORDS + ANSWER_WORDS])
            answer = words[CONTEXT_WORDS:]
            choices = []
            while len(choices) < 3:
                shuffled = " ".join(rng.sample(answer, len(answer)))
                if shuffled != truth and shuffled not in choices:
                    choices.append(shuffled)
            label = rng.randrange(4)
            choices.insert(label, truth)
            context = " ".join(words[:CONTEXT_WORDS])
            f.write(json.dumps({"context": context, "choices": choices, "label": label}) + "\n")
    print(f"wrote {len(chosen)} items to {out}")


if __name__ == "__main__":
    main()
