"""Which format each group gets: the least summed KL within an average-bits budget (a 0/1
knapsack over discretised bits, exact up to that rounding), and the random control."""

import random

import numpy as np

_UNITS = 4000  # the budget in this many steps; a group's bits round up (never over budget)


def cheapest(costs: list[list[float]], bits: list[list[float]], budget: float) -> list[int]:
    """Per group, the index of its chosen candidate: min Σ costs subject to Σ bits ≤ budget.
    costs[g][c], bits[g][c] for group g and candidate c. Raises ValueError when even the fewest
    bits exceed the budget."""
    unit = budget / _UNITS
    inf = float("inf")
    best = np.full(_UNITS + 1, inf)
    best[0] = 0.0
    choices = []
    for cost, size in zip(costs, bits, strict=True):
        nxt = np.full(_UNITS + 1, inf)
        pick = np.full(_UNITS + 1, -1, dtype=np.int16)
        for c, (kl, b) in enumerate(zip(cost, size, strict=True)):
            w = int(np.ceil(b / unit - 1e-9))
            if w > _UNITS:
                continue
            shifted = np.full(_UNITS + 1, inf)
            shifted[w:] = best[: _UNITS + 1 - w] + kl
            better = shifted < nxt
            nxt[better], pick[better] = shifted[better], c
        best = nxt
        choices.append(pick)
    if not np.isfinite(best).any():
        raise ValueError("no assignment fits the budget")
    at = int(np.argmin(best))
    chosen = []
    for g in range(len(costs) - 1, -1, -1):
        c = int(choices[g][at])
        chosen.append(c)
        at -= int(np.ceil(bits[g][c] / unit - 1e-9))
    return chosen[::-1]


def random_fill(bits: list[list[float]], budget: float, seed: int) -> list[int]:
    """The control: groups in a random order, each raised to a random wider candidate while the
    budget allows (candidates are ordered fewest bits first; everyone starts at the fewest)."""
    rng = random.Random(seed)
    chosen = [0] * len(bits)
    spent = sum(b[0] for b in bits)
    for g in rng.sample(range(len(bits)), len(bits)):
        for c in rng.sample(range(1, len(bits[g])), len(bits[g]) - 1):
            extra = bits[g][c] - bits[g][0]
            if spent + extra <= budget:
                chosen[g], spent = c, spent + extra
                break
    return chosen
