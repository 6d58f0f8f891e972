"""A random-initialised model with a real model's layer shapes and vocabulary, few layers.

Memory and time at real size grow with the shapes of one layer, the vocabulary and the shard
size, not with the number of layers: Llama-3-8B's shapes (hidden 4096, MLP 14336, 32/8 heads,
vocab 128256) with 2 layers are 1.5B parameters, 2.9 GiB in bf16, written as 1 GB shards like a
hub checkpoint. Its weights mean nothing (fine for memory and time, not for drift). It uses
tiny-llama's tokenizer (ids < 4,096 < vocab). Built once (about a minute) and cached beside
tiny-llama in $PIPELINE_CACHE.

    python -m pipeline.models.realshape [llama3-8b] [--layers 2]    # prints the folder
"""

import argparse
import json
import shutil
from pathlib import Path

from pipeline.core.files import sha256_json, staging_dir, waiting_lock
from pipeline.core.paths import cache_root
from pipeline.models import aliases
from pipeline.models.tiny import spec
from pipeline.models.tiny.build import ensure as tiny

_BUILD_VERSION = 1  # bump when this file changes what it produces
SHARD = "1GB"
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja")


def config(alias: str, layers: int) -> dict:
    """The alias's shipped config with `layers` decoder layers and tiny-llama's special ids."""

    found = {**aliases.load_config(aliases.resolve(alias)), "num_hidden_layers": layers}
    for key in ("bos_token_id", "eos_token_id", "pad_token_id"):
        found[key] = spec.CONFIG.get(key, found.get(key))
    found["max_position_embeddings"] = min(found.get("max_position_embeddings", 8192), 8192)
    return found


def ensure(alias: str = "llama3-8b", layers: int = 2) -> Path:
    """The built model's folder, building it first if the cache lacks it."""
    from importlib.metadata import version

    wanted = config(alias, layers)
    key = sha256_json([_BUILD_VERSION, wanted, SHARD, version("torch"), version("transformers")])[
        :12
    ]
    root = cache_root()
    final = root / f"realshape-{alias}-{layers}L-{key}"
    with waiting_lock(root / "realshape.lock"):
        if not (final / "realshape.json").is_file():
            print(f"building {alias} shapes, {layers} layers (once, cached at {final})", flush=True)
            with staging_dir(final) as tmp:
                _build(tmp, alias, wanted)
    return final


def _build(out: Path, alias: str, wanted: dict, seed: int = 0) -> None:
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    values = dict(wanted)
    model_type = values.pop("model_type")
    for key in ("architectures", "torch_dtype", "dtype", "transformers_version"):
        values.pop(key, None)
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(
        AutoConfig.for_model(model_type, **values), dtype=torch.bfloat16
    )
    model.save_pretrained(out, max_shard_size=SHARD)
    del model
    tokenizer = tiny()
    for name in TOKENIZER_FILES:
        if (tokenizer / name).is_file():
            shutil.copy(tokenizer / name, out / name)
    info = {"alias": alias, "layers": wanted["num_hidden_layers"], "seed": seed, "shard": SHARD}
    (out / "realshape.json").write_text(json.dumps(info) + "\n")
    _evict(out)


def _evict(folder: Path) -> None:
    """Written, synced, and out of the page cache: measured later like a checkpoint downloaded
    long ago (freshly written pages mapped by the next reader inflate its peak RSS: 2.94 GiB
    against 2.12 GiB for the same model-free quantize)."""
    import os

    for path in folder.glob("*.safetensors"):
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("alias", nargs="?", default="llama3-8b", choices=list(aliases.ALIASES))
    p.add_argument("--layers", type=int, default=2)
    args = p.parse_args()
    print(ensure(args.alias, args.layers))
