"""Resume llm-compressor's sequential pipeline (every calibrating recipe) after the last layer it
finished, bit for bit.

The pipeline cuts the model into subgraphs at decoder layers (layer_progress.py) and runs each:
a calibration pass over every batch, the modifiers' work at its end
(`LifecycleCallbacks.sequential_epoch_end`: GPTQ's solve, AWQ's smoothing, the observers'
scales), then a propagation pass through the quantized layer that makes the next one's inputs.
As each subgraph's modifiers finish, the state of the modules it ran (weights, scales, zero
points) is kept with torch's RNG state (core/checkpoints.py).

A resumed run loads the model as the first did and replays the finished subgraphs: no
calibration pass and no modifier at their end (their kept state is loaded instead), then the
same propagation pass, so the first unfinished layer calibrates on the same activations. The
next layer's inputs are recomputed rather than kept: a forward per finished layer at resume,
where keeping the layer boundary's activations would write them after every layer of every run
(samples × sequence × hidden × 4 bytes: 17 GB a layer for 512 × 2048 tokens at Llama-3-8B's
width; benchmarks/quantize_resume.py measures both). A recipe whose calibration pass is the one
that propagates (AutoRound: `propagate_error` off, as llm-compressor decides in its pipeline)
replays that pass with the modifiers' hooks off and the layer still unquantized, then loads the
kept state. llm-compressor's default `independent` pipeline runs one such pass per modifier that
needs data (int8: SmoothQuant's, then GPTQ's): subgraphs are kept per pass, and a resumed run
replays the passes before the one it resumes in whole.

llm-compressor 0.14's pipeline module looks up `trace_subgraphs`, `_get_batches` and
`LifecycleCallbacks.sequential_epoch_end` at call time: wrapping them there is enough.
"""

import re
import time
from contextlib import contextmanager

from pipeline.core.checkpoints import Checkpoints

KIND = "subgraph"
_PASS = re.compile(r"^\((\d+)/(\d+)\): (Calibrating|Propagating)")
_RNG = "__rng__.torch"


# Modifiers whose whole state after a layer is that layer's modules' (and torch's RNG): a
# resumed run of each shipped recipe of these is tested byte-identical to an uninterrupted one
# (tests/e2e/quantize/test_quantize_stage.py: gptq, awq, int8 killed in its second pass, nvfp4
# with only the save left, fp8-kv; tiny-llama). AutoRound is not among them: it hands each
# layer's quantized outputs to the next layer's tuning (its `_q_input`), which no replay of
# the kept layers rebuilds.
SAVE_LEFT = "the save"  # kept()'s word when every layer of every pass is kept
RESUMABLE = {"GPTQModifier", "AWQModifier", "SmoothQuantModifier", "QuantizationModifier"}


def unsupported(recipe) -> str | None:
    """Why a calibrating recipe's layers cannot be kept for resuming (None: they can)."""
    others = [name for name, _ in recipe.modifiers() if name not in RESUMABLE]
    if not others:
        return None
    if "AutoRoundModifier" in others:
        return "AutoRound hands each layer's quantized outputs to the next layer's tuning"
    return f"{', '.join(others)} not checked to resume bit for bit"


def name(epoch: int, index: int) -> str:
    """A kept subgraph: llm-compressor's oneshot runs one calibration pass per modifier that
    needs data (its default `independent` pipeline: SmoothQuant, then GPTQ), each over every
    subgraph."""
    return f"pass {epoch} {KIND} {index}"


def replayable(checkpoints: Checkpoints) -> list[tuple[int, int]]:
    """The (pass, subgraph) kept from the first on, in order (a contiguous run: one missing —
    a hand-removed file — ends it; a pass's next begins once all its subgraphs are kept)."""
    done = checkpoints.done() if checkpoints.kind in (None, KIND) else {}
    total, epoch = checkpoints.total or 0, 0
    found: list[tuple[int, int]] = []
    while total:
        for index in range(total):
            unit = name(epoch, index)
            if unit not in done or not checkpoints.path(unit).is_file():
                return found
            found.append((epoch, index))
        epoch += 1
    return found


def passes(recipe) -> int:
    """The calibration passes oneshot makes for `recipe`: one per modifier that needs data
    (llm-compressor's own `requires_calibration_data`; its independent pipeline)."""
    from llmcompressor.recipe import Recipe

    built = Recipe.from_dict(recipe.spec.quantization).modifiers
    return max(1, sum(bool(getattr(m, "requires_calibration_data", False)) for m in built))


def kept(checkpoints: Checkpoints, recipe) -> tuple[int, int, float, str]:
    """(decoder layers kept in the pass to resume, its layers, the seconds every kept subgraph
    took, which pass it is when not the first, or that only the save is left); layers are the
    subgraphs after the first (the embeddings'). (0, 0, 0, "") when nothing is kept."""
    units = replayable(checkpoints)
    if not units:
        return 0, 0, 0.0, ""
    done = checkpoints.done()
    seconds = sum(done[name(*unit)]["seconds"] for unit in units)
    total = checkpoints.total
    assert total, "replayable() keeps units only of a begun total"
    epoch, index = divmod(len(units), total)  # the first subgraph not kept
    if epoch >= passes(recipe):  # killed as it saved: every layer is kept
        return total - 1, total - 1, seconds, SAVE_LEFT
    where = ""
    if epoch:
        modifier = done[name(epoch - 1, total - 1)].get("modifier") or "the one before"
        where = f" of pass {epoch + 1} (after {modifier}'s)"
    return max(0, index - 1), total - 1, seconds, where


