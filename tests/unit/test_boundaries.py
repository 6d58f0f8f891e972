"""Issue 54's boundaries, read from the code: argparse stops at the command line (no function
outside cli/ takes a Namespace), where run folders live is read from the environment by the
entry points alone (cli/, core/, and a Ray worker's cell), and every stage is made from few
parameters (its request, its artifact, its runs)."""

import ast
import importlib
import inspect

from pipeline.core.paths import REPO

PIPELINE = REPO / "pipeline"
AMBIENT = {"runs_root", "runs_url", "runs_root_variable"}  # RUNS_DIR read where called


def _modules(*outside: str):
    for path in sorted(PIPELINE.rglob("*.py")):
        rel = path.relative_to(REPO).as_posix()
        if not rel.startswith(tuple(f"pipeline/{o}/" for o in outside)):
            yield rel, ast.parse(path.read_text())


def test_no_function_outside_the_command_line_takes_an_argparse_namespace():
    found = []
    for rel, tree in _modules("cli"):
        for node in ast.walk(tree):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                args = [*node.args.posonlyargs, *node.args.args, *node.args.kwonlyargs]
                found += [
                    f"{rel}: {node.name}({a.arg})"
                    for a in args
                    if a.annotation is not None and "Namespace" in ast.unparse(a.annotation)
                ]
    assert found == []


def test_only_the_entry_points_read_where_run_folders_live():
    """cli/ and core/ make the Runs value; a nightly cell on a Ray node makes its own from the
    RUNS_DIR its task was handed (nightly/cell.py). Forwarding the value (a child's
    environment) is not reading it."""
    read, made = [], set()
    for rel, tree in _modules("cli", "core"):
        for node in ast.walk(tree):
            if isinstance(node, ast.Name | ast.Attribute):
                name = node.id if isinstance(node, ast.Name) else node.attr
                if name in AMBIENT:
                    read.append(f"{rel}: {name}")
                if name == "from_env":
                    made.add(rel)
            if isinstance(node, ast.Call) and _reads_runs_dir(node):
                read.append(f"{rel}: {ast.unparse(node)}")
            if isinstance(node, ast.Subscript) and ast.unparse(node).endswith("['RUNS_DIR']"):
                if isinstance(node.ctx, ast.Load):
                    read.append(f"{rel}: {ast.unparse(node)}")
    assert read == []
    assert made == {"pipeline/nightly/cell.py"}


def _reads_runs_dir(call: ast.Call) -> bool:
    said = ast.unparse(call.func)
    first = call.args[0] if call.args else None
    named = isinstance(first, ast.Constant) and first.value == "RUNS_DIR"
    return named and (said.endswith("environ.get") or said.endswith("getenv"))


def _stages() -> list[type]:
    """Each package's stage: the classes of its stage.py with a `prepare` and a `work`."""
    found = []
    for path in sorted(PIPELINE.glob("*/stage.py")):
        module = importlib.import_module(f"pipeline.{path.parent.name}.stage")
        found += [
            cls
            for cls in vars(module).values()
            if inspect.isclass(cls) and cls.__module__ == module.__name__
            and hasattr(cls, "prepare") and hasattr(cls, "work")
        ]  # fmt: skip
    return found


def test_every_stage_is_made_from_five_parameters_at_most():
    stages = _stages()
    names = {c.__name__ for c in stages}
    assert names >= {"QuantizeStage", "ImportStage", "EvalStage", "ServeStage", "PublishStage"}
    assert "SearchStage" in names
    for cls in stages:
        for made_by in (cls.__init__, cls.prepare):
            params = [p for p in inspect.signature(made_by).parameters if p != "self"]
            assert len(params) <= 5, (
                f"{cls.__name__}.{made_by.__name__}{inspect.signature(made_by)}"
            )
