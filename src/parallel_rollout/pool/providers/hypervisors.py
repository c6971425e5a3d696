"""VMwareProvider and VirtualBoxProvider: OSWorld's own VM images on the user's hypervisor,
driven the way OSWorld's runner drives them, so its command line works here::

    --provider-name vmware --path-to-vm /vms/ubuntu.vmx --snapshot-name init_state

::

    pool ── start(vm_id) ──► a free VM file ──► revert to the snapshot ──► start ──► guest IP
                                                                   ──► GET /platform on IP:5000
         ── reset(info)  ──► revert to the snapshot ──► start ──► guest IP ──► GET /platform
         ── stop(info)   ──► stop the VM (vmware) / save its state (virtualbox, as OSWorld)

    vmware:      vmrun -T ws|fusion revertToSnapshot VMX SNAP, start VMX nogui|gui,
                 getGuestIPAddress VMX -wait, stop VMX
    virtualbox:  VBoxManage list vms (the VM whose name is the file's stem, or a name/uuid),
                 controlvm UUID savestate, snapshot UUID restore SNAP, startvm UUID --type
                 headless|gui, guestproperty get UUID /VirtualBox/GuestInfo/Net/0/V4/IP

**One VM file is one VM.** ``--path-to-vm`` takes one file, or a comma list with one per VM of
the pool; ``start`` takes a file no other VM of this provider holds and waits, up to
``boot_timeout_s``, for one to be given back. The guest agent is OSWorld's (or ours) on port
5000 of the address the hypervisor reports. ``--snapshot-name`` is required: without it a VM
could not be brought back between tasks.

**A first boot checks the run's settings** (``boot_checks.py``, as the remote provider's):
with a desktop (osworld) the VM's screen against ``--screen-width``/``--screen-height``, and
that its agent has a desktop at all; after a failed revert, that the VM has the snapshot
(``vmrun listSnapshots``, ``VBoxManage snapshot UUID list``) and, for VirtualBox, that it knows
the VM (a ``.vmx`` that is not there is a ConfigError when the provider is made); a
mismatch at a VM file's first boot in the run stops the run (VMSettingsMismatch, exit 2), at
a later one it is a failed boot. A boot that fails
after the VM was started stops it again: nothing of a failed boot is left running.

**A VM that dies under a task** is the task's (``sandbox_violation``: a task may hold sudo
and power its guest off), unless its product tells it ended outside the guest (``death_cause``,
infrastructure): VirtualBox says the VM ``aborted``; for VMware, whose ``vmrun`` tells nothing of
the kind, the VM's log does: every exit of its VMX process of its own (a power-off, the guest's
included, ``vmrun stop``) ends ``vmware.log`` with ``VMX has left the building``, which a VMX
killed (or crashed) never writes.

**Verified resets** (``--verify-reset fast|full``, off by default: a round trip to the
guest): as the remote provider's, through our guest agent in the VM, against what each VM
file held at its first boot in this run.

**Every command is bounded**: each gets the time left of ``boot_timeout_s`` and its process
group is killed past it; a failure is a VMError quoting the command and the end of its output,
so the pool marks the VM dead. Neither product can be installed on the machines this project
is tested on: the tests drive stand-in ``vmrun`` and ``VBoxManage`` programs that run this
machine's VMs (``tests/hypervisor_standin.py``); the real products are untested.
"""

from __future__ import annotations

import logging
import os
import re
import shutil
import subprocess
import sys
import time

from ...vm_address import DEFAULT_PORT
from ...errors import ConfigError, ProviderUnavailable, VMError, VMSettingsMismatch
from . import verify_guest
from .base import Provider, ProviderOptions, VMInfo, refuse_limits
from .boot_checks import check_booted, first_boot, no_agent_is_settings
from .remote import HEALTH_TIMEOUT_S, answers, kill_group, wait_agent_ready
from .slots import Slots

log = logging.getLogger(__name__)

