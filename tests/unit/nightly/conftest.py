"""The nightly store's tests: `own_pg`, a PostgreSQL server that tests may restart, halt and
stall (tests/postgres.py) without disturbing the session's `postgres`."""

import os

import pytest


@pytest.fixture(scope="session")
def own_pg():
    from tests.postgres import Server, binaries

    if binaries() is None:
        if os.environ.get("REQUIRE_POSTGRES") == "1":
            pytest.fail("REQUIRE_POSTGRES=1 but PostgreSQL is not installed")
        pytest.skip("PostgreSQL is not installed (/usr/lib/postgresql/*/bin)")
    server = Server()
    yield server
    server.stop()
