"""What `--help` says of the tool and of each command; docs/commands/ is generated from it too
(pipeline/cli/docs_pages.py), so the terminal and the site say the same."""

import textwrap
from dataclasses import dataclass

DOCS = "docs/ (make docs-serve: http://127.0.0.1:8000)"

TOOL = f"""\
Quantize an open-weight LLM with a recipe (llm-compressor; 13 shipped: FP8, FP8 blocks, W4A16 by
GPTQ, AWQ, AutoRound or round-to-nearest, W8A16, INT8, NVFP4, MXFP4 …; `recipes` lists them),
measure what it lost against the original (perplexity, KL divergence, top-token agreement),
serve both in vLLM to compare memory and throughput, and publish the artifact with a model card.
Results land in runs/<model>/<recipe>/ (RUNS_DIR); a stage whose inputs are unchanged is reused.

  python -m pipeline quantize --model llama3-70b --recipe fp8    (make quantize MODEL=… RECIPE=…)
  python -m pipeline COMMAND --help                               one command, with an example

Docs: {DOCS}."""

EXIT_CODES = """exit codes: 0 ok · 1 internal error (also a server or hub failure)
· 2 user error (bad input; nothing was created) · 3 a gate failed (results complete,
quality below the recipe's gates) · 4 not possible on this host (e.g. W4A16 without
vLLM's kernel; a GPU can) · 75 transient: try again later (a locked or unanswering
results database) · 130 interrupted (Ctrl-C) · 143 terminated (SIGTERM)."""
JSON_NOTE = (
    "--json prints the outcome as one JSON line on stdout (`python -m pipeline schema outcome`)."
)
EXIT_CODES_HELP = f"{EXIT_CODES}\n{JSON_NOTE}"  # a command without --json shows EXIT_CODES alone


@dataclass(frozen=True)
class Command:
    summary: str  # one line: the command list of `--help`
    about: str  # what it does, for its own --help and page
    example: str  # one command a user would type
    guide: str = ""  # the docs page that explains it (relative to docs/)


