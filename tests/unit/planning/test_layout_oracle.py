"""The layout rule (planning/layout.py) against vLLM 0.32 itself (vllm_scripts/layout_oracle.py):
every bundled config × every shipped recipe × TP 1, 2, 4, 8 (× expert parallel for MoE), one
verdict per quantized vLLM layer and per cell, and each layer's partition as vLLM computes it.
Runs the serving env once (~1-2 min: importing vLLM on 2 busy cores)."""

import json
import subprocess

import pytest

from pipeline.config import recipe
from pipeline.config.schemes import PRESETS
from pipeline.engines.vllm import serving_env
from pipeline.engines.vllm.serving_env import VLLM_SCRIPTS
from pipeline.models import aliases
from pipeline.planning import geometry, layout, parallel
from pipeline.planning.linears import Linear, Style

TPS = (1, 2, 4, 8)
SENT = ("id", "config", "tp", "expert_parallel", "layer")  # what the oracle reads of a case


def _cells() -> list[tuple[str, dict, recipe.RecipeFile, int, bool]]:
    paths = sorted(aliases.CONFIGS_DIR.glob("*.json"))
    configs = [(p.stem, json.loads(p.read_text())) for p in paths]
    found = []
    for name, config in configs:
        moe = geometry.of(config).experts > 0
        for rf in (recipe.load(r) for r in recipe.shipped()):
            for tp in (t for t in TPS if parallel.tp_refusal(t, geometry.of(config)) is None):
                for ep in (False, True) if moe and tp > 1 else (False,):
                    found.append((name, config, rf, tp, ep))
    return found


def _layer(one: Linear) -> dict:
    """The oracle's description of a vLLM layer: what its model code passes the constructor."""
    common = {"style": one.style.value, "name": one.name, "parts": list(one.parts)}
    if one.style is Style.QKV:
        heads = {"heads": one.heads, "kv_heads": one.kv_heads, "head_size": one.head_size}
        return {**common, **heads, "hidden": one.in_features, "v_head_size": one.v_head_size}
    if one.style is Style.EXPERTS:
        width = {"intermediate": one.outputs[0], "experts": one.experts}
        return {**common, "hidden": one.in_features, **width}
    return {**common, "input_size": one.in_features, "output_sizes": list(one.outputs)}


def _ours(one: Linear, rf: recipe.RecipeFile, tp: int, ep: bool) -> str:
    scheme = rf.scheme()
    found = layout.linear_straddle(one, scheme, tp, ep) if scheme else None
    return "loads" if found is None else "misaligned" if found.loads else "refused"


def _quantized(one: Linear, rf: recipe.RecipeFile) -> bool:
    ignored = set(rf.ignored())
    return one.quantized and one.style is not Style.VOCAB and not set(one.parts) <= ignored


def _oracle(request: dict) -> dict:
    done = subprocess.run(
        [str(serving_env.SERVE_PYTHON), str(VLLM_SCRIPTS / "layout_oracle.py")],
        input=json.dumps(request), capture_output=True, text=True, timeout=1200,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_the_layout_rule_agrees_with_vllm_on_every_config_recipe_and_tp():
    if not serving_env.available():
        pytest.skip(f"no serving env ({serving_env.SERVE_PYTHON}; make setup builds it): "
                    "the oracle runs vLLM 0.32's own checks there")  # fmt: skip
    configs, cases, cells, online = _questions()
    sent = [{k: c[k] for k in SENT} for c in cases.values()]
    answer = _oracle({"configs": configs, "cases": sent})
    assert answer["vllm"].startswith("0.32"), answer["vllm"]
    said = {r["id"]: r for r in answer["results"]}
    for key, spec in answer["configs"].items():  # vLLM reads our presets' blocks and groups
        weights, ours = spec["weights"], PRESETS[configs[key]["preset"]]
        assert weights.get("group_size") == ours.group_size, (key, weights)
        assert tuple(weights.get("block_structure") or ()) == (ours.block or ()), (key, weights)

    disagree = [*_layer_disagreements(cases, said), *_cell_disagreements(cells, said)]
    assert not disagree, f"{len(disagree)} disagreements:\n" + "\n".join(disagree[:30])
    n, refused = len(cells), sum(1 for _, ours, _ in cells if ours)
    verdicts = [r["verdict"] for r in answer["results"]]
    counts = {v: verdicts.count(v) for v in ("loads", "refused", "misaligned")}
    print(f"{n} cells agree ({refused} refused), {len(cases)} vLLM layers built: {counts}; "
          f"{online} online-FP8 cells by the rule alone")  # fmt: skip
    assert n > 0 and refused > 0 and counts["refused"] > 0


def _questions() -> tuple[dict, dict, list, int]:
    """The oracle's configs and (deduplicated) layer cases, each cell's layers and our
    verdict, and how many online-FP8 cells only the rule judged."""
    configs, cases, cells, online = {}, {}, [], 0
    for name, config, rf, tp, ep in _cells():
        if rf.online:  # vLLM's online FP8 (per tensor, no partition check): not asked
            assert layout.recipe_refusal(geometry.of(config), rf, tp, ep) is None
            online += 1
            continue
        key = f"{rf.scheme().name}:{','.join(rf.ignored())}"
        configs[key] = {"preset": rf.scheme().name, "ignore": rf.ignored()}
        ids = []
        for one in (x for x in geometry.of(config).linears.distinct if _quantized(x, rf)):
            case = {"config": key, "tp": tp, "expert_parallel": ep, "layer": _layer(one)}
            cid = json.dumps(case, sort_keys=True)
            cases[cid] = {**case, "id": cid, "ours": _ours(one, rf, tp, ep), "linear": one}
            ids.append(cid)
        cells.append(
            ((name, rf.name, tp, ep), layout.recipe_refusal(geometry.of(config), rf, tp, ep), ids)
        )
    return configs, cases, cells, online


def _layer_disagreements(cases: dict, said: dict) -> list[str]:
    """Per vLLM layer: the same verdict; where it built, the same partition."""
    found = []
    for cid, case in cases.items():
        got, one, tp, ep = said[cid], case["linear"], case["tp"], case["expert_parallel"]
        where = f"{one.name} tp{tp} ep{ep} {case['config']}"
        if got["verdict"] != case["ours"]:
            vllm = f"vLLM {got['verdict']} ({got.get('reason')})"
            found.append(f"{where}: ours {case['ours']}, {vllm}")
            continue
        if got["verdict"] == "refused":
            continue
        shard = one.shard(tp, ep)
        theirs = [got["input_per_partition"], got["output_partition_sizes"]]
        if [shard.in_features, list(shard.outputs)] != theirs:
            found.append(f"{where}: partition {shard} vs vLLM's {got}")
        if one.style is Style.EXPERTS and got["local_experts"][1] != shard.experts:
            found.append(f"{where}: {shard.experts} experts per rank vs vLLM's {got}")
    return found


def _cell_disagreements(cells: list, said: dict) -> list[str]:
    """Per cell: our refusal exactly where some layer of it does not load in vLLM."""
    found = []
    for where, ours, ids in cells:
        loads = all(said[i]["verdict"] == "loads" for i in ids)
        if (ours is None) != loads:
            found.append(f"cell {where}: ours {ours!r}, vLLM loads every layer: {loads}")
    return found
