"""What an hour of a GPU (or of this CPU host) costs: the shipped, dated table in prices.toml,
unless the user gives a figure (--gpu-hour-usd / --host-hour-usd)."""

import tomllib
from dataclasses import dataclass
from pathlib import Path

from pipeline.core.errors import UserError

TABLE = Path(__file__).with_name("prices.toml")


@dataclass(frozen=True)
class Price:
    usd_per_hour: float
    source: str  # where the figure comes from: the table's provider and date, or the user

    def per_million(self, units: int, tokens_s: float) -> float | None:
        """USD per 1M tokens for `units` GPUs (or hosts) producing `tokens_s` tokens/s."""
        if not tokens_s or tokens_s <= 0:
            return None
        return self.usd_per_hour * units / (tokens_s * 3600) * 1e6


def table() -> dict:
    return tomllib.loads(TABLE.read_text())


def gpu(name: str, override: float | None = None) -> Price | None:
    """An hour of one `name` GPU (None: not in the table and no override)."""
    if override is not None:
        return Price(_checked(override, "--gpu-hour-usd"), "given (--gpu-hour-usd)")
    t = table()
    entry = next((v for k, v in t["gpu"].items() if k.lower() == name.strip().lower()), None)
    if entry is None:
        return None
    return Price(entry["usd_per_hour"], f"{entry['source']} (table of {t['compiled']})")


def host(override: float | None = None) -> Price:
    """An hour of a CPU host like this one."""
    if override is not None:
        return Price(_checked(override, "--host-hour-usd"), "given (--host-hour-usd)")
    t = table()
    return Price(t["host"]["usd_per_hour"], f"{t['host']['source']} (table of {t['compiled']})")


def _checked(value: float, flag: str) -> float:
    if not 0 < value < float("inf"):
        raise UserError(f"{flag} must be a price > 0 in USD per hour (got {value})")
    return value
