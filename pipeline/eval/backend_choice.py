"""Which backend scores an eval, decided once: the stage (EvalStage.prepare) runs what its
dry-run plan (eval/plan.py) shows, because both ask here.

Backend "auto": the faster of two equivalent ones — hf on CPU hosts, where it scores both
splits in seconds and vLLM's CPU engine takes minutes per model; vLLM on GPUs where it runs the
scheme (and the KV-cache dtype), else hf. hf measures an FP8 KV cache by compressed-tensors'
emulation, which needs the artifact's calibrated kv_cache_scheme: without one only vLLM can.
"""

from dataclasses import dataclass

from pipeline.artifact import Artifact
from pipeline.config.engine_name import BACKEND, ENGINE
from pipeline.config.recipe import EvalSettings
from pipeline.core import environment
from pipeline.core.errors import UserError
from pipeline.engines import serving_env

CPU_HOST = f"CPU host: hf scores the same tokens in seconds, {ENGINE}'s CPU engine in minutes"


@dataclass(frozen=True)
class Choice:
    backend: str  # "hf" | BACKEND
    reason: str | None = None  # why, where the recipe, the artifact or this host decided it


def choose(q: Artifact, asked: str | None, s: EvalSettings) -> Choice:
    """The backend for `q` (asked: --backend; None: the recipe's). A backend that cannot run
    it is refused: UserError where the ask is wrong, NotOnThisHost where this host's serving
    env cannot."""
    kv = s.kv_cache_dtype
    chosen = asked or s.backend
    if q.recipe.online:  # vLLM quantizes it as it loads: only vLLM can evaluate it
        if chosen == "hf":
            raise UserError(
                f"recipe {q.recipe.name} is {ENGINE}'s online {q.recipe.online}: only the "
                f"{BACKEND} backend runs it (--backend {BACKEND})"
            )
        serving_env.require(f"eval backend {BACKEND}")
        serving_env.require_online(q.recipe, "evaluate")
        return Choice(BACKEND, f"online quantization happens in {ENGINE}")
    if q.hf_refusal and chosen != BACKEND:  # vLLM only (an imported format)
        if chosen == "hf":
            raise UserError(f"--backend hf cannot run {q.recipe.name}: {q.hf_refusal}")
        serving_env.require(f"eval backend {BACKEND}")
        for one, _ in q.recipe.schemes():
            serving_env.require_scheme(one, "run", f" (and hf cannot: {q.hf_refusal})")
        return Choice(BACKEND, q.hf_refusal)
    found = _auto(q, kv) if chosen == "auto" else Choice(chosen)
    if chosen == BACKEND:
        serving_env.require(f"eval backend {BACKEND}")
        for one, _ in q.recipe.schemes():
            serving_env.require_scheme(one, "run", "; use --backend hf")
            serving_env.require_moe(one, q.geometry, "run", "; use --backend hf")
        serving_env.require_kv_cache(
            kv, "evaluate", "; --backend hf emulates a calibrated FP8 KV cache"
        )
    if found.backend == "hf" and kv != "auto" and not q.recipe.kv_cache_scheme():
        raise UserError(
            f"eval.kv_cache_dtype {kv} with the hf backend needs the recipe's kv_cache_scheme "
            f"(calibrated scales to emulate); use the {BACKEND} backend or add a kv_cache_scheme"
        )
    return found


def _auto(q: Artifact, kv: str) -> Choice:
    schemes = [s for s, _ in q.recipe.schemes()]
    needs_engine = kv != "auto" and not q.recipe.kv_cache_scheme()
    if not environment.gpus() and not needs_engine:  # vLLM not asked (nor probed): hf
        return Choice("hf", CPU_HOST)
    usable = serving_env.available() and all(serving_env.runs_scheme(s) for s in schemes)
    for needed in {serving_env.moe_kernel(s) for s in schemes} - {None}:
        if usable and q.geometry.experts:
            usable = serving_env.capabilities().get(needed) is not False
    scheme = schemes[0] if schemes else None
    if usable and kv != "auto":
        usable = serving_env.capabilities()["fp8_kv_cache"]
    if not environment.gpus():
        if usable:
            return Choice(
                BACKEND,
                f"KV cache {kv} without a calibrated kv_cache_scheme: only {ENGINE} runs it",
            )
        return Choice("hf", CPU_HOST)
    if usable:
        return Choice(BACKEND, f"GPU host: {ENGINE} runs this scheme")
    return Choice(
        "hf", f"this host's {ENGINE} cannot run {scheme.label if scheme else 'this model'}"
    )
