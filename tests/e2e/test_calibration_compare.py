"""`make compare CALIB=…` on tiny-llama: GPTQ calibrated on a set built to be worse (a few
tokens repeated) is worse beyond the noise floor; two draws of the same data (seeds) are
indistinguishable; a cached re-run quantizes and evaluates nothing; a cell's card names its
calibration set with the sha256 of its token ids. The eval is cut to drift alone (no tasks, no
answers): calibration is what differs, and the drift sees it. And docs/jobs.md's own comparison
(gptq as shipped, on the documents and on the same documents as chats) prints its block."""

import json

import yaml

from pipeline.cli import doc_samples
from tests.conftest import REPO, cli

HF = ("--backend", "hf")


def _recipe(tmp_path):
    """gptq as shipped, scored without lm-eval tasks or answers."""
    data = yaml.safe_load((REPO / "recipes" / "gptq.yaml").read_text())
    data["eval"] |= {"tasks": [], "generation": {"enabled": False}}
    path = tmp_path / "gptq-drift.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def _repeated(tmp_path):
    """64 samples of one short phrase over and over: a Hessian of almost no directions."""
    path = tmp_path / "repeated.txt"
    path.write_text("\n\n".join(["return None " * 100] * 64) + "\n")
    return path


def test_a_worse_set_is_worse_beyond_the_floor_and_two_draws_are_indistinguishable(
    tiny_model, session_runs, tmp_path
):
    mine = _recipe(tmp_path)
    sets = f"python-docs,{_repeated(tmp_path)}"  # chat sets: tests/e2e/data/test_texts.py
    # hf, as every eval test: the same float32 scoring on every host, GPUs or not
    first = cli("compare", "--recipes", str(mine), "--calib", sets, *HF, runs=session_runs)
    assert first.returncode in (0, 3), first.stderr[-3000:]
    out = first.stdout
    assert "gptq-drift.python-docs vs gptq-drift.repeated: better" in out, out
    folder = "compare-calib-gptq-drift-python-docs+repeated"
    table = json.loads((session_runs / "tiny-llama" / folder / "compare.json").read_text())
    pairs = {(p["first"], p["second"]): p for p in table["pairs"]}
    pair = pairs["gptq-drift.python-docs", "gptq-drift.repeated"]
    assert pair["high"] < 0 and abs(pair["diff"]) > pair["floor_kl"]
    cells = {c["name"]: c for c in table["cells"]}
    docs = cells["gptq-drift.python-docs"]["calibration"]
    assert docs["dataset"] == "python-docs" and docs["samples"] == 64 and docs["seed"] == 42
    assert len(docs["token_ids_sha256"]) == 64
    repeated = cells["gptq-drift.repeated"]["calibration"]
    assert docs["token_ids_sha256"] != repeated["token_ids_sha256"]

    draws = cli("compare", "--recipes", str(mine), "--seeds", "42,43", *HF, runs=session_runs)
    assert draws.returncode in (0, 3), draws.stderr[-3000:]
    said = draws.stdout
    assert "gptq-drift.python-docs vs gptq-drift.python-docs.seed43: indistinguishable" in said
    assert "gptq-drift.python-docs: quantize cached" in said  # the first comparison's cell

    again = cli("compare", "--recipes", str(mine), "--seeds", "42,43", *HF, runs=session_runs)
    assert again.stdout.count("quantize cached, eval cached") == 2, again.stdout

    cell = session_runs / "tiny-llama" / "compare-calib-gptq-drift-python-docs+python-docs.seed43"
    dest = tmp_path / "published"
    args = ["publish", "--recipe", str(cell / "recipes" / "gptq-drift.python-docs.yaml"),
            "--repo", f"file://{dest}", "--ignore-gates"]  # fmt: skip
    published = cli(*args, runs=session_runs)
    assert published.returncode == 0, published.stderr[-2000:]
    card = (dest / "README.md").read_text()
    assert f"sha256 of the token ids `{docs['token_ids_sha256']}`" in card


def test_the_pages_comparison_prints_its_block_and_calibrates_on_chats(evaluated, session_runs):
    evaluated("gptq")  # the original's side, stored once for the session
    argv = "compare --recipes gptq --calib python-docs,python-docs-chat"  # docs/jobs.md, job 6
    result = cli(*argv.split(), runs=session_runs)
    assert doc_samples.printed_as_output(argv, result.returncode), result.stderr[-3000:]
    assert not (why := doc_samples.mismatch(argv, result.stdout, session_runs)), why
    folder = session_runs / "tiny-llama" / "compare-calib-gptq-python-docs+python-docs-chat"
    cells = {c["name"]: c for c in json.loads((folder / "compare.json").read_text())["cells"]}
    docs, chats = (cells[f"gptq.{s}"]["calibration"] for s in ("python-docs", "python-docs-chat"))
    assert chats["dataset"] == "python-docs-chat" and chats["samples"] == docs["samples"] == 64
    assert chats["token_ids_sha256"] != docs["token_ids_sha256"]  # the template's tokens differ
