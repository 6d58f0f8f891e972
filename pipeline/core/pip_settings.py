"""The host's pip settings as `uv pip install` arguments. `make setup` installs with uv, which
reads neither pip.conf nor PIP_* variables: without this, a host whose pip is pointed at a
mirror, a wheel folder, a CA bundle or a constraint file would install from PyPI, unconstrained.
Read through pip itself (`pip config list`: every config file and PIP_* variable, merged), and
resolved as pip resolves: across all indexes, the best version wins (uv's unsafe-best-match;
uv's own default takes the first index that has the name). Standard library only: it runs
before any env exists.

    python3 -m pipeline.core.pip_settings      # one line of arguments, shell-quoted
"""

import ast
import shlex
import subprocess
import sys

# pip's option → uv's (repeated per value where pip takes a whitespace-separated list)
FLAGS = {
    "index-url": "--default-index",
    "extra-index-url": "--index",
    "find-links": "--find-links",
    "constraint": "--constraint",
    "cert": "--cert",
    "trusted-host": "--allow-insecure-host",
}
SWITCHES = {"no-index": "--no-index"}
# later sections override earlier ones, as in pip: [install] over [global], PIP_* over both
SECTIONS = ("global", "install", ":env:")


def listed(lines: list[str]) -> dict[str, str]:
    """`pip config list` output (`section.option='value'`) → option → the value pip applies."""
    found: dict[str, dict[str, str]] = {}
    for line in lines:
        key, _, value = line.partition("=")
        section, _, option = key.rpartition(".")
        if section in SECTIONS and value:
            found.setdefault(section, {})[option] = ast.literal_eval(value)
    merged: dict[str, str] = {}
    for section in SECTIONS:
        merged.update(found.get(section, {}))
    return merged


def uv_args(options: dict[str, str]) -> list[str]:
    args = ["--index-strategy", "unsafe-best-match"]
    for option, flag in FLAGS.items():
        for value in options.get(option, "").split():
            args += [flag, value]
    for option, flag in SWITCHES.items():
        if options.get(option, "").lower() in ("1", "true", "yes", "on"):
            args.append(flag)
    return args


def pip_config() -> list[str]:
    """What this Python's pip is configured with (nothing where pip is absent)."""
    try:
        done = subprocess.run([sys.executable, "-m", "pip", "config", "list"],
                              capture_output=True, text=True, timeout=60)  # fmt: skip
    except (OSError, subprocess.TimeoutExpired):
        return []
    return done.stdout.splitlines() if done.returncode == 0 else []


if __name__ == "__main__":
    print(shlex.join(uv_args(listed(pip_config()))))
