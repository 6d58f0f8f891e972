"""Imports of our own modules sit at the top of a file, where a reader sees what it depends on.
The exceptions keep a fast path fast — the parser imports every command's module; torch loads
only when there is scoring to do — and each such file says why once ("Deferred imports: …")."""

import ast

from pipeline.core.paths import REPO

PARSER_FAST = "the parser imports every command's module: a command loads its stages when it runs"
NO_TORCH = "torch (or SQLAlchemy) loads only when there is work: a cached result stays fast"
DEFERRED = {
    "pipeline/cli/artifact_stage.py": PARSER_FAST,
    "pipeline/cli/chain.py": PARSER_FAST,
    "pipeline/cli/commands/advise.py": PARSER_FAST,
    "pipeline/cli/commands/compare.py": PARSER_FAST,
    "pipeline/cli/commands/nightly.py": PARSER_FAST,
    "pipeline/cli/commands/plan.py": PARSER_FAST,
    "pipeline/cli/commands/publish.py": PARSER_FAST,
    "pipeline/cli/commands/quantize.py": PARSER_FAST,
    "pipeline/cli/commands/report.py": PARSER_FAST,
    "pipeline/cli/commands/run.py": PARSER_FAST,
    "pipeline/cli/commands/search.py": PARSER_FAST,
    "pipeline/eval/floor.py": NO_TORCH,
    "pipeline/eval/stage.py": NO_TORCH,
    "pipeline/eval/tasks.py": NO_TORCH,
    "pipeline/external/stage.py": NO_TORCH,
    "pipeline/search/sensitivity.py": NO_TORCH,
    "pipeline/search/stage.py": NO_TORCH,
}


def _deferred(path) -> list[str]:
    """`from pipeline… import …` inside a function of `path`."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            found += [
                f"{node.name}: {sub.module}"
                for sub in ast.walk(node)
                if isinstance(sub, ast.ImportFrom) and (sub.module or "").startswith("pipeline")
            ]
    return found


def _files() -> dict[str, list[str]]:
    found = {}
    for path in sorted((REPO / "pipeline").rglob("*.py")):
        rel = str(path.relative_to(REPO))
        if "vllm_scripts" in rel or "migrations" in rel:  # run by other interpreters / alembic
            continue
        if imports := _deferred(path):
            found[rel] = imports
    return found


def test_own_modules_are_imported_inside_functions_only_where_listed():
    found = _files()
    unlisted = {f: found[f] for f in found.keys() - DEFERRED.keys()}
    assert not unlisted, f"import these at the top, or list the file here with why: {unlisted}"
    assert not DEFERRED.keys() - found.keys(), "these defer nothing now: drop them from the list"


def test_each_file_that_defers_says_why_once():
    for rel in DEFERRED:
        said = (REPO / rel).read_text().count("Deferred imports:")
        assert said == 1, f"{rel}: say once why its imports are deferred ('Deferred imports: …')"
