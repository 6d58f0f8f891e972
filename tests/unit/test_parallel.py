"""make test's scheduling (tests/parallel.py): groups first, unit tests last, a group's files
one unit of work and every other file one of its own."""

from tests import parallel


def test_groups_come_first_and_unit_tests_last():
    ids = [
        "tests/unit/test_sizing.py::test_a",
        "tests/e2e/test_cli_errors.py::test_b",
        "tests/e2e/test_real_shape_chain.py::test_c",
        "tests/e2e/serve/test_serve_stage.py::test_d",
    ]
    ordered = sorted(ids, key=parallel._rank)
    assert ordered == [ids[3], ids[2], ids[1], ids[0]]


def test_a_groups_files_are_one_unit_and_other_files_one_each():
    class Config:
        def getvalue(self, name):
            return "loadgroup"

        class option:
            loadscopereorder = True

    from xdist.remote import Producer

    scheduler = parallel.pytest_xdist_make_scheduler(Config(), Producer("test"))
    scope = scheduler._split_scope
    assert scope("tests/e2e/publish/test_publish.py::t1") == "fp8-served"
    assert scope("tests/e2e/test_advise.py::t2[x]") == "fp8-served"
    assert scope("tests/e2e/models/test_zoo.py::t3[a]") == scope("tests/e2e/models/test_zoo.py::t4")
    assert scope("tests/unit/test_sizing.py::t5") != scope("tests/unit/test_capacity.py::t6")
    assert Config.option.loadscopereorder is False  # the order above holds
