"""Progress bars that stay readable in CI logs: frequent on a terminal, every 15 s otherwise."""

from pipeline.core.quiet import terminal


def bar(iterable=None, **kwargs):
    from tqdm import tqdm

    out = kwargs.setdefault("file", terminal())  # ours on the terminal, libraries' in the log
    tty = out.isatty()
    kwargs.setdefault("mininterval", 0.5 if tty else 15.0)
    kwargs.setdefault("dynamic_ncols", True)
    return tqdm(iterable, **kwargs)
