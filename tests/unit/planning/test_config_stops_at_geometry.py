"""The raw config.json dict stops at models/ and planning/geometry.py: every other function takes
the typed Geometry (or what it derives), so two planners cannot read a figure differently."""

import ast
from pathlib import Path

import pipeline

ROOT = Path(pipeline.__file__).parent
READERS = ("models/", "planning/geometry.py")
# functions whose signature a library fixes: compressed-tensors' Converter protocol
LIBRARY_CALLBACKS = {"update_config", "update_model_config"}
# scripts run by the serving env's own Python: they hand a config to vLLM's own functions
OTHER_PROGRAMS = ("vllm_scripts/",)
CONFIG_NAMES = {"config", "cfg", "model_config", "hf_config", "base_config", "text_config"}


def _takes_config(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> list[str]:
    args = fn.args.posonlyargs + fn.args.args + fn.args.kwonlyargs
    return [a.arg for a in args if a.arg in CONFIG_NAMES]


def test_no_function_outside_models_and_geometry_takes_a_config_dict():
    found = []
    for path in sorted(ROOT.rglob("*.py")):
        rel = path.relative_to(ROOT).as_posix()
        if rel.startswith(READERS + OTHER_PROGRAMS):
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                if node.name not in LIBRARY_CALLBACKS and (names := _takes_config(node)):
                    found.append(f"{rel}:{node.lineno} {node.name}({', '.join(names)})")
    assert found == [], "take a planning.geometry.Geometry instead:\n" + "\n".join(found)


def test_the_scan_sees_a_config_parameter(tmp_path):
    """The check itself can fail: a function taking `config` is found."""
    tree = ast.parse("def plan(config: dict, users: int): ...")
    assert _takes_config(tree.body[0]) == ["config"]
