"""The card says where vLLM 0.32 loads the artifact: the quantize stage's `layouts` record
(planning/deployment.py: layouts), as a table in its Deploy section."""

from pipeline.config import recipe
from pipeline.core.rundir import StageEntry
from pipeline.models import aliases
from pipeline.planning import deployment, geometry
from pipeline.publish import card
from pipeline.publish.results import UsedResult

RECORDED = [
    {"tp": 1, "expert_parallel": False, "loads": True, "why": None},
    {"tp": 8, "expert_parallel": False, "loads": False,
     "why": "TP 8 slices the 768-wide experts (mlp.experts) into 96: fp8-block's 128-wide "
            "blocks straddle them"},
    {"tp": 8, "expert_parallel": True, "loads": True, "why": None},
]  # fmt: skip


def _card(layouts: list[dict] | None) -> card.CardInputs:
    metrics = {"layouts": layouts} if layouts is not None else {}
    entry = StageEntry(status="done", started="2026-12-03T00:00:00Z", fingerprint="f",
                       inputs={}, metrics=metrics)  # fmt: skip
    return card.CardInputs(
        repo_id="org/model-fp8-block", model={"name": "m"}, recipe={"name": "fp8-block"},
        quantize=entry, eval=None, serve=None, serve_environment=None, used=UsedResult(),
        pipeline={},
    )  # fmt: skip


def test_the_table_marks_each_layout_and_says_why_one_is_refused():
    table = card.loads_at(RECORDED)
    lines = table.splitlines()
    assert lines[0].startswith("Loads in vLLM 0.32 at")
    assert "| 1 | ✓ |" in lines
    assert "| 8 | ✗ TP 8 slices the 768-wide experts (mlp.experts) into 96: fp8-block's " \
           "128-wide blocks straddle them |" in lines  # fmt: skip
    assert "| 8 with `--enable-expert-parallel` | ✓ |" in lines


def test_the_deploy_section_carries_the_table_and_an_old_record_has_none():
    assert "| 8 with `--enable-expert-parallel` | ✓ |" in card._deploy(_card(RECORDED))
    old = card._deploy(_card(None))
    assert "Loads in vLLM" not in old and old.startswith("## Deploy")


def test_the_tiny_fp8_block_artifacts_record_renders_its_refusals():
    """What the quantize stage records for tiny-llama × fp8-block (4 heads, 2 KV heads): TP 1
    loads; TP 2 and 4 split the 128-wide blocks; TP 8 the heads refuse. No experts: no EP rows."""
    config = aliases.load_config(aliases.resolve("tiny-llama"))
    recorded = deployment.layouts(geometry.of(config), recipe.load("fp8-block"))
    assert [(r["tp"], r["loads"]) for r in recorded] == [(1, True), (2, False), (4, False),
                                                         (8, False)]  # fmt: skip
    table = card.loads_at(recorded)
    assert "| 1 | ✓ |" in table.splitlines()
    assert "✗ TP 2 slices self_attn.qkv_proj" in table and "heads do not divide by 8" in table
    assert "expert-parallel" not in table


def test_a_moe_artifacts_record_has_expert_parallel_rows_that_load():
    config = aliases.load_config(aliases.resolve("qwen3-30b-a3b"))
    recorded = deployment.layouts(geometry.of(config), recipe.load("gptq"))
    by = {(r["tp"], r["expert_parallel"]): r for r in recorded}
    assert by[(2, False)]["loads"] and not by[(4, False)]["loads"]
    assert by[(8, True)]["loads"] and "into 96" in by[(8, False)]["why"]
    assert "expert parallel" not in by[(8, False)]["why"]  # the EP row says it
