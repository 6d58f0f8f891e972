"""Log-probabilities from transformers (main env). Loads compressed-tensors checkpoints too."""

from collections.abc import Iterator
from pathlib import Path

import torch

from pipeline.config.engine_defaults import BATCH_WINDOWS
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


def generate(model, prompts: list[list[int]], max_new_tokens: int, batch_sizes: list[int],
             pad_id: int, bar=None) -> list[list[list[int]]]:  # fmt: skip
    """Greedy continuations at each batch size: `size` prompts at a time, left-padded (the
    model's own generation config's end-of-sequence stops a row; its tokens after are
    padding)."""
    device = next(model.parameters()).device
    runs = []
    with torch.inference_mode():
        for size in batch_sizes:
            out = []
            for first in range(0, len(prompts), size):
                batch = prompts[first : first + size]
                width = max(map(len, batch))
                ids = [[pad_id] * (width - len(p)) + p for p in batch]
                mask = [[0] * (width - len(p)) + [1] * len(p) for p in batch]
                made = model.generate(
                    input_ids=torch.tensor(ids, device=device),
                    attention_mask=torch.tensor(mask, device=device),
                    do_sample=False,
                    max_new_tokens=max_new_tokens,
                    pad_token_id=pad_id,
                )
                out += made[:, width:].tolist()
                if bar is not None:
                    bar.update(len(batch))
            runs.append(out)
    return runs
