"""A stage's checkpoints: kept whole or not at all, reused under the same fingerprint,
discarded with one line saying why under another or --force."""

from pathlib import Path

from pipeline.core.checkpoints import Checkpoints

INPUTS = {"model": {"sha": "a"}, "libraries": {"torch": "2.13.0", "llmcompressor": "0.14.0"}}


def _keep(kept: Checkpoints, name: str, text: str) -> None:
    kept.keep(name, f"units/{name}.bin", lambda tmp: Path(tmp).write_text(text), 2.5)


def test_units_kept_are_found_again_under_the_same_fingerprint(tmp_path):
    final = tmp_path / "artifact"
    kept = Checkpoints.beside(final, "f1", INPUTS, force=False)
    kept.begin("shard", 3)
    _keep(kept, "a", "first")
    again = Checkpoints.beside(final, "f1", INPUTS, force=False)
    assert again.discarded is None and again.total == 3 and again.kind == "shard"
    assert list(again.done()) == ["a"] and again.done()["a"]["seconds"] == 2.5
    assert again.path("a").read_text() == "first"
    assert not final.exists() and (tmp_path / "artifact.checkpoints").is_dir()
    assert [p.name for p in again.path("a").parent.iterdir()] == ["a.bin"]  # no temporary left


def test_another_fingerprint_or_force_discards_them_and_says_why(tmp_path):
    final = tmp_path / "artifact"
    kept = Checkpoints.beside(final, "f1", INPUTS, force=False)
    kept.begin("subgraph", 5)
    _keep(kept, "subgraph 0", "x")
    _keep(kept, "subgraph 1", "y")
    newer = INPUTS | {"libraries": {"torch": "2.13.0", "llmcompressor": "0.15.0"}}
    changed = Checkpoints.beside(final, "f2", newer, force=False)
    assert changed.discarded == (
        "not resuming: 2 subgraph(s) of an earlier attempt discarded: its inputs differ "
        "(llmcompressor 0.14.0 → 0.15.0)"
    )
    assert changed.done() == {} and not (tmp_path / "artifact.checkpoints").exists()
    changed.begin("subgraph", 5)
    _keep(changed, "subgraph 0", "x")
    forced = Checkpoints.beside(final, "f2", newer, force=True)
    assert forced.discarded.endswith("discarded: --force") and forced.done() == {}


def test_another_count_of_units_starts_over_and_remove_leaves_nothing(tmp_path):
    kept = Checkpoints.beside(tmp_path / "artifact", "f1", INPUTS, force=False)
    kept.begin("shard", 3)
    _keep(kept, "a", "first")
    kept.begin("shard", 4)  # another split of the same inputs: nothing kept applies
    assert kept.done() == {} and kept.total == 4
    _keep(kept, "b", "second")
    kept.remove()
    assert list(tmp_path.iterdir()) == []


def test_a_torn_or_corrupted_unit_is_discarded_with_one_line_and_the_rest_kept(tmp_path):
    """A host crash can tear a file whose rename survived; a copy can flip bytes at the same
    size. Each unit's sha256, kept with it, is checked when the next attempt opens them."""
    final = tmp_path / "artifact"
    kept = Checkpoints.beside(final, "f1", INPUTS, force=False)
    kept.begin("subgraph", 4)
    for name, text in (("s0", "intact"), ("s1", "to be torn"), ("s2", "to be flipped")):
        _keep(kept, name, text)
    assert len(kept.done()["s0"]["sha256"]) == 64
    torn, flipped = kept.path("s1"), kept.path("s2")
    torn.write_text("to be")  # cut short
    flipped.write_text("to be flopped")  # same size, other bytes
    again = Checkpoints.beside(final, "f1", INPUTS, force=False)
    assert again.discarded == (
        "kept subgraph(s) discarded and redone: units/s1.bin (sha256 differs), "
        "units/s2.bin (sha256 differs)"
    )
    assert list(again.done()) == ["s0"] and not torn.exists() and not flipped.exists()
    assert Checkpoints.beside(final, "f1", INPUTS, force=False).discarded is None  # said once


