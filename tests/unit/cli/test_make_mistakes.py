"""Mistakes made through `make` that the pipeline cannot see (a variable left empty or out):
refused by the Makefile itself in one line, exit 2, before any command runs."""

import subprocess

import pytest

from tests.conftest import REPO
from tests.unit.cli.test_doc_commands import clean_env


@pytest.mark.parametrize(
    "argv, says",
    [
        (["run", "ARTIFACT="], "ARTIFACT is empty: give a folder or org/name[@revision]"),
        (["quantize", "ARTIFACT= "], "ARTIFACT is empty"),
        (["search"], "make search needs TARGET_BITS=<average bits per weight"),
        (["search", "TARGET_BITS="], "e.g. make search MODEL=tiny-llama TARGET_BITS=6"),
        (["compare", "RECIPES="], "RECIPES is empty: give recipes separated by commas"),
    ],
)
def test_an_empty_or_missing_make_variable_is_one_line_exit_2(argv, says):
    done = subprocess.run(
        ["make", "-s", *argv], cwd=REPO, capture_output=True, text=True, env=clean_env()
    )
    assert done.returncode == 2 and done.stdout == ""
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and says in lines[0], done.stderr


def test_an_artifact_left_out_or_given_is_passed_as_it_is():
    def expanded(*argv: str) -> str:
        done = subprocess.run(
            ["make", "-n", "-s", *argv], cwd=REPO, capture_output=True, text=True, env=clean_env()
        )
        assert done.returncode == 0, done.stderr
        return done.stdout.splitlines()[-1].strip()

    assert "--artifact" not in expanded("run") and "--recipe fp8" in expanded("run")
    assert '--artifact "org/ckpt"' in expanded("run", "ARTIFACT=org/ckpt")
    assert expanded("test", "ARTIFACT=").endswith("--dist loadgroup")  # other targets: no check


def test_makes_own_dry_run_says_it_is_makes():
    """`make quantize --dry-run` is make's -n: it says so, and where the pipeline's plan is."""
    done = subprocess.run(["make", "-s", "quantize", "--dry-run"], cwd=REPO, capture_output=True,
                          text=True, env=clean_env())  # fmt: skip
    assert done.returncode == 0
    assert "make prints the commands below and runs none" in done.stderr
    assert "make quantize ARGS=--dry-run" in done.stderr


def test_pins_touched_but_unchanged_rebuild_no_env():
    """A fresh clone or a `git pull` leaves every pin file newer than the envs' stamps; the
    stamps' recorded sha256s still hold, so make installs nothing (it would reinstall torch)."""
    import os

    stamps = [REPO / ".venv" / ".installed", *(REPO / ".venv-serve").glob(".installed-*")]
    if len(stamps) < 2 or not all(s.is_file() for s in stamps):
        pytest.skip("the envs are not built in this checkout (make setup)")
    for stamp in stamps:
        for line in stamp.read_text().splitlines():
            os.utime(REPO / line.split(maxsplit=1)[1])  # newer than the stamp, same bytes
    env = clean_env()  # the host as make sees it: a stand-in nvidia-smi would ask a CUDA env
    env["PATH"] = os.pathsep.join(p for p in env["PATH"].split(os.pathsep) if "gpu_hosts" not in p)
    done = subprocess.run(["make", "-n", "setup"], cwd=REPO, capture_output=True, text=True,
                          env=env)  # fmt: skip
    assert done.returncode == 0 and "pip install" not in done.stdout, done.stdout
