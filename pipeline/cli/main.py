"""Command line: parse, run the command's handler, turn what it raised into an exit code and an
outcome. Each command's flags and handler live in pipeline/cli/commands/<command>.py; heavy
libraries load only inside stages.

python -m pipeline recipes | models
python -m pipeline quantize --model tiny-llama --recipe fp8 [--force] [--dry-run]
python -m pipeline eval|serve|run --model tiny-llama --recipe fp8 [--json]
python -m pipeline publish --model tiny-llama --recipe fp8 --repo org/name [--dry-run]
python -m pipeline quantize --model tiny-llama --import <folder | org/name[@rev]>   (then eval,
    serve, run, publish with --artifact <same>): a checkpoint quantized elsewhere, vs its base
python -m pipeline nightly [--matrix evals/nightly.yaml] [--executor ray]; python -m pipeline report
python -m pipeline plan --model llama3-70b; python -m pipeline schema eval | clean-cache
"""

import argparse
import contextlib
import os
import sys
import traceback

from pipeline.cli import commands, common_flags, help_texts
from pipeline.cli.help_texts import EXIT_CODES_HELP
from pipeline.core import procs, secrets, stopping
from pipeline.core.errors import PipelineError, Terminated, debugging, interrupted
from pipeline.core.outcome import Outcome
from pipeline.core.runs import Runs


def main(argv: list[str] | None = None) -> int:
    procs.die_with_parent()
    args = _parser().parse_args(argv)
    command = args.command
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")  # its fork warning, every run
    if args.verbose:
        os.environ["PIPELINE_VERBOSE"] = "1"
    if args.debug:
        os.environ["PIPELINE_DEBUG"] = "1"
    # plan and a dry run print their own JSON: the result itself, not an outcome
    plain = command in ("plan", "schema", "advise") or getattr(args, "dry_run", False)
    want_json = getattr(args, "json", False) and not plain
    # with --json, stdout carries the outcome alone: what people read goes to stderr
    out = contextlib.redirect_stdout(sys.stderr) if want_json else contextlib.nullcontext()
    if getattr(args, "db", None):
        secrets.remember(args.db)  # masked by value in every message from now on
    try:
        # where run folders live: RUNS_DIR read once, its form checked before any command and
        # any work (exit 2 or 4), and the value handed to the command
        runs = Runs.from_env()
        with out, stopping.on_sigterm():
            outcome = args.func(args, runs)
    except PipelineError as e:
        if debugging():
            traceback.print_exc()
        outcome = Outcome.of(command, e.reason, str(e))
    except KeyboardInterrupt as e:  # Ctrl-C, or SIGTERM (errors.Terminated)
        e = stopping.as_received(e)
        status = "terminated" if isinstance(e, Terminated) else "interrupted"
        outcome = Outcome.of(command, status, interrupted(e))
    except Exception as e:  # a bug or a library's crash: the traceback is for the maintainers
        traceback.print_exc()
        outcome = Outcome.of(command, "internal_error", f"{type(e).__name__}: {e}"[:1000])
    if outcome.message:  # whatever a library said, credentials never shown
        outcome.message = secrets.text(outcome.message)
    if want_json:
        print(outcome.model_dump_json())
    if outcome.status in ("interrupted", "terminated"):  # not an error: a stop, said once
        print(f"\n{outcome.message}", file=sys.stderr)
    elif outcome.exit_code and outcome.message:
        print(f"error: {outcome.message}", file=sys.stderr)
    return outcome.exit_code


class _Parser(argparse.ArgumentParser):
    """argparse, but a bad argument is one line (`error: …`, exit 2) like every other mistake."""

    def error(self, message: str):
        self.exit(2, f"error: {self.prog}: {message} (--help for usage)\n")


def _parser() -> argparse.ArgumentParser:
    fmt = argparse.RawDescriptionHelpFormatter
    p = _Parser(
        prog="pipeline", description=help_texts.TOOL, epilog=EXIT_CODES_HELP, formatter_class=fmt
    )
    sub = p.add_subparsers(required=True, metavar="COMMAND", parser_class=_Parser, dest="command")
    for module in commands.ALL:
        c = sub.add_parser(
            module.NAME,
            help=help_texts.COMMANDS[module.NAME].summary,
            description=help_texts.description(module.NAME),
            epilog=EXIT_CODES_HELP,
            formatter_class=fmt,
        )
        c.set_defaults(func=module.handle)
        common_flags.verbosity(c)
        module.add_arguments(c)
        if "--json" not in c._option_string_actions:  # its footer only where the flag is
            c.epilog = help_texts.EXIT_CODES
    return p
