"""How `make test` runs on several workers (pytest-xdist, `-n 3 --dist loadgroup` on a host
without GPUs, `-n 2` on GPU hosts: default_workers below).

Most of the suite is single-threaded — interpreter start-up and imports of every CLI call, vLLM's
engine start-up, tiny-model forwards — so one test per core nearly halves the wall time, and a
third worker on two cores fills the ~14% the first two leave idle while they wait on engine
start-ups, health polls and sockets. What keeps that honest:

- Warm-up before the workers start: the tiny model (its training uses both cores) and this host's
  roofline rates (pipeline/perf/host.py: a rate measured beside another test would be halved,
  and every time estimate after it wrong).
- Groups (GROUPS below): the test files that share a session's expensive artifacts (a served
  fp8, the recipes' evals, the real-shape model) run on one worker, so each artifact is made
  once; every other file is a unit of its own. The costliest units go first (COST, measured),
  the unit tests last, to fill the gaps.
  xdist's own `xdist_group` marks do nothing under pytest 9.2 (pytest-xdist#1386: the group rides
  on a node id pytest no longer lets it change), so the scheduler here reads this table instead.
- One thread per worker: torch and vLLM run OpenMP threads that spin at their barriers, and two
  processes with two threads each on two cores ran quantize 2-3× slower than one at a time. Each
  worker's processes get OMP_NUM_THREADS=1, and its vLLM engines one core (the worker's number
  modulo the cores).
- Made once per run: a recipe's tiny-llama artifact is quantized, and its hf eval run, by the
  first worker that needs it; the others copy that run directory, or adopt the eval, into their
  own sessions (made_once, tests/e2e/conftest.py), so no two workers make the same thing, and
  each can still change its copy (`--force`, evals, serves). tiny-llama's eval references
  (the original's scores, noise floors, answers and task scores) sit in one folder every
  worker's run root links to; the eval locks each reference on its own, so a worker waits only
  for one it needs, and the group that needs the shipped settings' late runs them late (GROUPS).
- Imports once per worker: `cli()` forks each `python -m pipeline …` from the worker's zygote
  (tests/zygote.py), which has imported torch, transformers and llm-compressor: ~100 calls
  per run would each spend 5-14 s of CPU importing them again.
- No test runs alone: a plan's time for a test worker's process counts the one thread it gets
  (OMP_NUM_THREADS), so the real-shape eval's estimate holds beside the other workers.
"""

import os
import shutil
import tempfile
import uuid
from contextlib import contextmanager
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
GROUPS = {  # a group's files run in this order
    "fp8-served": [  # served_fp8 and evaluated("fp8"): the shipped eval settings' references
        "tests/e2e/serve/test_serve_stage.py",  # late, when "evals" has long scored them
        "tests/e2e/external/test_import.py",
        "tests/e2e/test_advise.py",
        "tests/e2e/publish/test_publish.py",
        "tests/e2e/nightly/test_nightly.py",
    ],
    "evals": [  # the shipped eval settings' references first
        "tests/e2e/eval/test_eval_stage.py",
        "tests/e2e/test_formats.py",
        "tests/e2e/test_calibration_compare.py",
    ],
    "real-shape": ["tests/e2e/quantize/test_real_shape.py", "tests/e2e/test_real_shape_chain.py"],
}
GROUP_OF = {path: group for group, paths in GROUPS.items() for path in paths}
# Session fixtures of tests/e2e's conftests that each worker would make again (a server, a
# model, checkpoints): every test file asking for one, directly or through other fixtures, must
# be in the group named here (tests/unit/test_parallel.py checks GROUPS against the files).
SHARED_FIXTURES = {"served_fp8": "fp8-served", "real_shape": "real-shape", "external": "fp8-served"}
# Session fixtures that need no group: made before the workers start (tiny_model, in
# pytest_sessionstart), or cheap. Those using made_once (once per run) need none either.
PER_WORKER_FIXTURES = {"tiny_model", "session_runs", "small_recipe"}
# Worker seconds per unit of work, measured (`make test ARGS=--durations=0`, 2-core AVX2 host,
# 2026-12-02, CLI calls forked from the zygote): the largest are scheduled first, so that the
# last to finish is a short one.
# A unit not listed (seconds) follows them in collection order; unit tests come last.
COST = {
    "fp8-served": 1200,
    "evals": 880,
    "real-shape": 245,
    "tests/e2e/models/test_zoo.py": 240,
    "tests/e2e/quantize/test_quantize_stage.py": 150,
    "tests/e2e/test_search.py": 140,
    "tests/e2e/quantize/test_distributed.py": 55,
    "tests/e2e/test_cli_errors.py": 30,
}
# Read by torch and vLLM when their processes start: set before any test imports torch
ONE_CORE = {"OMP_NUM_THREADS": "1"}


