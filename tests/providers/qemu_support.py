"""What the qemu provider's tests share: the guest image (built once per session, or the tests
skipped with the reason), a check that each test leaves no QEMU process, overlay, socket or
folder behind, and a run id per test.

The fixtures are imported by the test modules (``from qemu_support import …``); the autouse
``no_qemu_left`` applies to each module that imports it.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import psutil
import pytest

from parallel_rollout.errors import ProviderUnavailable
from parallel_rollout.pool.providers import qemu
from parallel_rollout.pool.providers.qemu import QemuProvider

ROOT = Path(__file__).resolve().parents[2]
SHELL_TASKS = ROOT / "benchmarks" / "shell_tasks.jsonl"
BOOT_TIMEOUT_S = 120.0


@pytest.fixture(scope="session")
def image():
    """The guest image, built when missing (minutes, once) or skipped with the reason."""
    try:
        QemuProvider.build_image(log=lambda line: print(line, flush=True))
        QemuProvider.check_available()
    except ProviderUnavailable as exc:
        pytest.skip(f"the qemu provider cannot run here: {exc}")
    return qemu.image_dir()


def _qemu_base() -> Path:
    # tests/providers/conftest.py points this at a folder of this session
    return qemu.base_dir_default()


def _our_qemus() -> list[str]:
    base = str(_qemu_base())
    found = []
    for proc in psutil.process_iter(["pid", "name", "cmdline"]):
        try:
            cmdline = " ".join(proc.info["cmdline"] or ())
            if (proc.info["name"] in (qemu.QEMU, "setpriv") and base in cmdline
                    and proc.status() != psutil.STATUS_ZOMBIE):
                found.append(f"{proc.pid} {cmdline[:100]}")
        except psutil.Error:
            pass
    return found


@pytest.fixture(autouse=True)
def no_qemu_left():
    """Fail a test that leaves a QEMU process, an overlay, a socket or a folder behind."""
    yield
    deadline = time.monotonic() + 10
    while True:
        procs = _our_qemus()
        files = sorted(str(p) for p in _qemu_base().rglob("*")) if _qemu_base().exists() else []
        if (not procs and not files) or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    if procs or files:
        QemuProvider.sweep()
    assert not procs, f"QEMU processes left behind: {procs}"
    assert not files, f"files left behind: {files}"


def _run_id(request) -> str:
    return f"qt{os.getpid()}-{request.node.name[5:20].strip('_')}"
