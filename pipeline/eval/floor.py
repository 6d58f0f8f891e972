"""The measurement's own noise floor: the original model scored a second time on the held-out
windows at FLOOR_BATCH windows per batch (the reference's: 4), and compared with its own cached
reference exactly as the quantized model is. Nothing is quantized, so whatever drift it shows —
other matrix shapes, other summation order, other kernels' tiles — is what the eval cannot tell from
zero. Cached by its inputs like the reference (the reference's key and the batch), as a summary.
Read every drift figure against it: "mean KL 1.1e-4: 40× the floor".
"""

import json
from pathlib import Path

from pipeline.core.files import sha256_json, write_json_atomic

# Deferred imports: drift imports torch: torch loads only when there is scoring to do (a cached eval
# answers in under a second)

FLOOR_BATCH = 2  # windows per batch for the second pass: other matrix shapes, no more memory
FIELDS = ("kl_mean", "kl_mean_se", "kl_p99", "same_top_pct", "ppl_ratio", "rms_dp_pct")


def name(reference_key: str) -> str:
    return f"floor-{sha256_json([reference_key, FLOOR_BATCH])[:16]}"


def stored(folder: Path, reference_key: str) -> Path:
    return folder / f"{name(reference_key)}.json"


def load(folder: Path, reference_key: str) -> dict | None:
    path = stored(folder, reference_key)
    return json.loads(path.read_text()) if path.is_file() else None


def compute(backend, model, windows, ref: dict, reference_key: str, folder: Path) -> dict:
    """The original's drift against its own reference at FLOOR_BATCH; saved beside it."""
    from pipeline.core import progress
    from pipeline.eval import drift

    parts, offset = [], 0
    # a pass as long as the reference's held-out one: never silent (SmolLM2: minutes on 2 cores)
    bar = progress.bar(total=len(windows), desc=f"noise floor (original, batch {FLOOR_BATCH})",
                       unit="window")  # fmt: skip
    try:
        for i, logp in enumerate(backend.logprobs(model, windows, batch_size=FLOOR_BATCH)):
            n = logp.shape[0]
            parts.append(drift.per_token(drift.rows(ref, offset, offset + n), logp,
                                         windows[i, 1:]))  # fmt: skip
            offset += n
            bar.update()
    finally:
        bar.close()
    summary = drift.summarize(drift.concat(parts))
    floor = {k: summary[k] for k in FIELDS} | {"batch_size": FLOOR_BATCH, "tokens": offset}
    write_json_atomic(stored(folder, reference_key), floor)
    return floor


def times(value: float, floor: float) -> str:
    """How a drift figure reads against the floor's: "40× the floor"."""
    if floor <= 0:
        return "floor 0 (the re-run is bit-identical)" if value > 0 else "as the floor (0)"
    ratio = value / floor
    return f"{ratio:,.0f}× the floor" if ratio >= 1000 else f"{ratio:.3g}× the floor"
