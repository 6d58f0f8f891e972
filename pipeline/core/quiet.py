"""Library chatter to a log file in the run folder, not the terminal.

llm-compressor logs every module it quantizes (INFO, and GPTQ's METRIC lines above WARNING),
transformers and torch warn about things users cannot act on ("Attempting to save a model with
offloaded modules"). Inside `to_log(path)` they go to `path`; the terminal keeps errors, the
pipeline's own lines and progress bars. `-v` (PIPELINE_VERBOSE=1) leaves everything on the
terminal, as before.
"""

import contextlib
import logging
import os
import sys
import warnings
from collections.abc import Iterator
from pathlib import Path


def verbose() -> bool:
    return os.environ.get("PIPELINE_VERBOSE") == "1"


@contextlib.contextmanager
def to_log(path: Path, llmcompressor: bool = False) -> Iterator[None]:
    """`llmcompressor`: also route its loguru logger (importing it costs seconds: only where
    it is used)."""
    if verbose():
        yield
        return
    import transformers

    path.parent.mkdir(parents=True, exist_ok=True)
    handler = logging.FileHandler(path, encoding="utf-8")
    handler.setFormatter(logging.Formatter("%(asctime)s %(name)s %(levelname)s %(message)s"))
    hf = transformers.utils.logging
    hf.disable_default_handler()
    hf.add_handler(handler)
    # torch's own loggers (e.g. torch.fx's tracing warning), lm-eval's, and Python warnings
    saved = {}
    for name in ("torch", "py.warnings", "datasets", "accelerate", "lm_eval"):
        log = logging.getLogger(name)
        saved[name] = (log.handlers[:], log.propagate)
        log.handlers[:] = [handler]
        log.propagate = False
    sink = _loguru_to(path) if llmcompressor else None
    logging.captureWarnings(True)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("default")
            yield
    finally:
        logging.captureWarnings(False)
        if sink is not None:
            from loguru import logger

            logger.remove(sink)
        for name, (handlers, propagate) in saved.items():
            log = logging.getLogger(name)
            log.handlers[:], log.propagate = handlers, propagate
        hf.remove_handler(handler)
        hf.enable_default_handler()
        handler.close()


@contextlib.contextmanager
def library_output(path: Path) -> Iterator[None]:
    """Libraries' prints and tqdm bars (llm-compressor's "Quantizing", transformers' "Loading
    weights", compressed-tensors' "Compressing" …) into `path`: they write to sys.stdout /
    sys.stderr as found when the bar is made, so bars the pipeline opened before keep the
    terminal. `-v` leaves them on the terminal."""
    if verbose():
        yield
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    _terminals.append(sys.stderr)
    try:
        with open(path, "a") as f, contextlib.redirect_stdout(f), contextlib.redirect_stderr(f):
            yield
    finally:
        _terminals.pop()


_terminals: list = []  # the stderr each library_output replaced, outermost first


def terminal():
    """Where the pipeline's own lines and bars go: the terminal's stderr, also inside
    `library_output` (whose redirect is for the libraries)."""
    return _terminals[0] if _terminals else sys.stderr


def import_llmcompressor() -> None:
    """Import llm-compressor with its import-time logging off (on CPU hosts it warns that no
    accelerator is present, on the terminal, before any routing is in place)."""
    user_set = "LLM_COMPRESSOR_LOG_DISABLED" in os.environ
    os.environ.setdefault("LLM_COMPRESSOR_LOG_DISABLED", "true")
    try:
        import llmcompressor  # noqa: F401
    finally:
        if not user_set:
            del os.environ["LLM_COMPRESSOR_LOG_DISABLED"]


def _loguru_to(path: Path) -> int:
    from llmcompressor.logger import LoggerConfig, configure_logger
    from loguru import logger

    # GPTQ needs the METRIC level that only an enabled configuration registers: keep it on,
    # its console at ERROR (METRIC is 38), everything readable in the file
    configure_logger(LoggerConfig(console_log_level="ERROR"))
    return logger.add(path, level="INFO", format="{time:HH:mm:ss} {name} {level} {message}")
