"""The one exception type for mistakes a user can make; the CLI prints it as one line, exit 2."""


class UserError(Exception):
    """Bad input: names the file / key / value and what would be valid."""

    exit_code = 2

    def __init__(self, message: str):
        # One line, always: the CLI prints it verbatim.
        super().__init__(" ".join(str(message).split()))


def first_line(e: BaseException) -> str:
    """The first line of an exception from a library, for a one-line UserError."""
    text = str(e).strip()
    return text.splitlines()[0] if text else type(e).__name__


class ServerError(RuntimeError):
    """A vLLM server that failed to start or died; the message carries its log's last lines."""


class HubError(RuntimeError):
    """An upload that failed on the way (network, server); safe to re-run. CLI exit 1."""
