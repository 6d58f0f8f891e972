"""The model-free path (llm-compressor's model_free_ptq, shard by shard): the default for every
data-free recipe, the same tensors as oneshot bit for bit, the same quantization_config up to
names that mean nothing to a loader, and its refusals."""

import json
from pathlib import Path

import pytest

from pipeline.core.same_tensors import differences
from tests.conftest import cli

DATA_FREE = ["fp8", "fp8-block", "w8a16", "w4a16-rtn", "nvfp4a16", "mxfp4"]


def oneshot_artifact(model: str, recipe_name: str, runs: Path, monkeypatch) -> Path:
    """The same recipe through oneshot, in this process (a CLI start costs ~10 s of imports)."""
    from pipeline.core.runs import Runs
    from pipeline.core.stage import execute
    from pipeline.quantize.request import QuantizeRequest
    from pipeline.quantize.stage import QuantizeStage

    monkeypatch.setenv("RUNS_DIR", str(runs))
    request = QuantizeRequest.named(model, recipe_name, path="oneshot")
    stage = QuantizeStage.prepare(request, Runs(runs))
    entry, _ = execute(stage)
    assert entry.inputs["path"] == "oneshot"
    return stage.rundir.path / "artifact"


def same_quantization_config(model_free: Path, oneshot: Path) -> None:
    """Equal but for what a loader never reads: config group names, the calibration observer,
    an empty sparsity config; model-free's ignore list adds the non-Linear modules it must
    name (it sees tensors, not modules)."""

    def normal(folder: Path) -> dict:
        q = json.loads((folder / "config.json").read_text())["quantization_config"]
        groups = []
        for group in q.pop("config_groups").values():
            group["weights"].pop("observer")
            groups.append(group)
        ignore = q.pop("ignore")
        q.pop("sparsity_config", None)
        q.pop("version", None)
        return {"groups": groups, "rest": q, "ignore": ignore}

    import re

    a, b = normal(model_free), normal(oneshot)
    assert a["groups"] == b["groups"] and a["rest"] == b["rest"]
    for entry in b["ignore"]:  # oneshot's entries: names, or patterns (its MoE routers)
        pattern = entry[3:] if entry.startswith("re:") else None
        found = [x for x in a["ignore"] if x == entry or (pattern and re.search(pattern, x))]
        assert found, (entry, a["ignore"])


@pytest.mark.parametrize("name", DATA_FREE)
def test_model_free_is_the_default_and_gives_oneshots_tensors(
    quantized, tiny_model, tmp_path, monkeypatch, name
):
    run = quantized(name)
    q = json.loads((run / "manifest.json").read_text())["stages"]["quantize"]
    assert q["inputs"]["path"] == q["metrics"]["path"] == "model-free"
    assert q["metrics"]["shards"] >= 1 and q["metrics"]["params_per_second"] > 0
    assert "model.embed_tokens" in q["metrics"]["ignore"]  # derived: not a Linear
    oneshot = oneshot_artifact("tiny-llama", name, tmp_path, monkeypatch)
    assert differences(run / "artifact", oneshot) == []
    same_quantization_config(run / "artifact", oneshot)


def test_model_free_refusals_are_one_line_and_create_nothing(tiny_model, tmp_path):
    cases = [
        (["--recipe", "gptq", "--path", "model-free"], 2, "calibrates on data"),
        (["--recipe", "fp8", "--path", "oneshot", "--workers", "2"], 2, "--workers 2"),
        (["--recipe", "fp8", "--workers", "0"], 2, "at least 1"),
        (["--recipe", "fp8", "--max-memory", "2"], 2, "a memory size from 1MiB"),
        (["--recipe", "fp8", "--max-memory", "lots"], 2, "expected a size like"),
        (["--recipe", "vllm-fp8", "--path", "model-free"], 2, "online"),
        # a small host played by --max-memory: refused from the plan, before loading anything
        (["--recipe", "fp8", "--max-memory", "64MiB"], 4, "GiB of CPU RAM by the plan"),
    ]
    for args, code, text in cases:
        result = cli("quantize", *args, runs=tmp_path)
        lines = [x for x in result.stderr.splitlines() if x.startswith("error: ")]
        assert result.returncode == code, (args, result.stderr[-2000:])
        assert len(lines) == 1 and text in lines[0], (args, lines)
        assert "Traceback" not in result.stderr
    assert not list(tmp_path.iterdir())


def test_progress_counts_shards_and_library_bars_go_to_the_log(quantized):
    log = (quantized("fp8") / "logs" / "quantize.log").read_text()
    terminal = quantized.printed["fp8"]
    assert "(model-free)" in terminal and "1/1 [" in terminal and "shard/s" in terminal
    for library_bar in ("Validating", "Quantizing", "Compressing", "Loading weights"):
        assert library_bar not in terminal, library_bar
    assert "Quantizing" in log and "Validating" in log  # llm-compressor's, kept in the log
    assert "peak RSS" in terminal and "× plan" in terminal


@pytest.mark.gpu
def test_model_free_spreads_shards_over_the_gpus(quantized):
    log = (quantized("fp8") / "logs" / "quantize.log").read_text()
    assert "CUDA device(s)" in log and "Compressing model on CPU" not in log
