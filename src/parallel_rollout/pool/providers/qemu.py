"""QemuProvider: every VM is a QEMU virtual machine on its own overlay of one Debian image.

::

    owning process ── launcher thread ──fork──► setpriv --pdeathsig KILL qemu-system-x86_64
                                                  │ -name parallel-rollout-<run>-<vm>
       GuestClient ── http://127.0.0.1:PORT ──────┤ -netdev user,restrict=on,hostfwd=…-:5000
       qmp()       ── unix:<vm_dir>/qmp.sock ─────┤ savevm / loadvm / quit
                                                  ▼
                   guest: kernel ─► initramfs /init (busybox: insmod virtio + ext4, mount
                          /dev/vda, switch_root) ─► /usr/local/sbin/guest-init (python3, PID 1:
                          mounts, eth0, relay :5000 ─► /run/guest/agent.sock, reaps orphans)
                          ─► python3 server.py --unix … in a network namespace with only lo

    <cache>/qemu/          vmlinuz, initrd.img, base.qcow2, image.json   (build_image)
    <base>/<run_id>@<pool>/<vm_id>/   base: $PARALLEL_ROLLOUT_QEMU_DIR or /tmp/parallel-rollout/qemu
                                      (pool: a key of this provider's own, ``common.pool_folder``)
        overlay.qcow2  the VM's disk: a qcow2 overlay over the base image; holds the snapshot
        qmp.sock       QMP control socket
        serial.log     the guest console (kernel, initramfs, guest-init), quoted on failure
        qemu.log       QEMU's own stderr
        meta.json      run id, vm id, owner pid, qemu pid and start times: what sweep() reads

**Image.** ``build_image`` takes the kernel from Debian's ``linux-image-amd64`` (``apt-get
download``), a minbase+python3 tree from ``images.build_rootfs`` (debootstrap, cached and
shared with the docker provider), adds the guest agent and ``guest-init``, and makes an ext4
filesystem from the tree without mounting it (``mkfs.ext4 -d``), converted to a compact
qcow2. Debian's kernel has virtio and ext4 as modules, so a tiny initramfs (Debian's static
busybox, those modules in dependency order, a ten-line ``/init``) mounts the disk. Nothing
else boots: no systemd, no udev; under TCG the guest is ready in seconds. ``image.json``
records a hash of everything we put in; an image made from another guest agent is stale.
``force`` rebuilds this layer; the debootstrap tarball under it is ``images``' own cache.

**KVM is tried, not assumed.** ``/dev/kvm`` may exist while guests hang or QEMU aborts under
it (nested virtualisation gone wrong). The first VM of a process boots the image's kernel
under KVM with ``pr.probe`` on its command line; the initramfs prints a marker and powers
off. Marker within ``KVM_PROBE_TIMEOUT_S`` → KVM, anything else → TCG. The verdict is cached
in memory and in ``<cache>/qemu/accel.json`` for this host boot (``boot_id``) and QEMU
version; ``$PARALLEL_ROLLOUT_QEMU_ACCEL=kvm|tcg`` skips the probe.

**Desktop.** Desktop modes (osworld; ``options.desktop``) boot the image of
``image build --provider qemu --desktop`` in ``<cache>/qemu-desktop/``: the same kernel,
initramfs and guest-init over a tree with ``images.DESKTOP_PACKAGES`` (Xvfb, openbox, xterm,
mousepad, pcmanfm, xdotool, wmctrl, ffmpeg, D-Bus and AT-SPI) and
``images.DESKTOP_APT_PACKAGES`` (LibreOffice Writer and Calc). ``pr.desktop=WxH`` on the
kernel command line makes guest-init start the agent with ``--desktop WxH``, so the desktop is
up before the snapshot is taken and a loadvm brings back a clean one. The guest gets
``DESKTOP_MEMORY_MB`` unless ``memory_mb`` says otherwise. Under TCG here: boot ~15 s, reset
~0.6 s, a 1024x768 screenshot ~0.8 s.

**Reaching the guest.** User-mode networking with ``restrict=on`` (the guest cannot reach
out, not even the host) and one forward from a free loopback port to guest port 5000. There
guest-init relays each connection to the agent's unix socket: the agent and the commands it
runs live in their own network namespace with only ``lo``, so a task sees no network at all,
as on the other providers (the shell benchmark checks it). QMP on a unix socket in the VM
folder controls the VM; each call opens its own connection and every read has a timeout.

**Snapshot and reset.** Once the agent answers, ``savevm <name>`` (``--snapshot-name``,
default ``init``) stores RAM, devices and disk state inside the VM's overlay (an internal
qcow2 snapshot). Reset is ``loadvm``: the guest resumes at the instant it was saved, its
agent already listening, so every file written, process started and ``/tmp`` entry made
since is gone. Its clock would fall behind (the wall-clock offset in the snapshot's RAM,
less every pause), so reset sends the host's time to guest-init's relay (one line, no
process started in the guest) and then checks that the agent answers.

**Process lifetime.** QEMU runs under ``setpriv --pdeathsig KILL``, forked by the process
provider's launcher thread (PR_SET_PDEATHSIG fires when the forking *thread* exits, and the
pool starts VMs from short-lived threads), so a VM dies with the process that owns it and
``sweep()`` removes its folder afterwards. ``stop`` asks QMP to quit, then SIGKILLs.

**Limits.** ``memory_mb`` is the guest's RAM (``-m``); a pool whose guests (spares counted)
need more than the host's RAM is a ConfigError. ``max_processes`` cannot be enforced
from outside a VM: ConfigError. ``path_to_vm`` is a user's own disk image (qcow2 or raw) that
boots by itself (BIOS) and serves the guest agent on port 5000, as OSWorld's images do; the
KVM probe still uses the built kernel, so ``image build`` is needed either way. Its failed
boot names it and says what the BIOS saw of it (``qemu_boot``); one with nothing bootable
fails at once. Until a VM of the disk has booted in this pool, a boot whose agent never
answered is the run's settings (VMSettingsMismatch: the run stops), not a failed boot for a
spare and each replacement to wait out again.

**Numbers** (2-core host, TCG, 512 MB guest): a boot, snapshot included, takes 9-18 s (so
the default ``boot_timeout_s`` of 60 s holds, with two VMs booting at once); a reset 0.25-0.35
s (loadvm about 0.2 s); a VM costs about 320 MB of host RSS. The image: 133 MB of qcow2, 8 MB
of kernel, 2 MB of initramfs, built in about 10 s once the debootstrap tree is cached.
"""

