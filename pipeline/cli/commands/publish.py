"""`pipeline publish`: the artifact and its model card to a hub repo or a folder; `--dry-run`
writes the card and the file list only.

The publish stage is imported inside `handle`: the parser (it imports every command's module)
should not load the stages."""

import argparse

from pipeline.cli import common_flags
from pipeline.cli.artifact_stage import quantize_stage
from pipeline.cli.requests import artifact_request, publish_request
from pipeline.core.outcome import Outcome
from pipeline.core.runs import Runs

# Deferred imports: the parser imports every command's module, so a command's stages load only when
# it runs (`--help`, `recipes` and `make plan` stay fast and torch-free)

NAME = "publish"
MIB = 2**20


def add_arguments(p: argparse.ArgumentParser) -> None:
    common_flags.model_args(p)
    p.add_argument("--repo", help="org/name, hf://org/name or file:///path")
    p.add_argument("--private", action="store_true", help="create the hub repo private")
    p.add_argument("--branch", help="push to this branch (created if missing)")
    p.add_argument("--create-pr", action="store_true", help="open a pull request instead")
    p.add_argument(
        "--ignore-gates", action="store_true", help="publish despite missing stages / failed gates"
    )
    p.add_argument(
        "--without-serve",
        action="store_true",
        help="publish a run with no serve stage (the card says memory and throughput were not "
        "measured)",
    )
    p.add_argument(
        "--take-over", action="store_true", help="add to a repo/folder not published by us"
    )
    # --force skips the readiness checks only: replacing what we did not publish is --take-over
    p.add_argument("--force", action="store_true", help=argparse.SUPPRESS)
    common_flags.dry_run(p, help="write the card and file list only")
    common_flags.json_flag(p)


def handle(args: argparse.Namespace, runs: Runs) -> Outcome:
    from pipeline.core.stage import execute
    from pipeline.publish import stage as publish

    q = quantize_stage(artifact_request(args), runs)
    stage = publish.PublishStage.prepare(q, publish_request(args))
    if stage.problems:
        print(f"warning: publishing with --ignore-gates although: {'; '.join(stage.problems)}")
    if note := publish.loader_note(stage):
        print(f"note: {note}")
    label = f"publish {q.ref.name} × {q.recipe.name} → {stage.target.display}"
    fields = {"model": q.ref.name, "recipe": q.recipe.name}
    if args.dry_run:
        where = publish.dry_run(stage)
        print(f"{label}: dry run, nothing sent")
        print(f"  card      {where / 'README.md'}")
        print(f"  files     {where / 'files.txt'}")
        paths = {"card": str(where / "README.md"), "files": str(where / "files.txt")}
        return Outcome.of(NAME, "ok", paths=paths, **fields)
    entry, _ = execute(stage, force=True)  # an action, not a cached computation
    _print_done(label, entry.metrics, args.create_pr)
    card = stage.path / "README.md"
    print(f"  card      {card}")
    return Outcome.of(NAME, "ok", paths={"card": str(card)}, **fields)


def _print_done(label: str, m: dict, create_pr: bool) -> None:
    print(f"{label}: done, {m['files']} files, {m['bytes'] / MIB:.1f} MiB")
    if m.get("unchanged"):
        nothing = "no pull request opened" if create_pr else "no new commit"
        print(f"  unchanged {m['revision']} already holds these files: {nothing}")
    for key in ("commit_url", "pr_url", "path"):
        if m.get(key):
            print(f"  {key.replace('_', ' '):<9} {m[key]}")
