"""The drift noise floor: the original's second pass at FLOOR_BATCH against its own reference,
cached by the reference's key; and how a figure reads against it."""

import torch

from pipeline.eval import drift, floor


class _Backend:
    """Log-probs that depend on the batch size by a known nudge, as other matrix shapes do
    (the reference's batch of 4 nudged, the floor's other batch not)."""

    def __init__(self, logits: torch.Tensor, nudge: float):
        self.logits, self.nudge, self.batches = logits, nudge, []

    def logprobs(self, model, windows, batch_size=4):
        self.batches.append(batch_size)
        for i in range(len(windows)):
            shift = torch.zeros_like(self.logits[i])
            shift[:, 0] = self.nudge if batch_size == 4 else 0.0
            yield torch.log_softmax(self.logits[i] + shift, dim=-1)


def _reference(backend, windows):
    parts = [
        drift.compact(lp, windows[i, 1:], 1.0, 64)
        for i, lp in enumerate(backend.logprobs(None, windows))
    ]
    return drift.concat(parts)


def test_the_floor_is_the_originals_own_drift_at_another_batch_and_is_cached(tmp_path):
    torch.manual_seed(0)
    windows = torch.randint(0, 16, (3, 9))
    backend = _Backend(torch.randn(3, 8, 16), nudge=0.0)
    ref = _reference(backend, windows)
    got = floor.compute(backend, None, windows, ref, "key1", tmp_path)
    assert backend.batches[-1] == floor.FLOOR_BATCH == 2
    assert got["tokens"] == 24 and got["kl_mean"] < 1e-7 and got["same_top_pct"] == 100
    assert floor.load(tmp_path, "key1") == got and floor.load(tmp_path, "key2") is None

    shifted = _Backend(backend.logits, nudge=0.5)  # the reference's batch moved token 0's logit
    moved = floor.compute(shifted, None, windows, _reference(shifted, windows), "k", tmp_path)
    assert moved["kl_mean"] > 1e-3


def test_a_figure_reads_against_its_floor():
    assert floor.times(1.1e-4, 2.75e-6) == "40× the floor"
    assert floor.times(1e-4, 0.0) == "floor 0 (the re-run is bit-identical)"
    assert floor.times(1.09e-4, 5.92e-10) == "184,122× the floor"
