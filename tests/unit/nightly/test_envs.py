"""A node's envs against the driver's (their stamps: the pins' sha256), and the driver's Ray
token authentication."""

import os

from pipeline.nightly import envs, executors


def _checkout(root, main="pins-a", serve="pins-b"):
    (root / ".venv" / "bin").mkdir(parents=True)
    (root / ".venv" / "bin" / "python").touch()
    (root / ".venv" / ".installed").write_text(main)
    (root / ".venv-serve").mkdir()
    (root / ".venv-serve" / ".installed-cpu").write_text(serve)
    return root


def test_a_node_with_the_driver_s_envs_runs_and_one_without_names_the_fix(tmp_path):
    driver = envs.fingerprint(_checkout(tmp_path / "driver"))
    assert driver == {".venv/.installed": "pins-a", ".venv-serve/.installed-cpu": "pins-b"}
    assert envs.refusal(driver, "n1", None, _checkout(tmp_path / "same")) is None
    stale = envs.refusal(driver, "n2", None, _checkout(tmp_path / "stale", serve="pins-old"))
    assert "node n2" in stale and "make setup" in stale
    assert ".venv-serve/.installed-cpu: built from other pins" in stale
    (tmp_path / "bare").mkdir()
    bare = envs.refusal(driver, "n3", None, tmp_path / "bare")
    assert "no main env" in bare and "share the checkout" in bare


def test_the_driver_uses_the_cluster_token_it_has(monkeypatch, tmp_path):
    monkeypatch.setenv("HOME", str(tmp_path))  # no ~/.ray/auth_token
    for name in ("RAY_AUTH_MODE", "RAY_AUTH_TOKEN", "RAY_AUTH_TOKEN_PATH"):
        monkeypatch.delenv(name, raising=False)
    executors._token_auth()
    assert "RAY_AUTH_MODE" not in os.environ  # no token: Ray's default
    monkeypatch.setenv("RAY_AUTH_TOKEN", "t" * 64)
    executors._token_auth()
    assert os.environ["RAY_AUTH_MODE"] == "token"
    monkeypatch.setenv("RAY_AUTH_MODE", "disabled")  # the team's choice stands
    executors._token_auth()
    assert os.environ["RAY_AUTH_MODE"] == "disabled"
