"""What the pool's tests share: reading events.jsonl, waiting for a pool's state, and fds
above select()'s reach."""

from __future__ import annotations

import json
import os
import resource
import time
from contextlib import contextmanager
from pathlib import Path

import pytest


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


@contextmanager
def fds_above(lowest: int = 1024):
    """Every fd number below ``lowest`` taken (copies of /dev/null, not inherited), so the
    fds this process opens meanwhile are ``lowest`` or more: select() refuses those (a pool
    of a few hundred VMs holds that many). The soft RLIMIT_NOFILE is raised for it when it
    is too low, and put back."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    needed = lowest + 1024  # room for what the test opens
    if soft != resource.RLIM_INFINITY and soft < needed:
        if hard != resource.RLIM_INFINITY and hard < needed:
            pytest.skip(f"RLIMIT_NOFILE's hard limit {hard} is below {needed}")
        resource.setrlimit(resource.RLIMIT_NOFILE, (needed, hard))
    taken = [os.open("/dev/null", os.O_RDONLY)]
    try:
        while (fd := os.dup(taken[0])) < lowest:
            taken.append(fd)
        os.close(fd)
        yield
    finally:
        for fd in taken:
            os.close(fd)
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
