"""`quantize` plans its disk: a hub cache on a filesystem too small for the download is refused
before anything is fetched (exit 4, one line naming the fix); the dry run shows disk and time
and exits 4 on the same refusal."""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

SMALL = Path("/dev/shm")  # a real filesystem smaller than Llama-3-70B's 131 GiB download
hub = SMALL / f"hub-test-{os.getpid()}"


def _quantize(tmp_path: Path, *extra: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "HF_HUB_CACHE": str(hub), "RUNS_DIR": str(tmp_path / "runs")}
    env["HF_HUB_OFFLINE"] = "1"  # a download attempted would fail otherwise: none may start
    cmd = [sys.executable, "-m", "pipeline", "quantize", "--model", "llama3-70b", "--recipe"]
    return subprocess.run([*cmd, "fp8", *extra], capture_output=True, text=True, env=env)


@pytest.fixture
def small_hub_cache():
    if not SMALL.is_dir() or shutil.disk_usage(SMALL).free > 100 * 2**30:
        pytest.skip("no filesystem smaller than the download at /dev/shm on this host")
    hub.mkdir(exist_ok=True)
    yield hub
    shutil.rmtree(hub, ignore_errors=True)


def test_a_hub_cache_too_small_for_the_download_is_refused_before_it(small_hub_cache, tmp_path):
    found = _quantize(tmp_path)
    assert found.returncode == 4, found.stderr
    said = found.stderr.strip().splitlines()
    assert len(said) == 1 and "disk:" in said[0] and "HF_HUB_CACHE" in said[0]
    assert not any(small_hub_cache.iterdir())  # nothing fetched


def test_the_dry_run_shows_disk_and_time_and_exits_4_on_the_refusal(small_hub_cache, tmp_path):
    found = _quantize(tmp_path, "--dry-run")
    assert found.returncode == 4
    assert "131.42 GiB  original (hub cache)" in found.stdout
    assert "GiB  artifact" in found.stdout and "\ntime " in found.stdout
