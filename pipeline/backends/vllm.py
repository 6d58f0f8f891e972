"""Log-probabilities from vLLM: the kernels that will actually serve the artifact.

vLLM lives in the serving env (.venv-serve), so this runs pipeline/vllm_scripts/
prompt_logprobs.py there as a subprocess (its own process group, always stopped), once per
model over all windows, reading its results batch by batch as they appear.
With a vocabulary up to FULL_VOCAB_LIMIT it asks for every token's log-prob (exact); above
that for the top TOP_LOGPROBS (the reference's default reference_max_k), and the unseen tokens
share the remaining mass evenly.
"""

import math
import os
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from pipeline import procs
from pipeline.errors import UserError

NAME = "vllm"
REPO = Path(__file__).resolve().parents[2]
SERVE_PYTHON = Path(os.environ.get("SERVE_PYTHON", REPO / ".venv-serve" / "bin" / "python"))
SCRIPT = REPO / "pipeline" / "vllm_scripts" / "prompt_logprobs.py"
FULL_VOCAB_LIMIT = 32768
TOP_LOGPROBS = 4096
BATCH_WINDOWS = 4  # bounds the serving process's memory (see vllm_scripts/prompt_logprobs.py)


def available() -> bool:
    return SERVE_PYTHON.exists()


def version() -> str | None:
    """The serving env's vLLM version, from its package metadata (no import: vLLM is slow)."""
    prefix = SERVE_PYTHON.parent.parent
    for meta in sorted(prefix.glob("lib/python*/site-packages/vllm*.dist-info/METADATA")):
        for line in meta.read_text(errors="replace").splitlines():
            if line.startswith("Version:"):
                return f"{meta.parent.name.split('-')[0]} {line.split(':', 1)[1].strip()}"
    return None


def capabilities() -> dict:
    """What this host's vLLM build runs (cached per serving env; the probe imports vLLM)."""
    import json

    from pipeline.fsutil import cache_root, sha256_text, write_json_atomic

    probe = REPO / "pipeline" / "vllm_scripts" / "capabilities.py"
    key = sha256_text(str(SERVE_PYTHON.resolve()) + probe.read_text())[:12]  # new probe: re-run
    path = cache_root() / f"vllm-capabilities-{key}.json"
    if path.is_file():
        return json.loads(path.read_text())
    out = subprocess.run([str(SERVE_PYTHON), str(probe)], capture_output=True, text=True)
    lines = [line for line in out.stdout.splitlines() if line.startswith("{")]
    if not lines:
        raise RuntimeError(f"vLLM capability probe failed: {out.stderr.strip()[-500:]}")
    caps = json.loads(lines[-1])
    write_json_atomic(path, caps)
    return caps


def require_scheme(scheme, doing: str, hint: str = "") -> None:
    """UserError when this host's vLLM build has no kernel for the scheme (W4A16 on AVX2)."""
    if scheme and scheme.weight_bits == 4 and not capabilities()["w4a16"]:
        raise UserError(
            f"this host's vLLM cannot {doing} {scheme.name} (its AVX2 CPU kernels have no W4A16 "
            f"GEMM; needs AVX-512 or a GPU){hint}"
        )


def require_kv_cache(kv_cache_dtype: str, doing: str, hint: str = "") -> None:
    """UserError when this host's vLLM build cannot store the KV cache in that dtype."""
    if kv_cache_dtype.startswith("fp8") and not capabilities()["fp8_kv_cache"]:
        raise UserError(
            f"this host's vLLM cannot {doing} with kv_cache_dtype {kv_cache_dtype} (its CPU "
            f"attention keeps an FP8 KV cache only with AVX-512 or AMX; a GPU is fine){hint}"
        )


@dataclass
class Handle:
    model_dir: Path
    vocab_size: int
    kv_cache_dtype: str = "auto"


def load(model_dir: Path, kv_cache_dtype: str = "auto") -> Handle:
    import json

    if not available():
        raise UserError(f"eval backend vllm needs the serving env ({SERVE_PYTHON}): make setup")
    config = json.loads((Path(model_dir) / "config.json").read_text())
    return Handle(Path(model_dir), int(config["vocab_size"]), kv_cache_dtype)


def logprobs(handle: Handle, windows: torch.Tensor) -> Iterator[torch.Tensor]:
    """Per window, as vLLM finishes each batch: [context − 1, vocab] log-probs."""
    top = -1 if handle.vocab_size <= FULL_VOCAB_LIMIT else TOP_LOGPROBS
    batches = math.ceil(len(windows) / BATCH_WINDOWS)
    with tempfile.TemporaryDirectory() as tmp:
        np.save(f"{tmp}/windows.npy", windows.numpy())
        cmd = [
            str(SERVE_PYTHON),
            str(SCRIPT),
            str(handle.model_dir),
            f"{tmp}/windows.npy",
            tmp,
            str(top),
            str(BATCH_WINDOWS),
            handle.kv_cache_dtype,
        ]
        env = {
            **os.environ,
            "VLLM_CPU_KVCACHE_SPACE": os.environ.get("VLLM_CPU_KVCACHE_SPACE", "1"),
        }
        log = Path(tmp) / "vllm.log"
        with procs.group(cmd, log, env) as proc:
            for b in range(batches):
                path = Path(tmp) / f"batch-{b:05d}.npz"
                while not path.is_file():
                    if proc.poll() is not None and not path.is_file():
                        raise RuntimeError(
                            f"vLLM prompt_logprobs failed (exit {proc.returncode}):\n"
                            + procs.tail(log)
                        )
                    time.sleep(0.2)
                out = dict(np.load(path))
                path.unlink()
                yield from _windows(out, handle.vocab_size)


def _windows(out: dict, vocab: int) -> Iterator[torch.Tensor]:
    ids = torch.from_numpy(out["ids"]).long()
    values = torch.from_numpy(out["logprobs"]).float()
    for starts, ends in zip(out["start"], out["end"], strict=True):
        rows = []
        for s, e in zip(starts.tolist(), ends.tolist(), strict=True):
            rows.append(_dense(ids[s:e], values[s:e], vocab))
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
    return {"backend": NAME, "dtype": "bfloat16", "kv_cache": f"{handle.kv_cache_dtype} (vLLM)"}
