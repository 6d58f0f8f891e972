"""make test's scheduling (tests/parallel.py): costliest units first, unit tests last, a group's
files one unit of work and every other file one of its own; what the workers make once."""

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


def test_the_worker_split_is_shown_in_the_header():
    assert parallel.split([0], 2) == "gw0 GPU 0 (all tests), gw1 no GPU (unit tests only)"
    assert parallel.split(list(range(8)), 2) == (
        "gw0 GPU 0,1,2,3 (all tests), gw1 GPU 4,5,6,7 (all tests)"
    )
    assert parallel.split([], 2) == "gw0 CPU, gw1 CPU (no GPU visible)"


# the session fixtures whose users must share a worker (one server, one real-shape model)
GROUP_OF_FIXTURE = {"served_fp8": "fp8-served", "real_shape": "real-shape"}


def test_every_file_using_a_group_fixture_is_in_its_group():
    """GROUPS is a hand-kept table: a new test file asking for served_fp8 outside it would
    serve fp8 a second time on the other worker. Read from the tests' own signatures."""
    import ast

    from tests.conftest import REPO

    found = {}
    for path in sorted((REPO / "tests" / "e2e").rglob("test_*.py")):
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.FunctionDef) and node.name.startswith("test"):
                for arg in node.args.args:
                    if arg.arg in GROUP_OF_FIXTURE:
                        found[path.relative_to(REPO).as_posix()] = GROUP_OF_FIXTURE[arg.arg]
    assert set(found.values()) == set(GROUP_OF_FIXTURE.values())  # the scan found users
    assert {f: parallel.GROUP_OF.get(f) for f in found} == found
