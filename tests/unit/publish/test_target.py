"""Publish targets: hub repo ids and file:// folders, or one clear line."""

from pathlib import Path

import pytest

from pipeline.core.errors import UserError
from pipeline.publish.target import parse
from tests.conftest import REPO, cli
from tests.unit.cli.test_main import finished_quantize


def test_hub_targets():
    for text in ("acme/tiny-llama-fp8", "hf://acme/tiny-llama-fp8"):
        t = parse(text)
        assert t.kind == "hf" and t.repo_id == "acme/tiny-llama-fp8"
        assert t.display == "hf://acme/tiny-llama-fp8" and t.card_name == "acme/tiny-llama-fp8"


def test_file_target_card_name_is_its_last_two_folders():
    t = parse("file:///srv/hub/acme/m-fp8")
    assert (
        t.kind == "file" and t.path == Path("/srv/hub/acme/m-fp8") and t.card_name == "acme/m-fp8"
    )


@pytest.mark.parametrize(
    "text, message",
    [
        (None, "needs a target"),
        ("hf://", "names no repo: use hf://org/name"),
        ("file://relative/x", "absolute path"),
        ("file:///", "folder name"),
        ("s3://bucket/x", "unknown target scheme"),
        ("not a repo", "is not a hub repo id"),
        ("acme/../x", "is not a hub repo id"),
        ("acme/x.git", "is not a hub repo id"),
    ],
)
def test_bad_targets(text, message):
    with pytest.raises(UserError, match=message):
        parse(text)


def test_bad_targets_are_one_line_exit_2(tmp_path):
    for target, message in (
        ("", "publish needs a target"),
        ("not a repo", "is not a hub repo id"),
        ("s3://bucket/x", "unknown target scheme"),
        ("file://relative/path", "absolute path"),
    ):
        result = cli("publish", "--recipe", "fp8", "--repo", target, runs=tmp_path / "runs")
        assert result.returncode == 2, result.stderr
        (line,) = result.stderr.strip().splitlines()
        assert line.startswith("error: ") and message in line, target


def test_a_file_target_never_overlaps_the_pipelines_own_folders(tmp_path, monkeypatch):
    """Publishing copies from the run folder: a target in it, or holding it, could be moved
    aside by a take-over or overwrite a finished artifact."""
    runs = tmp_path / "runs"
    monkeypatch.setenv("RUNS_DIR", str(runs))
    for dest, word in (
        (runs / "tiny-llama" / "fp8" / "artifact", "inside the run root"),
        (runs, "inside the run root"),
        (tmp_path, "contains the run root"),
        (REPO / "exported", "inside the project"),
    ):
        result = cli("publish", "--recipe", "fp8", "--repo", f"file://{dest}", "--force",
                     "--take-over", runs=runs)  # fmt: skip
        assert result.returncode == 2, result.stderr
        (line,) = result.stderr.strip().splitlines()
        assert line.startswith("error: file target") and word in line, line
    assert not runs.exists() and not (REPO / "exported").exists()


def test_two_take_overs_in_one_second_keep_both_old_folders(tmp_path):
    from pipeline.publish.upload import _aside

    dest = tmp_path / "acme" / "m"
    first = _aside(dest)
    first.mkdir(parents=True)
    second = _aside(dest)
    assert second != first and not second.exists() and second.name.startswith("m.replaced-")


def test_force_never_takes_over_a_folder_we_did_not_publish(tmp_path):
    """--force skips the readiness checks only; someone's folder needs --take-over."""
    theirs = tmp_path / "hub" / "acme" / "model"
    theirs.mkdir(parents=True)
    (theirs / "weights.bin").write_bytes(b"someone else's")
    finished_quantize(tmp_path / "runs")  # eval and serve missing: --force ignores that
    result = cli("publish", "--recipe", "fp8", "--repo", f"file://{theirs}", "--force",
                 runs=tmp_path / "runs")  # fmt: skip
    assert result.returncode == 2
    assert "already holds other content" in result.stderr and "--take-over" in result.stderr
    assert [p.name for p in theirs.iterdir()] == ["weights.bin"]
    assert not list(theirs.parent.glob("model.replaced-*"))
