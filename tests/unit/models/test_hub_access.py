"""A hub model on a host without the hub: one line with the next step, at once (not ~25 s of
huggingface_hub's retries), exit 1 where the hub cannot be reached, 2 where the user can fix it."""

from huggingface_hub import constants

from pipeline.cli.main import main


def _quantize_plan(capsys) -> tuple[int, list[str]]:
    code = main(["quantize", "--model", "acme/some-model", "--recipe", "fp8", "--dry-run"])
    return code, capsys.readouterr().err.strip().splitlines()


def test_no_route_to_the_hub_is_exit_1_naming_the_ways_without_it(capsys, monkeypatch, tmp_path):
    monkeypatch.setenv("RUNS_DIR", str(tmp_path / "runs"))
    monkeypatch.setattr(constants, "ENDPOINT", "https://hub.invalid")  # RFC 2606: never resolves
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    for proxy in ("HTTPS_PROXY", "https_proxy", "ALL_PROXY", "all_proxy"):
        monkeypatch.delenv(proxy, raising=False)
    code, err = _quantize_plan(capsys)
    assert code == 1 and len(err) == 1, err  # no "Retrying in 8s" lines
    assert err[0].startswith("error: cannot reach the hub at https://hub.invalid for acme/some")
    assert "a local folder (--model /path/to/model)" in err[0] and "tiny-llama" in err[0]


def test_offline_mode_without_the_model_cached_says_how_to_carry_it(capsys, monkeypatch, tmp_path):
    monkeypatch.setenv("RUNS_DIR", str(tmp_path / "runs"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "hub"))
    code, err = _quantize_plan(capsys)
    assert code == 2 and len(err) == 1, err
    assert "HF_HUB_OFFLINE is set" in err[0] and "`hf download acme/some-model`" in err[0]
    assert not (tmp_path / "runs").exists()  # nothing was made
