"""A starting vLLM server said on the terminal phase by phase, from its log as it grows."""

from pipeline.engines.vllm import startup_phases
from pipeline.engines.vllm.startup_phases import StartupPhases
from tests.conftest import REPO

RECORDED = REPO / "tests" / "gpu_hosts" / "vllm-h100-server.log"  # vLLM 0.32 on one H100


def test_each_phase_is_said_once_as_the_log_reaches_it(tmp_path, capsys):
    log = tmp_path / "server.log"
    lines = RECORDED.read_text().splitlines(keepends=True)
    cut = next(i for i, line in enumerate(lines) if "Loading weights took" in line)
    log.write_text("".join(lines[:cut]) + lines[cut][:20])  # a line still being written
    phases = StartupPhases(log, "quantized", started=0.0)
    first = phases.poll(now=12.0)
    assert first == ["  vLLM quantized: config read, engine process starting (by 12 s)"]
    assert phases.poll(now=15.0) == []  # nothing new, and under the heartbeat
    log.write_text("".join(lines))
    rest = phases.poll(now=60.0)
    assert [line.split(": ", 1)[1] for line in rest] == [
        "weights loaded (by 60 s)",
        "profiling memory (by 60 s)",
        "CUDA graphs captured (by 60 s)",
        "KV cache allocated, warmed up (by 60 s)",
        "serving (by 60 s)",
    ]
    assert capsys.readouterr().err.splitlines() == first + rest


def test_a_start_up_that_says_nothing_new_still_says_it_is_starting(tmp_path):
    phases = StartupPhases(tmp_path / "not-yet.log", "original", started=100.0)
    assert phases.poll(now=105.0) == []  # no log yet, and not silent for long
    assert phases.poll(now=100.0 + startup_phases.HEARTBEAT_S) == [
        f"  vLLM original: still starting ({startup_phases.HEARTBEAT_S:.0f} s)"
    ]
