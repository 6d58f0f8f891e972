"""`--backend auto` picks the faster of two equivalent backends and says why: hf on CPU hosts,
vLLM on GPU hosts where it runs the scheme. (Which GPUs a host has is replaced here: the choice
is what is tested; tests/e2e/eval runs both backends for real.)"""

from dataclasses import astuple
from types import SimpleNamespace

from pipeline.config import recipe
from pipeline.core import environment
from pipeline.engines.vllm import serving_env
from pipeline.eval import backend_choice


def _q(name: str):
    return SimpleNamespace(recipe=recipe.load(name), geometry=SimpleNamespace(experts=0))  # dense


def test_cpu_hosts_use_hf_and_say_why(monkeypatch):
    monkeypatch.setattr(environment, "gpus", lambda: [])
    monkeypatch.setattr(serving_env, "available", lambda: True)
    monkeypatch.setattr(serving_env, "runs_scheme", lambda scheme: True)
    backend, why = astuple(backend_choice._auto(_q("fp8"), "auto"))
    assert backend == "hf" and "CPU host" in why


def test_gpu_hosts_use_vllm_where_it_runs_the_scheme_else_hf(monkeypatch):
    monkeypatch.setattr(environment, "gpus", lambda: ["NVIDIA H100 80GB HBM3, 81559 MiB"])
    monkeypatch.setattr(serving_env, "available", lambda: True)
    monkeypatch.setattr(serving_env, "runs_scheme", lambda scheme: True)
    assert backend_choice._auto(_q("gptq"), "auto").backend == "vllm"
    monkeypatch.setattr(serving_env, "runs_scheme", lambda scheme: False)
    backend, why = astuple(backend_choice._auto(_q("gptq"), "auto"))
    assert backend == "hf" and "cannot run W4A16" in why
