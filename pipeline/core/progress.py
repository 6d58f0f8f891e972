"""Progress bars that stay readable in CI logs: frequent on a terminal, every 15 s otherwise.
Each update is also where a stop that a library swallowed is raised again (stopping.check)."""

import functools

from pipeline.core import stopping
from pipeline.core.quiet import terminal


def bar(iterable=None, **kwargs):
    out = kwargs.setdefault("file", terminal())  # ours on the terminal, libraries' in the log
    tty = out.isatty()
    kwargs.setdefault("mininterval", 0.5 if tty else 15.0)
    kwargs.setdefault("dynamic_ncols", True)
    return _checked_tqdm()(iterable, **kwargs)


@functools.cache
def _checked_tqdm():
    from tqdm import tqdm  # on first use: tqdm pulls in more than a CLI's --help needs

    class Checked(tqdm):
        # an iterated bar calls update() at each refresh, a counted one at each step
        def update(self, n=1):
            stopping.check()
            return super().update(n)

    return Checked