COMMANDS = {
    "recipes": Command(
        "list the shipped recipes",
        "The recipes in recipes/: each one's scheme, how it quantizes, where vLLM serves it and "
        "the GPU capability its kernels need.",
        "make recipes",
        "recipes.md",
    ),
    "models": Command(
        "list model aliases",
        "The model aliases and the hub ids they name (their config.json ships with the code, "
        "so plans work offline); any hub id or local folder works as --model too.",
        "make models",
        "models.md",
    ),
    "quantize": Command(
        "quantize a model with a recipe (or --import one)",
        "Runs the recipe with llm-compressor (data-free recipes shard by shard, calibrated ones "
        "with oneshot) and writes a compressed-tensors checkpoint to "
        "runs/<model>/<recipe>/artifact/. A run that dies is resumed by the same command from "
        "the last decoder layer (or shard) it finished; --force starts over. --dry-run prints "
        "the plan (memory, disk, time) and loads no weights; --import takes a checkpoint "
        "quantized elsewhere.",
        "make quantize MODEL=llama3-70b RECIPE=fp8 ARGS=--dry-run",
        "real-size.md",
    ),
    "eval": Command(
        "quality drift vs the original (quantizes first if needed)",
        "Scores the artifact and the original on the same held-out and calibration windows: "
        "perplexity ratio, mean KL divergence and top-token agreement with their spread, plus "
        "the recipe's lm-eval tasks; exits 3 when a quality gate fails.",
        "make eval MODEL=tiny-llama RECIPE=gptq ARGS='--backend vllm'",
        "guide/eval.md",
    ),
    "serve": Command(
        "vLLM memory and throughput vs the original",
        "Starts `vllm serve` on the artifact and on the original (side by side where the GPUs "
        "hold both, else sharing them or one after the other: the placement decides), runs "
        "`vllm bench serve` at each concurrency, and reports memory, throughput and latency "
        "side by side with their spread over repeats.",
        "make serve MODEL=tiny-llama RECIPE=fp8 ARGS='--concurrency 1,4'",
        "guide/serve.md",
    ),
    "run": Command(
        "quantize → eval → serve, reusing what is cached",
        "The whole chain for one model and recipe; each stage is reused when its inputs are "
        "unchanged. --dry-run prints where each stage runs, its memory, disk and time.",
        "make run MODEL=llama3-8b RECIPE=gptq ARGS=--dry-run",
        "guide/run.md",
    ),
    "compare": Command(
        "several recipes' drift vs size (and throughput): one table, one plot",
        "Quantizes and evaluates each recipe (every stage cached, as `run` does), then prints "
        "one table of drift — mean KL, perplexity ratio, top-token agreement, task recovery, "
        "each ± its standard error — against the artifact's size and, where served, output "
        "tokens/s, and writes it with a plot to runs/<model>/compare-<recipes>/.",
        "make compare MODEL=tiny-llama RECIPES=fp8,w4a16-rtn,gptq",
        "jobs.md",
    ),
    "search": Command(
        "mixed precision per layer group within a bits budget",
        "Measures each layer group's sensitivity and writes a mixed-precision recipe within the "
        "average bits per weight, evaluated beside the uniform recipes that fit.",
        "make search MODEL=tiny-llama TARGET_BITS=6",
        "guide/search.md",
    ),
    "publish": Command(
        "artifact + model card to the hub or a local folder",
        "Uploads the artifact with a model card of its measured drift and serving figures to a "
        "hub repo (HF_TOKEN) or a file:// folder; refuses when stages are missing or gates "
        "failed unless told otherwise.",
        "make publish RECIPE=fp8 REPO=acme/tiny-llama-fp8 ARGS=--dry-run",
        "guide/publish.md",
    ),
    "nightly": Command(
        "the models × recipes matrix, into the results store",
        "Runs every cell of a matrix (evals/nightly.yaml) locally or on a Ray cluster, records "
        "each in the store (SQLite or PostgreSQL) and compares with the last run: exit 3 on a "
        "regression.",
        "make nightly ARGS='--executor ray --db postgresql://nightly@db/nightly'",
        "guide/nightly.md",
    ),
    "report": Command(
        "HTML + Markdown report with plots from the store",
        "Writes reports/<date>/index.html and summary.md from the nightly store: each cell's "
        "drift, memory and throughput over time.",
        "make report ARGS='--db postgresql://nightly@db/nightly'",
        "guide/nightly.md",
    ),
    "plan": Command(
        "GPUs and users per recipe, from the model config alone",
        "For each recipe and KV-cache type: the GPUs the model needs, tensor × pipeline "
        "parallel, and how many users of the given context fit, from the config alone.",
        "make plan MODEL=llama3-70b USERS=100 CONTEXT=4000 GPU=H100-80GB",
        "guide/plan.md",
    ),
    "advise": Command(
        "which recipe, how many GPUs, $ per answer and per 1M tokens, quality",
        "Ranks recipes by dollars per answer (per million tokens × the tokens per answer their "
        "evals measured; per million tokens where not measured) for a load and GPU, within "
        "latency SLOs and a quality limit: from the roofline bound, or from measured runs "
        "where there are.",
        "make advise MODEL=llama3-70b USERS=100 CONTEXT=4000 GPU=H100-80GB",
        "guide/advise.md",
    ),
    "schema": Command(
        "JSON Schema of a results file",
        "Prints the JSON Schema of a result file (manifest, eval, serve, publish, outcome).",
        "python -m pipeline schema eval",
        "schemas.md",
    ),
    "clean-cache": Command(
        "prune older eval/serve results of run dirs",
        "Deletes older eval and serve results of each run folder, never the latest.",
        "make clean-cache ARGS='--keep 1 --max-mib 500'",
        "getting-started.md",
    ),
}


def description(name: str) -> str:
    c = COMMANDS[name]
    about = textwrap.fill(c.about, 88)
    return f"{about}\n\nexample:\n  {c.example}\n\ndocs: {DOCS}, page commands/{name}.md"
