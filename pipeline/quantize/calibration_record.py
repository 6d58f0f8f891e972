"""What an artifact was calibrated on, as its manifest and model card say it: the source (name
or path, configuration, split, column, chat template), the samples taken of the samples asked,
their length, the seed, and the sha256 of the exact token ids oneshot was given — the JSON
list of lists, `json.dumps(ids, separators=(",", ":"))` — so two artifacts can be told
calibrated alike or not without their data."""

import hashlib
import json

from pipeline.quantize import oneshot


def record(job) -> dict | None:
    """None for a run that calibrates nothing (data-free, model-free)."""
    if job.texts is None:
        return None
    from transformers import AutoTokenizer

    cal, found = job.calibration, job.texts.description
    tokenizer = AutoTokenizer.from_pretrained(job.model_path)
    ids = oneshot.calibration_ids(job.texts.texts, cal, tokenizer)[: found["samples"]]
    return {
        "dataset": cal.dataset,
        "config_name": cal.config_name,
        "split": cal.split,
        "column": found["column"],
        "chat_template": cal.chat_template,
        "samples": len(ids),
        "requested_samples": cal.num_samples,
        "max_seq_length": cal.max_seq_length,
        "packed": bool(cal.pack),
        "seed": cal.seed,
        "tokens": sum(len(x) for x in ids),
        "token_ids_sha256": token_ids_sha256(ids),
    }


def token_ids_sha256(ids: list[list[int]]) -> str:
    return hashlib.sha256(json.dumps(ids, separators=(",", ":")).encode()).hexdigest()


def shortfall(description: dict, source: str) -> str | None:
    """The line said when the source holds fewer samples than asked (not silently shortened)."""
    asked, got = description["requested_samples"], description["samples"]
    if got >= asked:
        return None
    return f"calibration {source}: {got} samples of the {asked} asked (all it holds" + (
        " at this sequence length, packed)" if description.get("packed") else ")"
    )
