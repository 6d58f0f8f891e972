"""The offline text corpus: Python's help topics plus standard-library docstrings.

Documents are split into disjoint train / calibration / heldout parts by a hash of their name,
so the split is stable across runs and machines, and later stages (eval) reuse the same parts.
"""

import ast
import hashlib
import json
import sysconfig
from pathlib import Path

from pipeline.core.files import sha256_text, waiting_lock
from pipeline.core.paths import cache_root

SPLITS = ("train", "calibration", "heldout")
# Out of every 20 documents (by name hash): 1 held out, 1 for calibration, 18 for training.
_BUCKETS = 20
_VERSION = 1  # bump when the documents or the split change


def _split_of(doc_id: str) -> str:
    bucket = int(hashlib.sha256(doc_id.encode()).hexdigest(), 16) % _BUCKETS
    return "heldout" if bucket == 0 else "calibration" if bucket == 1 else "train"


def _help_topics() -> list[tuple[str, str]]:
    from pydoc_data.topics import topics

    return [(f"topic:{name}", topics[name].strip()) for name in sorted(topics)]


def _docstrings() -> list[tuple[str, str]]:
    """One document per stdlib module: its module, class and function docstrings in order."""
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    skip = {"test", "tests", "idlelib", "site-packages", "lib2to3", "turtledemo", "__pycache__"}
    docs = []
    for path in sorted(stdlib.rglob("*.py")):
        rel = path.relative_to(stdlib)
        if skip & set(rel.parts):
            continue
        try:
            tree = ast.parse(path.read_text(encoding="utf-8"))
        except (SyntaxError, UnicodeDecodeError, ValueError):
            continue
        parts = []
        for node in ast.walk(tree):
            if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
                doc = ast.get_docstring(node)
                if doc and len(doc) >= 40:
                    parts.append(doc.strip())
        if parts:
            docs.append((f"module:{rel.as_posix()}", "\n\n".join(parts)))
    return docs


def build_documents() -> dict[str, list[dict]]:
    parts: dict[str, list[dict]] = {s: [] for s in SPLITS}
    for doc_id, text in _help_topics() + _docstrings():
        parts[_split_of(doc_id)].append({"id": doc_id, "text": text})
    return parts


def corpus_dir() -> Path:
    """Folder with train/calibration/heldout .jsonl files; built once and cached."""
    root = cache_root() / f"corpus-v{_VERSION}"
    with waiting_lock(cache_root() / "corpus.lock"):
        done = root / "fingerprint.json"
        if done.is_file():
            return root
        parts = build_documents()
        root.mkdir(parents=True, exist_ok=True)
        info = {}
        for split, docs in parts.items():
            lines = "".join(json.dumps(d) + "\n" for d in docs)
            (root / f"{split}.jsonl").write_text(lines)
            info[split] = {
                "documents": len(docs),
                "characters": sum(len(d["text"]) for d in docs),
                "sha256": sha256_text(lines),
            }
        # Written last: its presence says the folder is complete.
        tmp = done.with_suffix(".tmp")
        tmp.write_text(json.dumps(info, indent=2))
        tmp.replace(done)
    return root


def read_split(split: str) -> list[str]:
    return [doc["text"] for doc in read_documents(split)]


def read_documents(split: str) -> list[dict]:
    """{id, text} of each document of a split, in order."""
    path = corpus_dir() / f"{split}.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()]


def fingerprint() -> dict:
    return json.loads((corpus_dir() / "fingerprint.json").read_text())


def chunks(texts: list[str], size: int = 1000) -> list[str]:
    """Paragraph-aligned pieces of about `size` characters: one calibration or eval sample each."""
    out = []
    for text in texts:
        piece = ""
        for para in text.split("\n\n"):
            if piece and len(piece) + len(para) > size:
                out.append(piece)
                piece = ""
            piece = f"{piece}\n\n{para}" if piece else para
        if piece.strip():
            out.append(piece)
    return out
