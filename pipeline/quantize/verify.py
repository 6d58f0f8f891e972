"""Does the artifact load back? Checked before the quantize stage says "done".

transformers reloads it (float32 on CPU) and must map every tensor: none unexpected, none of the
model's parameters missing; a forward pass on a few tokens must give finite logits. Where this
transformers cannot map a family's saved names (seen: Mixtral written by llm-compressor 0.14,
experts saved one by one, which transformers 5.17 keeps fused), the artifact is still what vLLM
loads: the stage is done and records why the hf backend cannot use it. Large models are not
reloaded here (it would cost as much as quantizing): the first eval load is their check.
"""

from pathlib import Path

from pipeline.core.errors import ArtifactCheckError, first_line

RELOAD_LIMIT = 3_000_000_000  # parameters; above it the reload is skipped


def reload(artifact: Path, params: int) -> dict:
    """{"transformers": True | False | None, "reason": …}; raises on non-finite logits."""
    if params > RELOAD_LIMIT:
        return {"transformers": None, "reason": f"not reloaded here ({params / 1e9:.1f}B params)"}
    import torch
    import transformers

    from pipeline.models import hf_load

    model, info = hf_load.from_pretrained(artifact, torch.float32, output_loading_info=True)
    missing, unexpected = sorted(info["missing_keys"]), sorted(info["unexpected_keys"])
    if missing or unexpected:
        shown = ", ".join([*unexpected[:1], *missing[:1]])
        return {
            "transformers": False,
            "reason": (
                f"transformers {transformers.__version__} does not map this artifact back: "
                f"{len(unexpected)} tensors unexpected, {len(missing)} parameters missing "
                f"(e.g. {shown}); vLLM loads it"
            ),
        }
    vocab = model.config.get_text_config().vocab_size
    ids = torch.arange(1, 9).remainder(vocab)[None]
    try:
        with torch.inference_mode():
            logits = model(input_ids=ids).logits
    except Exception as e:  # e.g. a config whose shapes the modeling code cannot run
        raise ArtifactCheckError(
            f"artifact check: transformers {transformers.__version__} reloads the artifact but "
            f"its forward pass fails ({type(e).__name__}: {first_line(e)}); check the model's "
            "config.json against its family (the original would fail the same way)"
        ) from None
    if not torch.isfinite(logits).all():
        raise ArtifactCheckError("artifact check: the reloaded artifact gives non-finite logits")
    return {"transformers": True, "reason": None}
