"""Log-probabilities from vLLM: the kernels that will actually serve the artifact.

vLLM lives in the serving env (.venv-serve), so this runs pipeline/vllm_scripts/
prompt_logprobs.py there as a subprocess, once per model, over all windows.
With a vocabulary up to FULL_VOCAB_LIMIT it asks for every token's log-prob (exact); above
that for the top TOP_LOGPROBS, and the unseen tokens share the remaining mass evenly.
"""

import os
import subprocess
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from pipeline.errors import UserError

NAME = "vllm"
REPO = Path(__file__).resolve().parents[2]
SERVE_PYTHON = Path(os.environ.get("SERVE_PYTHON", REPO / ".venv-serve" / "bin" / "python"))
SCRIPT = REPO / "pipeline" / "vllm_scripts" / "prompt_logprobs.py"
FULL_VOCAB_LIMIT = 32768
TOP_LOGPROBS = 256


def available() -> bool:
    return SERVE_PYTHON.exists()


def capabilities() -> dict:
    """What this host's vLLM build runs (cached per serving env; the probe imports vLLM)."""
    import json

    from pipeline.fsutil import cache_root, sha256_text, write_json_atomic

    path = cache_root() / f"vllm-capabilities-{sha256_text(str(SERVE_PYTHON.resolve()))[:12]}.json"
    if path.is_file():
        return json.loads(path.read_text())
    probe = REPO / "pipeline" / "vllm_scripts" / "capabilities.py"
    out = subprocess.run([str(SERVE_PYTHON), str(probe)], capture_output=True, text=True)
    lines = [line for line in out.stdout.splitlines() if line.startswith("{")]
    if not lines:
        raise RuntimeError(f"vLLM capability probe failed: {out.stderr.strip()[-500:]}")
    caps = json.loads(lines[-1])
    write_json_atomic(path, caps)
    return caps


@dataclass
class Handle:
    model_dir: Path
    vocab_size: int


def load(model_dir: Path) -> Handle:
    import json

    if not available():
        raise UserError(f"eval backend vllm needs the serving env ({SERVE_PYTHON}): make setup")
    config = json.loads((Path(model_dir) / "config.json").read_text())
    return Handle(Path(model_dir), int(config["vocab_size"]))


def logprobs(handle: Handle, windows: torch.Tensor) -> Iterator[torch.Tensor]:
    top = -1 if handle.vocab_size <= FULL_VOCAB_LIMIT else TOP_LOGPROBS
    with tempfile.TemporaryDirectory() as tmp:
        np.save(f"{tmp}/windows.npy", windows.numpy())
        cmd = [
            str(SERVE_PYTHON),
            str(SCRIPT),
            str(handle.model_dir),
            f"{tmp}/windows.npy",
            f"{tmp}/out.npz",
            str(top),
        ]
        env = {
            **os.environ,
            "VLLM_CPU_KVCACHE_SPACE": os.environ.get("VLLM_CPU_KVCACHE_SPACE", "1"),
        }
        proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
        if not Path(f"{tmp}/out.npz").is_file():  # exit code alone is unreliable (see FACTS)
            tail = "\n".join(proc.stderr.strip().splitlines()[-15:])
            raise RuntimeError(f"vLLM prompt_logprobs failed (exit {proc.returncode}):\n{tail}")
        out = dict(np.load(f"{tmp}/out.npz"))
    ids = torch.from_numpy(out["ids"]).long()
    values = torch.from_numpy(out["logprobs"]).float()
    for starts, ends in zip(out["start"], out["end"], strict=True):
        rows = []
        for s, e in zip(starts.tolist(), ends.tolist(), strict=True):
            rows.append(_dense(ids[s:e], values[s:e], handle.vocab_size))
        yield torch.stack(rows)


def _dense(ids: torch.Tensor, values: torch.Tensor, vocab: int) -> torch.Tensor:
    seen = torch.zeros(vocab, dtype=torch.bool)
    seen[ids] = True
    unseen = vocab - int(seen.sum())
    rest = (1 - values.double().exp().sum()).clamp(min=1e-12)
    fill = float((rest / max(unseen, 1)).log()) if unseen else float("-inf")
    row = torch.full((vocab,), fill, dtype=torch.float32)
    row[ids] = values
    return row


def describe(handle: Handle) -> dict:
    return {"backend": NAME, "dtype": "bfloat16"}
