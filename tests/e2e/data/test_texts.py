import json
from types import SimpleNamespace

import pytest

from pipeline.config.recipe import Calibration
from pipeline.core.errors import UserError
from pipeline.data import corpus
from pipeline.data import texts as data
from pipeline.quantize import calibration_record


def test_python_docs_splits_are_disjoint_and_non_trivial():
    ids = {}
    for split in corpus.SPLITS:
        path = corpus.corpus_dir() / f"{split}.jsonl"
        ids[split] = {json.loads(line)["id"] for line in path.read_text().splitlines()}
    assert not ids["train"] & ids["calibration"]
    assert not ids["train"] & ids["heldout"]
    assert not ids["calibration"] & ids["heldout"]
    sizes = corpus.fingerprint()
    assert sizes["heldout"]["characters"] > 50_000 and sizes["calibration"]["characters"] > 50_000


def test_default_calibration_is_seeded_and_sized():
    cal = Calibration(num_samples=16, seed=3)
    a, b = data.load_texts(cal), data.load_texts(cal)
    assert len(a.texts) == 16 and a.texts == b.texts and a.fingerprint == b.fingerprint
    other = data.load_texts(cal.model_copy(update={"seed": 4}))
    assert other.fingerprint != a.fingerprint


def test_packing_fills_equal_length_samples_without_padding(tiny_model):
    """AutoRound's convention: the texts end to end, cut into num_samples × max_seq_length."""
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tiny_model)
    cal = Calibration(num_samples=8, max_seq_length=128, pack=True)
    got = data.load_texts(cal, tok)
    assert got.description["samples"] == 8 and got.description["tokens"] >= 8 * 128
    lengths = [len(tok(t)["input_ids"]) for t in got.texts]
    assert sum(lengths[:-1]) < 8 * 128  # no more texts read than the samples need
    samples = data.packed([tok(t)["input_ids"] for t in got.texts], 128, 8)
    assert [len(s) for s in samples] == [128] * 8
    assert data.packed([[1, 2, 3], [4, 5]], 2, 9) == [[1, 2], [3, 4]]  # the tail is dropped


def test_local_txt_jsonl_and_parquet(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    (tmp_path / "a.txt").write_text("first paragraph\nstill first\n\nsecond one\n\nthird\n")
    rows = [{"body": f"sample {i}"} for i in range(5)]
    (tmp_path / "b.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "c.parquet")

    txt = data.load_texts(Calibration(dataset=str(tmp_path / "a.txt"), num_samples=10))
    assert sorted(txt.texts) == sorted(["first paragraph\nstill first", "second one", "third"])
    for name in ("b.jsonl", "c.parquet"):
        cal = Calibration(dataset=str(tmp_path / name), text_column="body", num_samples=3)
        got = data.load_texts(cal)
        assert len(got.texts) == 3 and all(t.startswith("sample ") for t in got.texts)


def test_chat_data_is_rendered_with_the_chat_template(tmp_path, tiny_model):
    from transformers import AutoTokenizer

    rows = [
        {"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}]}
    ]
    (tmp_path / "chat.jsonl").write_text(json.dumps(rows[0]) + "\n")
    cal = Calibration(dataset=str(tmp_path / "chat.jsonl"), chat_template=True, num_samples=1)
    got = data.load_texts(cal, AutoTokenizer.from_pretrained(tiny_model))
    assert got.texts == ["<|begin_of_text|><|user|>\nhi\n<|assistant|>\nyo\n"]
    # and so the artifact's manifest and card say it (quantize's record of what it ran on)
    job = SimpleNamespace(texts=got, calibration=cal, model_path=tiny_model)
    said = calibration_record.record(job)
    assert (said["column"], said["chat_template"], said["samples"]) == ("messages", True, 1)


@pytest.mark.parametrize(
    "content,column,message",
    [
        (None, "text", "calibration file not found"),
        ("", "text", "is empty"),
        ('{"body": "x"}\n', "text", "no column 'text' (columns: body)"),
        ('{"text": ""}\n', "text", "no non-empty text"),
    ],
)
def test_bad_calibration_files_give_one_clear_line(tmp_path, content, column, message):
    path = tmp_path / "cal.jsonl"
    if content is not None:
        path.write_text(content)
    with pytest.raises(UserError, match=message.replace("(", r"\(").replace(")", r"\)")):
        data.load_texts(Calibration(dataset=str(path), text_column=column, num_samples=4))
