"""Every module lives in a package that names its purpose: the package root holds only its
entry points."""

from pipeline.core.paths import REPO


def test_no_module_at_the_package_root_but_its_entry_points():
    loose = {p.name for p in (REPO / "pipeline").glob("*.py")} - {"__init__.py", "__main__.py"}
    assert not loose, f"move {sorted(loose)} into the package it belongs to"


def test_the_cli_entry_point_stays_short():
    lines = (REPO / "pipeline" / "cli" / "main.py").read_text().splitlines()
    assert len(lines) <= 150, "a command's parser and handler go in pipeline/cli/commands/"
