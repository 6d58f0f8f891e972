"""Command-line flags generated from a settings model, and back: one definition per schema.

`add(parser, ServeSettings)` gives `--input-len`, `--concurrency 1,4,16`, `--enforce-eager /
--no-enforce-eager`, … with each field's description as help; `overrides(args, ServeSettings)`
collects what was given; `to_argv(overrides)` turns a dict (a nightly matrix's serve block) back
into the same flags."""

import argparse
import re
import types
import typing

from pydantic import BaseModel, ByteSize, TypeAdapter


def _int_list(text: str) -> list[int]:
    try:
        values = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected integers like 1,4,16 (got {text!r})") from None
    if not values or min(values) < 1:
        raise argparse.ArgumentTypeError(f"expected positive integers (got {text!r})")
    return values


def _base(annotation):
    """int | None → int; list[int] stays list[int]."""
    if isinstance(annotation, types.UnionType) or typing.get_origin(annotation) is typing.Union:
        args = [a for a in typing.get_args(annotation) if a is not type(None)]
        return args[0]
    return annotation


# pydantic's ByteSize does the arithmetic; the units are a subset of its own (no bits, no PB),
# and a bare k / m / g / t is binary here as in `free -g` (ByteSize reads it decimal)
_UNITS = ("b", "kb", "mb", "gb", "tb", "kib", "mib", "gib", "tib")
_SHORT = {"": "b", "k": "kib", "m": "mib", "g": "gib", "t": "tib"}
_BYTES = TypeAdapter(ByteSize)


def memory_size(text: str) -> int:
    """Bytes from '48GiB', '64GB', '2g', '1500MiB' (binary for GiB / g, decimal for GB)."""
    found = re.fullmatch(r"\s*([0-9]+(?:\.[0-9]+)?)\s*([A-Za-z]*)\s*", text)
    unit = found.group(2).lower() if found else ""
    unit = _SHORT.get(unit, unit)
    if found is None or unit not in _UNITS:
        raise argparse.ArgumentTypeError(f"expected a size like 48GiB or 64GB (got {text!r})")
    value = _BYTES.validate_python(found.group(1) + unit)
    if not 2**20 <= value < 2**60:
        raise argparse.ArgumentTypeError(f"a memory size from 1MiB (got {text!r})")
    return int(value)


def port(text: str) -> int:
    """A TCP port: 1–65535 (0 would let the OS pick, which the pipeline already does)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a port number (got {text!r})") from None
    if not 1 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"a port is 1–65535 (got {value})")
    return value


def flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def add(
    parser: argparse.ArgumentParser,
    model: type[BaseModel],
    skip=(),
    default_label: str = "recipe default",
) -> None:
    for name, field in model.model_fields.items():
        if name in skip:
            continue
        kind = _base(field.annotation)
        help_text = (field.description or "") + f" ({default_label} {field.default!r})"
        if kind is bool:
            parser.add_argument(
                flag(name), action=argparse.BooleanOptionalAction, default=None, help=help_text
            )
        elif typing.get_origin(kind) is list:
            parser.add_argument(flag(name), type=_int_list, metavar="N,N,…", help=help_text)
        elif typing.get_origin(kind) is typing.Literal:
            parser.add_argument(flag(name), choices=typing.get_args(kind), help=help_text)
        else:
            parser.add_argument(flag(name), type=kind, help=help_text)


def overrides(given: dict, model: type[BaseModel]) -> dict:
    """The model's fields among `given` (the command line's values by flag name, as
    `vars(args)` holds them), those set."""
    return {n: given[n] for n in model.model_fields if given.get(n) is not None}


def to_argv(values: dict) -> list[str]:
    argv = []
    for name, value in values.items():
        if isinstance(value, bool):
            argv.append(flag(name) if value else "--no-" + name.replace("_", "-"))
        elif isinstance(value, list):
            argv += [flag(name), ",".join(str(v) for v in value)]
        elif value is not None:
            argv += [flag(name), str(value)]
    return argv
