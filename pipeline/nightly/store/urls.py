"""A store's URL: any SQLAlchemy URL, PostgreSQL's with the driver we pin, or one line saying
what is wrong with it (never its password). A SQLite file this host may not write is still read
(a report needs no more): it is opened `mode=ro`, and `immutable` where its folder is not
writable and no writer's -shm is beside it (readable); a night or a pin on it is one line,
exit 4."""

import os
from urllib.parse import quote

from sqlalchemy import exc, make_url
from sqlalchemy.engine import URL

from pipeline.core import secrets
from pipeline.core.errors import UserError, first_line


def parse(url: str, where: str) -> URL:
    """The URL, or one line saying what is wrong with it (never its password); `where` names
    the URL as it may be shown, and where it came from."""
    authority = url.partition("//")[2].partition("/")[0]
    if authority.count("@") > 1:
        raise UserError(f"{where}: its password holds an unescaped @ (write it as %40)")
    if url != url.strip():
        raise UserError(f"{where} is not a database URL: it starts or ends with a space")
    try:
        return make_url(pinned_driver(url))
    except ValueError as e:
        why = "its port is not a number" if "int()" in str(e) else secrets.text(first_line(e))
        raise UserError(f"{where} is not a database URL: {why}") from None
    except exc.ArgumentError:
        raise UserError(
            f"{where} is not a database URL (e.g. postgresql://HOST:5432/nightly with its "
            "user and password before the host, or sqlite:///runs/nightly.db)"
        ) from None


def pinned_driver(url: str) -> str:
    """postgresql://… (and Heroku's postgres://) means the driver we pin, psycopg 3: SQLAlchemy
    would pick psycopg2, which is not installed."""
    for bare in ("postgresql://", "postgres://"):
        if url.startswith(bare):
            return "postgresql+psycopg://" + url.removeprefix(bare)
    return url


def readable(url: URL) -> URL:
    """A SQLite file this host may not write, as a URL SQLite reads it by: `mode=ro`, and
    `immutable=1` where its folder is not writable and no `-shm` is beside it. In WAL mode a
    reader needs the -shm file, and SQLite cannot make one in such a folder: the file is then
    read as it is, trusted not to change meanwhile (https://www.sqlite.org/wal.html, "Read-Only
    Databases"). A -shm there is a writer's (who may write the folder): it is read through, and
    so is the night in its -wal. A file this host may write, a new one, is the writer's URL as
    given."""
    path = os.path.abspath(url.database or "")  # as pysqlite opens it
    folder = os.path.dirname(path)
    if not os.path.exists(path) or (os.access(path, os.W_OK) and os.access(folder, os.W_OK)):
        return url
    query = {**url.query, "mode": "ro", "uri": "true"}
    if not os.access(folder, os.W_OK) and not os.path.exists(f"{path}-shm"):
        query["immutable"] = "1"
    return url.set(database=f"file:{quote(path)}", query=query)
