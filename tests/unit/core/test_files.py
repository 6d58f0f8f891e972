import json
import os

import pytest

from pipeline.core.errors import UserError
from pipeline.core.files import exclusive_lock, hash_folder, staging_dir, write_json_atomic


def test_atomic_json_leaves_no_temp_files(tmp_path):
    write_json_atomic(tmp_path / "m.json", {"a": 1})
    write_json_atomic(tmp_path / "m.json", {"a": 2})
    assert json.loads((tmp_path / "m.json").read_text()) == {"a": 2}
    assert os.listdir(tmp_path) == ["m.json"]


def test_staging_dir_appears_only_when_complete(tmp_path):
    final = tmp_path / "artifact"
    with pytest.raises(RuntimeError), staging_dir(final) as tmp:
        (tmp / "half.bin").write_bytes(b"x")
        raise RuntimeError("killed half way")
    assert not final.exists() and os.listdir(tmp_path) == []
    with staging_dir(final) as tmp:
        (tmp / "whole.bin").write_bytes(b"x")
        assert not final.exists()
    assert os.listdir(final) == ["whole.bin"]


def test_stale_partial_from_a_killed_run_is_cleaned_up(tmp_path):
    (tmp_path / ".artifact.partial-99999").mkdir()
    with staging_dir(tmp_path / "artifact"):
        pass
    assert sorted(os.listdir(tmp_path)) == ["artifact"]


def test_second_holder_of_a_run_lock_gets_a_clear_error(tmp_path):
    with exclusive_lock(tmp_path / ".lock", "run directory x"):
        with pytest.raises(UserError, match="in use by another process"):
            with exclusive_lock(tmp_path / ".lock", "run directory x"):
                pass


def test_folder_hash_follows_content(tmp_path):
    (tmp_path / "w.bin").write_bytes(b"abc")
    before = hash_folder(tmp_path)
    assert hash_folder(tmp_path) == before
    (tmp_path / "w.bin").write_bytes(b"abd")
    assert hash_folder(tmp_path) != before


def test_folder_hash_ignores_bytecode(tmp_path):
    """A local lm-eval task's helper module gets __pycache__/ on its first run."""
    (tmp_path / "utils.py").write_text("x = 1\n")
    before = hash_folder(tmp_path)
    (tmp_path / "__pycache__").mkdir()
    (tmp_path / "__pycache__" / "utils.cpython-311.pyc").write_bytes(b"\x00")
    assert hash_folder(tmp_path) == before


def test_a_killed_holder_leaves_the_lock_free(tmp_path):
    """Another process holds the run lock: refused in one line; killed, the lock is free (the
    kernel drops an flock with its holder, nothing to clean up)."""
    import subprocess
    import sys

    from tests.conftest import REPO

    hold = (
        "import sys, time; from pathlib import Path; from pipeline.core.files import "
        "exclusive_lock\nwith exclusive_lock(Path(sys.argv[1]), 'x'):\n"
        "    print('held', flush=True); time.sleep(60)"
    )
    holder = subprocess.Popen(
        [sys.executable, "-c", hold, str(tmp_path / ".lock")],
        cwd=REPO,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout.readline().strip() == "held"
        with pytest.raises(UserError, match=r"run directory x is in use by another process"):
            with exclusive_lock(tmp_path / ".lock", "run directory x"):
                pass
    finally:
        holder.kill()
        holder.wait()
    with exclusive_lock(tmp_path / ".lock", "run directory x"):
        pass
