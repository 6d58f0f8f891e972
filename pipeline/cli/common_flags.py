"""Flags that more than one command takes, declared once: the model and its recipe or artifact,
the quantize path, the serving sweep, `--dry-run`, `--json`, `--db`, and `-v` / `--debug` that
every command has. Each function adds its flags in the order `--help` shows them."""

import argparse

from pipeline.config import flags
from pipeline.config.recipe import EVAL_BACKENDS, ServeSettings

MODEL_HELP = "alias, hub id or local folder"
OUTCOME_JSON = "print the outcome as JSON"
CHAIN_DRY_RUN = "print the chain's plan (where, memory, disk, time per stage); load nothing"
DB_HELP = "SQLAlchemy URL (wins over $NIGHTLY_DB, then the matrix's store)"


def verbosity(p: argparse.ArgumentParser) -> None:
    p.add_argument("-v", "--verbose", action="store_true", help="library logs on the terminal too")
    p.add_argument("--debug", action="store_true", help="a traceback with every error")


def model(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model", default="tiny-llama", help=MODEL_HELP)


def revision(p: argparse.ArgumentParser) -> None:
    p.add_argument("--revision", help="hub revision (branch, tag or commit)")


def model_args(p: argparse.ArgumentParser, *artifact_names: str) -> None:
    """--model, --recipe, --revision, --artifact: what names a run folder."""
    model(p)
    p.add_argument(
        "--recipe",
        help="recipe name or path to a .yaml (default fp8; with --artifact: the eval and serve "
        "settings, default a shipped recipe of the artifact's scheme)",
    )
    revision(p)
    p.add_argument(
        "--artifact",
        *artifact_names,
        dest="artifact",
        metavar="ARTIFACT",
        help="a checkpoint quantized elsewhere (folder or org/name[@revision]), compared with "
        "--model as its base",
    )


def recipes(p: argparse.ArgumentParser) -> None:
    p.add_argument("--recipe", action="append", help="recipe(s); default: every shipped one")


def path_args(p: argparse.ArgumentParser) -> None:
    """How quantize runs: its path, workers and memory cap."""
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


def nproc(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--nproc",
        type=int,
        help="calibrate in N processes under torchrun, one GPU each (default: one per visible "
        "GPU where the calibration splits, else 1; the plan says which and why)",
    )


def serving(p: argparse.ArgumentParser) -> None:
    """The serving sweep's settings (from ServeSettings) and the server's port."""
    flags.add(p, ServeSettings)
    p.add_argument("--port", type=flags.port, help="server port (default: a free one)")


def backend(p: argparse.ArgumentParser, help: str) -> None:
    """--backend: the eval's, one of the recipe settings' own (config/recipe.py)."""
    p.add_argument("--backend", choices=EVAL_BACKENDS, help=help)


def dry_run(p: argparse.ArgumentParser, help: str = CHAIN_DRY_RUN) -> None:
    p.add_argument("--dry-run", action="store_true", help=help)


def json_flag(p: argparse.ArgumentParser, help: str | None = OUTCOME_JSON) -> None:
    p.add_argument("--json", action="store_true", help=help)


def db(p: argparse.ArgumentParser) -> None:
    p.add_argument("--db", help=DB_HELP)
