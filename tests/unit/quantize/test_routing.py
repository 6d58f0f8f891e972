"""The routing summary of a calibrated MoE (counts as the hooks leave them)."""

import torch

from pipeline.quantize.routing import Routing, describe


def _routing(*rows) -> Routing:
    return Routing(
        counts={f"model.layers.{i}.mlp.experts": torch.tensor(r) for i, r in enumerate(rows)}
    )


def test_a_dense_model_has_nothing_to_report():
    assert Routing().summary() is None and describe(None) is None


def test_every_expert_reached():
    summary = _routing([5, 3, 2, 10], [1, 9, 5, 5]).summary()
    assert summary == {
        "moe_layers": 2,
        "experts": 4,
        "tokens_routed": 40,
        "min_share": 0.05,
        "unrouted": {},
    }
    assert "reached all 4 experts of each of 2 MoE layers" in describe(summary)
    assert "5.0%" in describe(summary)


def test_experts_without_a_routed_token_are_named():
    summary = _routing([5, 0, 2, 0], [1, 9, 5, 5], [0, 4, 4, 4]).summary()
    assert summary["unrouted"] == {
        "model.layers.0.mlp.experts": [1, 3],
        "model.layers.2.mlp.experts": [0],
    }
    line = describe(summary)
    assert line.startswith("WARNING 3 experts in 2 MoE layers got no routed calibration token")
    assert "model.layers.0.mlp.experts: 1, 3" in line
