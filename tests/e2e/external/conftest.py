"""Checkpoints quantized elsewhere, built once per session from tiny-llama by AutoRound."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO, cli


@pytest.fixture(scope="session")
def external(tiny_model, tmp_path_factory) -> dict[str, Path]:
    """{"auto_gptq" | "auto_awq" | "llm_compressor": checkpoint folder}."""
    out = tmp_path_factory.mktemp("external")
    script = REPO / "tests" / "e2e" / "external" / "make_checkpoints.py"
    done = subprocess.run(
        [sys.executable, str(script), str(tiny_model), str(out)],
        cwd=REPO, capture_output=True, text=True, timeout=900,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    return {k: Path(v) for k, v in json.loads(done.stdout.splitlines()[-1]).items()}


@pytest.fixture(scope="session")
def small_recipe(tmp_path_factory) -> Path:
    """Whose eval settings the imports take: autoround's (W4A16, as the checkpoints are) on a
    1,024-token budget (3 windows) and no answers generated — what is checked here is the
    import, its formats and their drift against each other, not tiny-llama's figures (the
    shipped budget, tasks and generation are the eval tests')."""
    text = (REPO / "recipes" / "autoround.yaml").read_text().replace("16384", "1024")
    assert "\n  gates:" in text and "tasks:" not in text
    path = tmp_path_factory.mktemp("small-recipe") / "small.yaml"
    path.write_text(text.replace("\n  gates:", "\n  generation:\n    enabled: false\n  gates:", 1))
    return path


@pytest.fixture(scope="session")
def imported_eval(external, small_recipe, session_runs):
    """imported_eval(format) → (eval results, CLI result): import + hf eval with small_recipe's
    settings, once per session."""
    done = {}

    def get(fmt: str):
        if fmt not in done:
            result = cli("eval", "--artifact", str(external[fmt]), "--recipe", str(small_recipe),
                         "--backend", "hf", runs=session_runs)  # fmt: skip
            assert result.returncode == 0, result.stderr[-3000:]
            run_dir = session_runs / "tiny-llama" / f"external-{fmt}"
            manifest = json.loads((run_dir / "manifest.json").read_text())
            path = run_dir / manifest["stages"]["eval"]["outputs"]["results"]
            done[fmt] = (json.loads(path.read_text()), result)
        return done[fmt]

    return get
