"""Credentials on a Ray cluster: never in a task's runtime environment (Ray 2.60's runtime-env
agent logs its env_vars on every node); each node has its own, and a node without them refuses
its cells in one line."""

from pathlib import Path

from pipeline.core.runs import Runs
from pipeline.nightly import envs, executors


def test_no_credential_travels_in_rays_runtime_environment():
    """Ray 2.60's runtime-env agent logs a task's env_vars on every node."""
    environ = {"RUNS_DIR": "s3://b/runs", "AWS_ENDPOINT_URL": "http://127.0.0.1:9",
               "AWS_ACCESS_KEY_ID": "id", "AWS_SECRET_ACCESS_KEY": "s", "AWS_SESSION_TOKEN": "t",
               "HF_TOKEN": "hf_x", "HF_HUB_OFFLINE": "1"}  # fmt: skip
    sent = executors.runtime_env_vars(environ, Runs(Path("/unused"), "s3://b/runs"))
    assert not {
        "AWS_ACCESS_KEY_ID",
        "AWS_SECRET_ACCESS_KEY",
        "AWS_SESSION_TOKEN",
        "HF_TOKEN",
    } & set(sent)
    assert sent["RUNS_DIR"] == "s3://b/runs" and sent["AWS_ENDPOINT_URL"].endswith(":9")


def test_a_node_without_credentials_for_the_bucket_refuses_in_one_line(monkeypatch, tmp_path):
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")  # no instance metadata here
    why = envs.credentials_refusal("abc123", "s3://bucket/runs")
    assert why.startswith("node abc123: no AWS credentials for RUNS_DIR=s3://bucket/runs")
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "id")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "key")
    assert envs.credentials_refusal("abc123", "s3://bucket/runs") is None
    monkeypatch.delenv("AWS_ACCESS_KEY_ID")
    assert envs.credentials_refusal("abc123", None) is None  # a folder: nothing to reach
