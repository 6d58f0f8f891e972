"""A PostgreSQL server of the tests' own: Debian's binaries, a cluster initialised in a temporary
folder, a socket and a free port on 127.0.0.1, stopped at the end. `initdb` refuses to run as
root: as root the cluster belongs to the `postgres` user (FACTS.md). Where the binaries are not
installed the store's PostgreSQL tests skip, unless REQUIRE_POSTGRES=1 (CI sets it): then they
fail, so a CI host without PostgreSQL cannot pass by skipping.

What a database goes through, for the store's resilience tests: `restart()` (every connection
dropped), `halt()` / `start()` (down for a while), `stalled()` (the server and its backends
stopped with SIGSTOP: connections stay open and nothing answers), `role()` (a user with a
password and chosen privileges)."""

import contextlib
import glob
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path


def binaries() -> Path | None:
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"))
    return Path(found[-1]).parent if found else None


class Server:
    def __init__(self):
        bin_dir = binaries()
        if bin_dir is None:
            raise FileNotFoundError("PostgreSQL is not installed (/usr/lib/postgresql/*/bin)")
        self.bin = bin_dir
        self.root = Path(tempfile.mkdtemp(prefix="pg-", dir="/tmp"))  # a short socket path
        self.data = self.root / "data"
        self.port = _free_port()
        self.as_root = os.geteuid() == 0
        if self.as_root:
            shutil.chown(self.root, "postgres", "postgres")
        self._run("initdb", "-D", str(self.data), "-A", "trust", "-U", "postgres", "--no-sync")
        self.start()

    def database(self) -> str:
        """A fresh, empty database: its SQLAlchemy URL."""
        name = f"t_{uuid.uuid4().hex[:12]}"
        self.sql(f'CREATE DATABASE "{name}"')
        return f"postgresql+psycopg://postgres@127.0.0.1:{self.port}/{name}"

    def role(self, url: str, password: str, grants: tuple[str, ...] = ()) -> str:
        """A new login role with `password` (trust authentication lets it in with any) and
        only `grants` (SQL run in the database of `url`, `{role}` for its name): the URL of
        that database as this role."""
        import psycopg

        name = f"r_{uuid.uuid4().hex[:8]}"
        self.sql(f"CREATE ROLE {name} LOGIN PASSWORD '{password}'")
        database = url.rsplit("/", 1)[1]
        with psycopg.connect(self._dsn(database), autocommit=True) as c:
            for grant in grants:
                c.execute(grant.format(role=name))
        return f"postgresql+psycopg://{name}:{password}@127.0.0.1:{self.port}/{database}"

    def sql(self, statement: str, database: str = "postgres") -> None:
        import psycopg

        with psycopg.connect(self._dsn(database), autocommit=True) as c:
            c.execute(statement)

    def start(self) -> None:
        options = f"-p {self.port} -k {self.root} -c listen_addresses=127.0.0.1 -c fsync=off"
        self._run("pg_ctl", "-D", str(self.data), "-o", options, "-l", str(self.root / "log"),
                  "-w", "start")  # fmt: skip

    def halt(self) -> None:
        """Down until start(): every connection closed by the server (fast shutdown)."""
        self._run("pg_ctl", "-D", str(self.data), "-m", "fast", "-w", "stop")

    def restart(self) -> None:
        self.halt()
        self.start()

    @contextlib.contextmanager
    def stalled(self) -> Iterator[None]:
        """The server and every backend stopped (SIGSTOP) for the block: connections open, TCP
        answered by the kernel, nothing else."""
        postmaster = int((self.data / "postmaster.pid").read_text().split()[0])
        os.kill(postmaster, signal.SIGSTOP)  # first: it forks no backend while we look
        backends = _children(postmaster)
        for pid in backends:
            os.kill(pid, signal.SIGSTOP)
        try:
            yield
        finally:
            for pid in [postmaster, *backends]:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGCONT)

    def stop(self) -> None:
        """The end: stopped, its folder removed. A fast shutdown (fsync is off: nothing to
        flush) ends in a fraction of the second that an immediate one takes with many
        connections open; immediate if that fails."""
        fast = ["-D", str(self.data), "-m", "fast", "-t", "30", "-w", "stop"]
        self._run("pg_ctl", *fast, check=False)
        if (self.data / "postmaster.pid").exists():
            self._run("pg_ctl", "-D", str(self.data), "-m", "immediate", "stop", check=False)
        shutil.rmtree(self.root, ignore_errors=True)

    def _dsn(self, db: str) -> str:
        return f"host=127.0.0.1 port={self.port} user=postgres dbname={db}"

    def _run(self, tool: str, *args: str, check: bool = True) -> None:
        cmd = [str(self.bin / tool), *args]
        if self.as_root:
            cmd = ["runuser", "-u", "postgres", "--", *cmd]
        subprocess.run(cmd, check=check, capture_output=True, text=True, timeout=120)


def _children(parent: int) -> list[int]:
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError):
            fields = stat.read_text().rsplit(")", 1)[1].split()
            if int(fields[1]) == parent:  # the field after the state: the parent's pid
                found.append(int(stat.parent.name))
    return found


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