def test_units_kept_under_another_device_or_dtype_are_discarded_with_the_reason(tmp_path):
    """The fingerprint names the inputs, not where the work ran: a CPU node's float32 layers
    replayed into a GPU retry in bf16 would match neither uninterrupted run."""
    cpu = {"device": "cpu AVX512", "dtype": "float32", "torch": "2.13.0+cpu"}
    gpu = {"device": "cuda NVIDIA H100 80GB HBM3", "dtype": "bfloat16", "torch": "2.13.0"}
    kept = Checkpoints.beside(tmp_path / "artifact", "f1", INPUTS, force=False)
    assert kept.replay_on(cpu) is None
    kept.begin("subgraph", 4)
    _keep(kept, "s0", "x")
    again = Checkpoints.beside(tmp_path / "artifact", "f1", INPUTS, force=False)
    assert again.replay_on(cpu) is None and list(again.done()) == ["s0"]
    assert again.replay_on(gpu) == (
        "not resuming: 1 subgraph(s) of an earlier attempt discarded: kept under another "
        "device cpu AVX512 → cuda NVIDIA H100 80GB HBM3, dtype float32 → bfloat16, "
        "torch 2.13.0+cpu → 2.13.0 (replay would match neither run)"
    )
    assert again.done() == {} and not (tmp_path / "artifact.checkpoints" / "units").exists()


def test_a_reader_follows_the_writers_units_in_memory_and_writes_nothing(tmp_path):
    """torchrun's ranks beside rank 0 (quantize/oneshot.py): the writer's record, the reader's
    the same in memory; the reader touches no file, even where a count starts over."""
    final = tmp_path / "artifact"
    writer = Checkpoints.beside(final, "f1", INPUTS, force=False)
    writer.begin("subgraph", 3)
    _keep(writer, "a", "first")
    folder = tmp_path / "artifact.checkpoints"
    reader = Checkpoints(folder, "f1", INPUTS, writes=False)
    assert list(reader.done()) == ["a"] and reader.path("a").read_text() == "first"
    reader.begin("subgraph", 3)
    _keep(writer, "b", "second")
    _keep(reader, "b", "ignored")
    assert list(reader.done()) == list(writer.done()) == ["a", "b"]
    assert reader.path("b").read_text() == "second"  # the writer's file
    reader.begin("subgraph", 4)  # another count: forgotten in memory, left on disk
    assert reader.done() == {} and writer.path("a").read_text() == "first"
    on_disk = Checkpoints(folder, "f1", INPUTS)
    assert on_disk.total == 3 and list(on_disk.done()) == ["a", "b"]  # the writer's alone


def test_the_parent_of_torchrun_commits_each_layer_its_rank_0_keeps(tmp_path):
    """quantize/oneshot.py's wait on torchrun: each change of rank 0's progress.json is
    committed (`on_keep`: the run folder to object storage), and once more as it exits."""
    from pipeline.quantize import oneshot

    parent = Checkpoints.beside(tmp_path / "artifact", "f1", INPUTS, force=False)
    commits = []
    parent.on_keep = lambda: commits.append(len(Checkpoints(parent.folder, "f1", INPUTS).done()))
    rank0 = Checkpoints(parent.folder, "f1", INPUTS)

    class Torchrun:  # rank 0 keeps a unit between two of the parent's looks
        returncode, polls = 0, 0

        def poll(self):
            self.polls += 1
            if self.polls in (2, 4):
                _keep(rank0, f"unit {self.polls}", "kept")
            return None if self.polls < 6 else 0

    assert oneshot._wait(Torchrun(), parent, every=0.01) == 0
    assert commits and commits[-1] == 2 and 1 in commits, commits
