"""A stage run in a process of its own (what a GPU host does before vLLM starts, forced here
with PIPELINE_STAGE_PROCESS=own): the same outcome and manifest as in one process."""

import json

from tests.conftest import cli


def test_a_quantize_in_its_own_process_is_done_then_cached(tmp_path, tiny_model):
    env = {"PIPELINE_STAGE_PROCESS": "own"}
    first = cli("quantize", "--recipe", "fp8", "--json", runs=tmp_path, env=env)
    assert first.returncode == 0, first.stderr[-2000:]
    (stage,) = json.loads(first.stdout.strip().splitlines()[-1])["stages"]
    assert stage["status"] == "done" and stage["metrics"]["path"] == "model-free"
    manifest = json.loads((tmp_path / "tiny-llama" / "fp8" / "manifest.json").read_text())
    assert manifest["stages"]["quantize"]["status"] == "done"
    assert (tmp_path / "tiny-llama" / "fp8" / "artifact" / "config.json").is_file()
    again = cli("quantize", "--recipe", "fp8", "--json", runs=tmp_path, env=env)
    (stage,) = json.loads(again.stdout.strip().splitlines()[-1])["stages"]
    assert again.returncode == 0 and stage["status"] == "cached"