@contextmanager
def resumable(model, checkpoints: Checkpoints):
    """Keep each finished subgraph's state in `checkpoints`, and replay those already kept,
    while the context is open. Yields its state: `replay`, the current pass's subgraphs to
    replay (layer_progress's bar starts after them)."""
    from llmcompressor.pipelines.sequential import pipeline

    traced, batches = pipeline.trace_subgraphs, pipeline._get_batches
    callbacks = pipeline.LifecycleCallbacks
    original_end = callbacks.sequential_epoch_end
    raw_end = callbacks.__dict__["sequential_epoch_end"]  # the classmethod, to put back
    state = {"replay": 0, "epoch": -1, "index": -1, "subgraphs": [], "t0": 0.0}

    def trace(*args, **kwargs):
        subgraphs = traced(*args, **kwargs)
        state["subgraphs"], state["epoch"] = subgraphs, state["epoch"] + 1
        checkpoints.begin(KIND, len(subgraphs))
        units = replayable(checkpoints)  # none when another attempt's count differed
        state["replay"] = sum(1 for epoch, _ in units if epoch == state["epoch"])
        return subgraphs

    def passes(activations, num_batches, input_names, desc, *rest, **kwargs):
        found = _PASS.match(desc)
        index, calibrating = int(found[1]) - 1, found[3] == "Calibrating"
        if calibrating:
            state["index"], state["t0"] = index, time.monotonic()
        if index < state["replay"] and calibrating:
            if _propagates():  # its inputs for the next layer come from the pass after
                return
            from llmcompressor.modifiers.utils.hooks import HooksMixin

            with HooksMixin.disable_hooks():  # the layer as it was before its modifiers ran
                yield from batches(activations, num_batches, input_names, desc, *rest, **kwargs)
            return
        yield from batches(activations, num_batches, input_names, desc, *rest, **kwargs)

    def epoch_end(modules, **kwargs):
        epoch, index = state["epoch"], state["index"]
        if index < state["replay"]:
            _restore(model, checkpoints.path(name(epoch, index)), rng=checkpoints.writes)
            return None
        result = original_end(modules, **kwargs)
        subgraph = state["subgraphs"][index]
        seconds = time.monotonic() - state["t0"]
        checkpoints.keep(name(epoch, index), f"pass-{epoch}-subgraph-{index:04d}.safetensors",
                         lambda tmp: _save(model, subgraph, tmp), seconds,
                         modifier=_modifier())  # fmt: skip
        return result

    pipeline.trace_subgraphs, pipeline._get_batches = trace, passes
    # deliberate patches of the library's methods, which mypy refuses to assign
    callbacks.sequential_epoch_end = staticmethod(epoch_end)  # type: ignore[method-assign]
    try:
        yield state
    finally:
        pipeline.trace_subgraphs, pipeline._get_batches = traced, batches
        callbacks.sequential_epoch_end = raw_end  # type: ignore[method-assign]


def _modifier() -> str:
    """The modifiers of the current pass, by name (the independent pipeline gives each its own)."""
    from llmcompressor.core import active_session

    return "+".join(type(m).__name__ for m in active_session().lifecycle.recipe.modifiers)


def _propagates() -> bool:
    """llm-compressor's rule (pipelines/sequential/pipeline.py): AutoRound calibrates each
    layer on the unquantized model's activations; every other recipe propagates the error."""
    from llmcompressor.core import active_session

    modifiers = active_session().lifecycle.recipe.modifiers
    return not any(type(m).__name__ == "AutoRoundModifier" for m in modifiers)


def _save(model, subgraph, path) -> None:
    """The state of every module the subgraph runs, and torch's RNG state after it."""
    import torch
    from safetensors.torch import save_file

    tensors = {}
    targets = dict.fromkeys(n.target for n in subgraph.graph.find_nodes(op="call_module"))
    for target in targets:
        for key, value in model.get_submodule(target).state_dict(keep_vars=False).items():
            tensors[f"{target}.{key}"] = value.detach().to("cpu").contiguous()
    tensors[_RNG] = torch.get_rng_state()
    save_file(tensors, str(path))


def _restore(model, path, rng: bool = True) -> None:
    """The kept state into the model; torch's RNG too where this process kept it (another
    torchrun rank's is its own)."""
    import torch
    from compressed_tensors.offload import update_offload_parameter
    from safetensors.torch import load_file

    saved = load_file(str(path))
    state = saved.pop(_RNG)
    if rng:
        torch.set_rng_state(state)
    with torch.no_grad():
        for key, value in saved.items():
            owner, _, attr = key.rpartition(".")
            module = model.get_submodule(owner)
            current = getattr(module, attr)
            update_offload_parameter(module, attr, value.to(current.device, current.dtype))