#: characters of a failed command's output quoted in its VMError
OUTPUT_TAIL = 1500
#: seconds between two polls of VirtualBox's guest-IP property
IP_POLL_S = 1.0
#: how long death_cause waits for a VirtualBox VM that still says running to say aborted
DEATH_CAUSE_S = 3.0
#: the least time a failed revert's look at the VM's snapshots gets, its boot's time spent
SNAPSHOT_LIST_S = 10.0


class _HypervisorProvider(Provider):
    """What both products share: VM files as slots, revert/start/IP/stop as commands."""

    #: the command line program and the package that has it
    program = ""

    def __init__(self, run_id: str, options: ProviderOptions | None = None) -> None:
        super().__init__(run_id, options)
        opts = self.options
        if not opts.path_to_vm:
            raise ConfigError(f"the {self.name} provider needs --path-to-vm: the VM file "
                              "(a comma list gives one per VM of the pool)")
        if not opts.snapshot_name:
            raise ConfigError(f"the {self.name} provider needs --snapshot-name: the snapshot "
                              "every task starts from (OSWorld's images have init_state)")
        refuse_limits(opts, self.name, "set it in the VM's settings")
        self.vm_files = [p.strip() for p in opts.path_to_vm.split(",") if p.strip()]
        doubled = sorted({p for p in self.vm_files if self.vm_files.count(p) > 1})
        if doubled:
            raise ConfigError(f"--path-to-vm names {', '.join(doubled)} more than once")
        #: which VM holds which VM file
        self.slots = Slots(self.vm_files, "VM files of --path-to-vm (give one per VM, comma-separated)")
        #: reset verification through the guest agent, against each VM file's first boot
        self._view = verify_guest.machine_view(opts)
        #: the VM files that booted in this run: a settings mismatch at a later boot of one (a
        #: screen that was right) is the machine's change, not the run's settings
        self._booted: set[str] = set()

    def __repr__(self) -> str:
        return (f"{type(self).__name__}(run_id={self.run_id!r}, vm_files={self.vm_files!r}, "
                f"held={len(self.slots)})")

    @classmethod
    def check_available(cls) -> None:
        """ProviderUnavailable unless the product's command line program is on PATH."""
        if shutil.which(cls.program) is None:
            raise ProviderUnavailable(f"the {cls.name} provider needs {cls.program} on PATH "
                                      f"({cls.install_hint})")

    # ------------------------------------------------------------------- contract

    def start(self, vm_id: str) -> VMInfo:
        """Take a free VM file, bring it to the snapshot, wait for its agent."""
        deadline = time.monotonic() + self.options.boot_timeout_s
        vm_file = self.slots.acquire(vm_id, deadline)
        info = VMInfo(vm_id=vm_id, provider=self.name, address="", run_id=self.run_id,
                      private={"vm_file": vm_file})
        try:
            with first_boot(self._booted, vm_file):
                try:
                    self._revert(vm_file, deadline)
                except VMError:
                    self.check_snapshot(f"VM {vm_id} ({vm_file})", vm_file, deadline)  # the VM's word: no such snapshot
                    raise
                try:
                    with no_agent_is_settings(f"VM {vm_id} ({vm_file}): port {DEFAULT_PORT} of its guest IP",
                                              self.options, "path_to_vm"):
                        info = self._boot(info, deadline)
                    check_booted(self.options, self._view, vm_file, info, f"VM {vm_id} ({vm_file} at {info.address})")
                except BaseException:  # a boot that failed once the VM started (no agent, another screen)
                    self._stop_quietly(vm_id, vm_file)
                    raise
            return info
        except BaseException:
            self.slots.release(vm_file, vm_id)
            raise

    def reset(self, info: VMInfo) -> VMInfo:
        """Revert to the snapshot, start, and wait for the agent at the (new) guest IP."""
        if not self.slots.holds(info.private["vm_file"], info.vm_id):
            raise VMError(f"VM {info.vm_id} was stopped; it cannot be reset")
        return self._restore(info, time.monotonic() + self.options.boot_timeout_s)

    def verify(self, info: VMInfo) -> list[str]:
        """The guest's home (its agent's), /tmp and processes through a probe the agent runs,
        against what that VM file had at its first boot in this run (``verify_guest.py``)."""
        return self._view.check(info.private["vm_file"], None, info.address)

    def healthy(self, info: VMInfo) -> bool:
        """The VM file is still this VM's and its agent answers quickly."""
        if not self.slots.holds(info.private["vm_file"], info.vm_id):
            return False
        return bool(info.address) and answers(info.address, HEALTH_TIMEOUT_S)

    def stop(self, info: VMInfo) -> None:
        """Stop the VM as OSWorld does and give its file back; safe to call twice."""
        vm_file = info.private["vm_file"]
        if not self.slots.holds(vm_file, info.vm_id):
            return
        try:
            self._stop(vm_file, time.monotonic() + self.options.boot_timeout_s)
        finally:
            self.slots.release(vm_file, info.vm_id)

    @classmethod
    def sweep(cls, run_id: str | None = None, *, orphans_only: bool = False) -> list[str]:
        """Nothing to remove: the VM files are the user's, and stop() stops each VM."""
        return []

    # ------------------------------------------------------------------- internals

    def _restore(self, info: VMInfo, deadline: float) -> VMInfo:
        self._revert(info.private["vm_file"], deadline)
        return self._boot(info, deadline)

    def _boot(self, info: VMInfo, deadline: float) -> VMInfo:
        """Start the reverted VM and wait for its agent at the guest IP."""
        vm_file = info.private["vm_file"]
        self._start(vm_file, deadline)
        address = f"http://{self._guest_ip(vm_file, deadline)}:{DEFAULT_PORT}"
        wait_agent_ready(address, deadline, self.options.boot_timeout_s)
        return VMInfo(vm_id=info.vm_id, provider=self.name, address=address,
                      run_id=self.run_id, private=dict(info.private))

    def check_snapshot(self, machine: str, vm_file: str, deadline: float) -> None:
        """VMSettingsMismatch when the VM lists its snapshots and --snapshot-name is not among
        them, or the product knows no such VM (no boot brings either); else nothing. Asked
        after a failed revert, and by ``--dry-run``. ``machine`` names it in the message."""
        try:
            snapshots = self._snapshots(vm_file, max(deadline, time.monotonic() + SNAPSHOT_LIST_S))
        except VMSettingsMismatch as exc:  # no such VM at all
            raise VMSettingsMismatch(f"{machine}: {exc}") from None
        if snapshots is None or self.options.snapshot_name in snapshots:
            return
        raise VMSettingsMismatch(
            f"{machine} has no snapshot named {self.options.snapshot_name!r} (--snapshot-name); "
            f"its snapshots: {', '.join(repr(name) for name in snapshots) or 'none'}: take that snapshot of "
            "the VM, or start a new run with the one every task starts from (a resume keeps the run's --snapshot-name)")

    def _stop_quietly(self, vm_id: str, vm_file: str) -> None:
        """Stop a VM whose boot failed; a stop that fails is said, not raised over the boot's error."""
        try:
            self._stop(vm_file, time.monotonic() + self.options.boot_timeout_s)
        except VMError as exc:
            log.warning("VM %s (%s): stopping it after its failed boot failed: %s", vm_id, vm_file, exc)

    def _run(self, args: list[str], deadline: float, check: bool = True) -> str:
        """``program *args`` in its own process group, bounded by ``deadline``; its output."""
        argv = [self.program, *args]
        timeout = max(0.5, deadline - time.monotonic())
        try:
            proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                    stderr=subprocess.STDOUT, start_new_session=True)
        except OSError as exc:
            raise VMError(f"cannot run {self.program}: {exc}") from exc
        try:
            out, _ = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            kill_group(proc)
            raise VMError(f"{' '.join(argv)} did not finish within {_within(timeout, self.options.boot_timeout_s)} "
                          f"(killed; {self.options.said('boot_timeout_s')} allows more)") from None
        except BaseException:
            kill_group(proc)
            raise
        text = out.decode("utf-8", "replace").strip()
        if check and proc.returncode != 0:
            raise VMError(f"{' '.join(argv)} exited with {proc.returncode}: "
                          f"{text[-OUTPUT_TAIL:] or '(no output)'}")
        return text

    # each product says how
    def _revert(self, vm_file: str, deadline: float) -> None:
        raise NotImplementedError

    def _start(self, vm_file: str, deadline: float) -> None:
        raise NotImplementedError

    def _guest_ip(self, vm_file: str, deadline: float) -> str:
        raise NotImplementedError

    def _stop(self, vm_file: str, deadline: float) -> None:
        raise NotImplementedError

    def _snapshots(self, vm_file: str, deadline: float) -> list[str] | None:
        """The names of the VM's snapshots; None when the product cannot list them."""
        raise NotImplementedError


