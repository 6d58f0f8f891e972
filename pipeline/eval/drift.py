"""Quality drift of a quantized model against the original, token by token (after llama.cpp's
`--kl-divergence` summary), from a compact reference instead of the original's full logits.

Reference per scored token: the original's most likely tokens, as many as it takes to hold
`mass` of the probability (at least 1, at most `max_k`), their log-probs, the log of the mass
outside them (tail), and the log-prob of the actual next token. Rows are ragged: `counts` says
how many (id, log-prob) entries each token has in the flat `ids` / `logp` columns.

    KL(P‖Q) ≈ Σ_kept p_i (log p_i − log q_i) + p_tail (log p_tail − log q_tail),
    q_tail = 1 − Σ_kept q_i

The tail merges the rest of the vocabulary into one outcome, so the estimate is a lower bound
of the full-vocabulary KL (log-sum inequality), short by p_tail · KL(P_tail‖Q_tail), with
p_tail ≤ 1 − mass. Choosing by mass instead of a fixed k keeps that error small whatever the
model's entropy (a sharp model keeps a few tokens per position, a flat one many); on tiny-llama
mass 0.99 misses 0.5-0.6% of the KL.
benchmarks/reference_mass_error.py measures the gap. Standard errors treat tokens as
independent, as llama.cpp does.
"""

import math

import torch

PERCENTILES = (50, 90, 99, 99.9)


def compact(
    logp: torch.Tensor, targets: torch.Tensor, mass: float, max_k: int
) -> dict[str, torch.Tensor]:
    """[n, vocab] log-probs → the reference's compact columns for those n positions."""
    logp = logp.float()
    k = min(max_k, logp.shape[-1])
    top_logp, top_ids = logp.topk(k, dim=-1)  # sorted, most likely first
    cum = top_logp.double().exp().cumsum(-1)
    # keep entry j while the mass before it is still short of `mass`
    keep = (cum - top_logp.double().exp()) < mass
    counts = keep.sum(-1)
    kept_mass = torch.where(keep, top_logp.double().exp(), 0.0).sum(-1).clamp(max=1.0)
    id_dtype = torch.int16 if logp.shape[-1] <= torch.iinfo(torch.int16).max else torch.int32
    return {
        "counts": counts.to(torch.int32),
        "ids": top_ids[keep].to(id_dtype),
        "logp": top_logp[keep],  # float32: fp16 rounding alone would add KL ~1e-5
        "tail_logp": torch.log1p(-kept_mass).float(),  # -inf when the kept tokens hold all
        "target_logp": logp.gather(-1, targets[:, None]).squeeze(-1),
    }


RAGGED = ("ids", "logp")


def rows(ref: dict[str, torch.Tensor], start: int, stop: int) -> dict[str, torch.Tensor]:
    """Tokens start…stop−1 of a reference (its ragged columns sliced to match)."""
    offsets = _offsets(ref["counts"])
    lo, hi = int(offsets[start]), int(offsets[stop])
    return {k: v[lo:hi] if k in RAGGED else v[start:stop] for k, v in ref.items()}


def _offsets(counts: torch.Tensor) -> torch.Tensor:
    return torch.cat([torch.zeros(1, dtype=torch.long), counts.long().cumsum(0)])


def per_token(ref: dict[str, torch.Tensor], logq: torch.Tensor, targets: torch.Tensor) -> dict:
    """Per-token KL, same-top and top-5 flags, and target log-probs of both models. Only the
    entries read are widened to float64: a whole window of them would be 0.5 GB at a 128k
    vocabulary."""
    n = logq.shape[0]
    counts = ref["counts"].long()
    row = torch.repeat_interleave(torch.arange(n), counts)
    ids = ref["ids"].long()
    logp = ref["logp"].double()
    q_kept = logq[row, ids].double()
    kl = torch.zeros(n, dtype=torch.float64).index_add_(0, row, logp.exp() * (logp - q_kept))
    q_mass = torch.zeros(n, dtype=torch.float64).index_add_(0, row, q_kept.exp())
    tail_logp = ref["tail_logp"].double()
    q_tail = (1 - q_mass).clamp(min=1e-12).log()
    has_tail = torch.isfinite(tail_logp)
    kl = kl + torch.where(has_tail, tail_logp.exp() * (tail_logp - q_tail), 0.0)
    top1 = ids[_offsets(counts)[:-1]]
    return {
        "kl": kl.clamp(min=0.0),
        "same_top": logq.argmax(-1) == top1,
        "top5": (logq.topk(5, dim=-1).indices == top1[:, None]).any(-1),
        "logp_target": ref["target_logp"].double(),
        "logq_target": logq.gather(-1, targets[:, None]).squeeze(-1).double(),
    }


