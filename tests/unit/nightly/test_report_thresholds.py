"""`make report` judges regressions with the matrix's thresholds, as the nightly did (its exit
code), and says so when the matrix was edited since the run."""

import pytest
import yaml

from pipeline.core.errors import UserError
from pipeline.nightly import matrix, report


def _matrix(tmp_path, sigma: float):
    path = tmp_path / f"m{sigma}.yaml"
    data = {"models": ["tiny-llama"], "recipes": ["fp8"], "thresholds": {"quality_sigma": sigma}}
    path.write_text(yaml.safe_dump(data))
    return str(path)


def test_the_reports_thresholds_are_the_matrixs(tmp_path, capsys):
    tight = _matrix(tmp_path, 1.5)
    _, sha = matrix.load(tight)
    found = report.thresholds(tight, {"id": "r1", "matrix_sha": sha})
    assert found.quality_sigma == 1.5 and found != matrix.Thresholds()
    assert capsys.readouterr().err == ""


def test_a_matrix_edited_since_the_run_is_read_and_said(tmp_path, capsys):
    found = report.thresholds(_matrix(tmp_path, 2.0), {"id": "r1", "matrix_sha": "0" * 64})
    assert found.quality_sigma == 2.0
    assert "edited since run r1" in capsys.readouterr().err


def test_a_report_with_no_store_creates_none(tmp_path, monkeypatch):
    """`make report` before any night: one line naming the file and the next step; no empty
    store left behind for the next report to find."""
    monkeypatch.delenv("NIGHTLY_DB", raising=False)
    db = tmp_path / "runs" / "nightly.db"
    with pytest.raises(UserError, match=f"no nightly store at {db} \\(--db\\): run `make nightly`"):
        report.write(f"sqlite:///{db}", tmp_path / "reports")
    assert not db.exists() and not (tmp_path / "reports").exists()
