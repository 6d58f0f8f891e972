"""What a starting vLLM server is doing, read from its log as it grows: the minutes of a start-up
(imports, weights, profiling, CUDA graphs) said on the terminal as each phase begins, and a line
every HEARTBEAT_S while none does, never minutes of silence. The phases are vLLM 0.32's own log
lines (tests/gpu_hosts/vllm-h100-server.log, and its CPU build's)."""

import time
from pathlib import Path

from pipeline.core.quiet import terminal

# (the log line's words, what it means); in the order vLLM reaches them
PHASES = (
    ("Resolved architecture", "config read, engine process starting"),
    ("Initializing a V1 LLM engine", "engine starting"),
    ("Starting to load model", "loading weights"),
    ("Loading weights took", "weights loaded"),
    ("CUDA graph memory profiling", "profiling memory"),
    ("Capturing CUDA graph", "capturing CUDA graphs"),
    ("Graph capturing finished", "CUDA graphs captured"),
    ("init engine (profile, create kv cache, warmup model) took", "KV cache allocated, warmed up"),
    ("Starting vLLM server on", "serving"),
)
HEARTBEAT_S = 8.0  # within the ~10 s a user waits before wondering (polled every ~0.5 s)


class StartupPhases:
    """Reads the new part of `log` on each `poll()` and says each phase once."""

    def __init__(self, log: Path, name: str, started: float):
        self.log, self.name, self.started = log, name, started
        self.offset = 0
        self.said: set[str] = set()
        self.last_said = started
        self.partial = ""

    def poll(self, now: float | None = None) -> list[str]:
        """The lines said now (also printed)."""
        now = time.monotonic() if now is None else now
        lines = []
        for phase in self._new_phases():
            lines.append(f"  vLLM {self.name}: {phase} (by {now - self.started:.0f} s)")
        if not lines and now - self.last_said >= HEARTBEAT_S:
            lines.append(f"  vLLM {self.name}: still starting ({now - self.started:.0f} s)")
        if lines:
            self.last_said = now
            print("\n".join(lines), file=terminal(), flush=True)
        return lines

    def _new_phases(self) -> list[str]:
        try:
            with open(self.log, errors="replace") as f:
                f.seek(self.offset)
                text = self.partial + f.read()
                self.offset = f.tell()
        except FileNotFoundError:
            return []
        whole, _, self.partial = text.rpartition("\n")  # a line still being written waits
        found = []
        for words, phase in PHASES:
            if phase not in self.said and words in whole:
                self.said.add(phase)
                found.append(phase)
        return found
