"""`make gpu-bundle`, then its check on an offline GPU host simulated on this CPU host
(tests/gpu_hosts/offline_host.py): a fresh venv holding only the image's packages, a torch whose
version (2.11.0, as on the lent H200) vLLM 0.32 does not take, no network (`unshare -n` where
this host lets root make a network namespace; pip --no-index always). The GPU itself cannot be
simulated: the check runs with --cpu, and every row says so; on a GPU host the same check runs
for real (docs/figures.md has its table)."""

import json
import os
import shutil
import subprocess

from tests.conftest import REPO
from tests.gpu_hosts import offline_host


def _no_network() -> list[str]:
    ok = shutil.which("unshare") and subprocess.run(["unshare", "-n", "true"]).returncode == 0
    return ["unshare", "-n"] if ok else []


def test_the_bundle_installs_offline_and_its_runnable_rows_hold(tmp_path):
    bundle = tmp_path / "bundle"
    made = subprocess.run(["make", "-s", "gpu-bundle", f"BUNDLE={bundle}", "BUNDLE_PYTHON=3.11"],
                          cwd=REPO, capture_output=True, text=True, timeout=600)  # fmt: skip
    assert made.returncode == 0, made.stderr[-2000:]
    record = json.loads((bundle / "bundle.json").read_text())
    assert record["bytes"] <= 64 * 2**20 and "llmcompressor" in record["carried"]
    assert "torch" not in record["carried"] and "transformers" in record["kept_from_target"]

    target = REPO / "requirements" / "gpu-targets" / "h200-image.txt"
    python = offline_host.make(tmp_path / "host", target)
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "VIRTUAL_ENV", "PIPELINE_CACHE", "RUNS_DIR")}  # fmt: skip
    path = os.pathsep.join(p for p in env["PATH"].split(os.pathsep) if ".venv" not in p)
    env |= {"PYTHON": str(python), "OUT": str(tmp_path), "TMPDIR": str(tmp_path), "PATH": path}
    cmd = [*_no_network(), "bash", str(bundle / "check.sh"), "--cpu", "--only", "wheels,fp8,vllm"]
    done = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    table = json.loads((tmp_path / "gpu-check.json").read_text())
    rows = {r["step"]: r for r in table["steps"]}
    assert table["simulated_on_cpu"] and table["holds"]
    assert rows["carried wheels"]["holds"] is True
    assert "requirements hold on torch 2.11.0" in rows["carried wheels"]["detail"]
    assert rows["quantize fp8 (model-free)"]["holds"] is True
    for label in ("eval vllm fp8", "serve fp8 (paired)"):  # a reason, not a failure
        assert rows[label]["holds"] is None and rows[label]["status"] == "not run"
        assert rows[label]["detail"].startswith("vLLM 0.32.0 needs torch 2.13.0; this host has "
                                                "2.11.0:")  # fmt: skip
    assert "simulated on the CPU (--cpu)" in done.stdout
