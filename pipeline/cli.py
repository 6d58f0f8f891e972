"""Command line: parse, call a stage, print. Heavy libraries load only inside the stages.

python -m pipeline recipes
python -m pipeline models
python -m pipeline quantize --model tiny-llama --recipe fp8 [--force] [--dry-run]
"""

import argparse
import json
import sys

from pipeline.errors import UserError

MIB = 2**20


def main(argv: list[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    try:
        return args.func(args)
    except UserError as e:
        print(f"error: {e}", file=sys.stderr)
        return e.exit_code
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="pipeline", description=__doc__.splitlines()[0])
    sub = p.add_subparsers(required=True, metavar="COMMAND")

    r = sub.add_parser("recipes", help="list the shipped recipes")
    r.set_defaults(func=cmd_recipes)

    m = sub.add_parser("models", help="list model aliases")
    m.set_defaults(func=cmd_models)

    q = sub.add_parser("quantize", help="quantize a model with a recipe")
    q.add_argument("--model", default="tiny-llama", help="alias, hub id or local folder")
    q.add_argument("--recipe", default="fp8", help="recipe name or path to a .yaml")
    q.add_argument("--revision", help="hub revision (branch, tag or commit)")
    q.add_argument("--num-samples", type=int, help="override the recipe's calibration samples")
    q.add_argument("--max-seq-length", type=int, help="override the recipe's sequence length")
    q.add_argument("--force", action="store_true", help="redo even if the cached result is valid")
    q.add_argument("--dry-run", action="store_true", help="print the plan; load no weights")
    q.add_argument("--json", action="store_true", help="with --dry-run: the plan as JSON")
    q.set_defaults(func=cmd_quantize)
    return p


def cmd_recipes(args) -> int:
    from pipeline import recipe

    for name in recipe.shipped():
        rf = recipe.load(name)
        scheme = rf.scheme()
        modifiers = "+".join(n.removesuffix("Modifier") for n, _ in rf.modifiers())
        print(
            f"{name:<12} {scheme.name if scheme else '-':<12} {modifiers:<22} {rf.spec.description}"
        )
    return 0


def cmd_models(args) -> int:
    from pipeline import models

    print(f"{models.TINY:<12} embedded: trained here from Python's own docs (default)")
    for alias, hub_id in models.ALIASES.items():
        print(f"{alias:<12} {hub_id}")
    return 0


def cmd_quantize(args) -> int:
    from pipeline.stages import quantize

    if args.num_samples is not None and args.num_samples < 0:
        raise UserError(f"--num-samples must be >= 0 (got {args.num_samples})")
    if args.max_seq_length is not None and args.max_seq_length <= 0:
        raise UserError(f"--max-seq-length must be > 0 (got {args.max_seq_length})")
    job = quantize.prepare(
        args.model, args.recipe, args.num_samples, args.max_seq_length, args.revision
    )
    if args.dry_run:
        from pipeline.quantize_plan import render

        plan = quantize.plan(job)
        print(json.dumps(plan, indent=2) if args.json else render(plan))
        return 0
    quantize.load_inputs(job)
    entry, cached = quantize.run(job, force=args.force)
    where = job.rundir.path / quantize.ARTIFACT
    m = entry["metrics"]
    label = f"quantize {job.ref.name} × {job.recipe.name}"
    if cached:
        print(f"{label}: cached (inputs unchanged since {entry['ended']}; --force redoes it)")
    else:
        print(f"{label}: done in {m['wall_seconds']:.1f} s")
    print(f"  artifact  {where}")
    print(
        f"  size      {m['tensor_bytes'] / MIB:.2f} MiB tensors, {m['ratio_to_bf16']:.3f}× bf16, "
        f"{m['ratio_to_theoretical']:.3f}× the scheme's ideal size"
    )
    print(f"  manifest  {job.rundir.manifest_path}")
    return 0
