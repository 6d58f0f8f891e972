"""Progress bars that stay readable in CI logs: frequent on a terminal, every 15 s otherwise."""

import sys


def bar(iterable=None, **kwargs):
    from tqdm import tqdm

    tty = sys.stderr.isatty()
    kwargs.setdefault("mininterval", 0.5 if tty else 15.0)
    kwargs.setdefault("dynamic_ncols", True)
    return tqdm(iterable, **kwargs)
