"""`make advise`'s report: the ranked deployments (rank.py) for a model, the recipes and a GPU
(or this host), as the terminal table or as JSON.

    advise_report.report("llama3-70b", ["fp8"], "H100-80GB", AdviseSettings(users=50), False, runs)
"""

import json

from pipeline.advise import rank as advise
from pipeline.config import recipe
from pipeline.config.advise_settings import AdviseSettings
from pipeline.core.errors import UserError
from pipeline.core.runs import Runs
from pipeline.models import aliases
from pipeline.perf import host, prices
from pipeline.planning import geometry, gpus


def report(
    model: str,
    recipe_names: list[str] | None,
    gpu: str,
    s: AdviseSettings,
    as_json: bool,
    runs: Runs,
) -> tuple[str, str]:
    """(the model's resolved name, the report); recipe_names None: every shipped recipe;
    gpu "host": this CPU, measured; quality and serving measured in `runs` where there."""
    ref = aliases.resolve(model)
    g = geometry.of_model(ref)
    recipes = [recipe.load(name) for name in (recipe_names or recipe.shipped())]
    hw, price = _hardware(gpu, s)
    ask = advise.Ask(
        s.users, s.context, s.slo_ttft_ms, s.slo_itl_ms, s.max_kl,
        s.gpu_memory_utilization, s.overhead_gib,
    )  # fmt: skip
    rows = advise.advise(advise.Measured(runs, ref.name), g, recipes, hw, price, ask)
    if as_json:
        found: dict[str, object] = {
            "model": ref.name,
            "hardware": hw.name,
            "hardware_source": hw.source,
        }
        found |= {"ask": ask.__dict__, "price": price and price.__dict__}
        return ref.name, json.dumps({**found, "rows": [r.describe() for r in rows]}, indent=2)
    header = f"model {ref.name} on {hw.name}: {advise.describe_ask(ask)}"
    return ref.name, advise.render(rows, header, price)


def _hardware(gpu: str, s: AdviseSettings) -> tuple[gpus.Hardware, prices.Price | None]:
    if gpu.strip().lower() == "host":
        measured = host.hardware()  # None only with measure=False
        assert measured is not None
        return measured, prices.host(s.host_hour_usd)
    hw = gpus.find(gpu)
    if hw is None:
        raise UserError(f"unknown GPU '{gpu}'; known: {', '.join(gpus.SPECS)}, or host")
    return hw, prices.gpu(hw.name, s.gpu_hour_usd)
