"""Progress of llm-compressor's sequential pipeline in decoder layers, the unit a person waits for.

The sequential pipeline (every calibrating recipe) cuts the model into subgraphs at decoder
layers: the first runs the embeddings, each next one a decoder layer (the last also the final
norm and LM head). Each gets all calibration batches, then the modifiers' work at its end (GPTQ's
solve: ~10 minutes per Llama-3-8B-shaped layer on 2 CPU cores), then the batches again to
propagate. Its own tqdm bars restart for each pass and go to the run's log; this shows
`layer 37/80`, what the layer is doing (`calibrating 12/64`, `solving`, `propagating`), elapsed
time and an ETA on one bar.

llm-compressor 0.14's pipeline module looks up `trace_subgraphs`, `_get_batches` and
`LifecycleCallbacks.sequential_epoch_end` at call time: wrapping them there is enough.
"""

import re
import time
from contextlib import contextmanager

_MODULES = re.compile(r"Quantizing \d+ module\(s\): \['([^']+)'")


@contextmanager
def layers(bar, replayed=lambda: 0):
    """Drive `bar` (a tqdm) from the sequential pipeline while the context is open;
    `replayed()`: how many subgraphs a resumed run replays from checkpoints (the bar starts
    after them)."""
    from llmcompressor.pipelines.sequential import pipeline

    traced, batches = pipeline.trace_subgraphs, pipeline._get_batches
    callbacks = pipeline.LifecycleCallbacks
    original_end = callbacks.sequential_epoch_end
    raw_end = callbacks.__dict__["sequential_epoch_end"]  # the classmethod, to put back
    state = {"started": 0, "total": 0}

    def trace(*args, **kwargs):
        subgraphs = traced(*args, **kwargs)
        state["total"] = max(1, len(subgraphs) - 1)  # the first holds the embeddings
        state["started"] = 0  # oneshot runs a pass per modifier that needs data
        bar.reset(total=state["total"])
        kept = max(0, replayed() - 1)  # layers done by an earlier attempt: not this run's rate
        bar.initial = bar.n = bar.last_print_n = kept
        return subgraphs

    def counted_batches(activations, num_batches, input_names, desc, *rest, **kwargs):
        phase = "propagating" if "Propagating" in desc else "calibrating"
        if phase == "calibrating":  # a new subgraph: the layers before it are done
            bar.update(max(0, state["started"] - 1 - bar.n))
            state["started"] += 1
        if state["started"] <= replayed():
            phase = "replaying (kept)"
        found = batches(activations, num_batches, input_names, desc, *rest, **kwargs)
        for i, item in enumerate(found):
            _show(bar, state, f"{phase} {i + 1}/{num_batches}")
            yield item

    def epoch_end(modules, **kwargs):
        kept = state["started"] <= replayed()
        _show(
            bar, state, "loading kept state" if kept else "solving" if _solves() else "quantizing"
        )
        return original_end(modules, **kwargs)

    def solving(message) -> None:  # GPTQ logs each module as it starts solving it
        if found := _MODULES.search(message.record["message"]):
            module = ".".join(found[1].split(".")[-2:])
            _show(bar, state, f"solving {module}")

    from loguru import logger

    sink = logger.add(solving, level="INFO", filter=lambda r: "Quantizing" in r["message"])
    pipeline.trace_subgraphs, pipeline._get_batches = trace, counted_batches
    callbacks.sequential_epoch_end = staticmethod(epoch_end)
    try:
        yield
        if state["total"]:
            bar.update(state["total"] - bar.n)
    finally:
        pipeline.trace_subgraphs, pipeline._get_batches = traced, batches
        callbacks.sequential_epoch_end = raw_end
        logger.remove(sink)


def _show(bar, state: dict, phase: str) -> None:
    layer = state["started"] - 1
    where = f"layer {layer}/{state['total']}" if layer else "embeddings"
    bar.set_postfix_str(f"{where}: {phase}", refresh=False)
    now = time.monotonic()  # redraw at the bar's own interval (every 15 s in CI logs)
    if now - state.get("drawn", 0.0) >= bar.mininterval:
        state["drawn"] = now
        bar.refresh()


def _solves() -> bool:
    from llmcompressor.core import active_session

    names = {type(m).__name__ for m in active_session().lifecycle.recipe.modifiers}
    return bool(names & {"GPTQModifier", "AutoRoundModifier", "AWQModifier"})