from __future__ import annotations

import logging
import os
import re
import secrets
import shutil
import socket
import subprocess
import time
from pathlib import Path
from typing import Callable

from ...errors import ConfigError, ProviderUnavailable, VMError, VMSettingsMismatch
from . import host_dirs, qemu_image, verify, verify_guest
from .base import Provider, ProviderOptions, VMInfo
# The image build lives in its own module; these are what booting and tests use of it.
from .qemu_image import (IMAGE_FILES, QEMU_IMG, damaged_files, image_dir, image_format, image_inputs,
                         read_bytes, read_json, run)
from .qemu_guest_init import GUEST_PORT
from .qemu_process import children, free_port, is_our_qemu, kill_qemu
# Shared with the process provider: same labelling, same pid checks, same launcher thread.
from .common import (LONG_VM_ID, check_name, check_vm_folder_free, checked_socket, child_runs, create_time, exit_status,
                     make_vm_dir, new_pool_key, owner_label, pool_folder, process_and_agent_healthy, read_meta,
                     remove_run_dir_if_empty, same_process, secure_base_dir, signal_name, start_ticks,
                     sweep_vm_folders, write_meta)
from .halted import halted_tree
from .images import build_command
from .boot_checks import resume_note
from .qemu_boot import AgentNeverAnswered, failure_detail, user_disk_argv, wait_for_agent
from .sandbox_processes import launcher
# KVM detection and QMP; the accelerator names are part of this module's face (tests,
# benchmarks and the CLI reach them as qemu.X)
from .qemu_machine import (ACCEL_ENV, KVM_PROBE_TIMEOUT_S,  # noqa: F401
                           QEMU, boot_id, check_host_memory, detect_accelerator,
                           probe_kvm, qmp, qmp_hmp)

log = logging.getLogger(__name__)

DEFAULT_BASE_DIR = host_dirs.QEMU.default
BASE_DIR_ENV = host_dirs.QEMU.env
DEFAULT_SNAPSHOT = "init"
DEFAULT_MEMORY_MB = 512
#: a desktop guest runs Xvfb, a window manager and GTK apps besides the agent
DESKTOP_MEMORY_MB = 1024
_SAFE_SNAPSHOT = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")


