"""The serving engine behind one door: the modules that name vLLM in code (imports, names,
string constants; docstrings and comments aside) outside its room (pipeline/engines/: the stages
reach it through pipeline.engines' map). The house's rule is at most 15; 7 do today: the help
text, the model card, the recipe schema, config/engine_name.py (the name said once for the layers
below the room), the lm-eval task script, the GPU host check's rows. The count may only fall:
lower NAMED_NOW as it does."""

import ast
from pathlib import Path

ROOMS = ("pipeline/vllm_scripts/", "pipeline/engines/")  # scripts run in vLLM's env; the room
NAMED_NOW = 7


def _docstrings(tree: ast.AST) -> set[int]:
    kinds = (ast.Module, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, kinds) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                found.add(id(first.value))
    return found


def names_vllm(source: str) -> list[str]:
    """What in `source`'s code names vLLM: an import, a name, an attribute, an argument, a
    string that is not a docstring."""
    tree = ast.parse(source)
    docstrings = _docstrings(tree)
    said = []
    for node in ast.walk(tree):
        match node:
            case ast.Constant(value=str(text)) if id(node) not in docstrings:
                said.append(text)
            case ast.Name(id=text) | ast.Attribute(attr=text) | ast.arg(arg=text):
                said.append(text)
            case ast.alias(name=text) | ast.ImportFrom(module=str(text)):
                said.append(text)
            case ast.FunctionDef(name=text) | ast.ClassDef(name=text) | ast.keyword(arg=str(text)):
                said.append(text)
    return [text for text in said if "vllm" in text.lower()]


def test_names_vllm_reads_code_not_docstrings():
    source = '"""vLLM\'s engine."""\nimport vllm\nx = "vllm serve"\ndef f(vllm_args): pass\n'
    assert sorted(names_vllm(source)) == ["vllm", "vllm serve", "vllm_args"]
    assert names_vllm('def f():\n    """Starts vLLM."""\n    return 1  # vLLM\n') == []


def test_vllm_is_named_by_no_more_modules_outside_its_room_than_before():
    outside = [
        str(path)
        for path in sorted(Path("pipeline").rglob("*.py"))
        if not str(path).startswith(ROOMS) and names_vllm(path.read_text())
    ]
    assert len(outside) <= NAMED_NOW, "\n".join(outside)
