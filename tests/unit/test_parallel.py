"""make test's scheduling (tests/parallel.py): costliest units first, unit tests last, a group's
files one unit of work and every other file one of its own; what the workers make once."""

import ast
import os

from tests import parallel


def test_costliest_units_come_first_and_unit_tests_last():
    ids = [
        "tests/unit/test_sizing.py::test_a",
        "tests/e2e/test_cli_errors.py::test_b",
        "tests/e2e/test_real_shape_chain.py::test_c",
        "tests/e2e/models/test_zoo.py::test_e",
        "tests/e2e/serve/test_serve_stage.py::test_d",
    ]
    ordered = sorted(ids, key=parallel._rank)
    assert ordered[-1] == ids[0]  # a unit test, however costly
    costs = [parallel.COST[parallel._unit_of(nodeid)] for nodeid in ordered[:-1]]
    assert costs == sorted(costs, reverse=True) and ordered[0] == ids[4]  # the fp8-served group


class Config:
    def getvalue(self, name):
        return "loadgroup"

    class option:
        loadscopereorder = True
        numprocesses = 2


def test_a_groups_files_are_one_unit_and_other_files_one_each():
    from xdist.remote import Producer

    scheduler = parallel.pytest_xdist_make_scheduler(Config(), Producer("test"))
    scope = scheduler._split_scope
    assert scope("tests/e2e/publish/test_publish.py::t1") == "fp8-served"
    assert scope("tests/e2e/test_advise.py::t2[x]") == "fp8-served"
    assert scope("tests/e2e/models/test_zoo.py::t3[a]") == scope("tests/e2e/models/test_zoo.py::t4")
    assert scope("tests/unit/test_sizing.py::t5") != scope("tests/unit/test_capacity.py::t6")
    assert Config.option.loadscopereorder is False  # the order above holds


