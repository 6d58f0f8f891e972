"""`pipeline schema NAME`: the JSON Schema of a result file (docs/schemas.md is made from it)."""

import argparse
import importlib
import json

from pipeline.core.outcome import Outcome
from pipeline.core.runs import Runs

NAME = "schema"
# named as "module:Class", imported only for the schema asked for
SCHEMAS = {
    "manifest": "pipeline.core.rundir:Manifest",
    "eval": "pipeline.eval.results:EvalResults",
    "serve": "pipeline.serve.results:ServeResults",
    "publish": "pipeline.publish.results:PublishRecord",
    "outcome": "pipeline.core.outcome:Outcome",
}


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("name", choices=sorted(SCHEMAS), help="which file")


def schema_of(name: str) -> dict:
    module, _, cls = SCHEMAS[name].partition(":")
    return getattr(importlib.import_module(module), cls).model_json_schema()


def handle(args: argparse.Namespace, runs: Runs) -> Outcome:
    print(json.dumps(schema_of(args.name), indent=2))
    return Outcome.of(NAME, "ok")
