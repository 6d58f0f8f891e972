"""The one deployment planner: known answers, and `make plan` and `make advise` agreeing on it."""

from pipeline.advise import rank as advise
from pipeline.config import recipe
from pipeline.models import aliases
from pipeline.planning import capacity, deployment, geometry
from pipeline.planning.gpus import named

GIB = 2**30


def _config(alias: str) -> dict:
    return aliases.load_config(aliases.resolve(alias))


def test_a_model_beyond_a_node_gets_tp_of_the_node_and_a_stage_per_node():
    config = _config("llama3-405b")
    load = deployment.Load(geometry.of(config).original_bytes, "auto", 100, 4000)
    found = deployment.fewest(geometry.of(config), load, named("H100-80GB"))
    assert (found.tensor_parallel_size, found.pipeline_parallel_size) == (8, 2)
    assert (found.gpus, found.nodes, found.executor) == (16, 2, "ray")
    assert found.engine_flags() == (
        "--tensor-parallel-size 8 --pipeline-parallel-size 2 --distributed-executor-backend ray"
    )
    assert found.max_users >= 100 and "TP 8 × PP 2 on 2 nodes of 8" in found.why
    # one node of 4 cannot hold it on 2 nodes: 4 × 4 stages
    narrow = deployment.fewest(geometry.of(config), load, named("H100-80GB", per_node=4))
    assert (narrow.tensor_parallel_size, narrow.pipeline_parallel_size) == (4, 4)
    assert deployment.fewest(geometry.of(config), load, named("H100-80GB", nodes=1)) is None


def test_at_a_size_too_small_for_the_weights_nobody_fits():
    config = _config("llama3-70b")
    load = deployment.Load(geometry.of(config).original_bytes, "auto", 1, 4000)
    one = deployment.at(geometry.of(config), load, named("H100-80GB"), 1)
    assert one.max_users == 0 and one.kv_room_bytes == 0 and one.executor == "mp"
    two = deployment.at(geometry.of(config), load, named("H100-80GB"), 2)
    assert two.max_users > 0 and two.engine_flags() == "--tensor-parallel-size 2"


def test_plan_and_advise_read_the_same_deployment():
    """Advise prices a candidate from the fewest GPUs `make plan` prints for it, up: at that
    size it counts the same users."""
    config = _config("llama3-70b")
    gptq = recipe.load("gptq")
    gpu = named("H100-80GB")
    plan = capacity.plan(geometry.of(config), [gptq], ["auto", "fp8"], 100, 4000, gpu)
    rows = {(r.recipe, r.kv_dtype): r for r in plan}
    ask = advise.Ask(100, 4000)
    same = 0
    for priced in advise.advise(None, geometry.of(config), [gptq], gpu.hardware, None, ask):
        planned = rows[(priced.recipe, priced.kv_dtype)]
        assert priced.gpus >= planned.gpus  # never fewer GPUs than hold it
        if priced.gpus == planned.gpus:  # at the plan's own size: the same users
            assert priced.max_users == planned.max_users
            same += 1
    assert same > 0  # the comparison above ran: advise priced the plan's size too
