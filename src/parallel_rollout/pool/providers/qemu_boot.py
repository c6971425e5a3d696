"""A QEMU boot seen from outside: the wait for the guest agent, and what a boot that failed
saw, for its error.

Three logs in the VM's folder say what a guest did: ``qemu.log`` (QEMU's own stderr),
``serial.log`` (the guest's serial console, ttyS0: the built image's kernel, initramfs and
guest-init print there) and, for a disk of the user's own (``--path-to-vm``), ``bios.log``:
what QEMU's BIOS (SeaBIOS) writes to its debug port, among it each device it boots from and
why that failed. Such a disk boots by itself, and one that prints nothing on ttyS0 (its
console on the screen, which has no display here) left both other logs empty: the BIOS's
words are then all that tells a disk without a bootable system ("No bootable device") from
one whose boot code ran and never served the agent. A BIOS that finds nothing to boot
reboots at once (``-boot reboot-timeout=0``), which ends QEMU (``-no-reboot``): that boot
fails in about a second, not at the boot timeout.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

from ...errors import GuestUnreachable, VMError
from .base import ProviderOptions
from .common import log_tail

#: the BIOS's lines that say what it booted from, and how that went
_BIOS_BOOT_LINES = ("Booting from ", "Boot failed", "No bootable device")


class AgentNeverAnswered(VMError):
    """A boot whose guest agent did not answer within the boot timeout, QEMU still running."""


def user_disk_argv(vm_dir: Path) -> list[str]:
    """QEMU's flags for booting a user's disk: the BIOS's debug port into ``bios.log``, and a
    BIOS that finds nothing to boot rebooting at once (QEMU then exits: ``-no-reboot``)."""
    return ["-chardev", f"file,id=bios,path={vm_dir / 'bios.log'}",
            "-device", "isa-debugcon,iobase=0x402,chardev=bios", "-boot", "reboot-timeout=0"]


def wait_for_agent(client, proc: subprocess.Popen | None, deadline: float, options: ProviderOptions,
                   accel: str) -> None:
    """Poll the agent's /health until it answers; VMError when QEMU exits or time is up, which
    names the boot timeout as the user gave it (``options.said``)."""
    budget_s = options.boot_timeout_s
    from ...guest.client import wait_ready

    def qemu_alive() -> None:
        if proc is not None and proc.poll() is not None:
            raise VMError(f"QEMU exited with status {proc.returncode} before the guest "
                          "agent answered")

    try:
        wait_ready(client, deadline, check_alive=qemu_alive, max_delay_s=0.2, budget_s=budget_s)
    except GuestUnreachable as exc:
        raise AgentNeverAnswered(f"the guest agent did not answer within the boot timeout, {budget_s:g}s under "
                      f"{accel.upper()} ({options.said('boot_timeout_s')}) ({exc})") from None


def failure_detail(vm_dir: Path, user_disk: Path | None = None) -> str:
    """What a VM that failed saw, to end its error with: QEMU's log, the serial console's
    tail (saying so when the guest printed nothing at all there) and, booting ``user_disk``,
    what the BIOS said of its boot devices (``bios_saw``)."""
    serial = log_tail(vm_dir / "serial.log", 1500)
    if serial == "(empty)":
        serial = "(empty: the guest printed nothing at all on its serial console, ttyS0"
        serial += ", where a disk's system must put its console to be seen here)" if user_disk else ")"
    detail = f"; qemu log: {log_tail(vm_dir / 'qemu.log', 600)}; serial log tail: {serial}"
    return detail + (f"; the BIOS: {bios_saw(vm_dir / 'bios.log')}" if user_disk else "")


def bios_saw(path: Path) -> str:
    """What the BIOS's log (``bios.log``) says of booting: each device it booted from and
    how that went: 'No bootable device.' when none boots, 'Booting from 0000:7c00' last when
    it ran the disk's boot code; the floppy it always tries is left out."""
    try:
        lines = path.read_text("utf-8", "replace").splitlines()
    except OSError:
        return "(no log)"
    said: list[str] = []
    floppy = False
    for line in (line.strip() for line in lines):
        if line.startswith("Booting from "):
            floppy = line.startswith("Booting from Floppy")
        elif line.startswith("No bootable device"):
            floppy, line = False, "No bootable device."
        if not floppy and line.startswith(_BIOS_BOOT_LINES) and line not in said[-1:]:
            said.append(line)
    if said and said[-1].startswith("Booting from 0000:7c00"):
        said[-1] += " (it ran the disk's boot code; what that started never answered)"
    return "; ".join(said[-6:]) if said else "nothing of booting (it never reached a boot device)"
