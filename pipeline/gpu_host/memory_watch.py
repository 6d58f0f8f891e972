"""What one step held on the GPUs, read from nvidia-smi while it runs (no torch in this process:
a CUDA context here would itself hold memory, and poison the steps' forks).

    with Watch() as w:
        subprocess.run(step)
    w.peak_mib, w.left_mib      # MiB above the used memory before the step, at most / after it

`left_mib` is read after the step's process group ended; a step that leaves a process holding
memory (a vLLM engine's worker, a forked stage) shows here, and gpu-check fails its row.
"""

import shutil
import subprocess
import threading
import time

from pipeline.core import devices

INTERVAL_S = 0.5
LEFT_TOLERANCE_MIB = 64  # the driver's own bookkeeping moves by a few MiB; a context is ~500
SETTLE_S = 5.0  # a process's memory is returned shortly after it exits: read again until then


def used_mib() -> int | None:
    """Memory used on the GPUs this process's steps may use (CUDA_VISIBLE_DEVICES: nvidia-smi
    lists every GPU of the host, and another job's use of the others is no step's), summed.
    None: no nvidia-smi answer, or no GPU visible."""
    if not shutil.which("nvidia-smi"):
        return None
    try:
        query = ["nvidia-smi", "--query-gpu=index,memory.used", "--format=csv,noheader,nounits"]
        out = subprocess.run(query, capture_output=True, text=True, timeout=20, check=True).stdout
    except (subprocess.SubprocessError, OSError):
        return None
    return visible_sum(out, {g.index for g in devices.seen()})


def visible_sum(query_output: str, visible: set[int]) -> int | None:
    """The memory.used of the `visible` GPUs (nvidia-smi's host indices) in the output of
    `--query-gpu=index,memory.used --format=csv,noheader,nounits`."""
    values = []
    for line in query_output.splitlines():
        index, _, used = line.partition(",")
        if used.strip() and int(index) in visible:
            values.append(int(float(used)))
    return sum(values) if values else None


class Watch:
    def __init__(self, interval_s: float = INTERVAL_S):
        self.interval_s = interval_s
        self.before: int | None = None
        self.peak_mib: int | None = None
        self.left_mib: int | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def __enter__(self) -> "Watch":
        self.before = used_mib()
        if self.before is not None:
            self.peak_mib = 0
            self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        if self.before is None:
            return
        self._stop.set()
        self._thread.join()
        deadline = time.monotonic() + SETTLE_S
        while True:
            after = used_mib()
            self.left_mib = None if after is None else max(0, after - self.before)
            if self.left_mib is None or self.left_mib <= LEFT_TOLERANCE_MIB:
                return
            if time.monotonic() > deadline:
                return
            time.sleep(self.interval_s)

    @property
    def freed(self) -> bool:
        return self.left_mib is not None and self.left_mib <= LEFT_TOLERANCE_MIB

    def _sample(self) -> None:
        while not self._stop.wait(self.interval_s):
            now = used_mib()
            if now is not None and self.before is not None:
                self.peak_mib = max(self.peak_mib or 0, now - self.before)
