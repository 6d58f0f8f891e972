"""An import's `quantize --import … --dry-run` says what was checked for it: its format, its
architecture and tokenizer against the base, and not this host's memory (an import quantizes
nothing), never a bare "fits"."""

import json

from pipeline.cli.main import main
from pipeline.external import match
from pipeline.external.stage import HOST_FIT
from pipeline.models.tiny.spec import CONFIG


def _fp8_checkpoint(folder):
    """tiny-llama's config as an FP8 export (vLLM / transformers) would ship it; no weights:
    the dry run reads configs alone."""
    folder.mkdir()
    config = CONFIG | {
        "quantization_config": {"quant_method": "fp8", "activation_scheme": "dynamic"}
    }
    (folder / "config.json").write_text(json.dumps(config))
    return folder


def test_an_import_dry_run_says_its_host_fit_was_not_checked(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("RUNS_DIR", str(tmp_path / "runs"))
    # the tokenizer comparison is test_match's: here it would build tiny-llama first
    monkeypatch.setattr(match, "check_tokenizer", lambda *args: None)
    artifact = str(_fp8_checkpoint(tmp_path / "fp8-export"))
    assert main(["quantize", "--import", artifact, "--dry-run", "--json"]) == 0
    plan = json.loads(capsys.readouterr().out)
    assert plan["host_fit"] == HOST_FIT and plan["host_fit"].startswith("not checked: ")
    assert plan["format"]["quant_method"] == "fp8"
    assert main(["quantize", "--import", artifact, "--dry-run"]) == 0
    text = capsys.readouterr().out
    assert "this host not checked: an import quantizes nothing" in text
    assert not (tmp_path / "runs").exists()  # a dry run writes nothing
