"""The drift arithmetic on distributions whose answers are known."""

import math

import pytest
import torch

from pipeline.eval import drift


def _logp(n=64, vocab=512, seed=0, temperature=2.0):
    g = torch.Generator().manual_seed(seed)
    return torch.log_softmax(torch.randn(n, vocab, generator=g) * temperature, dim=-1)


def _full_kl(p, q):
    return (p.exp() * (p - q)).sum(-1)


def test_a_model_against_itself_has_zero_kl_and_full_agreement():
    p = _logp()
    targets = p.argmax(-1)
    tokens = drift.per_token(drift.compact(p, targets, mass=0.99, max_k=16), p, targets)
    s = drift.summarize(tokens)
    assert s["kl_mean"] < 1e-6 and s["kl_max"] < 1e-5
    assert s["same_top_pct"] == s["top5_pct"] == 100.0 and s["ppl_ratio"] == pytest.approx(1.0)
    assert s["rms_dp_pct"] < 1e-6


def test_full_vocabulary_reference_gives_the_exact_kl():
    p, q = _logp(seed=0), _logp(seed=1)
    targets = torch.zeros(len(p), dtype=torch.long)
    tokens = drift.per_token(drift.compact(p, targets, mass=1.0, max_k=p.shape[1]), q, targets)
    assert torch.allclose(tokens["kl"], _full_kl(p.double(), q.double()), atol=1e-6)


def test_mass_reference_is_a_lower_bound_whose_gap_shrinks_with_the_mass_kept():
    p = _logp(temperature=1.0)  # flat, like tiny-llama: hundreds of tokens per position
    q = torch.log_softmax(
        p + 0.3 * torch.randn(p.shape, generator=torch.Generator().manual_seed(5)), -1
    )
    exact = _full_kl(p.double(), q.double())
    targets = torch.zeros(len(p), dtype=torch.long)
    errors = []
    for mass in (0.5, 0.9, 0.99, 0.999):
        ref = drift.compact(p, targets, mass=mass, max_k=p.shape[1])
        kept = 1 - ref["tail_logp"].double().exp()
        assert (kept >= mass - 1e-6).all() and len(ref["ids"]) == int(ref["counts"].sum())
        approx = drift.per_token(ref, q, targets)["kl"]
        assert (approx <= exact + 1e-9).all()
        # the gap is exactly p_tail · KL(P_tail‖Q_tail), the tail's own divergence
        assert torch.allclose(exact - approx, _tail_kl(p, q, ref), atol=1e-6)  # float32 rounding
        errors.append(((exact - approx).sum() / exact.sum()).item())
    assert errors == sorted(errors, reverse=True) and errors[-1] >= 0


def _tail_kl(p, q, ref):
    p, q = p.double(), q.double()
    tail = torch.ones_like(p, dtype=torch.bool)
    row = torch.repeat_interleave(torch.arange(len(p)), ref["counts"].long())
    tail[row, ref["ids"].long()] = False
    p_tail = torch.where(tail, p.exp(), 0.0).sum(-1)
    q_tail = torch.where(tail, q.exp(), 0.0).sum(-1)
    inner = torch.where(tail, p.exp() * (p - q), 0.0).sum(-1)
    return inner - p_tail * (p_tail.log() - q_tail.log())


def test_rows_slice_the_ragged_columns_with_their_tokens():
    p = _logp(n=10, temperature=1.5)
    targets = torch.arange(10)
    ref = drift.compact(p, targets, mass=0.9, max_k=64)
    assert ref["ids"].dtype == torch.int16
    joined = drift.concat([drift.rows(ref, 0, 3), drift.rows(ref, 3, 10)])
    assert all(torch.equal(joined[k], ref[k]) for k in ref)
    part = drift.rows(ref, 3, 10)
    assert drift.per_token(part, p[3:10], targets[3:10])["kl"].abs().max() < 1e-7


def test_summary_statistics():
    p, q = _logp(n=400, seed=2), _logp(n=400, seed=3)
    targets = p.argmax(-1)
    tokens = drift.per_token(drift.compact(p, targets, mass=1.0, max_k=512), q, targets)
    s = drift.summarize(tokens)
    kl = _full_kl(p.double(), q.double())
    assert s["kl_mean"] == pytest.approx(kl.mean().item(), rel=1e-6)
    assert s["kl_mean_se"] == pytest.approx(kl.std().item() / 20, rel=1e-6)
    assert s["kl_p50"] <= s["kl_p90"] <= s["kl_p99"] <= s["kl_p99_9"] <= s["kl_max"]
    same = (q.argmax(-1) == p.argmax(-1)).double().mean().item()
    assert s["same_top_pct"] == pytest.approx(100 * same)
    assert s["same_top_pct_se"] == pytest.approx(100 * math.sqrt(same * (1 - same) / 400))
    # top-5 agreement: the original's top token among the quantized model's five likeliest
    rank = (q > q.gather(-1, p.argmax(-1)[:, None])).sum(-1)  # tokens q prefers to it
    top5 = (rank < 5).double().mean().item()
    assert same < top5 < 1 and s["top5_pct"] == pytest.approx(100 * top5)
    assert s["top5_pct_se"] == pytest.approx(100 * math.sqrt(top5 * (1 - top5) / 400))
    nll_p = -p.gather(-1, targets[:, None]).double().mean().item()
    assert s["ppl_original"] == pytest.approx(math.exp(nll_p), rel=1e-6)
