"""Which model a name means: an alias, the embedded tiny-llama, a hub id or a local folder."""

import json
import re
from dataclasses import dataclass
from pathlib import Path

from pipeline.core.errors import UserError, clip
from pipeline.core.files import exists, hash_folder, is_file
from pipeline.models import hub_access, integrity, packaged
from pipeline.models.tiny.build import cached_path, ensure
from pipeline.models.tiny.spec import CONFIG

TINY = "tiny-llama"
CONFIGS_DIR = Path(__file__).resolve().parent / "configs"

# Alias → hub id. Their config.json files are kept in configs/ so plans work offline.
ALIASES = {
    "llama3-8b": "meta-llama/Meta-Llama-3-8B-Instruct",
    "llama3-70b": "meta-llama/Meta-Llama-3-70B-Instruct",
    "llama3-405b": "meta-llama/Llama-3.1-405B-Instruct",
    "llama3.1-8b": "meta-llama/Llama-3.1-8B-Instruct",
    "mistral-7b": "mistralai/Mistral-7B-Instruct-v0.3",
    "qwen2.5-7b": "Qwen/Qwen2.5-7B-Instruct",
    "qwen3-8b": "Qwen/Qwen3-8B",
    "mixtral-8x7b": "mistralai/Mixtral-8x7B-Instruct-v0.1",
    "qwen3-30b-a3b": "Qwen/Qwen3-30B-A3B",
    "qwen1.5-moe-a2.7b": "Qwen/Qwen1.5-MoE-A2.7B-Chat",
    "deepseek-v2-lite": "deepseek-ai/DeepSeek-V2-Lite-Chat",
    "deepseek-v3": "deepseek-ai/DeepSeek-V3",
}
HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]{0,95}/[\w.-]{1,96}$")  # the hub's 96-character limit


@dataclass(frozen=True)
class ModelRef:
    name: str  # the run directory's name for it
    source: str  # "tiny", "package" (built here from a registry package), "alias", "hub", "local"
    hub_id: str | None = None
    path: Path | None = None
    revision: str | None = None

    @property
    def from_hub(self) -> bool:
        """Its weights are downloaded from the hub (tiny-llama and a package's model are built
        here, a local folder is there)."""
        return self.source in ("alias", "hub")

    @property
    def load_id(self) -> str:
        """What `from_pretrained` gets."""
        return str(self.path) if self.path else str(self.hub_id or self.name)

    @property
    def folder(self) -> Path:
        """Its local folder: a package's or a local model's (resolve sets it for those)."""
        if self.path is None:
            raise ValueError(f"model {self.name} ({self.source}) has no local folder")
        return self.path

    @property
    def repo(self) -> str:
        """Its hub id: an alias's, a hub model's or a package's upstream (resolve sets it)."""
        if self.hub_id is None:
            raise ValueError(f"model {self.name} ({self.source}) has no hub id")
        return self.hub_id


def names() -> list[str]:
    return [TINY, *packaged.PACKAGED, *ALIASES]


def resolve(name: str, revision: str | None = None) -> ModelRef:
    if not name.strip():
        raise UserError(f"no model given; valid: {', '.join(names())}, a hub id or a folder")
    if revision and (name == TINY or exists(_expanded(name))):
        raise UserError(f"--revision applies to hub models, not {clip(name)}")
    if name == TINY:
        return ModelRef(name=TINY, source="tiny")
    if revision and name in packaged.PACKAGED:
        raise UserError(f"--revision applies to hub models, not {name} (built from a package)")
    if name in packaged.PACKAGED:  # its upstream hub id: the base model a card names
        p = packaged.PACKAGED[name]
        return ModelRef(name=name, source="package", hub_id=p.upstream,
                        path=packaged.cached_path(name))  # fmt: skip
    if name in ALIASES:
        return ModelRef(name=name, source="alias", hub_id=ALIASES[name], revision=revision)
    path = _expanded(name)
    if exists(path):
        if not (path / "config.json").is_file():
            raise UserError(f"model folder {name} has no config.json")
        return ModelRef(name=path.resolve().name, source="local", path=path.resolve())
    if HUB_ID.match(name) and not name.startswith((".", "/")):
        return ModelRef(name=name.replace("/", "--"), source="hub", hub_id=name, revision=revision)
    valid = ", ".join(names())
    raise UserError(
        f"unknown model '{clip(name)}'; valid: {valid}, a hub id (org/name) or a local folder"
    )


