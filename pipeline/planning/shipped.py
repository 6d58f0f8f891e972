"""The original model's weights as they ship: 16-bit, or the format its config.json declares
(DeepSeek-V3 and R1 ship FP8 weights in 128 × 128 blocks: ~627 GiB, not 1,250 GiB of bf16).
vLLM serves such a checkpoint in that format, so plans count it so."""

from pipeline.models import architecture


def fp8_blocks(config: dict) -> tuple[int, int] | None:
    """The (rows, columns) of the FP8 blocks the checkpoint ships in (None: 16-bit)."""
    quant = config.get("quantization_config") or {}
    block = quant.get("weight_block_size")
    if quant.get("quant_method") == "fp8" and block:
        return int(block[0]), int(block[1])
    return None


def original_bytes(config: dict) -> int:
    """The bytes of weights vLLM loads for the original."""
    if fp8_blocks(config):
        from pipeline.config import recipe
        from pipeline.planning.weights import artifact_bytes

        # the shipped fp8-block recipe: FP8 Linears in 128 × 128 blocks, lm_head in 16 bits
        return artifact_bytes(recipe.load("fp8-block"), config)
    return architecture.total_params(config) * 2


def describe(config: dict) -> str:
    block = fp8_blocks(config)
    return f"FP8 in {block[0]} × {block[1]} blocks (as shipped)" if block else "16-bit"
