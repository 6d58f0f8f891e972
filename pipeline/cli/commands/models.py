"""`pipeline models`: the model aliases and the embedded tiny model."""

import argparse

from tabulate import tabulate

from pipeline.core.outcome import Outcome
from pipeline.core.runs import Runs
from pipeline.models import aliases, packaged

NAME = "models"


def add_arguments(p: argparse.ArgumentParser) -> None:
    pass  # no flags of its own


def handle(args: argparse.Namespace, runs: Runs) -> Outcome:
    tiny = (aliases.TINY, "embedded: trained here from Python's own docs (default)")
    built = [(name, packaged.describe(name)) for name in packaged.PACKAGED]
    rows = [tiny, *built, *aliases.ALIASES.items()]
    print(tabulate(rows, tablefmt="plain", disable_numparse=True))
    return Outcome.of(NAME, "ok")
