"""What the process provider's tests share: a short base folder, a provider with a small
snapshot and a VM of it, a check that each test leaves no bwrap of its own, a machine whose
cgroups refuse, and ways to find a sandbox's processes from the host.

The fixtures are imported by the test modules (``from process_support import …``); the
autouse ``no_leaked_sandbox`` applies to each module that imports it.
"""

from __future__ import annotations

import shutil
import tempfile
import time
from pathlib import Path

import psutil
import pytest

from parallel_rollout.pool.providers import cgroups
from parallel_rollout.pool.providers.base import ProviderOptions
from parallel_rollout.pool.providers.process import ProcessProvider


def _bwraps() -> set[int]:
    return {p.pid for p in psutil.Process().children(recursive=True)
            if p.name() == "bwrap" and p.status() != psutil.STATUS_ZOMBIE}


@pytest.fixture(autouse=True)
def no_leaked_sandbox():
    """Every test must leave no bwrap process of its own behind."""
    before = _bwraps()
    yield
    deadline = time.monotonic() + 3
    while _bwraps() - before and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _bwraps() - before, "a test leaked a sandbox"


@pytest.fixture
def base_dir():
    # short, so socket paths stay under the unix limit (tmp_path is long)
    path = Path(tempfile.mkdtemp(prefix="prt-", dir="/tmp"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def snapshot(tmp_path):
    snap = tmp_path / "snap"
    (snap / "sub").mkdir(parents=True)
    (snap / "a.txt").write_text("initial")
    (snap / "sub" / "b.txt").write_text("nested")
    return snap


@pytest.fixture
def provider(base_dir, snapshot):
    return ProcessProvider("run1", ProviderOptions(snapshot_name=str(snapshot),
                                                   boot_timeout_s=10), base_dir=base_dir)


@pytest.fixture
def vm(provider):
    info = provider.start("vm0")
    yield info
    provider.stop(info)


def _sandbox_pids(info) -> set[int]:
    """Host pids of bwrap, the namespace init and everything below it."""
    pids = {info.private["pid"], info.private["init_pid"]}
    try:
        pids |= {p.pid for p in psutil.Process(info.private["init_pid"]).children(True)}
    except psutil.NoSuchProcess:
        pass
    return pids


def _alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def _processes_naming(folder: Path) -> list[psutil.Process]:
    """Every live process on the host whose command line names ``folder``."""
    found = []
    for proc in psutil.process_iter(["cmdline", "status"]):
        if proc.info["status"] != psutil.STATUS_ZOMBIE \
                and any(f"{folder}/" in arg for arg in proc.info["cmdline"] or ()):
            found.append(proc)
    return found


@pytest.fixture
def no_cgroups(tmp_path, monkeypatch):
    """A machine whose only cgroup hierarchy looks writable but refuses (a plain folder: no
    limit files), as a CI runner's container or an undelegated cgroup v2 does."""
    fake = cgroups.Hierarchy(tmp_path / "cg", 2, frozenset({"pids", "memory"}))
    fake.root.mkdir()
    monkeypatch.setattr(cgroups, "hierarchies", lambda: [fake])
    cgroups._probe.cache_clear()
    yield fake
    cgroups._probe.cache_clear()
