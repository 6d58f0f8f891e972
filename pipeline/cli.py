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

    e = sub.add_parser("eval", help="quality drift vs the original (quantizes first if needed)")
    e.add_argument("--model", default="tiny-llama", help="alias, hub id or local folder")
    e.add_argument("--recipe", default="fp8", help="recipe name or path to a .yaml")
    e.add_argument("--revision", help="hub revision (branch, tag or commit)")
    e.add_argument("--backend", choices=["hf", "vllm"], help="default: the recipe's eval.backend")
    e.add_argument("--force", action="store_true", help="redo the evaluation even if cached")
    e.set_defaults(func=cmd_eval)
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


def cmd_eval(args) -> int:
    from pipeline.stages import eval as eval_stage
    from pipeline.stages import quantize
    from pipeline.tables import eval_table

    job = quantize.prepare(args.model, args.recipe, revision=args.revision)
    ejob = eval_stage.prepare(job, args.backend)
    quantize.load_inputs(job)
    quantize.run(job)  # cached unless its inputs changed
    entry, cached = eval_stage.run(ejob, force=args.force)
    results = eval_stage.load_results(ejob)
    # Gates are checked against the recipe as it is now: editing them needs no re-evaluation.
    results["gates"] = eval_stage.check_gates(ejob.settings, results["splits"]["heldout"])
    state = f"cached (since {entry['ended']}; --force redoes it)" if cached else "done"
    print(
        f"eval {job.ref.name} × {job.recipe.name}: {state}; backend {results['backend']} "
        f"({results['dtype']}), reference top-{results['top_k']}"
    )
    print(eval_table(results))
    print(f"  results   {ejob.folder / 'results.json'}")
    if not results["gates"]["passed"]:
        failed = [c for c in results["gates"]["checks"] if not c["passed"]]
        names = ", ".join(f"{c['gate']} ({c['value']:.4g} vs {c['limit']:g})" for c in failed)
        print(f"error: eval gate failed: {names}", file=sys.stderr)
        return 1
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
