"""Where a paired serve's two sides run, and how each server is launched: known answers for the
GPUs a process sees (1, 2, 4 and 8 H100s, read through the stand-in nvidia-smi of
tests/gpu_hosts: this host has no GPU; its machines are written from published figures), then
the rules every placement keeps, over random needs."""

import json
from pathlib import Path

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from pipeline.config import recipe
from pipeline.config.recipe import ServeSettings
from pipeline.core import devices
from pipeline.engines.vllm import placement, server, sizing
from pipeline.planning import geometry
from pipeline.planning.weights import artifact_bytes
from tests.conftest import REPO, cli
from tests.unit.core.test_devices import STANDIN, standin

CONFIGS = REPO / "pipeline" / "models" / "configs"
LLAMA_8B = "meta-llama--Meta-Llama-3-8B-Instruct.json"
LLAMA_70B = "meta-llama--Meta-Llama-3-70B-Instruct.json"
USERS, CONTEXT = 16, 192  # the fp8 recipe's serve sweep: its largest concurrency, 128 + 64


def placed(config_file: str, recipe_name: str = "fp8") -> placement.Placement:
    config = json.loads((CONFIGS / config_file).read_text())
    r = recipe.load(recipe_name)
    sides = [
        sizing.ServeSide("original", "original", geometry.of(config).original_bytes, "auto"),
        sizing.ServeSide("quantized", r.name, artifact_bytes(r, geometry.of(config)), "auto"),
    ]
    return sizing.serve_placement(geometry.of(config), sides, devices.seen(), USERS, CONTEXT)


def launched(side: placement.SidePlace) -> server.Launch:
    s = ServeSettings(
        tensor_parallel_size=side.tensor_parallel_size, gpu_memory_utilization=side.memory_share
    )
    return server.launch(Path("/m"), side.label, s, 8000, 4096, gpus=side.gpus)


def flags(launch: server.Launch) -> dict[str, str]:
    return dict(zip(launch.argv[3::2], launch.argv[4::2], strict=False))


def test_eight_h100s_serve_70b_side_by_side_on_disjoint_gpus(monkeypatch):
    standin(monkeypatch, "h100x8")
    p = placed(LLAMA_70B)
    assert p.mode == "side-by-side" and p.paired and not p.start_in_turn
    original, fp8 = (launched(p.side(k)) for k in ("original", "quantized"))
    # the FP8 side on two too: on one, vLLM's engine (3.4 GiB) leaves 0.23 GiB beside 67.7 GiB
    # of weights, under the 16 × 192 tokens' 0.94 GiB of KV (planning/engine_memory.py)
    assert original.env["CUDA_VISIBLE_DEVICES"] == "0,1"
    assert fp8.env["CUDA_VISIBLE_DEVICES"] == "2,3"
    assert flags(original)["--tensor-parallel-size"] == "2"
    assert flags(fp8)["--tensor-parallel-size"] == "2"
    assert flags(original)["--gpu-memory-utilization"] == flags(fp8)["--gpu-memory-utilization"]
    assert original.env["CUDA_DEVICE_ORDER"] == "PCI_BUS_ID"  # vLLM reads NVML's numbering
    assert "VLLM_CPU_KVCACHE_SPACE" not in original.env
    assert original.shell().startswith("CUDA_VISIBLE_DEVICES=0,1 CUDA_DEVICE_ORDER=PCI_BUS_ID ")
    assert "/vllm serve /m --served-model-name original " in original.shell()


def test_four_visible_gpus_number_as_the_host_does(monkeypatch):
    standin(monkeypatch, "h100x8", "4,5,6,7")
    p = placed(LLAMA_70B)
    assert p.mode == "side-by-side"
    assert launched(p.side("original")).env["CUDA_VISIBLE_DEVICES"] == "4,5"
    assert launched(p.side("quantized")).env["CUDA_VISIBLE_DEVICES"] == "6,7"
    assert p.side("original").record()["gpu_uuids"] == [g.uuid for g in devices.seen()[:2]]


def test_two_h100s_serve_70b_one_after_the_other(monkeypatch):
    standin(monkeypatch, "h100x8", "2,3")
    p = placed(LLAMA_70B)
    assert p.mode == "sequential" and not p.paired
    assert "one after the other" in p.reason and "unpaired" in p.reason
    assert launched(p.side("original")).env["CUDA_VISIBLE_DEVICES"] == "2,3"
    assert launched(p.side("quantized")).env["CUDA_VISIBLE_DEVICES"] == "2,3"
    assert {s.memory_share for s in p.sides} == {placement.UTILIZATION}  # each alone, whole


def test_one_h100_shares_its_memory_between_8b_sides(monkeypatch):
    standin(monkeypatch, "h100x1")
    p = placed(LLAMA_8B)
    assert p.mode == "shared" and p.paired and p.start_in_turn
    assert sum(round(s.memory_share * 100) for s in p.sides) <= 90
    assert p.side("original").memory_share == p.side("quantized").memory_share == 0.45
    for side in p.sides:
        assert launched(side).env["CUDA_VISIBLE_DEVICES"] == "0"
        assert flags(launched(side))["--gpu-memory-utilization"] == "0.45"


def test_two_h100s_serve_8b_side_by_side(monkeypatch):
    standin(monkeypatch, "h100x8", "0,1")
    p = placed(LLAMA_8B)
    assert p.mode == "side-by-side"
    assert [launched(s).env["CUDA_VISIBLE_DEVICES"] for s in p.sides] == ["0", "1"]