def coverage(ref: dict[str, torch.Tensor]) -> dict:
    """How much of the original's distribution the reference holds, per token."""
    counts = ref["counts"].double()
    kept = 1 - ref["tail_logp"].double().exp()
    return {
        "tokens_kept_mean": counts.mean().item(),
        "tokens_kept_max": int(counts.max().item()),
        "mass_kept_mean": kept.mean().item(),
        "mass_kept_min": kept.min().item(),
    }


def summarize(tokens: dict[str, torch.Tensor]) -> dict:
    kl = tokens["kl"].double()
    same = tokens["same_top"].double()
    nll_p = -tokens["logp_target"].double()
    nll_q = -tokens["logq_target"].double()
    n = kl.numel()
    ppl_p, ppl_q = math.exp(nll_p.mean()), math.exp(nll_q.mean())
    dp = nll_q.neg().exp() - nll_p.neg().exp()
    same_pct = 100 * same.mean().item()
    top5_pct = 100 * tokens["top5"].double().mean().item()
    quantiles = torch.quantile(kl.float(), torch.tensor([p / 100 for p in PERCENTILES])).tolist()
    return {
        "tokens": n,
        "ppl_original": ppl_p,
        "ppl_original_se": ppl_p * _se(nll_p),
        "ppl_quantized": ppl_q,
        "ppl_quantized_se": ppl_q * _se(nll_q),
        "ppl_ratio": ppl_q / ppl_p,
        "ppl_diff": ppl_q - ppl_p,
        # ln(ratio) = mean(nll_q − nll_p): its SE uses the paired differences
        "ppl_ratio_se": (ppl_q / ppl_p) * _se(nll_q - nll_p),
        "kl_mean": kl.mean().item(),
        "kl_mean_se": _se(kl),
        **dict(
            zip((f"kl_p{str(p).replace('.', '_')}" for p in PERCENTILES), quantiles, strict=True)
        ),
        "kl_max": kl.max().item(),
        "same_top_pct": same_pct,
        "same_top_pct_se": _binomial_se(same_pct, n),
        "top5_pct": top5_pct,  # the original's top-1 among the quantized model's 5 likeliest
        "top5_pct_se": _binomial_se(top5_pct, n),
        "rms_dp_pct": 100 * dp.pow(2).mean().sqrt().item(),
    }


def _binomial_se(pct: float, n: int) -> float:
    return 100 * math.sqrt(max(pct / 100 * (1 - pct / 100), 0) / n)


def _se(x: torch.Tensor) -> float:
    return (x.std(unbiased=True) / math.sqrt(x.numel())).item() if x.numel() > 1 else 0.0


def concat(parts: list[dict[str, torch.Tensor]]) -> dict[str, torch.Tensor]:
    return {key: torch.cat([p[key] for p in parts]) for key in parts[0]}


def references(backend, model, windows: torch.Tensor, mass: float, max_k: int) -> list[dict]:
    """The compact reference of each window, in memory (the eval stage caches its own)."""
    targets = windows[:, 1:]
    return [
        compact(logp, targets[i], mass, max_k)
        for i, logp in enumerate(backend.logprobs(model, windows))
    ]


def kl_tokens(backend, model, refs: list[dict], windows: torch.Tensor) -> torch.Tensor:
    """Per-token KL of `model` against those references, every window's tokens in order."""
    targets = windows[:, 1:]
    return torch.cat(
        [
            per_token(refs[i], logq, targets[i])["kl"]
            for i, logq in enumerate(backend.logprobs(model, windows))
        ]
    )
