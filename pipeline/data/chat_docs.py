"""python-docs-chat: the shipped chat-style calibration set. The python-docs corpus's documents
as conversations (a user asks about the topic or module, the assistant answers with the
documentation's text, one ~1000-character piece per conversation), rendered with the model's chat
template. The same source as python-docs in another kind of text, so that

    make compare MODEL=tiny-llama RECIPES=gptq CALIB=python-docs,python-docs-chat

measures what the kind alone changes."""

from pipeline.data import corpus

NAME = "python-docs-chat"
VERSION = 1  # bump when the conversations' wording changes: part of their hash


def conversations(split: str, size: int) -> list[list[dict]]:
    """One {"messages"} conversation per piece of each document of the split, in order."""
    found = []
    for doc in corpus.read_documents(split):
        question = _question(doc["id"])
        for i, piece in enumerate(corpus.chunks([doc["text"]], size)):
            ask = question if i == 0 else f"{question} Go on."
            found.append([
                {"role": "user", "content": ask},
                {"role": "assistant", "content": piece},
            ])  # fmt: skip
    return found


def _question(doc_id: str) -> str:
    kind, _, name = doc_id.partition(":")
    if kind == "topic":
        return f"What does the Python reference say about '{name}'?"
    module = name.removesuffix(".py").removesuffix("/__init__").replace("/", ".")
    return f"What is the {module} module for, and how is it used?"
