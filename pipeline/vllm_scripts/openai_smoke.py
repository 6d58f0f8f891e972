"""A few greedy streaming requests through the official OpenAI client, as users call vLLM.
Serving env (it has `openai`).

    .venv-serve/bin/python openai_smoke.py BASE_URL MODEL_NAME

Prints one JSON line: the streamed texts and chunk counts of a chat and a completion request.
"""

import json
import sys

from openai import OpenAI

PROMPTS = {
    "chat": [{"role": "user", "content": "What does the len() function return?"}],
    "completion": "The list type in Python",
}


def main() -> None:
    base_url, model = sys.argv[1], sys.argv[2]
    client = OpenAI(base_url=f"{base_url}/v1", api_key="EMPTY", timeout=120)
    out = {}
    stream = client.chat.completions.create(
        model=model, messages=PROMPTS["chat"], max_tokens=24, temperature=0, stream=True
    )
    parts = [c.choices[0].delta.content or "" for c in stream if c.choices]
    out["chat"] = {"text": "".join(parts), "chunks": len(parts)}
    stream = client.completions.create(
        model=model, prompt=PROMPTS["completion"], max_tokens=24, temperature=0, stream=True
    )
    parts = [c.choices[0].text or "" for c in stream if c.choices]
    out["completion"] = {"text": "".join(parts), "chunks": len(parts)}
    print(json.dumps(out))


if __name__ == "__main__":
    main()
