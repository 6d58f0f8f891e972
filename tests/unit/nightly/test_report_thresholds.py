"""`make report` judges regressions with the matrix's thresholds, as the nightly did (its exit
code), and says so when the matrix was edited since the run."""

import yaml

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
