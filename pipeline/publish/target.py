"""Where `publish` sends an artifact: `hf://org/name` (or bare `org/name`) on the hub at
HF_ENDPOINT (default huggingface.co), or `file:///path`, a local hub-like folder for
air-gapped sites (the repo's files, laid out as they would be on the hub)."""

import re
from dataclasses import dataclass
from pathlib import Path

from pipeline.core.errors import UserError

REPO_ID = re.compile(r"^[A-Za-z0-9][\w.-]{0,95}/[A-Za-z0-9][\w.-]{0,95}$")


@dataclass(frozen=True)
class Target:
    kind: str  # "hf" or "file"
    repo_id: str | None = None
    path: Path | None = None

    @property
    def display(self) -> str:
        return f"hf://{self.repo_id}" if self.kind == "hf" else f"file://{self.path}"

    @property
    def hub_repo(self) -> str:
        """An hf target's repo id (parse sets it for every hf target)."""
        if self.repo_id is None:
            raise ValueError(f"{self.display} is not a hub target: it has no repo id")
        return self.repo_id

    @property
    def local_folder(self) -> Path:
        """A file target's folder (parse sets it for every file target)."""
        if self.path is None:
            raise ValueError(f"{self.display} is not a file target: it has no folder")
        return self.path

    @property
    def card_name(self) -> str:
        """What the card calls the model: the repo id, or the folder's org/name."""
        if self.kind == "hf":
            return self.hub_repo
        return f"{self.local_folder.parent.name}/{self.local_folder.name}"


def parse(text: str | None) -> Target:
    if not text:
        raise UserError("publish needs a target: REPO=org/name, hf://org/name or file:///path")
    if text.startswith("file://"):
        raw = text.removeprefix("file://")
        if not raw.startswith("/"):
            raise UserError(f"file target must be an absolute path, file:///… (got {text})")
        path = Path(raw)
        if path == Path("/") or not path.name:
            raise UserError(f"file target needs a folder name, not a root (got {text})")
        return Target("file", path=path)
    repo_id = text.removeprefix("hf://")
    if not repo_id.strip():
        raise UserError(f"'{text}' names no repo: use hf://org/name")
    if "://" in repo_id:
        raise UserError(f"unknown target scheme in '{text}'; use hf://org/name or file:///path")
    if not REPO_ID.match(repo_id) or ".." in repo_id or repo_id.endswith((".git", "-", ".")):
        raise UserError(f"'{repo_id}' is not a hub repo id (org/name: letters, digits, -_.)")
    return Target("hf", repo_id=repo_id)


def check_apart(path: Path, own: dict[str, Path]) -> None:
    """A file target never overlaps the pipeline's own folders or the model it came from: a
    copy into them, or a take-over moving them aside, would lose finished work."""
    dest = path.resolve()
    for what, folder in own.items():
        folder = folder.resolve()
        if dest == folder or folder in dest.parents:
            raise UserError(f"file target {dest} is inside {what} ({folder}); publish elsewhere")
        if dest in folder.parents:
            raise UserError(f"file target {dest} contains {what} ({folder}); publish elsewhere")
