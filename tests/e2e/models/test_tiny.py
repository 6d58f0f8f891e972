import hashlib
import json

from pipeline.models.tiny import build, spec


def _sha(path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_cached_model_learned_the_text(tiny_model):
    info = json.loads((tiny_model / "build.json").read_text())
    assert info["training"] == spec.TRAINING
    # Uniform guessing over the 4,096-token vocabulary would score 4,096.
    assert info["heldout_perplexity_bf16"] < 600
    config = json.loads((tiny_model / "config.json").read_text())
    assert config["hidden_size"] == 256 and config["vocab_size"] == 4096
    assert build.ensure() == tiny_model  # cached: same folder, nothing rebuilt


def test_the_build_is_deterministic_and_runs_in_a_process_of_its_own(tmp_path):
    """Training's memory (optimizer state, torch's allocator) is not the caller's: the first
    `make quantize` of a fresh clone measures the quantize's peak RSS, not the build's. The
    caller never even imports torch. Two independent builds (short training, no perplexity)
    give byte-identical tokenizer and weights."""
    import subprocess
    import sys

    code = (
        "import sys; from pathlib import Path; from pipeline.models.tiny import build; "
        "build.ensure(training={'steps': 2}, root=Path(sys.argv[1]), measure=False); "
        "print('torch imported' if 'torch' in sys.modules else 'no torch')"
    )
    done = subprocess.run(
        [sys.executable, "-c", code, str(tmp_path / "a")],
        capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip().splitlines()[-1] == "no torch"
    (a,) = [p.parent for p in (tmp_path / "a").glob("tiny-llama-*/model.safetensors")]
    b = build.ensure(training={"steps": 2}, root=tmp_path / "b", measure=False)
    assert a.name == b.name
    for name in ("model.safetensors", "tokenizer.json"):
        assert _sha(a / name) == _sha(b / name)
