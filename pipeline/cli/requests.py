"""The command line's flags, typed once at the door (`from_args`, as lm-eval's
EvaluatorConfig.from_cli does): the model resolved, the recipe loaded, the artifact named, each
mistake one line before any stage is prepared. The command handlers (cli/commands/) read
argparse; nothing below them does: the artifact's stage takes a QuantizeRequest or an
ImportRequest (cli/artifact_stage.py), the chain a ChainRequest (cli/chain.py), publish a
PublishRequest.

Each reads only the flags its command has (`getattr` with the flag's default): `quantize`
alone has --num-samples, `run` and `quantize` --nproc, `eval` no --port."""

import argparse
from dataclasses import dataclass

from pipeline.chain.request import ChainSpec
from pipeline.config import flags, recipe
from pipeline.config.recipe import ServeSettings
from pipeline.core.errors import UserError
from pipeline.core.stage_plan import Options
from pipeline.external import source
from pipeline.external.request import ImportRequest
from pipeline.models import aliases
from pipeline.publish import target
from pipeline.publish.request import PublishRequest
from pipeline.quantize.request import QuantizeRequest

ArtifactRequest = QuantizeRequest | ImportRequest
DEFAULT_RECIPE = "fp8"


def artifact_request(args: argparse.Namespace) -> ArtifactRequest:
    """A recipe's quantize, or with --artifact / --import the import of a checkpoint quantized
    elsewhere (--recipe then names its eval and serve settings); a recipe-only flag given with
    an import is a one-line user error."""
    how = {
        "num_samples": getattr(args, "num_samples", None),
        "max_seq_length": getattr(args, "max_seq_length", None),
        "nproc": getattr(args, "nproc", None),
        "path": getattr(args, "path", None),
        "workers": getattr(args, "workers", 1),
        "max_memory": getattr(args, "max_memory", None),
    }
    return artifact_request_of(args.model, args.recipe, args.artifact, args.revision, how)


def artifact_request_of(
    model: str, recipe_name: str | None, artifact: str | None, revision: str | None, how: dict
) -> ArtifactRequest:
    """artifact_request's, from its fields (a ChainSpec's too)."""
    if artifact is None:
        name = DEFAULT_RECIPE if recipe_name is None else recipe_name  # "": refused, not fp8
        return QuantizeRequest.named(model, name, revision, **how)
    given = {"--num-samples": how["num_samples"], "--nproc": how["nproc"] is not None}
    given |= {"--path": how["path"], "--workers": how["workers"] != 1}
    given |= {"--max-memory": how["max_memory"], "--max-seq-length": how["max_seq_length"]}
    for flag in (f for f, v in given.items() if v):
        raise UserError(f"{flag} applies to quantizing with a recipe, not an imported artifact")
    ref = aliases.resolve(model, revision)
    external = source.resolve(artifact)
    settings = None if recipe_name is None else recipe.load(recipe_name)
    return ImportRequest(ref, external, settings)


@dataclass(frozen=True)
class ChainRequest:
    """`quantize`, `eval`, `serve` and `run`: the artifact's request, the stages after it, their
    options, what to redo, and how to answer."""

    command: str
    artifact: ArtifactRequest
    stages: tuple[str, ...]  # after the artifact's (chain/stages.py's LATER)
    options: Options
    force: frozenset[str] = frozenset()  # the stages redone although cached
    dry_run: bool = False
    as_json: bool = False

    @classmethod
    def from_args(
        cls, args: argparse.Namespace, stages: tuple[str, ...], force=frozenset()
    ) -> "ChainRequest":
        return cls(
            command=args.command,
            artifact=artifact_request(args),
            stages=stages,
            options=options(args, stages),
            force=frozenset(force),
            dry_run=getattr(args, "dry_run", False),
            as_json=getattr(args, "json", False),
        )


def from_spec(spec: ChainSpec, command: str = "run", as_json: bool = False) -> ChainRequest:
    """A program's request (chain/request.py) as the command line's would be: `run` of its
    stages, nothing forced."""
    defaults = {"num_samples": None, "max_seq_length": None, "nproc": None, "path": None,
                "workers": 1, "max_memory": None}  # fmt: skip
    overrides = dict(spec.serve) if "serve" in spec.stages else {}  # checked as serve plans
    return ChainRequest(
        command=command,
        artifact=artifact_request_of(spec.model, spec.recipe, spec.artifact, None, defaults),
        stages=spec.stages,
        options=Options(
            backend=spec.backend,
            serve_overrides=overrides or None,
            skip_unsupported=spec.skip_unsupported,
        ),  # fmt: skip
        as_json=as_json,
    )


def options(args: argparse.Namespace, stages: tuple[str, ...]) -> Options:
    """What the command line sets for the stages after the artifact's (quantize alone has no
    --backend, eval no --port)."""
    given = vars(args)
    return Options(
        backend=given.get("backend"),
        serve_overrides=flags.overrides(given, ServeSettings) if "serve" in stages else None,
        port=given.get("port"),
        skip_unsupported=given.get("skip_unsupported", False),
    )


def publish_request(args: argparse.Namespace) -> PublishRequest:
    """Where `publish` sends (the target parsed: one line where it names nothing valid), and
    how; --force skips the readiness checks as --ignore-gates does."""
    return PublishRequest(
        target=target.parse(args.repo),
        dry_run=args.dry_run,
        private=args.private,
        branch=args.branch,
        create_pr=args.create_pr,
        ignore_gates=args.ignore_gates or args.force,
        without_serve=args.without_serve,
        take_over=args.take_over,
    )
