"""A few greedy streaming requests through the official OpenAI client, as users call vLLM.
Serving env (it has `openai`).

    .venv-serve/bin/python openai_smoke.py BASE_URL MODEL_NAME

Prints one JSON line: the streamed texts, chunk counts and generated token counts (the
stream's usage chunk) of a chat and a completion request. Tokens, not text, say whether the
engine answered: a random-weight model may answer only special tokens, which decode to "".
"""

import json
import sys

from openai import OpenAI

PROMPTS = {
    "chat": [{"role": "user", "content": "What does the len() function return?"}],
    "completion": "The list type in Python",
}


def streamed(stream, piece) -> dict:
    parts, tokens = [], None
    for chunk in stream:
        if chunk.choices:
            parts.append(piece(chunk.choices[0]) or "")
        if chunk.usage is not None:
            tokens = chunk.usage.completion_tokens
    return {"text": "".join(parts), "chunks": len(parts), "tokens": tokens}


def main() -> None:
    base_url, model = sys.argv[1], sys.argv[2]
    client = OpenAI(base_url=f"{base_url}/v1", api_key="EMPTY", timeout=120)
    usage = {"stream": True, "stream_options": {"include_usage": True}}
    out = {}
    chat = client.chat.completions.create(
        model=model, messages=PROMPTS["chat"], max_tokens=24, temperature=0, **usage
    )
    out["chat"] = streamed(chat, lambda choice: choice.delta.content)
    completion = client.completions.create(
        model=model, prompt=PROMPTS["completion"], max_tokens=24, temperature=0, **usage
    )
    out["completion"] = streamed(completion, lambda choice: choice.text)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
