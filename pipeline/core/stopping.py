"""SIGTERM stops a command the way Ctrl-C does: one line, exit 130, the stage's entry recorded
`interrupted`, its vLLM servers stopped, nothing half-written marked done. Python's default for
SIGTERM is to die on the spot, which left a manifest's entry `running` for good.

    with stopping.on_sigterm():
        ...  # SIGTERM raises errors.Terminated (a KeyboardInterrupt) here

A stage's forked process (own_process) gets the parent's SIGTERM forwarded; after its first
stop it ignores both signals, so recording the stop is never cut short by a second one.
"""

import contextlib
import signal
import threading
from collections.abc import Iterator

from pipeline.core.errors import Terminated


@contextlib.contextmanager
def on_sigterm() -> Iterator[None]:
    if threading.current_thread() is not threading.main_thread():  # signals: main thread only
        yield
        return
    before = signal.signal(signal.SIGTERM, _raise)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, before)


def once_in_child() -> None:
    """In a stage's forked process: the first SIGINT or SIGTERM stops it, later ones are
    ignored while it records the stop (the parent kills it if that hangs)."""
    signal.signal(signal.SIGTERM, _raise_once)
    signal.signal(signal.SIGINT, _raise_once)


def _raise(signum, frame) -> None:
    raise Terminated()


def _raise_once(signum, frame) -> None:
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    raise Terminated() if signum == signal.SIGTERM else KeyboardInterrupt()
