"""Leases and every wait on the database, in one place: how long a driver's lease lasts, how
often it is renewed, and how long the store waits for its database (Limits)."""

from dataclasses import dataclass

LEASE_S = 120  # a driver or a claim silent this long is taken for dead (database clock)
HEARTBEAT_S = 30  # how often a running driver renews its leases


@dataclass(frozen=True)
class Limits:
    """How long the store waits for its database, and how often it tries again. The bound that
    matters: a heartbeat that gives up (worst_s) does so before its lease lapses —
    HEARTBEAT_S + worst_s < LEASE_S — so a driver cut off from the database has stopped its
    cells before another driver may take them."""

    connect_s: int = 5  # psycopg connect_timeout: a server that accepts TCP and never answers
    statement_s: float = 10  # PostgreSQL statement_timeout: a statement stuck behind a lock
    keepalive_idle_s: int = 30  # TCP keepalives: a peer gone without a reset is seen in
    keepalive_interval_s: int = 10  # idle + interval × count s, and a firewall keeps
    keepalive_count: int = 3  # an idle pooled connection open
    busy_s: float = 20  # SQLite busy timeout: a second writer waits this long for the lock
    attempts: int = 3  # tries of each store call on a lost connection or a timeout
    backoff_s: tuple[float, ...] = (2.0, 8.0)  # the waits between them (a restart takes ~2 s)
    margin_s: float = 5  # a try's time beyond connecting and one statement (a few more)

    @property
    def attempt_s(self) -> float:
        """The longest one try may take: past it a PostgreSQL connection is cut by the store
        (a stopped server's kernel still answers keepalives, and statement_timeout is the
        server's own), and SQLite has given up waiting for its lock."""
        return max(self.connect_s + self.statement_s + self.margin_s, self.busy_s)

    @property
    def worst_s(self) -> float:
        """How long a store call may take before it fails: every try, and the waits between."""
        waits = [self.backoff_s[min(i, len(self.backoff_s) - 1)] for i in range(self.attempts - 1)]
        return self.attempts * self.attempt_s + sum(waits)


LIMITS = Limits()  # HEARTBEAT_S + LIMITS.worst_s < LEASE_S: tested
