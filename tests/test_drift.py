"""The drift arithmetic on distributions whose answers are known."""

import math

import pytest
import torch

from pipeline import drift
from pipeline.recipe import EvalSettings, Gates
from pipeline.stages.eval import check_gates


def _logp(n=64, vocab=512, seed=0, temperature=2.0):
    g = torch.Generator().manual_seed(seed)
    return torch.log_softmax(torch.randn(n, vocab, generator=g) * temperature, dim=-1)


def _full_kl(p, q):
    return (p.exp() * (p - q)).sum(-1)


def test_a_model_against_itself_has_zero_kl_and_full_agreement():
    p = _logp()
    targets = p.argmax(-1)
    tokens = drift.per_token(drift.compact(p, targets, k=16), p, targets)
    s = drift.summarize(tokens)
    assert s["kl_mean"] < 1e-6 and s["kl_max"] < 1e-5
    assert s["same_top_pct"] == 100.0 and s["ppl_ratio"] == pytest.approx(1.0)
    assert s["rms_dp_pct"] < 1e-6


def test_full_vocabulary_reference_gives_the_exact_kl():
    p, q = _logp(seed=0), _logp(seed=1)
    targets = torch.zeros(len(p), dtype=torch.long)
    tokens = drift.per_token(drift.compact(p, targets, k=p.shape[1]), q, targets)
    assert torch.allclose(tokens["kl"], _full_kl(p.double(), q.double()), atol=1e-6)


def test_top_k_reference_is_a_lower_bound_that_tightens_with_k():
    p = _logp(temperature=3.0)
    q = torch.log_softmax(
        p + 0.3 * torch.randn(p.shape, generator=torch.Generator().manual_seed(5)), -1
    )
    exact = _full_kl(p.double(), q.double())
    targets = torch.zeros(len(p), dtype=torch.long)
    errors = []
    for k in (4, 16, 64):
        approx = drift.per_token(drift.compact(p, targets, k), q, targets)["kl"]
        assert (approx <= exact + 1e-9).all()
        errors.append(((exact - approx).sum() / exact.sum()).item())
    assert errors[0] > errors[1] > errors[2] >= 0


def test_summary_statistics():
    p, q = _logp(n=400, seed=2), _logp(n=400, seed=3)
    targets = p.argmax(-1)
    tokens = drift.per_token(drift.compact(p, targets, k=512), q, targets)
    s = drift.summarize(tokens)
    kl = _full_kl(p.double(), q.double())
    assert s["kl_mean"] == pytest.approx(kl.mean().item(), rel=1e-6)
    assert s["kl_mean_se"] == pytest.approx(kl.std().item() / 20, rel=1e-6)
    assert s["kl_p50"] <= s["kl_p90"] <= s["kl_p99"] <= s["kl_p99_9"] <= s["kl_max"]
    same = (q.argmax(-1) == p.argmax(-1)).double().mean().item()
    assert s["same_top_pct"] == pytest.approx(100 * same)
    assert s["same_top_pct_se"] == pytest.approx(100 * math.sqrt(same * (1 - same) / 400))
    nll_p = -p.gather(-1, targets[:, None]).double().mean().item()
    assert s["ppl_original"] == pytest.approx(math.exp(nll_p), rel=1e-6)


def test_gates_name_what_failed():
    heldout = {"ppl_ratio": 1.2, "kl_mean": 0.01, "same_top_pct": 90.0}
    gates = Gates(max_ppl_ratio=1.1, max_mean_kl=0.05, min_same_top_pct=95)
    result = check_gates(EvalSettings(gates=gates), heldout)
    assert not result["passed"]
    assert [c["gate"] for c in result["checks"] if not c["passed"]] == [
        "max_ppl_ratio",
        "min_same_top_pct",
    ]
    assert check_gates(EvalSettings(), heldout) == {"passed": True, "checks": []}
