"""The leak check itself: it must see an orphan that init adopted, or it proves nothing."""

from __future__ import annotations

import subprocess
import time

import psutil

from conftest import live_descendants


def test_leak_check_sees_an_orphan_adopted_by_init():
    # The shell exits at once; its background sleep is re-parented away from this process.
    subprocess.run(["sh", "-c", "sleep 61 >/dev/null 2>&1 &"], check=True)
    deadline = time.monotonic() + 5
    orphans = []
    while not orphans and time.monotonic() < deadline:
        orphans = [p for p in live_descendants() if p.cmdline() == ["sleep", "61"]]
        time.sleep(0.05)
    try:
        assert orphans, "the leak check does not see an orphaned process of this session"
        assert all(p.ppid() != psutil.Process().pid for p in orphans)
    finally:
        for proc in orphans:
            proc.kill()
        psutil.wait_procs(orphans, timeout=5)
