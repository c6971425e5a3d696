"""The standby bookkeeping (``pool/providers/standby.py``) on fake sandboxes: what a swap
hands out, which folder the next standby boots in while the replaced sandbox is still being
killed, and what a stop waits for. The real sandboxes: tests/providers/test_process.py."""

from __future__ import annotations

import threading
import time
from pathlib import Path

from parallel_rollout.pool.providers import standby
from parallel_rollout.pool.providers.base import VMInfo
from pool_support import wait_until

RUN = Path("/nonexistent/run")


class Fakes:
    """boot, alive and discard for a ``Standby``: boots are instant; ``live`` holds the
    folders a sandbox runs in (the VM's own at first), from its boot to the end of its kill,
    and ``clashes`` each boot into a folder that one still ran in; a discard of a folder in
    ``slow`` blocks until ``slow[folder]`` is set."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.live = {"vm0"}
        self.boots: list[str] = []
        self.clashes: list[str] = []
        self.discarded: list[str] = []
        self.slow: dict[str, threading.Event] = {}

    def boot(self, vm_id: str, folder: Path) -> VMInfo:
        with self.lock:
            self.boots.append(folder.name)
            if folder.name in self.live:
                self.clashes.append(folder.name)
            self.live.add(folder.name)
        return VMInfo(vm_id, "fake", f"unix:{folder}/sock", "run", {"vm_dir": str(folder)})

    def discard(self, info: VMInfo) -> None:
        name = Path(info.private["vm_dir"]).name
        gate = self.slow.get(name)
        if gate is not None:
            assert gate.wait(10)
        with self.lock:
            self.discarded.append(name)
            self.live.discard(name)

    def standby(self, depth: int) -> standby.Standby:
        return standby.Standby(self.boot, lambda info: True, self.discard, depth=depth)


def vm(folder: str) -> VMInfo:
    return VMInfo("vm0", "fake", f"unix:{RUN / folder}/sock", "run", {"vm_dir": str(RUN / folder)})


def swap(spare: standby.Standby, old: VMInfo) -> VMInfo:
    """Wait until the oldest standby has booted and swap it in."""
    wait_until(lambda: spare.ready("vm0"), 10)
    new = spare.swap(old)
    assert new is not None
    return new


def test_a_swap_hands_out_the_standby_and_boots_in_the_old_folder_only_once_it_is_killed():
    fakes = Fakes()
    spare = fakes.standby(depth=1)
    assert spare.swap(vm("vm0")) is None  # nothing booted: the caller kills and boots itself
    assert fakes.discarded == []
    spare.prepare("vm0", RUN / "vm0")
    fakes.slow["vm0"] = threading.Event()
    new = swap(spare, vm("vm0"))
    assert new.private["vm_dir"] == str(RUN / "vm0.b")
    time.sleep(0.05)
    assert fakes.boots == ["vm0.b"] and fakes.discarded == []  # vm0 still dying
    fakes.slow["vm0"].set()
    wait_until(lambda: len(fakes.boots) == 2, 10)
    assert fakes.discarded == ["vm0"] and fakes.boots == ["vm0.b", "vm0"] and not fakes.clashes


def test_no_standby_boots_in_the_folder_the_vm_runs_in_while_kills_overlap():
    """Two standbys a VM, three swaps, the second's replaced sandbox (vm0.b) slow to die: by
    the end of its kill the VM has moved on twice, back to vm0; the standby its kill frees a
    folder for goes to vm0.b, not to vm0, where the VM runs (nor to vm0.c, booted meanwhile)."""
    fakes = Fakes()
    spare = fakes.standby(depth=2)
    spare.prepare("vm0", RUN / "vm0")  # vm0.b and vm0.c
    first = swap(spare, vm("vm0"))  # → vm0.b; vm0 dies at once and takes a standby
    wait_until(lambda: len(fakes.boots) == 3, 10)
    fakes.slow["vm0.b"] = threading.Event()
    second = swap(spare, first)  # → vm0.c; vm0.b dying, slowly
    third = swap(spare, second)  # → vm0; vm0.c dies at once and takes a standby
    wait_until(lambda: len(fakes.boots) == 4, 10)
    fakes.slow["vm0.b"].set()  # vm0.b's kill ends last
    wait_until(lambda: len(fakes.boots) == 5, 10)
    assert [Path(info.private["vm_dir"]).name for info in (first, second, third)] == ["vm0.b", "vm0.c", "vm0"]
    assert not fakes.clashes and fakes.boots == ["vm0.b", "vm0.c", "vm0", "vm0.c", "vm0.b"], fakes.boots


def test_a_stop_waits_for_a_kill_under_way_and_boots_nothing_after():
    fakes = Fakes()
    spare = fakes.standby(depth=1)
    spare.prepare("vm0", RUN / "vm0")
    fakes.slow["vm0"] = threading.Event()
    swap(spare, vm("vm0"))
    threading.Timer(0.1, fakes.slow["vm0"].set).start()
    started = time.monotonic()
    spare.drop("vm0", timeout_s=5)
    assert time.monotonic() - started >= 0.09  # it waited for vm0's kill
    assert fakes.discarded.count("vm0") == 2  # the kill, and the stop's own (a no-op once dead)
    time.sleep(0.05)
    assert fakes.boots == ["vm0.b"]  # no standby for a stopped VM


def test_no_standby_boots_in_the_folder_a_reset_is_handing_out():
    """A reset that takes a standby (no swap: the old sandbox is killed, then the VM's oldest
    standby awaited) has it off the list before it is the VM's current folder; a kill from an
    earlier swap that ends meanwhile must not boot the next standby there: its bind would take
    the socket's path of the sandbox handed out (seen in CI: the next task's commands reached
    the new standby, which the last task had written in)."""
    fakes = Fakes()
    spare = fakes.standby(depth=2)
    spare.prepare("vm0", RUN / "vm0")  # vm0.b and vm0.c
    wait_until(lambda: len(fakes.boots) == 2, 10)
    fakes.live.discard("vm0")  # the reset killed the old sandbox itself
    taken = spare.take("vm0", 10)  # vm0.b, handed out; the reset has not called prepare yet
    assert taken.private["vm_dir"] == str(RUN / "vm0.b")
    spare.prepare("vm0")  # what a retire thread does as its kill ends
    time.sleep(0.05)
    assert "vm0.b" not in fakes.boots[2:] and not fakes.clashes, fakes.boots
    spare.prepare("vm0", RUN / "vm0.b")  # the reset makes it current: vm0 is free again
    wait_until(lambda: len(fakes.boots) == 3, 10)
    assert fakes.boots[2] == "vm0" and not fakes.clashes, fakes.boots
