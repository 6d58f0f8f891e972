"""The nightly store's tests: `own_pg`, a PostgreSQL server that tests may restart, halt and
stall (tests/postgres.py) without disturbing the session's `postgres`."""

import pytest

from tests.conftest import start_postgres


@pytest.fixture(scope="session")
def own_pg():
    server = start_postgres()
    yield server
    server.stop()