def load_config(ref: ModelRef) -> dict:
    """config.json, without loading weights; offline for the aliases and tiny-llama."""
    if ref.source == "tiny":
        return dict(CONFIG)
    if ref.source == "local" or (ref.source == "package" and is_file(ref.folder / "config.json")):
        return integrity.read_config(ref.folder)
    bundled = CONFIGS_DIR / f"{ref.repo.replace('/', '--')}.json"
    if is_file(bundled):
        return json.loads(bundled.read_text())
    hub_access.reach(ref.repo)
    try:
        from huggingface_hub import hf_hub_download

        path = hf_hub_download(ref.repo, "config.json", revision=ref.revision)
    except Exception as e:  # offline, gated, missing: one line with the next step
        raise hub_access.failure(e, ref.repo, "read config.json of") from None
    return json.loads(Path(path).read_text())


def materialize(ref: ModelRef) -> tuple[Path, dict]:
    """A local folder with the weights, and the identity to fingerprint it by.

    tiny-llama is built (once); hub models are downloaded to the hub cache (once) and pinned
    by the commit they resolved to; local folders are identified by content hash.
    """

    if ref.source == "tiny":
        path = ensure()
        return path, _identity(ref, path)
    if ref.source == "package":
        return packaged.ensure(ref.name), _identity(ref, ref.folder)
    if ref.source == "local":
        return ref.folder, _identity(ref, ref.folder)
    hub_access.reach(ref.repo)
    try:
        from huggingface_hub import snapshot_download

        path = Path(
            snapshot_download(
                ref.repo,
                revision=ref.revision,
                allow_patterns=["*.json", "*.safetensors", "*.model", "*.txt", "*.jinja"],
            )
        )
    except Exception as e:  # offline, gated, unknown: one line with the next step
        raise hub_access.failure(e, ref.repo, "download") from None
    return path, {"id": ref.hub_id, "revision": path.name}


def identity_here(ref: ModelRef) -> dict | None:
    """materialize's identity where nothing is built or downloaded for it (a plan's): a local
    folder's, tiny-llama's once built; else None."""
    if ref.source == "local":
        return _identity(ref, ref.folder)
    if ref.source == "tiny" and (cached_path() / "build.json").is_file():
        return _identity(ref, cached_path())
    if ref.source == "package" and (ref.folder / "build.json").is_file():
        return _identity(ref, ref.folder)
    return None


def _identity(ref: ModelRef, path: Path) -> dict:
    if ref.source in ("tiny", "package"):
        return {"name": ref.name, "content_sha256": hash_folder(path)}
    return {"path": str(ref.path), "content_sha256": hash_folder(path)}


def header(ref: "ModelRef", identity: dict) -> dict:
    """The manifest's model header: which model a run dir's stages worked on."""
    found = {
        "name": ref.name,
        "source": ref.source,
        "id": ref.hub_id,
        "revision": identity.get("revision"),
    }
    if ref.source == "package":  # where it came from: the package, its file and license
        made = packaged.provenance(ref.folder) or {}
        keys = ("package", "version", "wheel_sha256", "gguf_sha256", "gguf_type", "license")
        found["built_from"] = {k: made.get(k) for k in keys}
    return found


def _expanded(name: str) -> Path:
    try:
        return Path(name).expanduser()
    except RuntimeError:  # "~user/…" of a user this host does not have
        raise UserError(f"model {clip(name)}: no such user's home folder") from None