def test_no_gpu_serves_both_in_ram(monkeypatch):
    standin(monkeypatch, "h100x8", "")
    p = placed(LLAMA_8B)
    assert p.mode == "cpu" and p.paired
    env = launched(p.side("quantized")).env
    assert "CUDA_VISIBLE_DEVICES" not in env and env["VLLM_CPU_KVCACHE_SPACE"] == "1"


def test_a_side_wider_than_the_gpus_seen_is_refused():
    from pipeline.core.errors import NotOnThisHost

    gpu = devices.Gpu(0, "GPU-0", "NVIDIA H100 80GB HBM3", 80 * 2**30, "580")
    need = placement.Need("original", "original", 2, lambda tp: 0)
    with pytest.raises(NotOnThisHost, match="more than the 1 this process sees"):
        placement.place([need], [gpu])


def test_pipeline_stages_and_the_executor_reach_the_command():
    s = ServeSettings(tensor_parallel_size=8, pipeline_parallel_size=2)
    cmd = server.launch(Path("/m"), "n", s, 1, 1).argv
    assert dict(zip(cmd[3::2], cmd[4::2], strict=False))["--pipeline-parallel-size"] == "2"
    assert cmd[cmd.index("--distributed-executor-backend") + 1] == "mp"  # one node: no Ray
    one_node = server.launch(Path("/m"), "n", ServeSettings(), 1, 1).argv
    assert "--distributed-executor-backend" not in one_node


GIB = 2**30


@settings(max_examples=300, deadline=None)
@given(
    gpu_count=st.integers(1, 8),
    tps=st.lists(st.sampled_from([1, 2, 4, 8]), min_size=2, max_size=2),
    held=st.lists(st.integers(1, 120), min_size=2, max_size=2),  # GiB a side holds at TP 1
    utilization=st.sampled_from([0.5, 0.8, 0.9, 0.95]),
)
def test_every_placement_keeps_vllms_rules(gpu_count, tps, held, utilization):
    """Sides up at once never share a GPU beyond the utilization; side-by-side sets are
    disjoint; each side runs on exactly its TP's GPUs, at its planned TP (shared: both at the
    larger, which holds less per GPU); a side alone gets the whole share."""
    gpus = [devices.Gpu(i, f"GPU-{i}", "H100", 80 * GIB, "580") for i in range(gpu_count)]
    needs = [
        placement.Need(key, key, tp, lambda t, g=g: int(g * GIB / t))
        for key, tp, g in zip(("original", "quantized"), tps, held, strict=True)
    ]
    assume(max(tps) <= gpu_count)  # else refused (test_a_side_wider_than_the_gpus_seen_is_refused)
    p = placement.place(needs, gpus, utilization)
    for side, need in zip(p.sides, needs, strict=True):
        assert len(side.gpus) == side.tensor_parallel_size
        wanted = max(tps) if p.mode == "shared" else need.tensor_parallel_size
        assert side.tensor_parallel_size == wanted
    if p.mode == "side-by-side":
        a, b = (set(s.gpus) for s in p.sides)
        assert not a & b
    elif p.mode == "shared":
        # in the flag's hundredths (exact: float hundredths may sum a hair past it)
        assert sum(round(s.memory_share * 100) for s in p.sides) <= round(utilization * 100)
        for side, need in zip(p.sides, needs, strict=True):  # each holds what it needs
            assert side.memory_share * 80 * GIB >= need.bytes_per_gpu(len(side.gpus)) * 0.99
    else:
        assert p.mode == "sequential"
        assert all(s.memory_share == utilization for s in p.sides)


def dry_run(tmp_path, model: str, machine: str, visible: str | None = None) -> dict:
    """`run --dry-run --json` with the stand-in on PATH: the serve stage's placement. Exit 4
    where this host's disk cannot take the download (the plan is printed all the same)."""
    import os

    path = f"{STANDIN}{os.pathsep}{os.environ['PATH']}"
    # visible None: every GPU of the machine (a test worker's own CUDA_VISIBLE_DEVICES unset)
    env = {"PATH": path, "STANDIN_GPUS": machine, "CUDA_VISIBLE_DEVICES": visible}
    result = cli("run", "--model", model, "--recipe", "fp8", "--dry-run", "--json",
                 runs=tmp_path, env=env)  # fmt: skip
    assert result.returncode in (0, 4), result.stderr[-2000:]
    plan = json.loads(result.stdout)
    return plan


def test_the_run_plan_places_each_side_where_it_will_serve(tmp_path):
    eight = dry_run(tmp_path, "llama3-70b", "h100x8")
    placed = eight["stages"]["serve"]["placement"]
    assert placed["mode"] == "side-by-side"
    assert placed["sides"]["original"]["gpus"] == [0, 1]
    assert placed["sides"]["fp8"]["gpus"] == [
        2,
        3,
    ]  # TP 2: vLLM's engine leaves too little KV on one
    one = dry_run(tmp_path, "llama3-8b", "h100x1")["stages"]["serve"]["placement"]
    assert one["mode"] == "shared"
    assert sum(s["gpu_memory_utilization"] for s in one["sides"].values()) <= 0.9
    assert {tuple(s["gpus"]) for s in one["sides"].values()} == {(0,)}
    two = dry_run(tmp_path, "llama3-70b", "h100x8", "2,3")
    assert len(two["host"]["gpus"]) == 2 and two["host"]["gpus_listed"] == 8
    placed = two["stages"]["serve"]["placement"]
    assert placed["mode"] == "sequential" and "one after the other" in placed["reason"]