class VMwareProvider(_HypervisorProvider):
    """VMware Workstation (Linux, Windows) or Fusion (macOS) through ``vmrun``."""

    name = "vmware"
    program = "vmrun"
    install_hint = "it comes with VMware Workstation or Fusion"

    def __init__(self, run_id: str, options: ProviderOptions | None = None) -> None:
        super().__init__(run_id, options)
        missing = [path for path in self.vm_files if not os.path.isfile(path)]
        if missing:  # vmrun could open none of them: every boot would fail until the budget is spent
            raise ConfigError(f"--path-to-vm: no such VM file {', '.join(missing)} (the .vmx of each VM)")

    def _host_type(self) -> list[str]:
        return ["-T", "fusion" if sys.platform == "darwin" else "ws"]

    def _revert(self, vm_file: str, deadline: float) -> None:
        self._run([*self._host_type(), "revertToSnapshot", vm_file, self.options.snapshot_name],
                  deadline)

    def _running_vms(self, deadline: float, check: bool = True) -> list[str]:
        """The .vmx files ``vmrun list`` names running (after its "Total running VMs" line)."""
        return self._run([*self._host_type(), "list"], deadline, check=check).splitlines()[1:]

    def _start(self, vm_file: str, deadline: float) -> None:
        if vm_file not in self._running_vms(deadline, check=False):
            self._run([*self._host_type(), "start", vm_file,
                       "nogui" if self.options.headless else "gui"], deadline)

    def _guest_ip(self, vm_file: str, deadline: float) -> str:
        text = self._run([*self._host_type(), "getGuestIPAddress", vm_file, "-wait"], deadline)
        return _ip_in(text, f"vmrun getGuestIPAddress {vm_file}")

    def _stop(self, vm_file: str, deadline: float) -> None:
        self._run([*self._host_type(), "stop", vm_file], deadline, check=False)

    def death_cause(self, info: VMInfo) -> str | None:
        """A VM no longer running whose ``vmware.log`` (its VMX process's log, beside the
        ``.vmx`` or where its ``log.fileName`` says) does not end with the VMX's own exit, ``VMX
        has left the building``: its VMX process was killed (or crashed), which no task in the
        guest can do. A power-off, the guest's own included, writes that line as the VMX
        exits. Polled a few seconds while ``vmrun list`` still names the VM (a guest powering
        off); anything else is None (the task's: it may hold sudo and power its guest off)."""
        vm_file, deadline = info.private["vm_file"], time.monotonic() + DEATH_CAUSE_S
        while True:
            try:
                running = self._running_vms(deadline)
            except VMError:
                return None
            if os.path.realpath(vm_file) not in {os.path.realpath(line.strip()) for line in running}:
                break
            if time.monotonic() + IP_POLL_S > deadline:
                return None
            time.sleep(IP_POLL_S)
        log_file = vmx_log(vm_file)
        try:
            with open(log_file, "rb") as handle:
                handle.seek(max(0, os.fstat(handle.fileno()).st_size - LOG_TAIL_BYTES))
                tail = handle.read()
        except OSError:
            return None  # no log (logging off): cannot tell
        if not tail or CLEAN_EXIT in tail:
            return None
        return (f"VMware VM {vm_file} ended without its VMX process's own exit: {log_file} does not end with "
                f"'{CLEAN_EXIT.decode()}' (as every power-off, the guest's own included, ends it), so the VMX "
                "process was killed from outside the guest, or it crashed")

    def _snapshots(self, vm_file: str, deadline: float) -> list[str] | None:
        try:  # "Total snapshots: N", then a name a line
            lines = self._run([*self._host_type(), "listSnapshots", vm_file], deadline).splitlines()
        except VMError:
            return None
        if not lines or not lines[0].startswith("Total snapshots:"):
            return None
        return [line.strip() for line in lines[1:] if line.strip()]


