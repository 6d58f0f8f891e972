"""Log-probabilities from transformers (main env). Loads compressed-tensors checkpoints too."""

from collections.abc import Iterator
from pathlib import Path

import torch

from pipeline.eval.plan import BATCH_WINDOWS
from pipeline.models import hf_load

NAME = "hf"


def load(model_dir: Path, kv_cache_dtype: str = "auto"):
    """kv_cache_dtype is not a choice here: compressed-tensors applies the artifact's own
    kv_cache_scheme (quantize-dequantize of k/v with its calibrated scales) when it has one."""

    gpu = torch.cuda.is_available()
    # float32 on CPU: exact, and faster than bf16 there; the checkpoint's dtype on GPU.
    model = hf_load.from_pretrained(
        model_dir,
        "auto" if gpu else torch.float32,
        device_map="auto" if gpu else None,
    )
    return model.eval()


def logprobs(
    model, windows: torch.Tensor, batch_size: int = BATCH_WINDOWS
) -> Iterator[torch.Tensor]:
    """Per window: [context − 1, vocab] float32 log-probs of the next token at each position."""
    device = next(model.parameters()).device
    with torch.inference_mode():
        for batch in windows.split(batch_size):
            logits = model(input_ids=batch.to(device)).logits.float()
            for window in logits:  # a window's log-probs at a time: a batch's would double it
                yield torch.log_softmax(window[:-1], dim=-1).cpu()


def describe(model) -> dict:
    quant = getattr(model.config, "quantization_config", None)
    quant = quant if isinstance(quant, dict) else getattr(quant, "to_dict", dict)()
    kv = (quant or {}).get("kv_cache_scheme")
    kv_cache = f"{kv['type']}{kv['num_bits']} (emulated, calibrated scales)" if kv else "16-bit"
    dtype = str(next(model.parameters()).dtype).removeprefix("torch.")
    fused = any(name.endswith("experts.gate_up_proj") for name, _ in model.named_parameters())
    if quant and fused:  # compressed-tensors dequantized them into transformers' 3-D layout
        dtype += "; MoE experts dequantized (bf16), their activations 16-bit"
    return {"backend": NAME, "dtype": dtype, "kv_cache": kv_cache}
