"""`--backend auto` picks the faster of two equivalent backends and says why: hf on CPU hosts,
vLLM on GPU hosts where it runs the scheme. (Which GPUs a host has is replaced here: the choice
is what is tested; tests/e2e/eval runs both backends for real.)"""

from types import SimpleNamespace

from pipeline.config import recipe
from pipeline.core import environment, serving_env
from pipeline.eval import stage


def _q(name: str):
    return SimpleNamespace(recipe=recipe.load(name), geometry=SimpleNamespace(experts=0))  # dense


def test_cpu_hosts_use_hf_and_say_why(monkeypatch):
    monkeypatch.setattr(environment, "gpus", lambda: [])
    monkeypatch.setattr(serving_env, "available", lambda: True)
    monkeypatch.setattr(serving_env, "runs_scheme", lambda scheme: True)
    backend, why = stage._auto_backend(_q("fp8"), "auto")
    assert backend == "hf" and "CPU host" in why


def test_gpu_hosts_use_vllm_where_it_runs_the_scheme_else_hf(monkeypatch):
    monkeypatch.setattr(environment, "gpus", lambda: ["NVIDIA H100 80GB HBM3, 81559 MiB"])
    monkeypatch.setattr(serving_env, "available", lambda: True)
    monkeypatch.setattr(serving_env, "runs_scheme", lambda scheme: True)
    assert stage._auto_backend(_q("gptq"), "auto")[0] == "vllm"
    monkeypatch.setattr(serving_env, "runs_scheme", lambda scheme: False)
    backend, why = stage._auto_backend(_q("gptq"), "auto")
    assert backend == "hf" and "cannot run W4A16" in why
