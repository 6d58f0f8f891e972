"""Command line: parse, call a stage, print. Heavy libraries load only inside the stages.

python -m pipeline recipes
python -m pipeline models
python -m pipeline quantize --model tiny-llama --recipe fp8 [--force] [--dry-run]
python -m pipeline eval|serve|run --model tiny-llama --recipe fp8
python -m pipeline publish --model tiny-llama --recipe fp8 --repo org/name [--dry-run]
python -m pipeline nightly [--matrix evals/nightly.yaml] [--executor ray]; python -m pipeline report
"""

import argparse
import json
import sys

from pipeline.errors import HubError, ServerError, UserError

MIB = 2**20


def main(argv: list[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    try:
        return args.func(args)
    except UserError as e:
        print(f"error: {e}", file=sys.stderr)
        return e.exit_code
    except (ServerError, HubError) as e:  # a server log's last lines / how to resume
        print(f"error: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130


class _Parser(argparse.ArgumentParser):
    """argparse, but a bad argument is one line (`error: …`, exit 2) like every other mistake."""

    def error(self, message: str):
        self.exit(2, f"error: {self.prog}: {message} (--help for usage)\n")


def _parser() -> argparse.ArgumentParser:
    p = _Parser(prog="pipeline", description=__doc__.splitlines()[0])
    sub = p.add_subparsers(required=True, metavar="COMMAND", parser_class=_Parser)

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

    sv = sub.add_parser("serve", help="vLLM memory and throughput vs the original")
    _model_args(sv)
    _serve_args(sv)
    sv.add_argument("--force", action="store_true", help="re-measure even if cached")
    sv.set_defaults(func=cmd_serve)

    rn = sub.add_parser("run", help="quantize → eval → serve, reusing what is cached")
    _model_args(rn)
    rn.add_argument("--backend", choices=["hf", "vllm"], help="eval backend")
    _serve_args(rn)
    rn.set_defaults(func=cmd_run)

    pb = sub.add_parser("publish", help="artifact + model card to the hub or a local folder")
    _model_args(pb)
    pb.add_argument("--repo", help="org/name, hf://org/name or file:///path")
    pb.add_argument("--private", action="store_true", help="create the hub repo private")
    pb.add_argument("--branch", help="push to this branch (created if missing)")
    pb.add_argument("--create-pr", action="store_true", help="open a pull request instead")
    pb.add_argument("--force", action="store_true", help="publish despite missing stages/gates")
    pb.add_argument("--dry-run", action="store_true", help="write the card and file list only")
    pb.set_defaults(func=cmd_publish)

    nt = sub.add_parser("nightly", help="the models × recipes matrix, into the results store")
    nt.add_argument("--matrix", help="matrix file (default evals/nightly.yaml)")
    nt.add_argument("--executor", default="local", help="local | ray (RAY_ADDRESS, or a local Ray)")
    nt.add_argument("--db", help="SQLAlchemy URL (default: the matrix's store; $NIGHTLY_DB wins)")
    nt.add_argument("--new", action="store_true", help="start a new run, do not resume")
    nt.add_argument("--pin-baseline", metavar="RUN_ID", help="pin a run (or 'latest') and exit")
    nt.set_defaults(func=cmd_nightly)

    rp = sub.add_parser("report", help="HTML + Markdown report with plots from the store")
    rp.add_argument("--db", help="SQLAlchemy URL (default sqlite:///runs/nightly.db)")
    rp.add_argument("--out", default="reports", help="folder for <date>/index.html")
    rp.set_defaults(func=cmd_report)

    pl = sub.add_parser("plan", help="GPUs and users per recipe, from the model config alone")
    pl.add_argument("--model", default="tiny-llama", help="alias, hub id or local folder")
    pl.add_argument("--recipe", action="append", help="recipe(s); default: every shipped one")
    pl.add_argument("--users", type=int, default=100, help="concurrent users")
    pl.add_argument("--context", type=int, default=4000, help="tokens of context per user")
    pl.add_argument("--kv-dtype", action="append", help="auto (16-bit) and/or fp8; default both")
    pl.add_argument(
        "--gpu",
        default="H100-80GB",
        help="A100-40GB, A100-80GB, H100-80GB, H200-141GB, L40S-48GB, or a size like 24GiB",
    )
    pl.add_argument("--gpu-memory-utilization", type=float, default=0.9)
    pl.add_argument(
        "--overhead-gib",
        type=float,
        default=2.0,
        help="per GPU: activations, CUDA graphs, NCCL (default 2)",
    )
    pl.add_argument("--json", action="store_true")
    pl.set_defaults(func=cmd_plan)
    return p


def _model_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model", default="tiny-llama", help="alias, hub id or local folder")
    p.add_argument("--recipe", default="fp8", help="recipe name or path to a .yaml")
    p.add_argument("--revision", help="hub revision (branch, tag or commit)")


def _serve_args(p: argparse.ArgumentParser) -> None:
    """Overrides of the recipe's serve: section (see pipeline/recipe.py ServeSettings)."""
    p.add_argument("--concurrency", type=_int_list, help="e.g. 1,4,16,64")
    p.add_argument("--input-len", type=int)
    p.add_argument("--output-len", type=int)
    p.add_argument("--num-prompts", type=int, help="requests per concurrency level")
    p.add_argument("--max-model-len", type=int)
    p.add_argument("--tensor-parallel-size", type=int)
    p.add_argument("--gpu-memory-utilization", type=float)
    p.add_argument("--dtype")
    p.add_argument("--kv-cache-dtype", help="auto | fp8 | fp8_e4m3 | fp8_e5m2")
    p.add_argument("--enforce-eager", action="store_true", default=None)
    p.add_argument("--cpu-kvcache-space-gib", type=float, help="CPU KV pool (GiB)")
    p.add_argument("--cpu-omp-threads-bind", help="CPU thread binding, e.g. 0-1 or auto")
    p.add_argument("--port", type=int, help="server port (default: a free one)")


def _int_list(text: str) -> list[int]:
    try:
        values = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected integers like 1,4,16 (got {text!r})") from None
    if not values or min(values) < 1:
        raise argparse.ArgumentTypeError(f"expected positive integers (got {text!r})")
    return values


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
    from pipeline.stages import quantize

    job = quantize.prepare(args.model, args.recipe, revision=args.revision)
    ejob = _prepare_eval(job, args)
    quantize.load_inputs(job)
    quantize.run(job)  # cached unless its inputs changed
    results = _eval(ejob, args.force)
    return _gate_exit(results)


def cmd_serve(args) -> int:
    from pipeline.stages import quantize

    job = quantize.prepare(args.model, args.recipe, revision=args.revision)
    sjob = _prepare_serve(job, args)
    quantize.load_inputs(job)
    quantize.run(job)
    _serve(sjob, args.force)
    return 0


def cmd_run(args) -> int:
    """quantize → eval → serve, each reused when cached; one summary table at the end."""
    from pipeline.stages import quantize
    from pipeline.tables import run_table

    job = quantize.prepare(args.model, args.recipe, revision=args.revision)
    ejob, sjob = _prepare_eval(job, args), _prepare_serve(job, args)  # bad input fails first
    quantize.load_inputs(job)
    quantize.run(job)
    quality = _eval(ejob, force=False)
    serving = _serve(sjob, force=False)
    print()
    print(run_table(quality, serving))
    return _gate_exit(quality)


def cmd_publish(args) -> int:
    from pipeline.stages import publish, quantize

    job = quantize.prepare(args.model, args.recipe, revision=args.revision)
    pjob = publish.prepare(
        job,
        args.repo,
        dry_run=args.dry_run,
        private=args.private,
        branch=args.branch,
        create_pr=args.create_pr,
        force=args.force,
    )
    if pjob.problems:
        print(f"warning: publishing with --force although: {'; '.join(pjob.problems)}")
    label = f"publish {job.ref.name} × {job.recipe.name} → {pjob.target.display}"
    if args.dry_run:
        where = publish.dry_run(pjob)
        print(f"{label}: dry run, nothing sent")
        print(f"  card      {where / 'README.md'}")
        print(f"  files     {where / 'files.txt'}")
        return 0
    entry, _ = publish.run(pjob)
    m = entry["metrics"]
    print(f"{label}: done, {m['files']} files, {m['bytes'] / MIB:.1f} MiB")
    for key in ("commit_url", "pr_url", "path"):
        if m.get(key):
            print(f"  {key.replace('_', ' '):<9} {m[key]}")
    print(f"  card      {pjob.folder / 'README.md'}")
    return 0


def cmd_nightly(args) -> int:
    from pipeline.nightly import matrix, runner

    if args.pin_baseline:
        m, _ = matrix.load(args.matrix)
        store = runner.open_store(args.db, m)
        run_id = args.pin_baseline
        if run_id == "latest":
            runs = store.run_ids()
            run_id = runs[-1]["id"] if runs else "latest"
        store.pin(run_id)
        print(f"baseline pinned: {run_id} ({store.url})")
        return 0
    return runner.nightly(args.matrix, args.executor, args.db, args.new)


def cmd_report(args) -> int:
    from pathlib import Path

    from pipeline.nightly import report

    where = report.write(args.db, Path(args.out))
    print(f"report    {where / 'index.html'}")
    print(f"          {where / 'summary.md'}")
    return 0


def cmd_plan(args) -> int:
    from pipeline import models, planner, recipe

    ref = models.resolve(args.model)
    config = models.load_config(ref)
    recipes = [recipe.load(name) for name in (args.recipe or recipe.shipped())]
    gpu = planner.gpu_bytes(args.gpu)
    rows = planner.plan(
        config,
        recipes,
        args.kv_dtype or ["auto", "fp8"],
        args.users,
        args.context,
        gpu,
        args.gpu_memory_utilization,
        args.overhead_gib,
    )
    if args.json:
        print(
            json.dumps(
                {
                    "model": ref.name,
                    "gpu": args.gpu,
                    "gpu_bytes": gpu,
                    "rows": planner.as_json(rows),
                },
                indent=2,
            )
        )
    else:
        print(
            f"model {ref.name}: {config['num_hidden_layers']} layers, "
            f"{config.get('num_key_value_heads')} KV heads × head dim "
            f"{config.get('head_dim') or config['hidden_size'] // config['num_attention_heads']}; "
            f"{args.gpu_memory_utilization:g} of each GPU usable, {args.overhead_gib:g} GiB "
            "per GPU kept for activations/engine"
        )
        print(planner.render(rows, args.users, args.context, args.gpu))
    return 0


def _prepare_eval(job, args):
    from pipeline.stages import eval as eval_stage

    return eval_stage.prepare(job, args.backend)


def _prepare_serve(job, args):
    from pipeline.stages import serve

    fields = ("concurrency", "input_len", "output_len", "num_prompts", "max_model_len")
    fields += ("tensor_parallel_size", "gpu_memory_utilization", "dtype", "kv_cache_dtype")
    fields += ("enforce_eager", "cpu_kvcache_space_gib", "cpu_omp_threads_bind")
    overrides = {f: getattr(args, f) for f in fields if getattr(args, f, None) is not None}
    return serve.prepare(job, overrides, port=args.port)


def _eval(ejob, force: bool) -> dict:
    from pipeline.stages import eval as eval_stage
    from pipeline.tables import eval_table

    entry, cached = eval_stage.run(ejob, force=force)
    results = eval_stage.load_results(ejob)
    # Gates are checked against the recipe as it is now: editing them needs no re-evaluation.
    results["gates"] = eval_stage.check_gates(
        ejob.settings, results["splits"]["heldout"], results.get("tasks", [])
    )
    q = ejob.quantize
    state = f"cached (since {entry['ended']}; --force redoes it)" if cached else "done"
    kv = results.get("kv_cache", "16-bit")
    kv = "" if kv in ("16-bit", "auto (vLLM)") else f", KV cache {kv}"
    print(
        f"eval {q.ref.name} × {q.recipe.name}: {state}; backend {results['backend']} "
        f"({results['dtype']}{kv}), reference keeps {100 * results['reference_mass']:g}% of the "
        f"original's probability per token"
    )
    print(eval_table(results))
    print(f"  results   {ejob.folder / 'results.json'}")
    return results


def _serve(sjob, force: bool) -> dict:
    from pipeline.stages import serve
    from pipeline.tables import serve_table

    q = sjob.quantize
    entry, cached = serve.run(sjob, force=force)
    results = serve.load_results(sjob)
    state = f"cached (since {entry['ended']}; --force redoes it)" if cached else "done"
    base = "cached" if results["original_cached"] else "measured now"
    print(f"serve {q.ref.name} × {q.recipe.name}: {state}; original model: {base}")
    print(serve_table(results))
    print(f"  results   {sjob.folder / 'results.json'}")
    return results


def _gate_exit(results: dict) -> int:
    if results["gates"]["passed"]:
        return 0
    failed = [c for c in results["gates"]["checks"] if not c["passed"]]
    names = ", ".join(f"{c['gate']} ({c['value']:.4g} vs {c['limit']:g})" for c in failed)
    print(f"error: eval gate failed: {names}", file=sys.stderr)
    return 1


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
