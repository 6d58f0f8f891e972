"""Quality drift of a quantized model against the original, token by token (after llama.cpp's
`--kl-divergence` summary), from a compact reference instead of the original's full logits.

Reference per scored token: the original's top-k token ids and log-probs, the log of the
probability mass outside them (tail), and the log-prob of the actual next token.

    KL(P‖Q) ≈ Σ_top p_i (log p_i − log q_i) + p_tail (log p_tail − log q_tail),
    q_tail = 1 − Σ_top q_i

The tail merges the rest of the vocabulary into one outcome, so the estimate is a lower bound
of the full-vocabulary KL (log-sum inequality); benchmarks/reference_topk_error.py measures
the gap. Standard errors treat tokens as independent, as llama.cpp does.
"""

import math

import torch

PERCENTILES = (50, 90, 99, 99.9)


def compact(logp: torch.Tensor, targets: torch.Tensor, k: int) -> dict[str, torch.Tensor]:
    """[n, vocab] log-probs → the reference's compact columns for those n positions."""
    logp = logp.float()
    top_logp, top_ids = logp.topk(k, dim=-1)
    top_mass = top_logp.double().exp().sum(-1).clamp(max=1.0)
    return {
        "top_ids": top_ids.to(torch.int32),
        "top_logp": top_logp,  # float32: fp16 rounding alone would add KL ~1e-4
        "tail_logp": torch.log1p(-top_mass).float(),  # -inf when the top-k hold everything
        "target_logp": logp.gather(-1, targets[:, None]).squeeze(-1),
    }


def per_token(ref: dict[str, torch.Tensor], logq: torch.Tensor, targets: torch.Tensor) -> dict:
    """Per-token KL, same-top flag, and target log-probs of both models."""
    logq = logq.double()
    top_logp = ref["top_logp"].double()
    q_top = logq.gather(-1, ref["top_ids"].long())
    kl = (top_logp.exp() * (top_logp - q_top)).sum(-1)
    tail_logp = ref["tail_logp"].double()
    q_tail = (1 - q_top.exp().sum(-1)).clamp(min=1e-12).log()
    has_tail = torch.isfinite(tail_logp)
    kl = kl + torch.where(has_tail, tail_logp.exp() * (tail_logp - q_tail), 0.0)
    return {
        "kl": kl.clamp(min=0.0),
        "same_top": logq.argmax(-1) == ref["top_ids"][:, 0].long(),
        "logp_target": ref["target_logp"].double(),
        "logq_target": logq.gather(-1, targets[:, None]).squeeze(-1),
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
        "same_top_pct_se": 100 * math.sqrt(max(same_pct / 100 * (1 - same_pct / 100), 0) / n),
        "rms_dp_pct": 100 * dp.pow(2).mean().sqrt().item(),
    }


def _se(x: torch.Tensor) -> float:
    return (x.std(unbiased=True) / math.sqrt(x.numel())).item() if x.numel() > 1 else 0.0


def concat(parts: list[dict[str, torch.Tensor]]) -> dict[str, torch.Tensor]:
    return {key: torch.cat([p[key] for p in parts]) for key in parts[0]}
