"""RUNS_DIR's forms through the command line: each mistake is refused before any stage runs
(`--dry-run` too), exit 2 with one `error: RUNS_DIR=…` line and nothing written anywhere; the
forms people mean (a relative or absolute folder, s3://bucket[/prefix]) still run."""

import pytest

from pipeline.cli.main import main
from pipeline.core import paths, store_transport
from tests.conftest import REPO, cli

MISTAKES = {
    "s3//bucket/runs": "not a URL (s3://bucket/prefix) nor a folder",  # was ./s3/bucket/runs
    "runs ": "'runs ': whitespace around it",  # was a folder named `runs `
    "runs\n": "'runs\\n': whitespace around it",  # was refused after the whole quantize
    " /srv/runs": "' /srv/runs': whitespace around it",
    "ru\tns": "'ru\\tns': whitespace around it or a control character in it",
    "http://example.com/runs": "http:// cannot hold run folders: give a folder or an object",
    "https://example.com/runs": "https:// cannot hold run folders",
    "file:///srv/runs": "file:// cannot hold run folders",
    "memory://runs": "memory:// cannot hold run folders",
    "s3:///x": "no bucket (s3://bucket/prefix)",  # was ParamValidationError, exit 1
    "s3://Bad_Bucket/x": "Bad_Bucket is no S3 bucket name (3–63 lowercase letters",
    "s3://ab/x": "ab is no S3 bucket name",
    f"s3://{'a' * 64}/x": f"{'a' * 64} is no S3 bucket name",
    "s3://-bucket/x": "-bucket is no S3 bucket name",
    "s3://my..bucket/x": "my..bucket is no S3 bucket name",
    "s3://192.168.1.10/x": "192.168.1.10 is no S3 bucket name",
    "s3://bucket//x": "an empty, . or .. folder in the prefix '/x'",
    "s3://bucket/a/../x": "an empty, . or .. folder in the prefix 'a/../x'",
    "s3://bucket/x?versionId=1": "a query or fragment (?…, #…) names no folder",
    "s3://AKIA:wJalrXUtnFEMI@bucket/x": "credentials belong in the environment",
}


@pytest.mark.parametrize("value", MISTAKES, ids=repr)
def test_a_runs_dir_mistake_is_one_line_before_any_work(tmp_path, value):
    env = {"RUNS_DIR": value, "PIPELINE_CACHE": str(tmp_path / "cache")}
    result = cli("quantize", "--recipe", "fp8", "--dry-run", runs=tmp_path, env=env, fresh=True,
                 timeout=120)  # fmt: skip
    assert result.returncode == 2, result.stderr
    assert result.stderr.startswith("error: RUNS_DIR=") and result.stderr.count("\n") == 1
    assert MISTAKES[value] in result.stderr, result.stderr
    assert "wJalrXUtnFEMI" not in result.stderr
    assert list(tmp_path.iterdir()) == []  # not even the cache
    assert not (REPO / "s3").exists() and not (REPO / "runs ").exists()


def test_a_mistake_is_refused_before_a_quantize_not_after(tmp_path):
    """Without --dry-run, too: the refusal comes before the model is built (seconds, not the
    minutes the quantize takes)."""
    env = {"RUNS_DIR": f"{tmp_path}/runs\n", "PIPELINE_CACHE": str(tmp_path / "cache")}
    result = cli("quantize", "--recipe", "fp8", runs=tmp_path, env=env, fresh=True, timeout=60)
    assert result.returncode == 2, result.stderr
    shown = repr(f"{tmp_path}/runs\n")
    assert result.stderr == (
        f"error: RUNS_DIR={shown}: whitespace around it or a control character in it (a copied "
        "line break?): give the folder or s3://bucket/prefix alone\n"
    )
    assert list(tmp_path.iterdir()) == []


@pytest.fixture
def runs_dir(monkeypatch, tmp_path):
    """Sets RUNS_DIR for a command run in this process, in an empty working folder."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("PIPELINE_CACHE", str(tmp_path / "cache"))
    paths._checked.cache_clear(), store_transport.open_store.cache_clear()
    yield lambda value: monkeypatch.setenv("RUNS_DIR", value)
    paths._checked.cache_clear(), store_transport.open_store.cache_clear()


@pytest.mark.parametrize("form", ["./runs", "runs/", "{tmp}/abs/runs", "{tmp}/my runs"])
def test_folders_still_run(runs_dir, tmp_path, capsys, form):
    runs_dir(form.format(tmp=tmp_path))
    assert main(["quantize", "--recipe", "fp8", "--dry-run"]) == 0, capsys.readouterr().err
    where = tmp_path / form.format(tmp=tmp_path).removeprefix("./").rstrip("/")
    assert f"under {where};" in capsys.readouterr().out


@pytest.mark.parametrize("prefix", ["/prefix", "/a/b/", ""])
def test_buckets_still_run(runs_dir, s3, monkeypatch, capsys, prefix):
    for key, value in s3.env.items():
        monkeypatch.setenv(key, value)
    url = s3.bucket() + prefix
    runs_dir(url)
    assert main(["quantize", "--recipe", "fp8", "--dry-run"]) == 0, capsys.readouterr().err
    assert paths.runs_url() == url.removesuffix("/")