def test_made_once_is_shared_by_a_runs_workers_and_off_outside_xdist():
    """Two workers of one run get the same path under one lock (threads stand in for the
    workers: flock locks belong to open files, so two opens exclude each other as two
    processes would); a plain pytest run gets None."""
    import threading
    import time
    import uuid

    class Worker:
        workerinput = {"testrunuid": uuid.uuid4().hex, "workerid": "gw0"}

    class Plain:
        pass

    with parallel.made_once(Plain(), "x") as path:
        assert path is None
    inside, most, paths = [], [], []

    def hold():
        with parallel.made_once(Worker(), "artifact") as path:
            inside.append(1)
            most.append(len(inside))
            paths.append(path)
            time.sleep(0.2)
            inside.pop()

    threads = [threading.Thread(target=hold) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert most == [1, 1]  # one at a time under the lock
    assert len(paths) == 2 and paths[0] == paths[1] and paths[0].name == "artifact"
    parallel.shutil.rmtree(paths[0].parent.parent)


def test_test_workers_get_disjoint_gpus_on_a_gpu_host():
    """What each worker's CUDA_VISIBLE_DEVICES is (host indices), for the GPUs `make test` sees."""
    assert [parallel.worker_gpus(list(range(8)), w, 2) for w in (0, 1)] == ["0,1,2,3", "4,5,6,7"]
    assert [parallel.worker_gpus([2, 5, 7], w, 2) for w in (0, 1)] == ["2,5", "7"]
    assert [parallel.worker_gpus([0, 1], w, 2) for w in (0, 1)] == ["0", "1"]
    for workers in range(1, 9):  # every GPU to exactly one worker
        shares = [
            parallel.worker_gpus(list(range(8)), w, workers).split(",") for w in range(workers)
        ]
        assert sorted(int(g) for share in shares for g in share) == list(range(8))

    assert parallel.worker_gpus([0], 1, 2) == ""  # one GPU, two workers: the second has none


class Node:
    """What the scheduler asks of an xdist worker: its id, tests sent, shutdown."""

    def __init__(self, worker: str):
        self.gateway = type("Gateway", (), {"id": worker})
        self.sent, self.shutting_down = [], False

    def send_runtest_some(self, indexes):
        self.sent += indexes

    def shutdown(self):
        self.shutting_down = True


def _scheduled(monkeypatch, machine: str, ids: list[str]) -> tuple[Node, Node, object]:
    """make test's scheduler on a stand-in GPU host (tests/gpu_hosts), two workers."""
    from xdist.remote import Producer

    from tests.conftest import REPO

    monkeypatch.setenv("PATH", f"{REPO / 'tests' / 'gpu_hosts'}:{os.environ['PATH']}")
    monkeypatch.setenv("STANDIN_GPUS", machine)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    scheduler = parallel.pytest_xdist_make_scheduler(Config(), Producer("test"))
    scheduler.numnodes = 2  # what xdist reads from `-n 2`
    nodes = Node("gw0"), Node("gw1")
    for node in nodes:
        scheduler.add_node(node)
        scheduler.add_node_collection(node, ids)
    scheduler.schedule()
    return *nodes, scheduler


IDS = [
    "tests/e2e/test_cli_errors.py::a",
    "tests/e2e/models/test_zoo.py::b",
    "tests/unit/test_x.py::c",
    "tests/unit/test_y.py::d",
]


def test_one_gpu_two_workers_the_one_without_takes_unit_tests_only(monkeypatch):
    """The README's `make test` (two workers) on a one-GPU host: gw0 holds the GPU and takes
    the e2e tests, gw1 none and only unit tests; it stops when none are left for it."""
    gpu, cpu, scheduler = _scheduled(monkeypatch, "h100x1", IDS)
    assert sorted(IDS[i] for i in cpu.sent) == IDS[2:]
    assert sorted(IDS[i] for i in gpu.sent) == sorted(IDS[:2])
    for i in cpu.sent:
        scheduler.mark_test_complete(cpu, i)
    assert cpu.shutting_down and not scheduler.workqueue


def test_eight_gpus_two_workers_both_take_anything(monkeypatch):
    gw0, gw1, _ = _scheduled(monkeypatch, "h100x8", IDS)
    assert sorted(IDS[i] for i in gw0.sent + gw1.sent) == sorted(IDS)
    assert any(IDS[i].startswith("tests/e2e/") for i in gw1.sent)


def test_three_workers_without_a_gpu_two_where_gpus_are_split(monkeypatch):
    from tests.conftest import REPO

    monkeypatch.setenv("PATH", f"{REPO / 'tests' / 'gpu_hosts'}:{os.environ['PATH']}")
    monkeypatch.setenv("STANDIN_GPUS", "h100x1")
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    assert parallel.default_workers() == 2
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")  # none visible: a CPU host's count
    assert parallel.default_workers() == 3


def test_the_worker_split_is_shown_in_the_header():
    assert parallel.split([0], 2) == "gw0 GPU 0 (all tests), gw1 no GPU (unit tests only)"
    assert parallel.split(list(range(8)), 2) == (
        "gw0 GPU 0,1,2,3 (all tests), gw1 GPU 4,5,6,7 (all tests)"
    )
    assert parallel.split([], 2) == "gw0 CPU, gw1 CPU (no GPU visible)"


# What a test file asks pytest for, read from its source (no import, no collection): the
# arguments of its tests and fixtures, pytest.mark.usefixtures(...) and
# request.getfixturevalue("...") names; fixtures it defines map to what they ask for.


def _is_fixture(fn: ast.FunctionDef) -> bool:
    for dec in fn.decorator_list:
        target = dec.func if isinstance(dec, ast.Call) else dec
        if (getattr(target, "attr", None) or getattr(target, "id", None)) == "fixture":
            return True
    return False


def _scope(fn: ast.FunctionDef) -> str:
    for dec in fn.decorator_list:
        for kw in getattr(dec, "keywords", []):
            if kw.arg == "scope" and isinstance(kw.value, ast.Constant):
                return kw.value.value
    return "function"


def _named_in_calls(node: ast.AST, method: str) -> set[str]:
    """String arguments of calls to `method` (usefixtures, getfixturevalue) under node."""
    return {
        arg.value
        for call in ast.walk(node)
        if isinstance(call, ast.Call) and getattr(call.func, "attr", None) == method
        for arg in call.args
        if isinstance(arg, ast.Constant) and isinstance(arg.value, str)
    }


def _asks(fn: ast.FunctionDef) -> set[str]:
    args = fn.args
    params = {a.arg for a in [*args.posonlyargs, *args.args, *args.kwonlyargs]}
    return params | _named_in_calls(fn, "usefixtures") | _named_in_calls(fn, "getfixturevalue")


def _functions(tree: ast.AST):
    return [n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]


def _read(text: str) -> tuple[dict[str, ast.FunctionDef], set[str]]:
    """(fixtures defined: name → def, what the tests and module marks ask for)."""
    tree = ast.parse(text)
    fixtures = {fn.name: fn for fn in _functions(tree) if _is_fixture(fn)}
    tests = [fn for fn in _functions(tree) if fn.name.startswith("test")]
    asked = set().union(*map(_asks, tests)) | _named_in_calls(tree, "usefixtures")
    return fixtures, asked


def _groups(names: set[str], fixtures: dict[str, ast.FunctionDef]) -> set[str]:
    """The groups owning the shared fixtures these names reach, through fixtures' own asks."""
    seen, todo, found = set(), list(names), set()
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        if name in parallel.SHARED_FIXTURES:
            found.add(parallel.SHARED_FIXTURES[name])
        if name in fixtures:
            todo += _asks(fixtures[name])
    return found


def _e2e_files():
    from tests.conftest import REPO

    root = REPO / "tests" / "e2e"
    conftest = {}
    for path in root.rglob("conftest.py"):  # fixture names are unique across them
        conftest.update(_read(path.read_text())[0])
    for path in sorted(root.rglob("test_*.py")):
        yield path.relative_to(REPO).as_posix(), conftest, *_read(path.read_text())


def test_every_file_using_a_shared_fixture_is_in_its_group():
    """GROUPS is a hand-kept table: a new test file asking for served_fp8 (itself, through a
    fixture of its own, usefixtures or getfixturevalue) outside the fp8-served group would
    serve fp8 a second time on the other worker."""
    needed = {}
    for file, conftest, own, asked in _e2e_files():
        if groups := _groups(asked, {**conftest, **own}):
            needed[file] = groups
    # the scan found users of every shared fixture: it can see what it guards
    assert set().union(*needed.values()) == set(parallel.SHARED_FIXTURES.values())
    stale = {f: g for f, g in needed.items() if g != {parallel.GROUP_OF.get(f)}}
    assert stale == {}, "tests/parallel.py GROUPS: put each file in the group it needs"


def test_every_session_fixture_is_shared_once_or_grouped():
    """A new session fixture in an e2e conftest that builds or serves something must be made
    once per run (made_once) or own a group (SHARED_FIXTURES); else each worker makes it."""
    from tests.conftest import REPO

    where, fixtures = {}, {}
    for path in (REPO / "tests" / "e2e").rglob("conftest.py"):
        for name, fn in _read(path.read_text())[0].items():
            where[name], fixtures[name] = path.relative_to(REPO).as_posix(), fn
    unsure = []
    for name, fn in fixtures.items():
        once = "made_once" in {getattr(n, "id", None) for n in ast.walk(fn)}
        known = name in parallel.SHARED_FIXTURES or name in parallel.PER_WORKER_FIXTURES
        if _scope(fn) == "session" and not (once or known or _groups({name}, fixtures)):
            unsure.append(f"{where[name]}::{name}")
    assert unsure == [], "classify in tests/parallel.py: SHARED_FIXTURES or PER_WORKER_FIXTURES"
    # no entry left for a fixture that is gone
    assert set(parallel.SHARED_FIXTURES) | parallel.PER_WORKER_FIXTURES <= set(fixtures)


def test_the_scan_sees_fixtures_reached_every_way():
    """The reader above on a file that asks for served_fp8 in each way pytest allows."""
    text = """
import pytest
pytestmark = pytest.mark.usefixtures("real_shape")

@pytest.fixture(scope="module")
def mine(served_fp8):
    return served_fp8

def test_a(mine): ...

def test_b(request):
    request.getfixturevalue("external")
"""
    fixtures, asked = _read(text)
    assert _scope(fixtures["mine"]) == "module"
    assert _groups(asked, fixtures) == {"fp8-served", "real-shape"}
    assert _groups({"mine"}, {}) == set()  # unknown fixture: nothing reached


def test_groups_and_costs_name_files_that_exist():
    """A renamed or moved test file leaves its GROUPS / COST entry behind, silently."""
    from tests.conftest import REPO

    named = [*parallel.GROUP_OF, *(u for u in parallel.COST if u.startswith("tests/"))]
    assert [p for p in named if not (REPO / p).is_file()] == []
    assert set(parallel.COST) - set(named) <= set(parallel.GROUPS)
