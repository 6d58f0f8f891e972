"""The vLLM eval backend's arrays: what vllm_scripts/prompt_logprobs.py writes from vLLM's
[positions, TOP + 1] prompt log-probs (column 0 the actual token) and how the backend reads it
back as [positions, vocab] log-probs. No vLLM: the script's writer is plain numpy."""

import importlib.util

import numpy as np
import torch

from pipeline.engines.vllm import eval_backend as backend
from pipeline.engines.vllm.serving_env import VLLM_SCRIPTS

VOCAB = 6


def _script():
    path = VLLM_SCRIPTS / "prompt_logprobs.py"
    spec = importlib.util.spec_from_file_location("prompt_logprobs", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _vllm_rows(logp: np.ndarray, actual: np.ndarray, top: int):
    """What vLLM returns per position: the actual token, then the top tokens by log-prob."""
    order = np.argsort(-logp, axis=-1)[:, :top]
    ids = np.concatenate([actual[:, None], order], axis=1)
    return ids, np.take_along_axis(logp, ids, axis=-1)


def _logp(rows: int, seed: int) -> np.ndarray:
    x = np.random.default_rng(seed).normal(size=(rows, VOCAB))
    return (x - np.log(np.exp(x).sum(-1, keepdims=True))).astype(np.float32)


def _read(tmp_path, logps, actuals, top) -> list[torch.Tensor]:
    arrays = [
        _vllm_rows(lp, a, VOCAB if top == -1 else top) for lp, a in zip(logps, actuals, strict=True)
    ]
    path = tmp_path / "batch-00000.npz"
    _script()._write(arrays, top, str(path))
    return list(backend._windows(dict(np.load(path)), VOCAB))


def test_a_whole_vocabulary_comes_back_exactly(tmp_path):
    logps = [_logp(4, seed) for seed in (0, 1)]
    actuals = [np.array([1, 5, 0, 2]), np.array([3, 3, 4, 0])]
    got = _read(tmp_path, logps, actuals, top=-1)
    assert len(got) == 2
    for g, lp in zip(got, logps, strict=True):
        assert torch.equal(g, torch.from_numpy(lp))


def test_a_top_k_keeps_its_tokens_and_spreads_the_rest_of_the_mass(tmp_path):
    lp = _logp(3, 2)
    actual = np.array([0, 1, 2])
    (got,) = _read(tmp_path, [lp], [actual], top=2)
    for pos in range(3):
        kept = set(np.argsort(-lp[pos])[:2]) | {actual[pos]}
        for tok in kept:
            assert got[pos, tok].item() == lp[pos, tok]
        rest = [t for t in range(VOCAB) if t not in kept]
        fill = np.log((1 - np.exp(lp[pos, sorted(kept)]).sum()) / len(rest))
        assert np.allclose(got[pos, rest].numpy(), fill, atol=1e-6)
        assert abs(got[pos].double().exp().sum().item() - 1) < 1e-5
