"""The command line typed once at the door (cli/requests.py): what each command's flags make,
loaded (the model resolved, the recipe read), and each mistake one line before any stage."""

import pytest

from pipeline.cli.main import _parser
from pipeline.cli.requests import ChainRequest, artifact_request, publish_request
from pipeline.core.errors import UserError
from pipeline.external.request import ImportRequest
from pipeline.quantize.request import QuantizeRequest


def _args(*argv: str):
    return _parser().parse_args(list(argv))


def test_a_recipe_request_holds_the_loaded_model_and_recipe_and_its_flags():
    req = artifact_request(_args("quantize", "--recipe", "gptq", "--num-samples", "8"))
    assert isinstance(req, QuantizeRequest)
    assert (req.ref.name, req.ref.source, req.recipe.name) == ("tiny-llama", "tiny", "gptq")
    assert (req.num_samples, req.max_seq_length, req.nproc, req.path) == (8, None, None, None)
    assert artifact_request(_args("eval")).recipe.name == "fp8"  # the default recipe
    with pytest.raises(UserError, match="no recipe given"):
        artifact_request(_args("eval", "--recipe", ""))  # an unset variable, never fp8


def test_an_import_request_refuses_what_applies_to_quantizing_with_a_recipe(tmp_path):
    folder = tmp_path / "export"
    folder.mkdir()
    req = artifact_request(_args("run", "--artifact", str(folder)))
    assert isinstance(req, ImportRequest) and req.settings is None
    assert req.external.path == folder and req.ref.name == "tiny-llama"
    assert artifact_request(_args("eval", "--artifact", str(folder), "--recipe", "gptq")).settings
    for flag in (["--nproc", "2"], ["--path", "oneshot"], ["--max-memory", "8GiB"]):
        with pytest.raises(UserError, match=f"{flag[0]} applies to quantizing with a recipe"):
            artifact_request(_args("run", "--artifact", str(folder), *flag))


def test_a_chain_request_sets_serve_s_flags_only_where_serve_runs():
    run = ChainRequest.from_args(_args("run", "--concurrency", "1,2", "--json"), ("eval", "serve"))
    assert run.options.serve_overrides == {"concurrency": [1, 2]} and run.as_json
    evals = ChainRequest.from_args(_args("run", "--concurrency", "1,2"), ("eval",), {"eval"})
    assert evals.options.serve_overrides is None and evals.force == frozenset({"eval"})
    dry = ChainRequest.from_args(_args("eval", "--backend", "hf", "--dry-run"), ("eval",))
    assert (dry.command, dry.options.backend, dry.dry_run, dry.options.port) == (
        "eval", "hf", True, None)  # fmt: skip


def test_a_publish_request_parses_its_target_and_force_skips_the_gates(tmp_path):
    req = publish_request(_args("publish", "--repo", f"file://{tmp_path}/out", "--force"))
    assert req.target.kind == "file" and req.ignore_gates and not req.dry_run
    with pytest.raises(UserError, match="absolute path"):
        publish_request(_args("publish", "--repo", "file://relative/path"))
