"""The prompts the generation drift answers (pipeline/eval/generation.py): the shipped set
(evals/prompts/generation.jsonl) or a recipe's own .jsonl, one `{"prompt": …}` or
`{"messages": [...]}` per line, rendered with the tokenizer's chat template where it has one
(a chat model answers a bare prompt as text to continue, not as a question)."""

import json
from pathlib import Path

from pipeline.config.recipe import GenerationSettings
from pipeline.core.errors import UserError
from pipeline.core.files import sha256_text
from pipeline.core.paths import PROMPTS_FILE


def path(settings: GenerationSettings) -> Path:
    return PROMPTS_FILE if settings.prompts == "shipped" else Path(settings.prompts).expanduser()


def check(settings: GenerationSettings) -> None:
    """Up front, before anything is quantized or loaded: the prompts file is there."""
    if settings.enabled and not path(settings).is_file():
        raise UserError(f"eval.generation.prompts: no such file: {path(settings)}")


def load(settings: GenerationSettings) -> list[list[dict]]:
    """Each prompt as chat messages; a bad file is one line naming it and the line."""
    check(settings)
    file = path(settings)
    conversations = []
    for number, line in enumerate(file.read_text().splitlines(), 1):
        if line.strip():
            conversations.append(_messages(json.loads(line) if _is_json(line) else None, file,
                                           number))  # fmt: skip
    if not conversations:
        raise UserError(f"eval.generation.prompts: {file} has no prompts")
    return conversations[: settings.limit]


def sha(settings: GenerationSettings) -> str:
    """The prompts' content: editing the file re-generates."""
    file = path(settings)
    return sha256_text(file.read_text()) if file.is_file() else "missing"


def render(tokenizer, conversations: list[list[dict]], chat_template: str) -> list[list[int]]:
    """Token ids per prompt: through the chat template (auto: when the tokenizer has one),
    else the user turns' text as the tokenizer encodes it."""
    templated = chat_template == "on" or (
        chat_template == "auto" and getattr(tokenizer, "chat_template", None)
    )
    if chat_template == "on" and not getattr(tokenizer, "chat_template", None):
        raise UserError("eval.generation.chat_template on: this tokenizer has no chat template")
    out = []
    for messages in conversations:
        if templated:
            text = tokenizer.apply_chat_template(messages, tokenize=False,
                                                 add_generation_prompt=True)  # fmt: skip
            out.append(tokenizer(text, add_special_tokens=False)["input_ids"])
        else:
            text = "\n".join(m["content"] for m in messages if m["role"] == "user")
            out.append(tokenizer(text)["input_ids"])
    return out


def _is_json(line: str) -> bool:
    try:
        json.loads(line)
    except json.JSONDecodeError:
        return False
    return True


def _messages(row, file: Path, number: int) -> list[dict]:
    where = f"eval.generation.prompts: {file}:{number}"
    if isinstance(row, dict) and isinstance(row.get("prompt"), str):
        return [{"role": "user", "content": row["prompt"]}]
    if isinstance(row, dict) and isinstance(row.get("messages"), list) and row["messages"]:
        if all(isinstance(m, dict) and {"role", "content"} <= m.keys() for m in row["messages"]):
            return row["messages"]
    raise UserError(
        f'{where}: expected {{"prompt": "…"}} or {{"messages": [{{"role", "content"}}]}}'
    )
