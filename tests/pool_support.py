"""What the pool's tests share: reading events.jsonl and waiting for a pool's state."""

from __future__ import annotations

import json
import time
from pathlib import Path


def read_events(path: Path) -> list[dict]:
    """Every line of an events.jsonl."""
    return [json.loads(line) for line in path.read_text().splitlines()]


def wait_until(predicate, timeout: float = 30.0) -> None:
    """Poll ``predicate`` until it holds; AssertionError after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.05)
    raise AssertionError("condition not reached in time")


def wait_idle(pool, count: int, timeout: float = 30.0) -> None:
    """Wait until ``count`` VMs of ``pool`` are IDLE (booted, not leased)."""
    wait_until(lambda: pool.stats()["states"]["idle"] == count, timeout)