class VirtualBoxProvider(_HypervisorProvider):
    """VirtualBox through ``VBoxManage``; a VM file names the VM by its stem (or is its name
    or uuid), as OSWorld finds it."""

    name = "virtualbox"
    program = "VBoxManage"
    install_hint = "it comes with VirtualBox"

    def _uuid(self, vm_file: str, deadline: float) -> str:
        wanted = {vm_file, os.path.splitext(os.path.basename(vm_file))[0]}
        for line in self._run(["list", "vms"], deadline).splitlines():
            found = re.match(r'^"(.*)" \{([0-9a-fA-F-]+)\}$', line.strip())
            if found and (found.group(1) in wanted or found.group(2) in wanted):
                return found.group(2)
        raise VMError(f"VBoxManage list vms has no VM named {' or '.join(map(repr, sorted(wanted)))}")

    def _running(self, uuid: str, deadline: float) -> bool:
        return uuid in self._run(["list", "runningvms"], deadline, check=False)

    def _revert(self, vm_file: str, deadline: float) -> None:
        uuid = self._uuid(vm_file, deadline)
        if self._running(uuid, deadline):
            self._run(["controlvm", uuid, "savestate"], deadline)
        self._run(["snapshot", uuid, "restore", self.options.snapshot_name], deadline)

    def _start(self, vm_file: str, deadline: float) -> None:
        uuid = self._uuid(vm_file, deadline)
        if not self._running(uuid, deadline):
            self._run(["startvm", uuid, "--type", "headless" if self.options.headless else "gui"],
                      deadline)

    def _guest_ip(self, vm_file: str, deadline: float) -> str:
        uuid = self._uuid(vm_file, deadline)
        while True:
            text = self._run(["guestproperty", "get", uuid, "/VirtualBox/GuestInfo/Net/0/V4/IP"],
                             deadline, check=False)
            if text.startswith("Value:"):
                return _ip_in(text, f"VBoxManage guestproperty get {uuid}")
            if time.monotonic() + IP_POLL_S > deadline:
                raise VMError(f"VirtualBox VM {vm_file} reported no guest IP within the boot "
                              f"timeout ({text or 'no value'}); are the Guest Additions running?")
            time.sleep(IP_POLL_S)

    def _stop(self, vm_file: str, deadline: float) -> None:
        uuid = self._uuid(vm_file, deadline)
        if self._running(uuid, deadline):
            self._run(["controlvm", uuid, "savestate"], deadline, check=False)

    def death_cause(self, info: VMInfo) -> str | None:
        """VirtualBox says ``aborted`` of a VM whose process ended without the guest powering
        it off (killed from outside, crashed): no task can do that. Polled a few seconds
        while it still says running (a dying VM); anything else is None (a task with sudo
        may power its guest off)."""
        vm_file, deadline = info.private["vm_file"], time.monotonic() + DEATH_CAUSE_S
        while True:
            try:
                uuid = self._uuid(vm_file, deadline)
                text = self._run(["showvminfo", uuid, "--machinereadable"], deadline)
            except VMError:
                return None
            state = re.search(r'^VMState="(.*)"$', text, flags=re.M)
            if state is not None and state.group(1) == "aborted":
                return (f"VirtualBox VM {vm_file} ({uuid}) aborted: its VM process ended outside the guest (killed, "
                        "or it crashed), as VBoxManage showvminfo says (VMState aborted)")
            if state is None or state.group(1) != "running" or time.monotonic() + IP_POLL_S > deadline:
                return None
            time.sleep(IP_POLL_S)

    def _snapshots(self, vm_file: str, deadline: float) -> list[str] | None:
        try:
            uuid = self._uuid(vm_file, deadline)
        except VMError as exc:
            if "has no VM named" in str(exc):  # not registered: no boot finds it
                raise VMSettingsMismatch(f"{exc}: register the VM, or start a new run whose --path-to-vm gives a VM's "
                                         "name or uuid (VBoxManage list vms), or its file (a resume keeps the run's "
                                         "--path-to-vm)") from None
            return None
        try:  # SnapshotName="…", SnapshotName-1="…" (a child) …
            text = self._run(["snapshot", uuid, "list", "--machinereadable"], deadline)
        except VMError as exc:
            return [] if "does not have any snapshots" in str(exc) else None
        return re.findall(r'^SnapshotName(?:-\d+)*="(.*)"$', text, flags=re.M)


