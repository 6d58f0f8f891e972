"""Command line: parse, prepare, run the flow, print. Heavy libraries load only inside stages.

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
import json
import os
import sys
import traceback
from pathlib import Path

from pipeline.cli import help_texts
from pipeline.config.advise_settings import AdviseSettings
from pipeline.config.capacity_settings import PlanSettings
from pipeline.config.recipe import ServeSettings
from pipeline.core import procs, secrets
from pipeline.core.errors import PipelineError, UserError, debugging
from pipeline.core.outcome import Outcome
from pipeline.planning.gpus import SPECS as GPUS

MIB = 2**20
EXIT_CODES_HELP = """exit codes: 0 ok · 1 internal error (also a server or hub failure)
· 2 user error (bad input; nothing was created) · 3 a gate failed (results complete,
quality below the recipe's gates) · 4 not possible on this host (e.g. W4A16 without
vLLM's kernel; a GPU can).
--json prints the outcome as one JSON line on stdout (`python -m pipeline schema outcome`)."""


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
        with out:
            outcome = args.func(args)
    except PipelineError as e:
        if debugging():
            traceback.print_exc()
        outcome = Outcome.of(command, e.reason, str(e))
    except KeyboardInterrupt:
        outcome = Outcome.of(command, "interrupted", "interrupted")
    except Exception as e:  # a bug or a library's crash: the traceback is for the maintainers
        traceback.print_exc()
        outcome = Outcome.of(command, "internal_error", f"{type(e).__name__}: {e}"[:1000])
    if outcome.message:  # whatever a library said, credentials never shown
        outcome.message = secrets.text(outcome.message)
    if want_json:
        print(outcome.model_dump_json())
    if outcome.exit_code and outcome.message:
        print(f"error: {outcome.message}", file=sys.stderr)
    return outcome.exit_code


class _Parser(argparse.ArgumentParser):
    """argparse, but a bad argument is one line (`error: …`, exit 2) like every other mistake."""

    def error(self, message: str):
        self.exit(2, f"error: {self.prog}: {message} (--help for usage)\n")


def _parser() -> argparse.ArgumentParser:
    from pipeline.config import flags

    fmt = argparse.RawDescriptionHelpFormatter
    p = _Parser(
        prog="pipeline", description=help_texts.TOOL, epilog=EXIT_CODES_HELP, formatter_class=fmt
    )
    sub = p.add_subparsers(required=True, metavar="COMMAND", parser_class=_Parser, dest="command")

    def command(name: str, func) -> argparse.ArgumentParser:
        c = sub.add_parser(
            name,
            help=help_texts.COMMANDS[name].summary,
            description=help_texts.description(name),
            epilog=EXIT_CODES_HELP,
            formatter_class=fmt,
        )
        c.set_defaults(func=func)
        c.add_argument(
            "-v", "--verbose", action="store_true", help="library logs on the terminal too"
        )
        c.add_argument("--debug", action="store_true", help="a traceback with every error")
        return c

    command("recipes", cmd_recipes)
    command("models", cmd_models)

    q = command("quantize", cmd_quantize)
    _model_args(q, "--import")
    q.add_argument("--num-samples", type=int, help="override the recipe's calibration samples")
    q.add_argument("--max-seq-length", type=int, help="override the recipe's sequence length")
    q.add_argument("--force", action="store_true", help="redo even if the cached result is valid")
    q.add_argument(
        "--nproc", type=int, default=1, help="calibrate in N processes under torchrun (GPU each)"
    )
    _path_args(q)
    q.add_argument("--dry-run", action="store_true", help="print the plan; load no weights")
    q.add_argument("--json", action="store_true", help="the outcome (with --dry-run: the plan)")

    e = command("eval", cmd_eval)
    _model_args(e)
    e.add_argument("--backend", choices=["hf", "vllm"], help="default: the recipe's eval.backend")
    e.add_argument("--force", action="store_true", help="redo the evaluation even if cached")
    e.add_argument("--json", action="store_true", help="print the outcome as JSON")
    _dry_run_arg(e)

    sv = command("serve", cmd_serve)
    _model_args(sv)
    flags.add(sv, ServeSettings)
    sv.add_argument("--port", type=flags.port, help="server port (default: a free one)")
    sv.add_argument("--force", action="store_true", help="re-measure even if cached")
    sv.add_argument("--json", action="store_true", help="print the outcome as JSON")
    _dry_run_arg(sv)

    rn = command("run", cmd_run)
    _model_args(rn)
    rn.add_argument("--backend", choices=["hf", "vllm"], help="eval backend")
    rn.add_argument("--stages", default="eval,serve", help="after quantize (default eval,serve)")
    rn.add_argument("--nproc", type=int, default=1, help="quantize in N processes (torchrun)")
    rn.add_argument(
        "--force",
        nargs="?",
        const="all",
        metavar="STAGE",
        help="redo every stage even if cached; --force STAGE: only that one (quantize, eval, "
        "serve)",
    )
    _path_args(rn)
    rn.add_argument(
        "--skip-unsupported", action="store_true", help="record stages this host cannot run"
    )
    flags.add(rn, ServeSettings)
    rn.add_argument("--port", type=flags.port, help="server port (default: a free one)")
    _dry_run_arg(rn)
    rn.add_argument("--json", action="store_true", help="print the outcome as JSON")

    se = command("search", cmd_search)
    se.add_argument("--model", default="tiny-llama", help="alias, hub id or local folder")
    se.add_argument("--revision", help="hub revision (branch, tag or commit)")
    se.add_argument(
        "--target-bits", type=float, required=True, help="average bits per weight, scales included"
    )
    se.add_argument(
        "--tokens", type=int, default=8192, help="calibration tokens each group is scored on"
    )
    se.add_argument("--backend", choices=["hf", "vllm"], help="eval backend of every recipe")
    se.add_argument("--force", action="store_true", help="re-measure the sensitivities")
    se.add_argument("--json", action="store_true", help="print the outcome as JSON")

    pb = command("publish", cmd_publish)
    _model_args(pb)
    pb.add_argument("--repo", help="org/name, hf://org/name or file:///path")
    pb.add_argument("--private", action="store_true", help="create the hub repo private")
    pb.add_argument("--branch", help="push to this branch (created if missing)")
    pb.add_argument("--create-pr", action="store_true", help="open a pull request instead")
    pb.add_argument(
        "--ignore-gates", action="store_true", help="publish despite missing stages / failed gates"
    )
    pb.add_argument(
        "--take-over", action="store_true", help="add to a repo/folder not published by us"
    )
    # --force skips the readiness checks only: replacing what we did not publish is --take-over
    pb.add_argument("--force", action="store_true", help=argparse.SUPPRESS)
    pb.add_argument("--dry-run", action="store_true", help="write the card and file list only")
    pb.add_argument("--json", action="store_true", help="print the outcome as JSON")

    nt = command("nightly", cmd_nightly)
    nt.add_argument("--matrix", help="matrix file (default evals/nightly.yaml)")
    nt.add_argument("--executor", default="local", help="local | ray (RAY_ADDRESS, or a local Ray)")
    nt.add_argument("--db", help="SQLAlchemy URL (wins over $NIGHTLY_DB, then the matrix's store)")
    nt.add_argument("--new", action="store_true", help="start a new run, do not resume")
    nt.add_argument("--pin-baseline", metavar="RUN_ID", help="pin a run (or 'latest') and exit")

    rp = command("report", cmd_report)
    rp.add_argument("--db", help="SQLAlchemy URL (wins over $NIGHTLY_DB, then the matrix's store)")
    rp.add_argument("--out", default="reports", help="folder for <date>/index.html")
    rp.add_argument(
        "--matrix", help="the nightly's matrix, for its thresholds (default evals/nightly.yaml)"
    )

    pl = command("plan", cmd_plan)
    pl.add_argument("--model", default="tiny-llama", help="alias, hub id or local folder")
    pl.add_argument("--recipe", action="append", help="recipe(s); default: every shipped one")
    pl.add_argument("--kv-dtype", action="append", help="auto (16-bit) and/or fp8; default both")
    pl.add_argument(
        "--gpu",
        default="H100-80GB",
        help=f"{', '.join(GPUS)}, or a size like 24GiB",
    )
    flags.add(pl, PlanSettings, default_label="default")
    pl.add_argument("--json", action="store_true")

    ad = command("advise", cmd_advise)
    ad.add_argument("--model", default="tiny-llama", help="alias, hub id or local folder")
    ad.add_argument("--recipe", action="append", help="recipe(s); default: every shipped one")
    ad.add_argument("--gpu", default="H100-80GB", help=f"{', '.join(GPUS)}, or host (this CPU)")
    flags.add(ad, AdviseSettings, default_label="default")
    ad.add_argument("--json", action="store_true")

    sc = command("schema", cmd_schema)
    sc.add_argument("name", choices=sorted(_schemas()), help="which file")

    cc = command("clean-cache", cmd_clean_cache)
    cc.add_argument("--keep", type=int, default=1, help="results kept per stage (the latest first)")
    cc.add_argument("--max-mib", type=float, help="and at most this much per stage and run dir")
    return p


def _model_args(p: argparse.ArgumentParser, *artifact_names: str) -> None:
    p.add_argument("--model", default="tiny-llama", help="alias, hub id or local folder")
    p.add_argument(
        "--recipe",
        help="recipe name or path to a .yaml (default fp8; with --artifact: the eval and serve "
        "settings, default a shipped recipe of the artifact's scheme)",
    )
    p.add_argument("--revision", help="hub revision (branch, tag or commit)")
    p.add_argument(
        "--artifact",
        *artifact_names,
        dest="artifact",
        metavar="ARTIFACT",
        help="a checkpoint quantized elsewhere (folder or org/name[@revision]), compared with "
        "--model as its base",
    )


def _ok(command: str, **fields) -> Outcome:
    return Outcome.of(command, "ok", **fields)


def cmd_recipes(args) -> Outcome:
    from pipeline import serving_env
    from pipeline.config import recipe

    print(
        f"{'recipe':<12} {'scheme':<12} {'how':<22} {'serves on (vLLM)':<22} "
        f"{'GPU capability':<20} description"
    )
    for name in recipe.shipped():
        rf = recipe.load(name)
        scheme = rf.scheme()
        modifiers = "+".join(n.removesuffix("Modifier") for n, _ in rf.modifiers())
        modifiers = modifiers or f"vLLM online {rf.online}"
        print(
            f"{name:<12} {scheme.name if scheme else '-':<12} {modifiers:<22} "
            f"{serving_env.serves_on(rf):<22} {serving_env.gpu_capability(scheme):<20} "
            f"{rf.spec.description}"
        )
    return _ok("recipes")


def cmd_models(args) -> Outcome:
    from pipeline.models import aliases

    print(f"{aliases.TINY:<12} embedded: trained here from Python's own docs (default)")
    for alias, hub_id in aliases.ALIASES.items():
        print(f"{alias:<12} {hub_id}")
    return _ok("models")


def _dry_run_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--dry-run",
        action="store_true",
        help="print the chain's plan (where, memory, disk, time per stage); load nothing",
    )


def _chain_plan(args, q, stages: tuple[str, ...], command: str) -> Outcome:
    """`--dry-run` on eval / serve / run: the plan; exit 4 when this host cannot do it."""
    from pipeline import chain_plan
    from pipeline.core.errors import NotOnThisHost

    backend, serve = getattr(args, "backend", None), _serve_overrides(args, stages)
    plan = chain_plan.build(q, stages, backend, serve)
    print(json.dumps(plan, indent=2) if args.json else chain_plan.render(plan))
    if plan["refusals"]:
        raise NotOnThisHost(plan["refusals"][0])
    return _ok(command, model=q.ref.name, recipe=q.recipe.name)


def _path_args(p: argparse.ArgumentParser) -> None:
    from pipeline.config import flags

    p.add_argument(
        "--path",
        choices=["model-free", "oneshot"],
        help="model-free: shard by shard, no model in memory (default for data-free recipes); "
        "oneshot: the model in memory (every calibrating recipe)",
    )
    p.add_argument("--workers", type=int, default=1, help="model-free: shards quantized at once")
    p.add_argument(
        "--max-memory",
        type=flags.memory_size,
        help="CPU RAM the run may use (e.g. 48GiB; default: what this host has available): a "
        "plan above it is refused before loading, exit 4",
    )


def _quantize_stage(args, **calibration):
    from pipeline.quantize.stage import QuantizeStage

    nproc = getattr(args, "nproc", 1)
    path, workers = getattr(args, "path", None), getattr(args, "workers", 1)
    max_memory = getattr(args, "max_memory", None)
    if args.artifact is not None:
        from pipeline.external.stage import ImportStage

        given = {"--num-samples": calibration.get("num_samples"), "--nproc": nproc != 1}
        given |= {"--path": path, "--workers": workers != 1, "--max-memory": max_memory}
        given["--max-seq-length"] = calibration.get("max_seq_length")
        for flag in (f for f, v in given.items() if v):
            raise UserError(f"{flag} applies to quantizing with a recipe, not an imported artifact")
        return ImportStage.prepare_import(args.model, args.artifact, args.recipe, args.revision)
    return QuantizeStage.prepare(
        args.model,
        "fp8" if args.recipe is None else args.recipe,
        revision=args.revision,
        nproc=nproc,
        path=path,
        workers=workers,
        max_memory=max_memory,
        **calibration,
    )


def cmd_quantize(args) -> Outcome:
    q = _quantize_stage(args, num_samples=args.num_samples, max_seq_length=args.max_seq_length)
    if args.dry_run:
        from pipeline.quantize.plan import render

        plan = q.plan()
        render = getattr(q, "render_plan", render)  # an import's plan is its detected format
        if hasattr(q, "memory_verdict"):
            plan["host_fit"] = q.memory_verdict(q.max_memory) or "fits"
        print(json.dumps(plan, indent=2) if args.json else render(plan))
        return _ok("quantize", model=q.ref.name, recipe=q.recipe.name)
    return _flow(args, q, (), force={"quantize"} if args.force else set())


def cmd_eval(args) -> Outcome:
    force = {"eval"} if args.force else set()
    if args.dry_run:
        return _chain_plan(args, _quantize_stage(args), ("eval",), "eval")
    return _flow(args, _quantize_stage(args), ("eval",), backend=args.backend, force=force)


def cmd_serve(args) -> Outcome:
    force = {"serve"} if args.force else set()
    if args.dry_run:
        return _chain_plan(args, _quantize_stage(args), ("serve",), "serve")
    return _flow(args, _quantize_stage(args), ("serve",), force=force)


def cmd_search(args) -> Outcome:
    from pipeline.search import compare
    from pipeline.search.stage import SearchStage

    stage = SearchStage.prepare(args.model, args.target_bits, args.tokens, args.revision)
    summary = compare.run(stage, args.backend or "hf", args.force, args.revision)
    paths = {"search": str(stage.rundir.path / "search.json"), "recipe": summary["recipe"]}
    return _ok("search", model=stage.ref.name, recipe=Path(summary["recipe"]).stem, paths=paths)


def cmd_run(args) -> Outcome:
    """quantize → eval → serve, each reused when cached; one summary table at the end."""
    from pipeline import flow

    stages = tuple(s.strip() for s in args.stages.split(",") if s.strip())
    unknown = [s for s in stages if s not in flow.STAGES]
    if unknown:
        raise UserError(f"--stages: unknown stage {unknown[0]!r} (valid: eval, serve)")
    _forced(args.force, stages)  # a bad stage name: one line before anything loads
    q = _quantize_stage(args)
    if args.dry_run:
        return _chain_plan(args, q, stages, "run")
    if not args.skip_unsupported:  # not hours in: what this host cannot do, refused first
        from pipeline import chain_plan
        from pipeline.core.errors import NotOnThisHost

        plan = chain_plan.build(q, stages, args.backend, _serve_overrides(args, stages))
        if refusals := plan["refusals"]:
            raise NotOnThisHost(f"{refusals[0]} (--dry-run shows the whole plan)")
    outcome = _flow(args, q, stages, backend=args.backend, force=_forced(args.force, stages))
    _print_run_table(outcome)
    return outcome


def _forced(force: str | None, stages: tuple[str, ...]) -> set[str]:
    """`run --force` redoes every stage of the run; `--force STAGE` that one."""
    every = {"quantize", *stages}
    if force is None:
        return set()
    if force == "all":
        return every
    if force not in every:
        raise UserError(
            f"--force {force}: not a stage of this run (valid: {', '.join(sorted(every))})"
        )
    return {force}


def _flow(args, q, stages, backend=None, force=frozenset()) -> Outcome:
    from pipeline import flow
    from pipeline.cli import show

    prepared = flow.prepare(
        args.command,
        q,
        stages,
        backend=backend,
        serve_overrides=_serve_overrides(args, stages),
        port=getattr(args, "port", None),
        skip_unsupported=getattr(args, "skip_unsupported", False),
    )
    return flow.run(prepared, show.STAGES, set(force))


def _serve_overrides(args, stages: tuple[str, ...]) -> dict | None:
    """The serve settings the command line sets (--tensor-parallel-size, …)."""
    from pipeline.config import flags

    return flags.overrides(args, ServeSettings) if "serve" in stages else None


def _print_run_table(outcome: Outcome) -> None:
    from pipeline.cli import show

    text = show.run_summary(outcome)
    if text:
        print()
        print(text)


def cmd_publish(args) -> Outcome:
    from pipeline.core.stage import execute
    from pipeline.publish import stage as publish

    q = _quantize_stage(args)
    stage = publish.PublishStage.prepare(
        q,
        args.repo,
        dry_run=args.dry_run,
        private=args.private,
        branch=args.branch,
        create_pr=args.create_pr,
        ignore_gates=args.ignore_gates or args.force,
        take_over=args.take_over,
    )
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
        return _ok("publish", paths=paths, **fields)
    entry, _ = execute(stage, force=True)  # an action, not a cached computation
    m = entry.metrics
    print(f"{label}: done, {m['files']} files, {m['bytes'] / MIB:.1f} MiB")
    if m.get("unchanged"):
        nothing = "no pull request opened" if args.create_pr else "no new commit"
        print(f"  unchanged {m['revision']} already holds these files: {nothing}")
    for key in ("commit_url", "pr_url", "path"):
        if m.get(key):
            print(f"  {key.replace('_', ' '):<9} {m[key]}")
    card = stage.path / "README.md"
    print(f"  card      {card}")
    return _ok("publish", paths={"card": str(card)}, **fields)


def cmd_nightly(args) -> Outcome:
    from pipeline.nightly import matrix, night

    if args.pin_baseline:
        m, _ = matrix.load(args.matrix)
        store = night.open_store(args.db, m)
        run_id = args.pin_baseline
        if run_id == "latest":
            runs = store.run_ids()
            run_id = runs[-1]["id"] if runs else "latest"
        store.pin(run_id)
        print(f"baseline pinned: {run_id} ({secrets.url(store.url)})")
        return _ok("nightly")
    status, message = night.nightly(args.matrix, args.executor, args.db, args.new)
    return Outcome.of("nightly", status, message)


def cmd_report(args) -> Outcome:
    from pathlib import Path

    from pipeline.nightly import report

    where = report.write(args.db, Path(args.out), args.matrix)
    print(f"report    {where / 'index.html'}")
    print(f"          {where / 'summary.md'}")
    return _ok("report", paths={"html": str(where / "index.html")})


def cmd_plan(args) -> Outcome:
    from pipeline import capacity
    from pipeline.config import flags, recipe
    from pipeline.config.strict import validated
    from pipeline.models import aliases, kv_layout
    from pipeline.planning.deployment import Budget
    from pipeline.planning.gpus import named

    settings = validated(PlanSettings, flags.overrides(args, PlanSettings), "plan settings")
    ref = aliases.resolve(args.model)
    config = aliases.load_config(ref)
    recipes = [recipe.load(name) for name in (args.recipe or recipe.shipped())]
    gpus = named(args.gpu, settings.gpus_per_node)
    budget = Budget(
        settings.gpu_memory_utilization,
        int(settings.overhead_gib * 2**30),
        settings.max_num_batched_tokens,
    )
    kv_dtypes = args.kv_dtype or ["auto", "fp8"]
    rows = capacity.plan(config, recipes, kv_dtypes, settings.users, settings.context, gpus, budget)
    if args.json:
        table = {"model": ref.name, "gpu": args.gpu, "gpu_bytes": gpus.memory_bytes}
        table["kv_layout"] = kv_layout.describe(config)
        print(json.dumps({**table, "rows": capacity.as_json(rows)}, indent=2))
    else:
        print(capacity.describe(ref.name, config, gpus, budget))
        print(capacity.render(rows, settings.users, settings.context, gpus))
    return _ok("plan", model=ref.name)


def cmd_advise(args) -> Outcome:
    from pipeline import advise
    from pipeline.config import flags, recipe
    from pipeline.config.strict import validated
    from pipeline.models import aliases
    from pipeline.perf import prices
    from pipeline.planning import gpus

    s = validated(AdviseSettings, flags.overrides(args, AdviseSettings), "advise settings")
    ref = aliases.resolve(args.model)
    config = aliases.load_config(ref)
    recipes = [recipe.load(name) for name in (args.recipe or recipe.shipped())]
    if args.gpu.strip().lower() == "host":
        from pipeline.perf import host

        hw, price = host.hardware(), prices.host(s.host_hour_usd)
    else:
        hw = gpus.find(args.gpu)
        if hw is None:
            raise UserError(f"unknown GPU '{args.gpu}'; known: {', '.join(GPUS)}, or host")
        price = prices.gpu(hw.name, s.gpu_hour_usd)
    ask = advise.Ask(
        s.users, s.context, s.slo_ttft_ms, s.slo_itl_ms, s.max_kl,
        s.gpu_memory_utilization, s.overhead_gib,
    )  # fmt: skip
    rows = advise.advise(ref.name, config, recipes, hw, price, ask)
    if args.json:
        found = {"model": ref.name, "hardware": hw.name, "hardware_source": hw.source}
        found |= {"ask": ask.__dict__, "price": price and price.__dict__}
        print(json.dumps({**found, "rows": [r.describe() for r in rows]}, indent=2))
    else:
        slo = advise.describe_ask(ask)
        print(advise.render(rows, f"model {ref.name} on {hw.name}: {slo}", price))
    return _ok("advise", model=ref.name)


def _schemas() -> dict:
    return {
        "manifest": "pipeline.core.rundir:Manifest",
        "eval": "pipeline.eval.results:EvalResults",
        "serve": "pipeline.serve.results:ServeResults",
        "publish": "pipeline.publish.results:PublishRecord",
        "outcome": "pipeline.core.outcome:Outcome",
    }


def schema_of(name: str) -> dict:
    import importlib

    module, _, cls = _schemas()[name].partition(":")
    return getattr(importlib.import_module(module), cls).model_json_schema()


def cmd_schema(args) -> Outcome:
    print(json.dumps(schema_of(args.name), indent=2))
    return _ok("schema")


def cmd_clean_cache(args) -> Outcome:
    from pipeline.core import objectstore
    from pipeline.core.paths import runs_root
    from pipeline.core.rundir import HISTORY_STAGES, RunDir

    if args.keep < 1:
        raise UserError(f"--keep must be >= 1: the latest result is always kept (got {args.keep})")
    if args.max_mib is not None and not 0 <= args.max_mib < float("inf"):
        raise UserError(f"--max-mib must be a size ≥ 0 (got {args.max_mib})")
    cap = int(args.max_mib * MIB) if args.max_mib is not None else None
    removed = []
    root = runs_root()
    objectstore.pull("", weights=False)  # in object storage: every run's manifest and results
    for manifest in sorted(root.glob("*/*/manifest.json")):
        rundir = RunDir(manifest.parent.parent.name, manifest.parent.name, root)
        with rundir.lock():
            for stage in HISTORY_STAGES:
                removed += rundir.prune(stage, args.keep, cap)
    for path in removed:
        print(f"removed   {path}")
    for line in objectstore.commit_pruned():  # the store pruned too: commits, then its GC
        print(line)
    print(f"clean-cache: {len(removed)} older results removed under {root}")
    return _ok("clean-cache")
