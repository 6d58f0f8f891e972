"""The one stage runner, on a stage that writes a file: cache by inputs, several results kept
side by side, a failure recorded and nothing left that looks finished."""

import io
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from pipeline.core import quiet
from pipeline.core.files import sha256_json, staging_dir
from pipeline.core.rundir import RunDir
from pipeline.core.stage import execute


@dataclass
class Counting:
    """A stage whose inputs are `setting`; `work` counts its calls and can be made to fail."""

    rundir: RunDir
    setting: str = "a"
    name: str = "eval"  # a stage that keeps one result per fingerprint
    folder: str = "eval"
    header: dict = field(default_factory=dict)
    calls: list = field(default_factory=list)
    checked: list = field(default_factory=list)
    fail: bool = False
    stop: bool = False
    staging = staticmethod(staging_dir)  # the runner asks every stage for its staging

    def inputs(self) -> dict:
        return {"setting": self.setting}

    def before_work(self) -> None:
        self.checked.append(self.setting)

    def outputs(self, folder: str) -> dict[str, str]:
        return {"results": f"{folder}/results.json"}

    def work(self, out: Path) -> dict:
        self.calls.append(self.setting)
        if self.fail:
            raise RuntimeError("boom\nsecond line")
        (out / "results.json").write_text(f'{{"setting": "{self.setting}"}}')
        if self.stop:  # Ctrl-C after the file, before the stage returns
            raise KeyboardInterrupt
        return {"value": len(self.calls)}

    def load_results(self, entry):
        return (self.rundir.path / entry.outputs["results"]).read_text()


def _stage(tmp_path, **kw) -> Counting:
    return Counting(RunDir("m", "r", tmp_path), **kw)


def test_same_inputs_are_cached_and_force_recomputes(tmp_path):
    s = _stage(tmp_path)
    first, cached = execute(s)
    assert not cached and first.status == "done" and first.metrics["value"] == 1
    again, cached = execute(s)
    assert cached and again == first and s.calls == ["a"] and s.checked == ["a"]
    _, cached = execute(s, force=True)
    assert not cached and s.calls == ["a", "a"]


def test_different_settings_keep_their_own_results(tmp_path):
    """a, then b, then a again: the third is cached, and the manifest points at it."""
    s = _stage(tmp_path)
    a, _ = execute(s)
    s.setting = "b"
    b, _ = execute(s)
    s.setting = "a"
    again, cached = execute(s)
    assert cached and again.fingerprint == a.fingerprint and s.calls == ["a", "b"]
    assert s.rundir.stage("eval").fingerprint == a.fingerprint  # the latest used
    assert set(s.rundir.manifest().results["eval"]) == {a.fingerprint, b.fingerprint}
    assert s.load_results(b) == '{"setting": "b"}' and a.outputs != b.outputs


def test_a_failure_is_recorded_and_leaves_no_result(tmp_path):
    s = _stage(tmp_path, fail=True)
    with pytest.raises(RuntimeError):
        execute(s)
    entry = s.rundir.stage("eval")
    assert entry.status == "failed" and entry.error == "RuntimeError: boom second line"
    assert entry.outputs == {}  # nothing was left: the manifest names nothing
    assert s.rundir.cached("eval", sha256_json(s.inputs())) is None  # failed: never a hit
    assert not [p for p in s.rundir.path.rglob("*") if ".partial" in p.name]


def test_deleted_outputs_are_not_a_cache_hit(tmp_path):
    s = _stage(tmp_path)
    entry, _ = execute(s)
    (s.rundir.path / entry.outputs["results"]).unlink()
    _, cached = execute(s)
    assert not cached and s.calls == ["a", "a"]


def test_single_result_stages_replace_their_folder(tmp_path):
    s = _stage(tmp_path, name="quantize", folder="artifact")
    first, _ = execute(s)
    s.setting = "b"
    second, _ = execute(s)
    assert first.outputs == second.outputs == {"results": "artifact/results.json"}
    assert s.rundir.manifest().results == {}


def test_each_stage_records_its_own_peak_rss(tmp_path):
    """A stage run after a memory-hungry one in the same process (`make run`) reports its own
    peak, not the process's."""
    import psutil

    held = bytearray(400 * 2**20)  # 400 MiB touched before the stage: the process's peak
    held[::4096] = b"x" * len(held[::4096])
    del held
    before = psutil.Process().memory_info().rss
    entry, _ = execute(_stage(tmp_path))
    assert 0 < entry.metrics["peak_rss_bytes"] < before + 200 * 2**20


def test_the_runner_writes_through_the_stages_own_staging(tmp_path):
    """Serve and publish bring their own staging (a failed attempt kept aside, a folder kept):
    the runner asks the stage, never a default of its own."""
    s = _stage(tmp_path)
    finals = []

    @contextmanager
    def recorded(final: Path):
        finals.append(final.relative_to(s.rundir.path))
        with staging_dir(final) as out:
            yield out

    s.staging = recorded
    entry, _ = execute(s)
    assert finals == [Path(entry.outputs["results"]).parent]
    assert (s.rundir.path / entry.outputs["results"]).is_file()


@pytest.mark.parametrize("aside", [False, True])
def test_an_interrupt_is_recorded_as_such_and_names_only_what_is_there(tmp_path, aside):
    """Ctrl-C mid-work: `interrupted`, never a failure; with serve's staging the partial results
    are kept aside (<folder>.incomplete/) and the manifest names them there; with the default
    one nothing is left, and the manifest names nothing."""
    from pipeline.core.errors import INTERRUPTED
    from pipeline.serve.stage import keep_incomplete

    s = _stage(tmp_path, stop=True)
    if aside:
        s.staging = keep_incomplete
    with pytest.raises(KeyboardInterrupt):
        execute(s)
    entry = s.rundir.stage("eval")
    assert entry.status == "interrupted" and entry.error == INTERRUPTED
    assert all((s.rundir.path / p).is_file() for p in entry.outputs.values())
    if aside:
        (path,) = entry.outputs.values()
        assert Path(path).parent.name.endswith(".incomplete")
    else:
        assert entry.outputs == {}
    assert s.rundir.cached("eval", sha256_json(s.inputs())) is None


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_a_terminal_hears_of_a_stage_before_its_checks_load_their_libraries(tmp_path, monkeypatch):
    terminal = _Terminal()
    monkeypatch.setattr(quiet, "terminal", lambda: terminal)
    s = _stage(tmp_path)
    s.before_work = lambda: s.checked.append(terminal.getvalue())  # what was said by then
    execute(s)
    assert s.checked == ["eval m × r: starting\n"]
    execute(s)  # cached: nothing starts, nothing said
    assert terminal.getvalue() == "eval m × r: starting\n"
    pipe = io.StringIO()  # a log or a pipe: no extra line
    monkeypatch.setattr(quiet, "terminal", lambda: pipe)
    execute(_stage(tmp_path, setting="b"))
    assert pipe.getvalue() == ""
