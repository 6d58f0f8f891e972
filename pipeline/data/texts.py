"""Calibration text, through `datasets`: the offline Python-docs corpus, local files, or the hub.

python-docs            the offline default; `split` is train | calibration | heldout
python-docs-chat       the same documents as conversations, in a `messages` column
                       (chat_template: true; pipeline/data/chat_docs.py)
path/to/file.txt       one sample per paragraph (blank-line separated)
path/to/file.jsonl     one sample per line, text in `text_column` (or a conversation in
                       `messages`, with chat_template: true)
path/to/file.parquet   one sample per row, text in `text_column`
org/name               a hub data set (`config_name`, `split`, `text_column`);
                       with `chat_template: true` a `messages` column is rendered with the
                       model's chat template (e.g. HuggingFaceH4/ultrachat_200k, train_sft)
"""

from dataclasses import dataclass
from pathlib import Path

from pipeline.config.recipe import Calibration
from pipeline.core.errors import UserError, first_line
from pipeline.core.files import sha256_json
from pipeline.data import chat_docs, corpus

DEFAULT = "python-docs"
_CHUNKS = 1000  # python-docs sample size (corpus.chunks): part of its texts' identity
_LOADERS = {".txt": "text", ".jsonl": "json", ".json": "json", ".parquet": "parquet"}


@dataclass(frozen=True)
class TextSet:
    texts: list[str]
    description: dict  # where they came from, for the manifest

    @property
    def fingerprint(self) -> str:
        return sha256_json([self.description, self.texts])