def default_workers() -> int:
    """make test's worker count: 3 on a host without GPUs (a 2-core host, 2026-12-05: 20 min 34 s
    of pytest on 2 workers, 17 min 09 s on 3; user CPU 86% of the two cores on 2 workers); 2 on
    GPU hosts, whose workers each hold GPUs of their own (tests/standin_hosts.py checks that
    split)."""
    return 2 if _visible_gpus() else 3


def pytest_configure(config):
    if _worker_run(config):
        worker = int(config.workerinput["workerid"].removeprefix("gw"))
        os.environ.update(ONE_CORE | {"VLLM_CPU_OMP_THREADS_BIND": str(worker % os.cpu_count())})
        gpus = _visible_gpus()
        if gpus:  # each worker its own GPUs: a vLLM engine takes 90% of every GPU it sees
            count = config.workerinput["workercount"]
            os.environ["CUDA_VISIBLE_DEVICES"] = worker_gpus(gpus, worker, count)
            os.environ["CUDA_DEVICE_ORDER"] = "PCI_BUS_ID"  # the indices are nvidia-smi's
    elif getattr(config.option, "numprocesses", None):
        if config.option.testrunuid is None:
            config.option.testrunuid = uuid.uuid4().hex  # xdist's own would be unknown here


def pytest_report_header(config) -> list[str]:
    """Which worker holds which GPUs, and what it may run (shown before collection)."""
    workers = getattr(config.option, "numprocesses", None)
    if _worker_run(config) or not isinstance(workers, int) or workers < 1:
        return []
    return [f"test workers: {split(_visible_gpus(), workers)}"]


def split(gpus: list[int], workers: int) -> str:
    """The worker split as the header shows it: e.g. "gw0 GPU 0 (all tests), gw1 no GPU
    (unit tests only)"."""
    if not gpus:
        return ", ".join(f"gw{w} CPU" for w in range(workers)) + " (no GPU visible)"
    parts = []
    for w in range(workers):
        held = worker_gpus(gpus, w, workers)
        parts.append(f"gw{w} GPU {held} (all tests)" if held else f"gw{w} no GPU (unit tests only)")
    return ", ".join(parts)


def _visible_gpus() -> list[int]:
    from pipeline.core import devices

    return [g.index for g in devices.seen()]


def worker_gpus(gpus: list[int], worker: int, workers: int) -> str:
    """CUDA_VISIBLE_DEVICES for test worker `worker` of `workers`: disjoint, contiguous shares
    of the visible GPUs (host indices), the first workers taking one more where they do not
    divide. More workers than GPUs: the workers past them get "" (no GPU) and run only unit
    tests (ByGroup below), so a one-GPU host still runs them beside the e2e tests."""
    share, extra = divmod(len(gpus), workers)
    start = worker * share + min(worker, extra)
    return ",".join(str(g) for g in gpus[start : start + share + (worker < extra)])


def pytest_unconfigure(config):
    """The controller removes what the workers shared (locks, made-once artifacts)."""
    if getattr(config.option, "numprocesses", None) and not _worker_run(config):
        shutil.rmtree(_run_folder(config.option.testrunuid), ignore_errors=True)


