"""Write tiny-llama quantized by AutoRound in the formats other tools ship, as a user would
find them on the hub: AutoGPTQ's (`auto_gptq`), AutoAWQ's (`auto_awq`) and llm-compressor's
(`llm_compressor`), one quantization saved three ways. Main env; run as a script so AutoRound's
global settings stay out of the test process.

    python tests/e2e/external/make_checkpoints.py MODEL_DIR OUT_DIR
"""

import json
import sys
from pathlib import Path

FORMATS = {"auto_gptq": "auto-gptq", "auto_awq": "auto-awq", "llm_compressor": "llm-compressor"}


def main() -> None:
    from auto_round import AutoRound

    from pipeline.data.texts import load_all

    model, out = sys.argv[1], Path(sys.argv[2])
    texts = load_all("python-docs", None, "calibration", "text")[:16]
    # iters=0: AutoRound's round-to-nearest mode (seconds; tuning is tested with the recipe)
    ar = AutoRound(model, bits=4, group_size=128, sym=True, iters=0, nsamples=16, seqlen=128,
                   enable_torch_compile=False,  # nothing to tune: compiling only costs time
                   dataset=texts)  # fmt: skip
    _, folders = ar.quantize_and_save(str(out / "autoround"), format=",".join(FORMATS))
    found = {}
    for name, prefix in FORMATS.items():
        folder = next(Path(f) for f in folders if Path(f).name.startswith(prefix))
        final = out / name  # the folder name a user would pass as ARTIFACT
        folder.rename(final)
        _unquantized_in_bf16(final)
        found[name] = str(final)
    print(json.dumps(found))


def _unquantized_in_bf16(folder: Path) -> None:
    """AutoRound keeps the model in float32 on CPUs without bf16 support (AVX2-only hosts) and
    saves the unquantized tensors (embeddings, LM head, norms) so; a hub checkpoint of a bf16
    model ships them in bf16, as AutoRound writes them on other hosts."""
    import torch
    from safetensors.torch import load_file, save_file

    config = folder / "config.json"
    data = json.loads(config.read_text())
    for key in ("torch_dtype", "dtype"):
        if data.get(key) == "float32":
            data[key] = "bfloat16"
    config.write_text(json.dumps(data, indent=2))
    for path in folder.glob("*.safetensors"):
        tensors = load_file(path)
        if not any(t.dtype == torch.float32 and n.endswith(".weight") for n, t in tensors.items()):
            continue
        cast = {
            n: t.to(torch.bfloat16) if t.dtype == torch.float32 and n.endswith(".weight") else t
            for n, t in tensors.items()
        }
        save_file(cast, path, metadata={"format": "pt"})


if __name__ == "__main__":
    main()
