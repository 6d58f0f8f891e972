"""`make compare CALIB=…`'s parts that need no model: which sets, each cell's recipe, the
refusals, and the paired verdict between two cells' per-token drift."""

import json

import pytest
import torch
import yaml

from pipeline.config import recipe
from pipeline.core.errors import UserError
from pipeline.data.texts import check_source
from pipeline.eval import paired
from pipeline.search import calibration_sets as cs


def test_each_set_sample_count_and_seed_is_a_cell_with_its_own_recipe(tmp_path):
    gptq = recipe.load("gptq")
    chat = tmp_path / "support.jsonl"
    chat.write_text(json.dumps({"messages": [{"role": "user", "content": "hi"}]}) + "\n")
    sets = cs.parse(gptq, f"python-docs,python-docs-chat,{chat}", "64", "42,7")
    names = [cs.name(gptq, s) for s in sets]
    assert names == [
        "gptq.python-docs.n64", "gptq.python-docs.n64.seed7",
        "gptq.python-docs-chat.n64", "gptq.python-docs-chat.n64.seed7",
        "gptq.support.n64", "gptq.support.n64.seed7",
    ]  # fmt: skip
    assert [s.chat for s in sets[::2]] == [False, True, True]  # a messages file is a chat set
    rf = cs.derived(tmp_path, gptq, sets[3], "notes.txt:heldout")
    assert rf.name == "gptq.python-docs-chat.n64.seed7" and not rf.path.exists()
    cal = rf.spec.calibration
    assert (cal.dataset, cal.chat_template, cal.num_samples, cal.seed) == (
        "python-docs-chat", True, 64, 7)  # fmt: skip
    assert (rf.spec.eval.dataset, rf.spec.eval.split) == ("notes.txt", "heldout")
    base = yaml.safe_load(gptq.text)
    assert rf.spec.quantization == base["quantization"]  # only calibration and eval differ
    assert rf.spec.eval.gates == gptq.spec.eval.gates


def test_mistakes_are_one_line_before_any_work(tmp_path):
    with pytest.raises(UserError, match="calibrates nothing"):
        cs.parse(recipe.load("w4a16-rtn"), "python-docs", None, None)
    gptq = recipe.load("gptq")
    with pytest.raises(UserError, match="named twice"):
        cs.parse(gptq, "python-docs,python-docs", None, None)
    with pytest.raises(UserError, match="whole number"):
        cs.parse(gptq, "python-docs", "64,x", None)
    (tmp_path / "a").mkdir()
    for folder in ("a", "b"):
        (tmp_path / folder).mkdir(exist_ok=True)
        (tmp_path / folder / "set.txt").write_text("some text\n")
    with pytest.raises(UserError, match="named 'set'"):
        cs.parse(gptq, f"{tmp_path}/a/set.txt,{tmp_path}/b/set.txt", None, None)
    bad = tmp_path / "chat.jsonl"
    good = {"messages": [{"role": "user", "content": "hi"}]}
    bad.write_text(json.dumps(good) + "\n" + json.dumps({"messages": "hi"}) + "\n")
    with pytest.raises(UserError, match=r"chat.jsonl:2: 'messages' must be a non-empty list"):
        cs.parse(gptq, str(bad), None, None)
    with pytest.raises(UserError, match="set chat_template: true"):
        check_source("python-docs-chat", "calibration", "text", "calibration")


def _tokens(path, kl):
    torch.save({"heldout": {"kl": torch.tensor(kl, dtype=torch.float64)}}, path)
    return path


def test_the_verdict_pairs_windows_and_reads_against_the_floor(tmp_path):
    g = torch.Generator().manual_seed(0)
    base = torch.rand(8 * 100, generator=g, dtype=torch.float64) * 1e-3
    # window-level noise that both share (a hard passage), and a per-window wobble of its own
    wobble = torch.randn(8, generator=g, dtype=torch.float64).repeat_interleave(100) * 1e-6
    a = _tokens(tmp_path / "a.pt", base.tolist())
    same = _tokens(tmp_path / "same.pt", (base + wobble).tolist())
    worse = _tokens(tmp_path / "worse.pt", (base * 1.5).tolist())
    d = paired.kl_by_window(a, same, 8)
    assert d["low"] < 0 < d["high"] and paired.verdict(d, 1e-9) == "indistinguishable"
    d = paired.kl_by_window(a, worse, 8)
    assert d["diff"] < 0 and d["high"] < 0
    assert paired.verdict(d, 1e-9) == "better"
    assert paired.verdict(paired.kl_by_window(worse, a, 8), 1e-9) == "worse"
    assert paired.verdict(d, 1.0) == "indistinguishable"  # within the noise floor


def test_a_set_smaller_than_asked_is_said_not_silently_shortened():
    from pipeline.quantize.calibration_record import shortfall, token_ids_sha256

    said = shortfall({"requested_samples": 512, "samples": 40}, "few.txt")
    assert said == "calibration few.txt: 40 samples of the 512 asked (all it holds)"
    assert shortfall({"requested_samples": 64, "samples": 64}, "python-docs") is None
    # the documented encoding: sha256 of the compact JSON list of lists
    import hashlib

    assert token_ids_sha256([[1, 2], [3]]) == hashlib.sha256(b"[[1,2],[3]]").hexdigest()
