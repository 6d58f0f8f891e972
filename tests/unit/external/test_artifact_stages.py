"""The two stages that make an artifact — a recipe's quantize and an import — are each an
Artifact (pipeline/artifact/protocol.py) on their own: the import inherits nothing from quantize, so
every member eval, serve, publish and the chain use is one it states, and its host fit is a
None with nothing checked, never a quantize memory verdict."""

import json
from dataclasses import fields

from typing_extensions import get_protocol_members

from pipeline.artifact import Artifact
from pipeline.core.runs import Runs
from pipeline.external import match, source
from pipeline.external.request import ImportRequest
from pipeline.external.stage import HOST_FIT, ImportStage
from pipeline.models import aliases
from pipeline.models.tiny.spec import CONFIG
from pipeline.quantize.request import QuantizeRequest
from pipeline.quantize.stage import QuantizeStage


def _has(cls: type, member: str) -> bool:
    """A class attribute, method or property, or a dataclass field (no class attribute when
    it has no default)."""
    return hasattr(cls, member) or member in {f.name for f in fields(cls)}


def test_both_stages_state_every_member_of_the_artifact_protocol():
    members = get_protocol_members(Artifact)
    assert {"host_fit", "staging", "entry", "load_results", "artifact_for"} <= members
    for cls in (QuantizeStage, ImportStage):
        assert [m for m in sorted(members) if not _has(cls, m)] == [], cls.__name__


def _import(tmp_path, monkeypatch) -> ImportStage:
    """An fp8 export of tiny-llama's config, prepared (configs only: no weights, no writes)."""
    monkeypatch.setattr(match, "check_tokenizer", lambda *args: None)  # test_match's subject
    folder = tmp_path / "fp8-export"
    folder.mkdir()
    quant = {"quant_method": "fp8", "activation_scheme": "dynamic"}
    (folder / "config.json").write_text(json.dumps(CONFIG | {"quantization_config": quant}))
    request = ImportRequest(aliases.resolve("tiny-llama"), source.resolve(str(folder)))
    return ImportStage.prepare(request, Runs(tmp_path / "runs"))


def test_nothing_of_quantizing_applies_to_an_import(tmp_path, monkeypatch):
    """What a recipe's stage has beyond the protocol (its memory check, calibration text,
    processes, path) an import does not answer to: a probe for it finds nothing, where a
    subclass of QuantizeStage would find quantize's."""
    members = {m for m in dir(QuantizeStage) if not m.startswith("__")}
    members |= {f.name for f in fields(QuantizeStage)}  # those without a default too
    # every stage is made by its own `prepare` from its own kind of request
    quantize_only = members - get_protocol_members(Artifact) - {"prepare", "request"}
    assert {"memory_verdict", "check_memory", "load_texts", "texts", "path"} <= quantize_only
    assert {"nproc", "workers", "capped", "decided"} <= quantize_only
    stage = _import(tmp_path, monkeypatch)
    assert sorted(m for m in quantize_only if hasattr(stage, m)) == []
    assert type(stage.request) is ImportRequest and not hasattr(stage.request, "nproc")


def test_an_imports_host_fit_checks_nothing(tmp_path, monkeypatch):
    stage = _import(tmp_path, monkeypatch)
    assert stage.max_memory is None
    assert stage.host_fit(None) is None and stage.host_fit(1) is None  # 1 byte: still None
    assert stage.plan()["host_fit"] == HOST_FIT  # what it says instead of "fits"
    assert stage.name == "quantize" and stage.header["recipe"]["name"] == stage.recipe.name


def test_a_recipes_host_fit_is_its_memory_verdict(tmp_path):
    q = QuantizeStage.prepare(QuantizeRequest.named("tiny-llama", "gptq"), Runs(tmp_path / "runs"))
    assert q.host_fit(2**50) is None
    assert q.host_fit(1) == q.memory_verdict(1) and "GiB of CPU RAM" in q.host_fit(1)


def test_every_stage_of_the_chain_states_its_staging():
    """The runner calls `stage.staging(final)` with no default of its own."""
    from pipeline.eval.stage import EvalStage
    from pipeline.publish.stage import PublishStage
    from pipeline.serve.stage import ServeStage

    for cls in (QuantizeStage, ImportStage, EvalStage, ServeStage, PublishStage):
        assert callable(cls.staging), cls.__name__
