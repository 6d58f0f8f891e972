"""SIGTERM stops a command the way Ctrl-C does: one line, exit 143, the stage's entry recorded
`interrupted`, its vLLM servers stopped, nothing half-written marked done. Python's default for
SIGTERM is to die on the spot, which left a manifest's entry `running` for good.

    with stopping.on_sigterm():
        ...  # SIGTERM raises errors.Terminated (a KeyboardInterrupt) here

A stage's forked process (own_process) gets the parent's SIGTERM forwarded; after its first
stop it ignores both signals, so recording the stop is never cut short by a second one.
"""

import contextlib
import signal
import sys
import threading
from collections.abc import Iterator

from pipeline.core.errors import Terminated


@contextlib.contextmanager
def on_sigterm() -> Iterator[None]:
    if threading.current_thread() is not threading.main_thread():  # signals: main thread only
        yield
        return
    before, hook = signal.signal(signal.SIGTERM, _raise), sys.unraisablehook
    _watch_dropped()
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, before)
        sys.unraisablehook = hook


def reclaim() -> None:
    """SIGTERM raises Terminated again after a library set its own handler: ray.init's calls
    sys.exit(15) at once, so a nightly driver's running cells were never stopped."""
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, _raise)


def interruptible() -> None:
    """Python's own SIGINT handler, in the main thread. A process a background job starts
    (`nohup … &`, cron, a script's `&`) inherits SIGINT ignored, and Python then drops a
    KeyboardInterrupt raised through its interrupt flag, which is how Ray's cancel stops a
    running task: a nightly started that way, then stopped, left its cells running to the end."""
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGINT, signal.default_int_handler)


def once_in_child() -> None:
    """In a stage's forked process: the first SIGINT or SIGTERM stops it, later ones are
    ignored while it records the stop (the parent kills it if that hangs)."""
    signal.signal(signal.SIGTERM, _raise_once)
    signal.signal(signal.SIGINT, _raise_once)
    _watch_dropped()


def as_received(e: KeyboardInterrupt) -> KeyboardInterrupt:
    """The stop as it came: Terminated where this process got SIGTERM, though a library handed
    it on as a plain KeyboardInterrupt (Ray's waits turn whatever a signal handler raised into
    one: a nightly driver stopped by SIGTERM read as Ctrl-C, exit 130)."""
    return Terminated() if _RECEIVED and not isinstance(e, Terminated) else e


_RECEIVED: list[int] = []  # SIGTERM arrived in this process
_DROPPED: list[BaseException] = []  # a stop raised where CPython drops exceptions


def check() -> None:
    """Raise again a stop that CPython dropped. It runs a signal handler wherever the main
    thread is, a `__del__` or a weakref callback included, and there it hands the handler's
    exception to sys.unraisablehook ("Exception ignored in …") and goes on as if no stop came
    (the likely cause of an eval seen once to score on after SIGTERM). Progress bars call this
    on each update, so a dropped stop is raised at the next step."""
    if _DROPPED:
        raise _DROPPED.pop()


def _watch_dropped() -> None:
    """Note stops handed to sys.unraisablehook, then let the hook before say them as usual."""
    before = sys.unraisablehook

    def hook(unraisable) -> None:
        if isinstance(unraisable.exc_value, KeyboardInterrupt):
            _DROPPED.append(unraisable.exc_value)
        before(unraisable)

    sys.unraisablehook = hook


def _raise(signum, frame) -> None:
    _RECEIVED.append(signum)
    raise Terminated()


def _raise_once(signum, frame) -> None:
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    raise Terminated() if signum == signal.SIGTERM else KeyboardInterrupt()
