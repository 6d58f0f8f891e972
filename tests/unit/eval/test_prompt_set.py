"""The generation prompts: the shipped set, a recipe's own file, its mistakes in one line, and
how prompts become token ids (through the chat template where the tokenizer has one)."""

import json

import pytest

from pipeline.config.recipe import GenerationSettings
from pipeline.core.errors import UserError
from pipeline.eval import prompt_set


class _Tokenizer:
    """Characters as ids; a template that marks the turns (what the code asks of a tokenizer)."""

    def __init__(self, chat_template=None):
        self.chat_template = chat_template

    def __call__(self, text, add_special_tokens=True):
        return {"input_ids": ([1] if add_special_tokens else []) + [ord(c) for c in text]}

    def apply_chat_template(self, messages, tokenize, add_generation_prompt):
        turns = "".join(f"<{m['role']}>{m['content']}" for m in messages)
        return turns + ("<assistant>" if add_generation_prompt else "")


def test_the_shipped_set_has_32_prompts_and_a_limit_takes_the_first():
    assert len(prompt_set.load(GenerationSettings())) == 32
    first = prompt_set.load(GenerationSettings(limit=3))
    assert len(first) == 3 and first[0][0]["role"] == "user"


def test_a_recipes_file_takes_prompts_or_conversations(tmp_path):
    path = tmp_path / "p.jsonl"
    chat = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}]
    path.write_text(json.dumps({"prompt": "Why?"}) + "\n\n" + json.dumps({"messages": chat}) + "\n")
    settings = GenerationSettings(prompts=str(path))
    assert prompt_set.load(settings) == [[{"role": "user", "content": "Why?"}], chat]
    before = prompt_set.sha(settings)
    path.write_text(json.dumps({"prompt": "Why not?"}) + "\n")
    assert prompt_set.sha(settings) != before  # editing the file is a new input


@pytest.mark.parametrize("line", ['{"text": "no prompt key"}', "not json", '{"messages": []}'])
def test_a_bad_line_is_one_error_naming_the_file_and_line(tmp_path, line):
    path = tmp_path / "p.jsonl"
    path.write_text(json.dumps({"prompt": "fine"}) + "\n" + line + "\n")
    with pytest.raises(UserError) as said:
        prompt_set.load(GenerationSettings(prompts=str(path)))
    assert f"{path}:2: expected" in str(said.value) and "\n" not in str(said.value)


def test_a_missing_file_is_refused_up_front_unless_generation_is_off(tmp_path):
    missing = GenerationSettings(prompts=str(tmp_path / "none.jsonl"))
    with pytest.raises(UserError, match="no such file"):
        prompt_set.check(missing)
    prompt_set.check(missing.model_copy(update={"enabled": False}))


def test_prompts_go_through_the_chat_template_where_there_is_one():
    chat = [[{"role": "user", "content": "ab"}]]
    templated = prompt_set.render(_Tokenizer("{{ messages }}"), chat, "auto")
    assert templated == [[ord(c) for c in "<user>ab<assistant>"]]  # no second BOS
    assert prompt_set.render(_Tokenizer(), chat, "auto") == [[1, ord("a"), ord("b")]]
    assert prompt_set.render(_Tokenizer("{{ messages }}"), chat, "off") == [[1, 97, 98]]
    with pytest.raises(UserError, match="has no chat template"):
        prompt_set.render(_Tokenizer(), chat, "on")