def base_dir_default() -> Path:
    """Where VM folders live unless told otherwise: $PARALLEL_ROLLOUT_QEMU_DIR or /tmp/..."""
    return host_dirs.QEMU.path()


class QemuProvider(Provider):
    """VMs as QEMU guests; a snapshot is an internal qcow2 snapshot, reset is loadvm."""

    name = "qemu"
    vms_in_runner_cgroup = True  # a guest's RAM is a process of the runner's (host_share.py)
    opens_windows = False  # -display none
    #: a loadvm reset takes ~0.6 s and a boot seconds: one VM booted ahead (pool/spares.py)
    default_spares = 1

    def __init__(self, run_id: str, options: ProviderOptions | None = None,
                 base_dir: str | os.PathLike | None = None) -> None:
        super().__init__(run_id, options)
        opts = self.options
        if opts.max_processes is not None:
            raise ConfigError("--vm-max-processes cannot be enforced from outside a QEMU VM; "
                              "the qemu provider supports --vm-memory-mb only")
        if opts.memory_mb is not None and opts.memory_mb < 128:
            raise ConfigError(f"--vm-memory-mb must be at least 128 for a QEMU VM, "
                              f"got {opts.memory_mb}")
        self.desktop = opts.desktop
        self.memory_mb = opts.memory_mb or (DESKTOP_MEMORY_MB if self.desktop else DEFAULT_MEMORY_MB)
        check_host_memory(self.memory_mb, opts.pool_size + (self.default_spares if opts.spare_vms is None else 0),
                           explicit=opts.memory_mb is not None)
        self.snapshot_name = opts.snapshot_name or DEFAULT_SNAPSHOT
        if not _SAFE_SNAPSHOT.match(self.snapshot_name):
            raise ConfigError(f"--snapshot-name {self.snapshot_name!r} must be 1-64 letters, "
                              "digits, '.', '_' or '-'")
        self.user_image: Path | None = None
        self.user_format = "qcow2"
        if opts.path_to_vm:
            self.user_image = Path(opts.path_to_vm).expanduser().resolve()
            if not self.user_image.is_file():
                raise ConfigError(f"--path-to-vm {opts.path_to_vm!r} is not a disk image file")
            self.user_format = image_format(self.user_image)
        #: whether a VM of this pool booted (its disk served the agent): until one has, a
        #: --path-to-vm disk whose agent never answered is the run's settings, and the VM, its
        #: spare and every replacement would wait out the boot timeout in turn
        self._disk_booted = False
        self.base_dir = Path(base_dir) if base_dir else base_dir_default()
        self.run_dir = pool_folder(self.base_dir, run_id, new_pool_key())  # this pool's own
        checked_socket(self.run_dir, LONG_VM_ID, "qmp.sock", env=BASE_DIR_ENV)
        _check_image(self.desktop)
        #: reset verification through the guest agent (a probe: off unless asked for)
        self._view = verify_guest.GuestView(opts.verify_reset or "off", "/home/user", None,
                                            spare_processes=verify.DESKTOP_LAZY if self.desktop else (),
                                            windows=self.desktop)

    def __repr__(self) -> str:
        return (f"QemuProvider(run_id={self.run_id!r}, base_dir={str(self.base_dir)!r}, "
                f"memory_mb={self.memory_mb})")

    @classmethod
    def supported_limits(cls) -> frozenset[str]:
        """Only memory_mb: the guest's RAM."""
        return frozenset({"memory_mb"})

    # ------------------------------------------------------------------- contract

    @classmethod
    def check_available(cls) -> None:
        """ProviderUnavailable unless QEMU, qemu-img and setpriv exist. Whether the image
        (the plain one or the desktop one) is built and current, a provider checks when it
        is made, since only then is it known which one is needed."""
        for binary in (QEMU, QEMU_IMG):
            if shutil.which(binary) is None:
                raise ProviderUnavailable(
                    f"{binary} is not installed; install it with: "
                    "apt-get install qemu-system-x86 qemu-utils")
        if shutil.which("setpriv") is None:
            raise ProviderUnavailable("setpriv is not installed; install it with: "
                                      "apt-get install util-linux")

    @classmethod
    def build_image(cls, *, force: bool = False, desktop: bool = False,
                    log: Callable[[str], None] = print) -> str:
        """Kernel, initramfs and base disk under <cache>/qemu (<cache>/qemu-desktop with
        ``desktop``); a no-op when current."""
        return qemu_image.build_image(force=force, log=log, desktop=desktop)

    def start(self, vm_id: str) -> VMInfo:
        """Create the overlay, boot QEMU, wait for the agent, take the snapshot."""
        check_name("vm id", vm_id)
        self.check_available()
        _check_image(self.desktop)
        vm_dir = checked_socket(self.run_dir, vm_id, "qmp.sock", env=BASE_DIR_ENV).parent
        if vm_dir.exists():
            meta = read_meta(vm_dir) or {}
            check_vm_folder_free(self.run_id, vm_id, meta,
                                 is_our_qemu(meta.get("pid"), meta.get("create_time"), vm_dir))
            shutil.rmtree(vm_dir, ignore_errors=True)
        secure_base_dir(self.base_dir)  # 0700 and ours, not another user's folder
        make_vm_dir(vm_dir, lock_pool=True)  # a sweep in another PID namespace sees it live
        private = {"vm_dir": str(vm_dir), "snapshot": self.snapshot_name}
        try:
            self._write_meta(vm_id, vm_dir, private)  # labelled at once: see process.py
            if self.user_image is not None:
                backing, backing_format = self.user_image, self.user_format
            else:
                backing, backing_format = image_dir(self.desktop) / "base.qcow2", "qcow2"
            run([QEMU_IMG, "create", "-q", "-f", "qcow2", "-b", str(backing),
                 "-F", backing_format, str(vm_dir / "overlay.qcow2")], "qemu-img create")
            accel = detect_accelerator()
            deadline = time.monotonic() + self.options.boot_timeout_s
            started = time.monotonic()
            client = self._boot(vm_id, vm_dir, accel, private, deadline)
            # a freshly booted guest's clock is a second or two off (the RTC has whole seconds)
            _set_guest_clock(private["port"], deadline, private.get("key"))
            private["boot_s"] = round(time.monotonic() - started, 2)
            qmp_hmp(vm_dir, f"savevm {self.snapshot_name}", timeout_s=120.0)
        except BaseException as exc:
            detail = failure_detail(vm_dir, self.user_image)
            kill_qemu(private)
            shutil.rmtree(vm_dir, ignore_errors=True)
            remove_run_dir_if_empty(self.run_dir)
            if isinstance(exc, AgentNeverAnswered) and self.user_image is not None and not self._disk_booted:
                raise VMSettingsMismatch(f"VM {vm_id} did not boot from {self.user_image}: {exc}{detail}. "
                                         f"{self._never_booted()}") from None
            if isinstance(exc, (VMError, ConfigError, ProviderUnavailable)):
                disk = f" from {self.user_image}" if self.user_image else ""
                raise type(exc)(f"VM {vm_id} did not boot{disk}: {exc}{detail}") from None
            raise
        self._disk_booted = True
        info = VMInfo(vm_id=vm_id, provider=self.name, address=client.address,
                      run_id=self.run_id, private=private)
        try:
            self._view.baseline(vm_id, None, info.address)
        except LookupError as exc:
            self.stop(info)
            raise VMError(f"VM {vm_id}: {exc}") from None
        return info

    def verify(self, info: VMInfo) -> list[str]:
        """The guest's home, /tmp and processes through a probe its agent runs (verify_guest.py)."""
        return self._view.check(info.vm_id, None, info.address)

    def reset(self, info: VMInfo) -> VMInfo:
        """loadvm the snapshot, set the guest clock, check that the agent answers."""
        vm_dir = Path(info.private["vm_dir"])
        if not same_process(info.private.get("pid"), info.private.get("create_time")):
            raise VMError(f"VM {info.vm_id}: its QEMU process is gone{failure_detail(vm_dir, self.user_image)}")
        qmp_hmp(vm_dir, f"loadvm {info.private['snapshot']}", timeout_s=60.0)
        from ...guest.client import GuestClient

        deadline = time.monotonic() + min(30.0, self.options.boot_timeout_s)
        try:
            _set_guest_clock(info.private["port"], deadline, info.private.get("key"))
            GuestClient(info.address, timeout_s=5.0).health()
        except VMError as exc:
            raise VMError(f"VM {info.vm_id}: after loadvm: {exc}") from None
        return info

    def healthy(self, info: VMInfo) -> bool:
        """QEMU is the process we started and the agent answers /health quickly."""
        return process_and_agent_healthy(info, timeout_s=5.0)

    def still_runs(self, info: VMInfo) -> bool:
        """QEMU, our child, has not exited (one waitpid: a guest killed with kill -9), nor is it
        exiting (its /proc stat): a killed QEMU's main thread is a zombie that waitpid cannot
        reap until its other threads (vCPUs, I/O) have ended, a while under TCG."""
        pid = info.private.get("pid")
        return child_runs(children, pid) and start_ticks(pid) is not None

    def death_cause(self, info: VMInfo) -> str | None:
        """QEMU killed by a signal, or stopped or traced while it runs (no guest can do either
        to its host's process: ``halted``), else None."""
        proc, pid = children.get(info.private.get("pid")), info.private.get("pid")
        if proc is not None and proc.poll() is None:
            halted = halted_tree(pid, None, "QEMU process")  # said at once: the wait below is for a dying QEMU
            if halted:
                return halted
        status = exit_status(proc, 2.0) if proc is not None else None
        return f"its QEMU (pid {pid}) was killed by {signal_name(-status)}" if status and status < 0 else None

    def stop(self, info: VMInfo) -> None:
        """Quit QEMU (QMP, then SIGKILL) and remove the VM folder; safe to call twice."""
        vm_dir = Path(info.private["vm_dir"])
        self._view.forget(info.vm_id)
        try:
            kill_qemu(info.private, graceful=True)
        finally:
            shutil.rmtree(vm_dir, ignore_errors=True)
            remove_run_dir_if_empty(vm_dir.parent)

    @classmethod
    def sweep(cls, run_id: str | None = None,
              base_dir: str | os.PathLike | None = None, *, orphans_only: bool = False) -> list[str]:
        """Kill and remove the VMs of ``run_id`` (any state), or, without a run id, those
        whose owning process is gone; return the removed VMs as ``<run id>/<vm id>``."""
        def kill(meta: dict, vm_dir: Path) -> None:
            if is_our_qemu(meta.get("pid"), meta.get("create_time"), vm_dir):
                kill_qemu(meta)

        return sweep_vm_folders(Path(base_dir) if base_dir else base_dir_default(), run_id, kill,
                                orphans_only=orphans_only)

    # ------------------------------------------------------------------- internals

    def _argv(self, vm_id: str, vm_dir: Path, accel: str, port: int, key: str | None = None) -> list[str]:
        image = image_dir(self.desktop)
        argv = [
            shutil.which(QEMU) or QEMU,
            "-name", f"parallel-rollout-{self.run_id}-{vm_id}",
            "-machine", "pc", "-accel", accel, "-cpu", "host" if accel == "kvm" else "qemu64",
            "-m", str(self.memory_mb), "-smp", "1",
            "-nodefaults", "-no-user-config", "-display", "none", "-no-reboot",
            "-chardev", f"file,id=serial0,path={vm_dir / 'serial.log'}",
            "-serial", "chardev:serial0",
            "-qmp", f"unix:{vm_dir / 'qmp.sock'},server=on,wait=off",
            "-drive", f"file={vm_dir / 'overlay.qcow2'},if=none,id=disk0,format=qcow2,"
                      "cache=unsafe,discard=unmap",
            "-device", "virtio-blk-pci,drive=disk0",
            "-netdev", f"user,id=net0,restrict=on,"
                       f"hostfwd=tcp:127.0.0.1:{port}-:{GUEST_PORT}",
            "-device", "virtio-net-pci,netdev=net0,romfile=",
        ]
        if self.user_image is not None:
            argv += user_disk_argv(vm_dir)
        else:
            append = f"console=ttyS0 panic=-1 8250.nr_uarts=1 pr.hostname={vm_id}"
            if key:  # what guest-init's relay asks each connection for
                append += f" pr.key={key}"
            if self.options.screen:
                append += f" pr.desktop={self.options.screen}"
            argv += ["-kernel", str(image / "vmlinuz"), "-initrd", str(image / "initrd.img"),
                     "-append", append]
        return argv

    def _boot(self, vm_id: str, vm_dir: Path, accel: str, private: dict,
              deadline: float):
        """Start QEMU on a free loopback port (another one if that was taken meanwhile) and
        wait for the guest agent; its GuestClient."""
        from ...guest.client import GuestClient, keyed_address

        # our image's relay asks every connection for this key (the port is on the host's
        # loopback, where a command agent's program could set the guest's clock or use its
        # agent); a --path-to-vm disk's guest is the user's own
        key = None if self.user_image is not None else secrets.token_hex(16)
        private["key"] = key
        for _attempt in range(5):
            port = free_port()
            argv = ["setpriv", "--pdeathsig", "KILL", "--",
                    *self._argv(vm_id, vm_dir, accel, port, key)]
            with open(vm_dir / "qemu.log", "wb") as qemu_log:
                try:
                    proc = launcher().popen(argv, stdin=subprocess.DEVNULL, stdout=qemu_log,
                                            stderr=qemu_log, start_new_session=True)
                except OSError as exc:
                    raise VMError(f"cannot start {QEMU}: {exc}") from exc
            children[proc.pid] = proc
            private.update(pid=proc.pid, create_time=create_time(proc.pid), port=port,
                           accel=accel)
            self._write_meta(vm_id, vm_dir, private)
            address = f"http://127.0.0.1:{port}"
            client = GuestClient(keyed_address(address, key) if key else address, timeout_s=2.0)
            try:
                wait_for_agent(client, proc, deadline, self.options, accel)
                return client
            except VMError:
                if proc.poll() is None or b"host forwarding" not in read_bytes(
                        vm_dir / "qemu.log"):
                    raise
                children.pop(proc.pid, None)  # the port was taken meanwhile: try another
        raise VMError("no free loopback port for the guest agent after 5 attempts")

    def _never_booted(self) -> str:
        """What to change when no VM of the --path-to-vm disk has booted in this run."""
        disk, timeout = self.options.said("path_to_vm"), self.options.said("boot_timeout_s")
        return (f"No VM of this disk booted in this run, so no replacement would: give {disk} a disk whose "
                f"system serves the guest agent on port {GUEST_PORT} {resume_note('path_to_vm', disk)}, or more "
                f"time with {timeout} {resume_note('boot_timeout_s', timeout)}")

    def _write_meta(self, vm_id: str, vm_dir: Path, private: dict) -> None:
        write_meta(vm_dir, {"run_id": self.run_id, "vm_id": vm_id, "created": time.time(),
                            **owner_label(), **private})