def load_texts(cal: Calibration, tokenizer=None) -> TextSet:
    """`cal.num_samples` texts (fewer if the source has fewer), shuffled with `cal.seed`; when
    packing, as many texts as fill num_samples × max_seq_length tokens (needs the tokenizer)."""
    tokens_needed = cal.num_samples * cal.max_seq_length if cal.pack else None
    tokens = 0
    rows, source = _load_rows(cal.dataset, cal.config_name, cal.split, "calibration")
    column = "messages" if cal.chat_template else cal.text_column
    if column not in rows.column_names:
        have = ", ".join(rows.column_names)
        raise UserError(f"calibration data {source}: no column '{column}' (columns: {have})")
    rows = rows.shuffle(seed=cal.seed)
    texts = []
    for value in rows[column]:
        text = _render(value, cal.chat_template, tokenizer)
        if text.strip():
            texts.append(text)
            if tokens_needed:
                ids = tokenizer(text, add_special_tokens=not cal.chat_template)["input_ids"]
                tokens += len(ids)
        if (tokens >= tokens_needed) if tokens_needed else len(texts) == cal.num_samples:
            break
    if not texts:
        raise UserError(f"calibration data {source}: no non-empty text in column '{column}'")
    description = {
        "dataset": cal.dataset,
        "config_name": cal.config_name,
        "split": cal.split,
        "column": column,
        "requested_samples": cal.num_samples,
        "samples": min(cal.num_samples, tokens // cal.max_seq_length) if cal.pack else len(texts),
        "seed": cal.seed,
    }
    if cal.pack:
        description |= {"packed": True, "texts": len(texts), "tokens": tokens}
    return TextSet(texts=texts, description=description)


def packed(token_lists: list[list[int]], length: int, count: int) -> list[list[int]]:
    """The texts' tokens end to end, cut into at most `count` samples of exactly `length`
    (AutoRound's own convention: equal-length samples, no padding to mask out)."""
    stream = [t for tokens in token_lists for t in tokens]
    return [stream[i * length : (i + 1) * length] for i in range(min(count, len(stream) // length))]


def _render(value, chat: bool, tokenizer) -> str:
    if not chat:
        return value.strip() if isinstance(value, str) else ""
    return tokenizer.apply_chat_template(value, tokenize=False)


def load_all(
    dataset: str, config_name: str | None, split: str, column: str, tokenizer=None
) -> list[str]:
    """Every non-empty text of a split, in order (evaluation reads a fixed token budget); a
    `messages` column rendered with the tokenizer's chat template."""
    rows, source = _load_rows(dataset, config_name, split, "eval data")
    if column not in rows.column_names:
        have = ", ".join(rows.column_names)
        raise UserError(f"data {source}: no column '{column}' (columns: {have})")
    values = rows[column]
    if column == "messages":
        values = [_render(v, True, tokenizer) for v in values]
    texts = [t.strip() for t in values if isinstance(t, str) and t.strip()]
    if not texts:
        raise UserError(f"data {source}: no non-empty text in column '{column}'")
    return texts


def source_sha(dataset: str, config_name: str | None, split: str, column: str) -> str:
    """A hash that changes when `load_all`'s texts would, without `datasets` where it can: the
    offline corpus by its split's recorded hash, a local file by its bytes. A hub data set is
    loaded and its texts hashed (only its content says whether it changed)."""
    if dataset in (DEFAULT, chat_docs.NAME) and split in corpus.SPLITS:
        built = [corpus.fingerprint()[split]["sha256"], _CHUNKS]
        if dataset == chat_docs.NAME:
            return sha256_json([dataset, split, *built, chat_docs.VERSION])
        return sha256_json([DEFAULT, split, *built])
    path = Path(dataset).expanduser()
    if _is_file_source(dataset, path) and path.is_file():
        import hashlib

        digest = hashlib.sha256(path.read_bytes()).hexdigest()
        return sha256_json(["file", path.suffix, digest, column])
    if column == "messages":  # conversations, before the template renders them
        rows, _ = _load_rows(dataset, config_name, split, "eval data")
        return sha256_json(rows[column] if column in rows.column_names else None)
    return sha256_json(load_all(dataset, config_name, split, column))


def hashed_offline(dataset: str, split: str) -> bool:
    """Whether source_sha answers without loading a hub data set (the network, minutes)."""
    if dataset in (DEFAULT, chat_docs.NAME) and split in corpus.SPLITS:
        return True
    path = Path(dataset).expanduser()
    return _is_file_source(dataset, path) and path.is_file()


def check_source(dataset: str, split: str, column: str, what: str) -> None:
    """What can be checked before any work, cheaply and offline: python-docs' split, a local
    file's existence, type, parse (the first bad JSONL line named) and column. A hub data set is
    checked when it loads (that needs the network)."""
    if dataset == DEFAULT:
        if split not in corpus.SPLITS:
            raise UserError(
                f"{what}: split '{split}' of python-docs; valid: {', '.join(corpus.SPLITS)}"
            )
        if column != "text":
            raise UserError(f"{what} python-docs:{split}: no column '{column}' (columns: text)")
        return
    if dataset == chat_docs.NAME:
        if split not in corpus.SPLITS:
            raise UserError(
                f"{what}: split '{split}' of {dataset}; valid: {', '.join(corpus.SPLITS)}"
            )
        if column != "messages":
            raise UserError(f"{what} {dataset}: conversations (column messages): set "
                            "chat_template: true")  # fmt: skip
        return
    path = Path(dataset).expanduser()
    if not _is_file_source(dataset, path):
        return
    loader = _check_file(path, what)
    if loader == "json":
        _check_json_rows(path, column, what)
    elif loader == "parquet":
        import pyarrow.parquet as pq

        try:
            names = pq.read_schema(path).names
        except Exception as e:
            raise UserError(f"{what} {path}: not a parquet file ({first_line(e)})") from None
        if column not in names:
            raise UserError(f"{what} {path}: no column '{column}' (columns: {', '.join(names)})")


def _is_file_source(dataset: str, path: Path) -> bool:
    return path.suffix in _LOADERS or path.exists() or dataset.startswith((".", "/", "~"))


def _check_file(path: Path, what: str) -> str:
    if not path.is_file():
        raise UserError(f"{what} file not found: {path}")
    loader = _LOADERS.get(path.suffix)
    if loader is None:
        raise UserError(f"{what} file {path}: unsupported type; use .txt, .jsonl or .parquet")
    if path.stat().st_size == 0:
        raise UserError(f"{what} file {path} is empty")
    return loader


def _check_json_rows(path: Path, column: str | None, what: str) -> None:
    """Every line a JSON object whose `column` holds what a sample needs (a string, or for
    `messages` a list of {role, content}); else the first bad line named, file:line."""
    import json

    rows = 0
    with path.open(encoding="utf-8", errors="strict") as f:
        try:
            for number, line in enumerate(f, 1):
                if not line.strip():
                    continue
                where = f"{what} {path}:{number}"
                try:
                    row = json.loads(line)
                except json.JSONDecodeError as e:
                    raise UserError(f"{where}: not JSON ({e.msg})") from None
                if not isinstance(row, dict):
                    raise UserError(f"{where}: not a JSON object")
                rows += 1
                if column is None:
                    continue
                if column not in row:
                    have = ", ".join(row) or "none"
                    raise UserError(f"{where}: no column '{column}' (columns: {have})")
                if why := _bad_value(row[column], column):
                    raise UserError(f"{where}: {why}")
        except UnicodeDecodeError:
            raise UserError(f"{what} {path}: not UTF-8 text") from None
    if not rows:
        raise UserError(f"{what} file {path} holds no rows")


def _bad_value(value, column: str) -> str | None:
    if column != "messages":
        return None if isinstance(value, str) else f"'{column}' is not a string"
    turns = value if isinstance(value, list) else None
    if not turns or not all(
        isinstance(t, dict) and isinstance(t.get("role"), str) and isinstance(t.get("content"), str)
        for t in turns
    ):
        return '\'messages\' must be a non-empty list of {"role": …, "content": …}'
    return None


def _load_rows(dataset: str, config_name: str | None, split: str, what: str):
    import datasets

    datasets.disable_progress_bars()
    if dataset == DEFAULT:
        if split not in corpus.SPLITS:
            raise UserError(f"split '{split}' of python-docs; valid: {', '.join(corpus.SPLITS)}")
        texts = corpus.chunks(corpus.read_split(split), _CHUNKS)
        return datasets.Dataset.from_dict({"text": texts}), f"python-docs:{split}"
    if dataset == chat_docs.NAME:
        if split not in corpus.SPLITS:
            raise UserError(f"split '{split}' of {dataset}; valid: {', '.join(corpus.SPLITS)}")
        rows = chat_docs.conversations(split, _CHUNKS)
        return datasets.Dataset.from_dict({"messages": rows}), f"{dataset}:{split}"
    path = Path(dataset).expanduser()
    if _is_file_source(dataset, path):
        return _load_file(path, what), str(path)
    try:
        rows = datasets.load_dataset(dataset, config_name, split=split)
    except Exception as e:  # offline, unknown id, bad split: one line for the user
        raise UserError(f"cannot load data set '{dataset}': {first_line(e)}") from None
    return rows, f"{dataset}:{split}"


def _load_file(path: Path, what: str):
    import datasets

    loader = _check_file(path, what)
    if loader == "json":
        _check_json_rows(path, None, what)  # datasets' own error does not say which line
    extra = {"sample_by": "paragraph"} if loader == "text" else {}
    try:
        return datasets.load_dataset(loader, data_files=str(path), split="train", **extra)
    except Exception as e:
        raise UserError(f"{what} file {path}: cannot read it: {first_line(e)}") from None