def _worker_run(config) -> str | None:
    """The test run's id on an xdist worker; None in the controller or a plain pytest run."""
    workerinput = getattr(config, "workerinput", None)
    return workerinput["testrunuid"] if workerinput else None


def _selects_e2e(config) -> bool:
    e2e = REPO / "tests" / "e2e"
    paths = [Path(arg.split("::")[0]).resolve() for arg in config.args] or [REPO]
    return any(p == e2e or e2e in p.parents or p in e2e.parents for p in paths)


def pytest_sessionstart(session):
    config = session.config
    if not getattr(config.option, "numprocesses", None) or _worker_run(config):
        return
    if _selects_e2e(config):
        from pipeline.models.tiny.build import ensure
        from pipeline.perf import host

        ensure()
        host.measured()


def _unit_of(nodeid: str) -> str:
    path = nodeid.split("::", 1)[0]
    return GROUP_OF.get(path, path)


def _rank(nodeid: str) -> tuple[bool, int, int]:
    path = nodeid.split("::", 1)[0]
    within = GROUPS[GROUP_OF[path]].index(path) if path in GROUP_OF else 0
    return nodeid.startswith("tests/unit/"), -COST.get(_unit_of(nodeid), 0), within


def pytest_collection_modifyitems(config, items):
    """The costliest units first, unit tests last (a stable sort: a module's tests stay
    together and in order)."""
    items.sort(key=lambda item: _rank(item.nodeid))


def pytest_xdist_make_scheduler(config, log):
    if config.getvalue("dist") != "loadgroup":
        return None
    from xdist.scheduler import LoadScopeScheduling

    gpus, workers = _visible_gpus(), config.option.numprocesses
    workers = workers if isinstance(workers, int) else 0  # "auto": as many as GPUs or more
    cpu_only = {f"gw{w}" for w in range(workers) if gpus and not worker_gpus(gpus, w, workers)}

    class ByGroup(LoadScopeScheduling):
        """A group's files are one unit of work, any other file one of its own: a module's
        fixtures are set up once, and its tests run in order (some read what the one before
        wrote, as test_zoo.py's do). A worker holding no GPU on a GPU host takes unit tests
        only: an e2e test there would plan for no GPU where the host has them."""

        def _split_scope(self, nodeid: str) -> str:
            return _unit_of(nodeid)

        def _assign_work_unit(self, node) -> None:
            if node.gateway.id not in cpu_only:
                return super()._assign_work_unit(node)
            fits = next((u for u in self.workqueue if u.startswith("tests/unit/")), None)
            if fits is None:  # nothing left it may run
                if not self._pending_of(self.assigned_work[node]):
                    node.shutdown()
                return None
            self.workqueue.move_to_end(fits, last=False)  # the parent pops the first unit
            return super()._assign_work_unit(node)

    config.option.loadscopereorder = False  # keep the order above: groups first
    return ByGroup(config, log)


def _run_folder(run: str) -> Path:
    folder = Path(tempfile.gettempdir()) / f"pipeline-tests-{run}"
    folder.mkdir(exist_ok=True)
    return folder


def shared_folder(config, name: str) -> Path | None:
    """A folder every worker of this run sees (None outside xdist): for what the pipeline
    itself guards with its own locks, as the eval's reference folder."""
    run = _worker_run(config)
    if run is None:
        return None
    folder = _run_folder(run) / "shared" / name
    folder.mkdir(parents=True, exist_ok=True)
    return folder


@contextmanager
def made_once(config, name: str):
    """Yields the path where this run's workers share `name`, under an exclusive lock: the
    first worker makes it there, the others wait and find it made. None outside xdist."""
    run = _worker_run(config)
    if run is None:
        yield None
        return
    from pipeline.core.files import waiting_lock

    folder = _run_folder(run) / "shared"
    with waiting_lock(folder / f"{name}.lock"):
        yield folder / name


if __name__ == "__main__":  # the Makefile's default TEST_WORKERS
    print(default_workers())
