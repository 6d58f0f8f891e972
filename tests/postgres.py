"""A PostgreSQL server of the tests' own: Debian's binaries, a cluster initialised in a temporary
folder, a socket and a free port on 127.0.0.1, stopped at the end. `initdb` refuses to run as
root: as root the cluster belongs to the `postgres` user (FACTS.md). Where the binaries are not
installed the store's PostgreSQL tests skip, unless REQUIRE_POSTGRES=1 (CI sets it): then they
fail, so a CI host without PostgreSQL cannot pass by skipping."""

import glob
import os
import shutil
import socket
import subprocess
import tempfile
import uuid
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
        options = f"-p {self.port} -k {self.root} -c listen_addresses=127.0.0.1 -c fsync=off"
        self._run("pg_ctl", "-D", str(self.data), "-o", options, "-l", str(self.root / "log"),
                  "-w", "start")  # fmt: skip

    def database(self) -> str:
        """A fresh, empty database: its SQLAlchemy URL."""
        import psycopg

        name = f"t_{uuid.uuid4().hex[:12]}"
        with psycopg.connect(self._dsn("postgres"), autocommit=True) as c:
            c.execute(f'CREATE DATABASE "{name}"')
        return f"postgresql+psycopg://postgres@127.0.0.1:{self.port}/{name}"

    def stop(self) -> None:
        self._run("pg_ctl", "-D", str(self.data), "-m", "immediate", "stop", check=False)
        shutil.rmtree(self.root, ignore_errors=True)

    def _dsn(self, db: str) -> str:
        return f"host=127.0.0.1 port={self.port} user=postgres dbname={db}"

    def _run(self, tool: str, *args: str, check: bool = True) -> None:
        cmd = [str(self.bin / tool), *args]
        if self.as_root:
            cmd = ["runuser", "-u", "postgres", "--", *cmd]
        subprocess.run(cmd, check=check, capture_output=True, text=True, timeout=120)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
