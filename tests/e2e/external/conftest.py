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
def imported_eval(external, session_runs):
    """imported_eval(format) → (eval results, CLI result): import + hf eval, once per session."""
    done = {}

    def get(fmt: str):
        if fmt not in done:
            result = cli("eval", "--artifact", str(external[fmt]), "--backend", "hf",
                         runs=session_runs)  # fmt: skip
            assert result.returncode == 0, result.stderr[-3000:]
            run_dir = session_runs / "tiny-llama" / f"external-{fmt}"
            manifest = json.loads((run_dir / "manifest.json").read_text())
            path = run_dir / manifest["stages"]["eval"]["outputs"]["results"]
            done[fmt] = (json.loads(path.read_text()), result)
        return done[fmt]

    return get