#: what a VMX process writes last to its vmware.log as it exits of its own accord
CLEAN_EXIT = b"VMX has left the building"
#: bytes of the end of a vmware.log that death_cause reads
LOG_TAIL_BYTES = 64 * 1024


def vmx_log(vm_file: str) -> str:
    """The VMX process's log of ``vm_file``: its ``log.fileName`` (relative to the .vmx's
    folder), else ``vmware.log`` beside it (the current power-on's; VMware keeps the
    earlier ones as vmware-N.log)."""
    folder, name = os.path.dirname(os.path.abspath(vm_file)), "vmware.log"
    try:
        with open(vm_file, encoding="utf-8", errors="replace") as handle:
            for line in handle:
                key, _, value = line.partition("=")
                if key.strip().lower() == "log.filename" and value.strip().strip('"'):
                    name = value.strip().strip('"')
    except OSError:
        pass
    return os.path.join(folder, name)


def _ip_in(text: str, what: str) -> str:
    found = re.search(r"\b(\d{1,3}(?:\.\d{1,3}){3})\b", text)
    if found is None:
        raise VMError(f"{what} gave no IPv4 address: {text[-OUTPUT_TAIL:] or '(no output)'}")
    return found.group(1)


def check_vm_files(provider_name: str, options: ProviderOptions) -> str:
    """``--dry-run``'s look at the VM files of ``--path-to-vm``, which starts and reverts
    nothing: what their first boot would stop at (``check_snapshot``: a snapshot the VM does
    not have, a VirtualBox VM it does not know). ConfigError naming each; a VM whose snapshots
    cannot be listed is left to its boot."""
    provider = {cls.name: cls for cls in (VMwareProvider, VirtualBoxProvider)}[provider_name]("dry-run", options)
    problems = []
    for vm_file in provider.vm_files:
        try:
            provider.check_snapshot(vm_file, vm_file, time.monotonic() + SNAPSHOT_LIST_S)
        except VMSettingsMismatch as exc:
            problems.append(str(exc))
    if problems:
        raise ConfigError(f"the {provider_name} VMs: " + "; ".join(problems))
    return f"the {len(provider.vm_files)} {provider_name} VM(s) have snapshot {options.snapshot_name!r}, or do not say"


def _within(timeout: float, boot_timeout: float) -> str:
    """How long a command of a boot had: the boot's whole timeout, or what was left of it when
    the command started (the steps before it took the rest: "within 1s" of a boot timeout set
    to 2 named a limit no one set)."""
    if timeout >= boot_timeout - 0.05:
        return f"{timeout:.0f}s"
    return f"{timeout:.1f}s, what was left of the boot's {boot_timeout:g}s"
