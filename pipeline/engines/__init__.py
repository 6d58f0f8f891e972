"""The serving engine's door: serve, eval, the chain and the CLI reach the engine through the
modules named here, never by its folder, so a second engine is a second folder and this map.
Everything that knows one engine sits in its folder (today vllm/: its env and CUDA builds, its
server and start-up, its benchmark, its engines' sizing and placement, its eval backend; the
scripts run in its env are pipeline/vllm_scripts/).

Modules load on first use: `make setup` runs cuda_builds with a bare python3, and the eval
backend imports torch."""

import importlib
from types import ModuleType
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pipeline.engines.vllm import (  # noqa: F401  what the door opens, for the type checker
        bench,
        bench_results,
        cuda_builds,
        engine_identity,
        engine_plan,
        eval_backend,
        placement,
        server,
        serving_env,
        sizing,
    )

ROOM = "pipeline.engines.vllm"
_OPENS = ("bench", "bench_results", "cuda_builds", "engine_identity", "engine_plan",
          "eval_backend", "placement", "server", "serving_env", "sizing")  # fmt: skip


def __getattr__(name: str) -> ModuleType:
    if name in _OPENS:
        return importlib.import_module(f"{ROOM}.{name}")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
