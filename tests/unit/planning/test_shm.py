"""/dev/shm for jobs of several processes (pipeline/planning/shm.py): what vLLM maps there, read
off vLLM's own MessageQueue in the serving env, and the plan's refusal under a container's
64 MiB /dev/shm (a tmpfs of that size mounted over /dev/shm in a mount namespace of the test's
own, as Docker gives one; the GPUs are the stand-in nvidia-smi's 8 × H100)."""

import json
import os
import shutil
import subprocess
import sys

import pytest

from pipeline.engines.vllm import serving_env, shm_rings
from pipeline.planning import shm
from tests.conftest import REPO
from tests.unit.core.test_devices import STANDIN

# vLLM's queues as its executor and workers make them: the scheduler's broadcast to 4 workers,
# one worker's response queue, a TP group of 4's broadcaster (create_from_process_group)
MAPPED = """
import json, os
from vllm.distributed.device_communicators.shm_broadcast import MessageQueue
queues = [MessageQueue(4, 4, max_chunk_bytes=16 * 2**20), MessageQueue(1, 1),
          MessageQueue(3, 3, max_chunk_bytes=1 << 22, max_chunks=6)]
sizes = [os.stat("/dev/shm/" + q.buffer.shared_memory.name).st_size for q in queues]
print(json.dumps(sizes))
"""


def test_the_bytes_counted_are_those_vllms_queues_map():
    if not serving_env.available():
        pytest.skip("serving env not built (make setup)")
    done = subprocess.run([str(serving_env.SERVE_PYTHON), "-c", MAPPED], capture_output=True,
                          text=True, timeout=300)  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    broadcast, response, tp_group = json.loads(done.stdout.strip().splitlines()[-1])
    assert broadcast == shm_rings.ring_bytes(4, 16 * shm.MIB, 10)
    assert response == shm_rings.ring_bytes(1, 24 * shm.MIB, 10)
    assert tp_group == shm_rings.ring_bytes(3, 4 * shm.MIB, 6)
    assert shm_rings.vllm_bytes(4) == broadcast + 4 * response + tp_group
    assert shm_rings.vllm_bytes(1) == 0  # one process: no queue


def _in_a_64_mib_container(argv: list[str], tmp_path) -> subprocess.CompletedProcess:
    if not shutil.which("unshare"):
        pytest.skip("no unshare here: a mount namespace of its own is needed")
    probe = subprocess.run(["unshare", "--mount", "true"], capture_output=True)
    if probe.returncode != 0:
        pytest.skip(f"unshare --mount refused here: {probe.stderr.decode()[:200]}")
    env = {**os.environ, "PATH": f"{STANDIN}{os.pathsep}{os.environ['PATH']}",
           "STANDIN_GPUS": "h100x8", "RUNS_DIR": str(tmp_path / "runs")}  # fmt: skip
    env.pop("CUDA_VISIBLE_DEVICES", None)
    command = " ".join([sys.executable, "-m", "pipeline", *argv])
    script = f"mount -t tmpfs -o size=64m tmpfs /dev/shm && exec {command}"
    return subprocess.run(["unshare", "--mount", "sh", "-c", script], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=300)  # fmt: skip


def test_a_containers_default_shm_is_refused_before_loading_with_the_flag_that_fixes_it(tmp_path):
    served = _in_a_64_mib_container(
        ["serve", "--model", "llama3-70b", "--recipe", "fp8", "--dry-run"], tmp_path
    )
    assert served.returncode == 4, served.stderr[-2000:]
    assert (
        "vLLM (original at TP 2, fp8 at TP 2) maps 1.30 GiB in /dev/shm, which has 64 MiB free "
        "(a container's default is 64 MiB): run the container with --ipc=host or --shm-size=2g"
    ) in served.stderr
    quantized = _in_a_64_mib_container(
        ["quantize", "--model", "llama3-8b", "--recipe", "gptq", "--nproc", "2", "--dry-run"],
        tmp_path,
    )
    assert quantized.returncode == 4, quantized.stderr[-2000:]
    assert "--nproc 2 (compressed-tensors' shared offload) maps 14.96 GiB in /dev/shm" in (
        quantized.stderr
    )
