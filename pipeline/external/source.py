"""Where an external artifact comes from: a local folder, or a hub id with an optional
@revision. `resolve` reads names only; `config_folder` fetches the small files (configs,
tokenizer) to decide up front; `materialize` the weights."""

import re
from dataclasses import dataclass
from pathlib import Path

from pipeline.core.errors import UserError, clip
from pipeline.core.files import exists, hash_folder
from pipeline.models import hub_access
from pipeline.models.aliases import HUB_ID

SMALL_FILES = ["*.json", "*.model", "*.txt", "*.jinja"]
WEIGHTS = ["*.safetensors"]


@dataclass(frozen=True)
class ExternalRef:
    given: str  # as the user wrote it
    name: str  # its run dir is runs/<model>/external-<name>
    path: Path | None = None
    hub_id: str | None = None
    revision: str | None = None

    @property
    def run_name(self) -> str:
        return f"external-{self.name}"


def resolve(given: str) -> ExternalRef:
    text = given.strip()
    if not text:
        raise UserError("ARTIFACT is empty: give a checkpoint folder or a hub id[@revision]")
    path = Path(text).expanduser()
    if exists(path):
        if not path.is_dir():
            raise UserError(f"ARTIFACT {clip(text)} is a file: give the checkpoint's folder")
        return ExternalRef(text, _safe(path.resolve().name), path=path.resolve())
    hub_id, _, revision = text.partition("@")
    if HUB_ID.match(hub_id) and not hub_id.startswith((".", "/")):
        name = hub_id.replace("/", "--") + (f"@{revision}" if revision else "")
        return ExternalRef(text, _safe(name), hub_id=hub_id, revision=revision or None)
    raise UserError(
        f"ARTIFACT '{clip(text)}' is neither a folder nor a hub id (org/name[@revision])"
    )


def config_folder(ref: ExternalRef) -> Path:
    """A folder with the artifact's configs and tokenizer (the whole artifact when local)."""
    return ref.path or _download(ref, SMALL_FILES)


def materialize(ref: ExternalRef) -> tuple[Path, dict]:
    """The artifact's folder, and the identity it is fingerprinted by: its content (the same
    bytes in another folder are the same artifact)."""
    if ref.path:
        return ref.path, {"content_sha256": hash_folder(ref.path)}
    path = _download(ref, SMALL_FILES + WEIGHTS)
    identity = {"id": ref.hub_id, "revision": path.name, "content_sha256": hash_folder(path)}
    return path, identity


def _download(ref: ExternalRef, patterns: list[str]) -> Path:
    if ref.hub_id is None:  # resolve() gives every ref a folder or a hub id
        raise ValueError(f"{ref.given}: neither a folder nor a hub id to download")
    hub_access.reach(ref.given)
    try:
        from huggingface_hub import snapshot_download

        return Path(snapshot_download(ref.hub_id, revision=ref.revision, allow_patterns=patterns))
    except Exception as e:  # offline, gated, unknown revision: one line with the next step
        raise hub_access.failure(e, ref.given, "download") from None


def _safe(name: str) -> str:
    return re.sub(r"[^\w.@-]+", "-", name).strip("-.") or "artifact"
