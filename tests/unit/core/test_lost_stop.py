"""A stop raised where CPython drops it (a `__del__` running when SIGTERM lands: "Exception
ignored in …") is raised again at the next progress update, once."""

import gc
import os
import signal
import sys

import pytest

from pipeline.core import progress, stopping
from pipeline.core.errors import Terminated


class _SignalsInDel:
    def __del__(self):
        os.kill(os.getpid(), signal.SIGTERM)
        sum(range(1000))  # bytecode to run the handler on, inside __del__


def test_a_stop_swallowed_in_del_is_raised_at_the_next_update(monkeypatch):
    dropped = []  # what CPython hands sys.unraisablehook (it prints it, by default)
    monkeypatch.setattr(sys, "unraisablehook", lambda u: dropped.append(u.exc_type))
    with stopping.on_sigterm():
        bar = progress.bar(total=3)
        _SignalsInDel()  # collected at once: its __del__ takes the SIGTERM
        gc.collect()
        assert dropped == [Terminated]  # the stop, dropped
        with pytest.raises(Terminated):
            bar.update()
        bar.update()  # raised once: the bar goes on
        bar.close()