# -------------------------------------------------------------------------- image


def _check_image(desktop: bool) -> None:
    """ProviderUnavailable unless the image (plain or desktop) is built and current."""
    where = image_dir(desktop)
    command = build_command("qemu", desktop)
    manifest = read_json(where / "image.json")
    if manifest is None or not all((where / n).is_file() for n in IMAGE_FILES):
        raise ProviderUnavailable(f"no qemu guest image in {where}; build it with: {command}")
    if manifest.get("inputs") != image_inputs(desktop):
        raise ProviderUnavailable(
            f"the qemu guest image in {where} was built from another guest agent or "
            f"recipe; rebuild it with: {command}")
    if damaged := damaged_files(where, manifest):  # its guests would panic at boot, or hang
        raise ProviderUnavailable(f"the qemu guest image in {where} is damaged ({'; '.join(damaged)}); "
                                  f"rebuild it with: {command}")


# ------------------------------------------------------------------------- clock


def _set_guest_clock(port: int, deadline: float, key: str | None = None) -> None:
    """Set the guest's clock to the host's: guest-init's relay takes a ``PR-SETTIME`` line
    on the forwarded port, after the VM's ``PR-KEY`` line (tasks cannot reach that port:
    their namespace has only lo; a process of the host can, but does not know the key).
    Retried until ``deadline``, so it doubles as the wait for a guest resuming from loadvm."""
    delay = 0.005
    while True:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=5.0) as sock:
                sock.sendall((f"PR-KEY {key}\n" if key else "").encode() + b"PR-SETTIME %.6f\n" % time.time())
                if sock.recv(16).startswith(b"ok"):
                    return
        except OSError:
            pass
        if time.monotonic() > deadline:
            raise VMError("the guest did not take the host's time (guest-init's relay does "
                          "not answer)")
        time.sleep(delay)
        delay = min(delay * 2, 0.2)
