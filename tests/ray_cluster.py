"""A Ray cluster of several nodes on this host, as a team starts one on many (FACTS.md,
"Clusters on one machine"): a head without GPUs and worker nodes each started with `ray start
--num-gpus N --block` — Ray accepts declared GPUs without devices. Token authentication stays
on, as `ray start --head` sets it by default: every process gets the cluster's token through
RAY_AUTH_TOKEN (never ~/.ray, so nothing of the user's is touched). Each node is its own process
group: `kill(i)` loses worker node i as a crashed machine would; `stop()` ends only these nodes
(never `ray stop`, which ends every Ray on the host)."""

import functools
import json
import os
import secrets
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

RAY = Path(sys.executable).parent / "ray"


class Cluster:
    def __init__(self, workers: int = 2, gpus: int = 2, cpus: int = 1, env: dict | None = None):
        """env: what every node's environment adds (the object store's credentials: they
        never travel with a task)."""
        self.root = Path(tempfile.mkdtemp(prefix="ray-", dir="/tmp"))  # short socket paths
        self.port = _free_port()
        self.address = f"127.0.0.1:{self.port}"
        self.env = {
            **os.environ,
            **(env or {}),
            "RAY_AUTH_MODE": "token",
            "RAY_AUTH_TOKEN": secrets.token_hex(32),
            "RAY_USAGE_STATS_ENABLED": "0",
        }
        self.nodes: list[subprocess.Popen] = []
        head = [f"--port={self.port}", "--head", "--num-gpus=0", "--num-cpus=0",
                "--include-dashboard=false", f"--temp-dir={self.root}"]  # fmt: skip
        self._start(head)
        self.wait_for(1)
        for i in range(workers):  # one at a time: a raylet has 30 s to register, on 2 busy cores
            self._start([f"--address={self.address}", f"--num-gpus={gpus}", f"--num-cpus={cpus}"])
            self.wait_for(2 + i)

    def _start(self, args: list[str]) -> None:
        log = open(self.root / f"node{len(self.nodes)}.log", "w")
        cmd = [str(RAY), "start", "--disable-usage-stats", "--block", *args]
        # SIGINT ignored, as every process a background job starts has it (`nohup … &`, cron,
        # a script's `&`): Ray's workers inherit it, and the nightly's cancel must still land
        ignored = functools.partial(signal.signal, signal.SIGINT, signal.SIG_IGN)
        self.nodes.append(subprocess.Popen(cmd, env=self.env, stdout=log, stderr=log,
                                           start_new_session=True, preexec_fn=ignored))  # fmt: skip

    def alive(self) -> list[dict]:
        """`ray.nodes()`'s alive entries, asked from a short-lived driver."""
        code = f"import json, ray; ray.init(address={self.address!r}, log_to_driver=False); "
        code += "print(json.dumps([n for n in ray.nodes() if n['Alive']]))"
        out = subprocess.run([sys.executable, "-c", code], env=self.env, capture_output=True,
                             text=True, timeout=120)  # fmt: skip
        lines = [x for x in out.stdout.splitlines() if x.startswith("[")]
        return json.loads(lines[-1]) if lines else []

    def wait_for(self, count: int, timeout: float = 180) -> None:
        deadline = time.time() + timeout
        while time.time() < deadline:
            if len(self.alive()) == count:
                return
            time.sleep(2)
        raise TimeoutError(f"{count} Ray nodes not up in {timeout:g} s: see {self.root}")

    def kill(self, i: int) -> None:
        """Worker node i (1-based: 0 is the head) dies, with every process it started."""
        os.killpg(self.nodes[i].pid, signal.SIGKILL)

    def stop(self) -> None:
        for node in reversed(self.nodes):
            try:
                os.killpg(node.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        subprocess.run(["pkill", "-9", "-f", str(self.root)], check=False)  # daemons it left


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
