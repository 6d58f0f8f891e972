"""The offline corpus's pure parts: paragraph-aligned chunks and the stable split by name."""

from pipeline.data import corpus


def test_chunks_keep_paragraphs_whole_and_near_the_size():
    paras = [f"p{i} " + "x" * 300 for i in range(10)]
    pieces = corpus.chunks(["\n\n".join(paras)], size=1000)
    assert "\n\n".join(pieces) == "\n\n".join(paras)  # nothing lost, nothing cut mid-paragraph
    assert all(len(p) <= 1000 + 305 for p in pieces) and len(pieces) > 1
    assert corpus.chunks(["short"], size=1000) == ["short"]
    assert corpus.chunks(["   "]) == []


def test_split_by_document_name_is_stable_and_about_18_1_1():
    names = [f"topic:{i}" for i in range(4000)]
    splits = [corpus._split_of(n) for n in names]
    assert splits == [corpus._split_of(n) for n in names]
    share = {s: splits.count(s) / len(names) for s in corpus.SPLITS}
    assert 0.03 < share["heldout"] < 0.07 and 0.03 < share["calibration"] < 0.07
