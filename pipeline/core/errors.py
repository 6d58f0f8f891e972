"""The failures a command can end with, each with its exit code and a machine-readable reason.

    0 ok · 1 internal error (a server or hub failure too) · 2 user error · 3 a gate failed (or
    was inconclusive: too few items to decide it) · 4 not possible on this host · 75 transient:
    try again later (a locked SQLite file, a database that did not answer in time) · 130
    interrupted (Ctrl-C) · 143 terminated (SIGTERM: stopped the same way)

75 is sysexits.h's EX_TEMPFAIL, which cron wrappers and mail agents already read as "retry":
a condition that clears by itself is no user's mistake (2), and no bug of ours (1).

Messages are for people and may be reworded; programs (nightly) read `reason`, never the text.
A failed gate is no exception: the results are complete, and the flow reports it (exit 3).
"""

import os


class PipelineError(Exception):
    exit_code = 1
    reason = "internal_error"

    def __init__(self, message: str):
        # One line where it is the user's to fix: the CLI prints it verbatim.
        super().__init__(" ".join(str(message).split()) if self.exit_code != 1 else message)


class UserError(PipelineError):
    """Bad input: names the file / key / value and what would be valid."""

    exit_code = 2
    reason = "user_error"


class NotOnThisHost(PipelineError):
    """Valid input that this host's hardware or vLLM build cannot run (a GPU can)."""

    exit_code = 4
    reason = "unsupported"


class Transient(PipelineError):
    """A condition that clears by itself (another process's lock, a server still starting):
    nothing to fix, the same command later succeeds."""

    exit_code = 75
    reason = "transient"

    def __init__(self, message: str):
        super().__init__(f"{message}: try again later, it clears by itself")


class ServerError(PipelineError):
    """A vLLM server that failed to start or died; the message carries its log's last lines."""

    reason = "server_error"


class ArtifactCheckError(PipelineError):
    """A written artifact that does not load back or run: never marked done."""

    reason = "artifact_check"


class HubError(PipelineError):
    """The hub failed on the way (network, server: a download or an upload); safe to re-run."""

    reason = "hub_error"


EXIT_CODES = {"ok": 0, "internal_error": 1, "server_error": 1, "hub_error": 1}
EXIT_CODES |= {"artifact_check": 1}
EXIT_CODES |= {"user_error": 2, "gate_failed": 3, "unsupported": 4, "interrupted": 130}
EXIT_CODES |= {"transient": 75}  # sysexits.h's EX_TEMPFAIL
EXIT_CODES |= {"gate_inconclusive": 3}  # a gate whose data cannot decide it: no pass either
EXIT_CODES |= {"terminated": 143}  # SIGTERM: 128 + 15, as a shell reports a process it ended


class Terminated(KeyboardInterrupt):
    """SIGTERM: what Slurm, Kubernetes, Ray's cancel and `timeout` send first. Raised by the
    handler `stopping.on_sigterm` installs, so every path that stops cleanly on Ctrl-C stops
    the same way on it."""


def interrupted(e: BaseException) -> str:
    how = "SIGTERM" if isinstance(e, Terminated) else "Ctrl-C"
    return f"interrupted ({how}): nothing half-written is marked done"


INTERRUPTED = interrupted(KeyboardInterrupt())
TERMINATED = interrupted(Terminated())


def first_line(e: BaseException) -> str:
    """The first line of an exception from a library, for a one-line UserError."""
    text = str(e).strip()
    return text.splitlines()[0] if text else type(e).__name__


def clip(text: str, limit: int = 80) -> str:
    """User input quoted in a message, cut to a readable length."""
    return text if len(text) <= limit else text[: limit - 3] + "..."


def debugging() -> bool:
    """`--debug`: a traceback with every error, a user's mistake included."""
    return os.environ.get("PIPELINE_DEBUG") == "1"
