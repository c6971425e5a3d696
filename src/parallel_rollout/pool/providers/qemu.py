"""QemuProvider: every VM is a QEMU virtual machine on its own overlay of one Debian image.

::

    owning process ── launcher thread ──fork──► setpriv --pdeathsig KILL qemu-system-x86_64
                                                  │ -name parallel-rollout-<run>-<vm>
       GuestClient ── http://127.0.0.1:PORT ──────┤ -netdev user,restrict=on,hostfwd=…-:5000
       _qmp()      ── unix:<vm_dir>/qmp.sock ─────┤ savevm / loadvm / quit
                                                  ▼
                   guest: kernel ─► initramfs /init (busybox: insmod virtio + ext4, mount
                          /dev/vda, switch_root) ─► /usr/local/sbin/guest-init (python3, PID 1:
                          mounts, eth0, relay :5000 ─► /run/guest/agent.sock, reaps orphans)
                          ─► python3 server.py --unix … in a network namespace with only lo

    <cache>/qemu/          vmlinuz, initrd.img, base.qcow2, image.json   (build_image)
    <base>/<run_id>/<vm_id>/   base: $PARALLEL_ROLLOUT_QEMU_DIR or /tmp/parallel-rollout/qemu
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

**Limits.** ``memory_mb`` is the guest's RAM (``-m``). ``max_processes`` cannot be enforced
from outside a VM: ConfigError. ``path_to_vm`` is a user's own disk image (qcow2 or raw) that
boots by itself (BIOS) and serves the guest agent on port 5000, as OSWorld's images do; the
KVM probe still uses the built kernel, so ``image build`` is needed either way.

**Numbers** (2-core host, TCG, 512 MB guest): a boot, snapshot included, takes 9-18 s (so
the default ``boot_timeout_s`` of 60 s holds, with two VMs booting at once); a reset 0.25-0.35
s (loadvm about 0.2 s); a VM costs about 320 MB of host RSS. The image: 133 MB of qcow2, 8 MB
of kernel, 2 MB of initramfs, built in about 10 s once the debootstrap tree is cached.
"""

from __future__ import annotations

import fcntl
import gzip
import json
import logging
import os
import re
import shutil
import signal
import socket
import struct
import subprocess
import tempfile
import threading
import time
from pathlib import Path
from typing import Callable

import psutil

from ...errors import ConfigError, ProviderUnavailable, VMError
from . import images
from .base import Provider, ProviderOptions, VMInfo
# Shared with the process provider: same labelling, same pid checks, same launcher thread.
from .process import (_check_name, _create_time, _launcher, _read_meta,
                      _remove_run_dir_if_empty, _same_process, _tail, sweep_vm_folders)

log = logging.getLogger(__name__)

DEFAULT_BASE_DIR = "/tmp/parallel-rollout/qemu"
BASE_DIR_ENV = "PARALLEL_ROLLOUT_QEMU_DIR"
ACCEL_ENV = "PARALLEL_ROLLOUT_QEMU_ACCEL"
QEMU = "qemu-system-x86_64"
QEMU_IMG = "qemu-img"
BUILD_COMMAND = "parallel-rollout image build --provider qemu"
DEFAULT_SNAPSHOT = "init"
DEFAULT_MEMORY_MB = 512
GUEST_PORT = 5000
GUEST_INIT_PATH = "/usr/local/sbin/guest-init"
#: bump when the image recipe changes in a way the input hash does not capture
IMAGE_VERSION = 1
#: free space the guest gets on top of the tree (the ext4 image is sparse until written)
DISK_HEADROOM_MB = 1536
#: a working KVM boots the probe in about a second; a broken one hangs
KVM_PROBE_TIMEOUT_S = 15.0
PROBE_MARKER = "parallel-rollout-kvm-probe-ok"
#: modules the initramfs loads (with their dependencies) to reach a virtio ext4 root and NIC
INITRD_MODULES = ("virtio_pci", "virtio_blk", "virtio_net", "crc32c_generic", "ext4")
QMP_TIMEOUT_S = 10.0
QUIT_WAIT_S = 5.0
MAX_SOCKET_PATH = 100
_SAFE_SNAPSHOT = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
_AGENT_SOURCE = images.GUEST_AGENT_SOURCE

# The initramfs: load the modules, mount the disk, hand over to guest-init on it.
INITRD_INIT = """#!/bin/busybox sh
bb=/bin/busybox
$bb mount -t proc proc /proc
$bb mount -t devtmpfs dev /dev
case " $($bb cat /proc/cmdline) " in *" pr.probe "*)
    echo PROBE_MARKER; $bb poweroff -f;; esac
for m in $($bb cat /modules); do
    $bb insmod /lib/modules/$m.ko || echo "init: insmod $m failed"; done
n=0; while [ ! -b /dev/vda ] && [ $n -lt 100 ]; do $bb usleep 50000; n=$((n+1)); done
$bb mount -t ext4 -o rw /dev/vda /newroot || {
    echo "init: cannot mount /dev/vda"; $bb poweroff -f; }
$bb mount --move /dev /newroot/dev
$bb umount /proc
exec $bb switch_root /newroot GUEST_INIT
""".replace("PROBE_MARKER", PROBE_MARKER).replace("GUEST_INIT", GUEST_INIT_PATH)

# PID 1 of the guest. Python rather than a shell script: one process instead of a dozen
# under TCG, and it must reap the orphans of every command the agent runs.
GUEST_INIT = r'''#!/usr/bin/python3 -IS
"""PID 1 of a parallel-rollout QEMU guest: mounts, network, the guest agent, a relay.

The agent and every command it runs live in a network namespace of their own with only
lo: a task sees no network interface, as in the other providers. The NIC that QEMU
forwards the host's port to stays here, in PID 1's namespace, where a relay passes each
connection on to the agent's unix socket (pathname sockets belong to no namespace).
"""
import ctypes, fcntl, os, select, socket, struct, sys, threading, time

AGENT = "AGENT_PATH"
AGENT_SOCKET = "/run/guest/agent.sock"
CLONE_NEWNET = 0x40000000
libc = ctypes.CDLL("libc.so.6", use_errno=True)


def say(message):
    sys.stderr.write("guest-init: %s\n" % message)
    sys.stderr.flush()


def mount(source, target, fstype, options=""):
    os.makedirs(target, exist_ok=True)
    if libc.mount(source.encode(), target.encode(), fstype.encode(), 0, options.encode()):
        errno = ctypes.get_errno()
        if errno != 16:  # EBUSY: already mounted (the initramfs moved /dev here)
            say("mount %s: %s" % (target, os.strerror(errno)))


def ifup(name, address, netmask):
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    def ifreq(payload):
        return struct.pack("16s", name.encode()) + payload.ljust(24, b"\0")
    def sockaddr(ip):
        return struct.pack("H2s4s", socket.AF_INET, b"", socket.inet_aton(ip))
    fcntl.ioctl(s, 0x8916, ifreq(sockaddr(address)))       # SIOCSIFADDR
    fcntl.ioctl(s, 0x891C, ifreq(sockaddr(netmask)))       # SIOCSIFNETMASK
    flags = struct.unpack("H", fcntl.ioctl(s, 0x8913, ifreq(b""))[16:18])[0]  # SIOCGIFFLAGS
    fcntl.ioctl(s, 0x8914, ifreq(struct.pack("H", flags | 0x1 | 0x40)))  # IFF_UP|IFF_RUNNING
    s.close()


def start_agent():
    pid = os.fork()
    if pid:
        return pid
    try:
        os.setsid()
        os.chdir("/root")
        os.dup2(os.open("/dev/null", os.O_RDONLY), 0)
        if libc.unshare(CLONE_NEWNET):
            raise OSError(ctypes.get_errno(), "unshare(CLONE_NEWNET)")
        ifup("lo", "127.0.0.1", "255.0.0.0")
        if os.path.exists(AGENT_SOCKET):
            os.unlink(AGENT_SOCKET)
        env = {"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
               "HOME": "/root", "USER": "root", "LANG": "C.UTF-8",
               "PARALLEL_ROLLOUT_VM": hostname}
        os.execve("/usr/bin/python3", ["python3", "-I", "-S", AGENT, "--unix", AGENT_SOCKET],
                  env)
    except BaseException as exc:
        say("cannot start the agent: %r" % (exc,))
    os._exit(1)


def relay_one(outside):
    inside = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        outside.settimeout(60)
        first = outside.recv(262144)
        outside.settimeout(None)
        if first.startswith(b"PR-SETTIME "):  # from the host after loadvm: no agent involved
            time.clock_settime(time.CLOCK_REALTIME, float(first.split()[1]))
            outside.sendall(b"ok\n")
            return
        inside.connect(AGENT_SOCKET)
        inside.sendall(first)
        peer = {outside: inside, inside: outside}
        open_ends = [outside, inside]
        while open_ends:
            for end in select.select(open_ends, [], [])[0]:
                data = end.recv(262144)
                if data:
                    peer[end].sendall(data)
                else:  # EOF one way: pass it on, keep the other way open
                    peer[end].shutdown(socket.SHUT_WR)
                    open_ends.remove(end)
    except (OSError, ValueError):
        pass  # the agent is not up yet, or either side went away: drop the connection
    finally:
        inside.close()
        outside.close()


def relay():
    server = socket.create_server(("0.0.0.0", PORT), backlog=128)
    while True:
        outside, _ = server.accept()
        threading.Thread(target=relay_one, args=(outside,), daemon=True).start()


for source, target, fstype, options in (
        ("proc", "/proc", "proc", ""), ("sysfs", "/sys", "sysfs", ""),
        ("devtmpfs", "/dev", "devtmpfs", ""), ("devpts", "/dev/pts", "devpts", "ptmxmode=666"),
        ("tmpfs", "/dev/shm", "tmpfs", "mode=1777"), ("tmpfs", "/run", "tmpfs", "mode=755"),
        ("tmpfs", "/tmp", "tmpfs", "mode=1777")):
    mount(source, target, fstype, options)
os.makedirs("/run/guest", exist_ok=True)
cmdline = open("/proc/cmdline").read().split()
hostname = next((a[12:] for a in cmdline if a.startswith("pr.hostname=")), "guest")
libc.sethostname(hostname.encode(), len(hostname.encode()))
agent = start_agent()  # before the relay's threads exist: fork a single-threaded process
try:
    ifup("lo", "127.0.0.1", "255.0.0.0")
    nics = sorted(n for n in os.listdir("/sys/class/net") if n != "lo")
    ifup(nics[0], "10.0.2.15", "255.255.255.0")  # QEMU user networking's guest address
    threading.Thread(target=relay, daemon=True).start()
except (OSError, IndexError) as exc:
    say("network: %r" % (exc,))
say("agent started (pid %d)" % agent)
while True:  # reap every orphan; restart the agent if it dies
    try:
        pid, status = os.wait()
    except ChildProcessError:
        time.sleep(1)
        continue
    if pid == agent:
        say("agent exited (status %d); restarting it" % status)
        time.sleep(0.5)
        agent = start_agent()
'''.replace("AGENT_PATH", images.GUEST_AGENT_PATH).replace("PORT", str(GUEST_PORT))


def base_dir_default() -> Path:
    """Where VM folders live unless told otherwise: $PARALLEL_ROLLOUT_QEMU_DIR or /tmp/..."""
    return Path(os.environ.get(BASE_DIR_ENV) or DEFAULT_BASE_DIR)


def image_dir() -> Path:
    """Where the built kernel, initramfs and base image live."""
    return images.cache_dir() / "qemu"


def image_inputs() -> str:
    """Hash of what we put into an image; a built image with another hash is stale."""
    return images.recipe_key("qemu-image", IMAGE_VERSION, INITRD_INIT, GUEST_INIT,
                             INITRD_MODULES, images.file_digest(_AGENT_SOURCE))


class QemuProvider(Provider):
    """VMs as QEMU guests; a snapshot is an internal qcow2 snapshot, reset is loadvm."""

    name = "qemu"

    def __init__(self, run_id: str, options: ProviderOptions | None = None,
                 base_dir: str | os.PathLike | None = None) -> None:
        super().__init__(run_id, options)
        _check_name("run id", run_id)
        opts = self.options
        if opts.max_processes is not None:
            raise ConfigError("max_processes cannot be enforced from outside a QEMU VM; "
                              "the qemu provider supports memory_mb only")
        if opts.memory_mb is not None and opts.memory_mb < 128:
            raise ConfigError(f"memory_mb must be at least 128 for a QEMU VM, "
                              f"got {opts.memory_mb}")
        self.memory_mb = opts.memory_mb or DEFAULT_MEMORY_MB
        self.snapshot_name = opts.snapshot_name or DEFAULT_SNAPSHOT
        if not _SAFE_SNAPSHOT.match(self.snapshot_name):
            raise ConfigError(f"snapshot name {self.snapshot_name!r} must be 1-64 letters, "
                              "digits, '.', '_' or '-'")
        self.user_image: Path | None = None
        self.user_format = "qcow2"
        if opts.path_to_vm:
            self.user_image = Path(opts.path_to_vm).expanduser().resolve()
            if not self.user_image.is_file():
                raise ConfigError(f"path_to_vm {opts.path_to_vm!r} is not a disk image file")
            self.user_format = _image_format(self.user_image)
        self.base_dir = Path(base_dir) if base_dir else base_dir_default()
        self.run_dir = self.base_dir / run_id

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
        """ProviderUnavailable unless QEMU, qemu-img, setpriv and a current image exist."""
        for binary in (QEMU, QEMU_IMG):
            if shutil.which(binary) is None:
                raise ProviderUnavailable(
                    f"{binary} is not installed; install it with: "
                    "apt-get install qemu-system-x86 qemu-utils")
        if shutil.which("setpriv") is None:
            raise ProviderUnavailable("setpriv is not installed; install it with: "
                                      "apt-get install util-linux")
        manifest = _read_json(image_dir() / "image.json")
        if manifest is None or not all((image_dir() / n).is_file() for n in _IMAGE_FILES):
            raise ProviderUnavailable(f"no qemu guest image in {image_dir()}; build it with: "
                                      f"{BUILD_COMMAND}")
        if manifest.get("inputs") != image_inputs():
            raise ProviderUnavailable(
                f"the qemu guest image in {image_dir()} was built from another guest agent or "
                f"recipe; rebuild it with: {BUILD_COMMAND}")

    @classmethod
    def build_image(cls, *, force: bool = False, log: Callable[[str], None] = print) -> str:
        """Kernel, initramfs and base disk under <cache>/qemu; a no-op when current."""
        return _build_image(force=force, log=log)

    def start(self, vm_id: str) -> VMInfo:
        """Create the overlay, boot QEMU, wait for the agent, take the snapshot."""
        _check_name("vm id", vm_id)
        self.check_available()
        vm_dir = self.run_dir / vm_id
        if len(str(vm_dir / "qmp.sock")) > MAX_SOCKET_PATH:
            raise ConfigError(f"socket path {vm_dir / 'qmp.sock'} is longer than "
                              f"{MAX_SOCKET_PATH} characters; set {BASE_DIR_ENV} to a shorter "
                              "folder or use shorter run/vm ids")
        if vm_dir.exists():
            meta = _read_meta(vm_dir) or {}
            if _is_our_qemu(meta.get("pid"), meta.get("create_time"), vm_dir):
                raise VMError(f"VM {vm_id} of run {self.run_id} is already running "
                              f"(pid {meta.get('pid')})")
            shutil.rmtree(vm_dir, ignore_errors=True)
        _make_dir(vm_dir)
        private = {"vm_dir": str(vm_dir), "snapshot": self.snapshot_name}
        try:
            if self.user_image is not None:
                backing, backing_format = self.user_image, self.user_format
            else:
                backing, backing_format = image_dir() / "base.qcow2", "qcow2"
            _run([QEMU_IMG, "create", "-q", "-f", "qcow2", "-b", str(backing),
                  "-F", backing_format, str(vm_dir / "overlay.qcow2")], "qemu-img create")
            accel = detect_accelerator()
            deadline = time.monotonic() + self.options.boot_timeout_s
            started = time.monotonic()
            client = self._boot(vm_id, vm_dir, accel, private, deadline)
            # a freshly booted guest's clock is a second or two off (the RTC has whole seconds)
            _set_guest_clock(private["port"], deadline)
            private["boot_s"] = round(time.monotonic() - started, 2)
            _qmp_hmp(vm_dir, f"savevm {self.snapshot_name}", timeout_s=120.0)
        except BaseException as exc:
            detail = _failure_detail(vm_dir)
            _kill_qemu(private)
            shutil.rmtree(vm_dir, ignore_errors=True)
            _remove_run_dir_if_empty(self.run_dir)
            if isinstance(exc, (VMError, ConfigError, ProviderUnavailable)):
                raise type(exc)(f"VM {vm_id} did not boot: {exc}{detail}") from None
            raise
        return VMInfo(vm_id=vm_id, provider=self.name, address=client.address,
                      run_id=self.run_id, private=private)

    def reset(self, info: VMInfo) -> VMInfo:
        """loadvm the snapshot, set the guest clock, check that the agent answers."""
        vm_dir = Path(info.private["vm_dir"])
        if not _same_process(info.private.get("pid"), info.private.get("create_time")):
            raise VMError(f"VM {info.vm_id}: its QEMU process is gone{_failure_detail(vm_dir)}")
        _qmp_hmp(vm_dir, f"loadvm {info.private['snapshot']}", timeout_s=60.0)
        from ...guest.client import GuestClient

        deadline = time.monotonic() + min(30.0, self.options.boot_timeout_s)
        try:
            _set_guest_clock(info.private["port"], deadline)
            GuestClient(info.address, timeout_s=5.0).health()
        except VMError as exc:
            raise VMError(f"VM {info.vm_id}: after loadvm: {exc}") from None
        return info

    def healthy(self, info: VMInfo) -> bool:
        """QEMU is the process we started and the agent answers /health quickly."""
        if not _same_process(info.private.get("pid"), info.private.get("create_time")):
            return False
        from ...guest.client import GuestClient

        try:
            GuestClient(info.address, timeout_s=5.0).health()
        except Exception:  # unreachable, malformed: either way not healthy
            return False
        return True

    def stop(self, info: VMInfo) -> None:
        """Quit QEMU (QMP, then SIGKILL) and remove the VM folder; safe to call twice."""
        vm_dir = Path(info.private["vm_dir"])
        try:
            _kill_qemu(info.private, graceful=True)
        finally:
            shutil.rmtree(vm_dir, ignore_errors=True)
            _remove_run_dir_if_empty(vm_dir.parent)

    @classmethod
    def sweep(cls, run_id: str | None = None,
              base_dir: str | os.PathLike | None = None) -> list[str]:
        """Kill and remove the VMs of ``run_id`` (any state), or, without a run id, those
        whose owning process is gone; return the removed VM ids."""
        def kill(meta: dict, vm_dir: Path) -> None:
            if _is_our_qemu(meta.get("pid"), meta.get("create_time"), vm_dir):
                _kill_qemu(meta)

        return sweep_vm_folders(Path(base_dir) if base_dir else base_dir_default(), run_id, kill)

    # ------------------------------------------------------------------- internals

    def _argv(self, vm_id: str, vm_dir: Path, accel: str, port: int) -> list[str]:
        image = image_dir()
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
        if self.user_image is None:
            argv += ["-kernel", str(image / "vmlinuz"), "-initrd", str(image / "initrd.img"),
                     "-append", f"console=ttyS0 panic=-1 8250.nr_uarts=1 "
                                f"pr.hostname={vm_id}"]
        return argv

    def _boot(self, vm_id: str, vm_dir: Path, accel: str, private: dict,
              deadline: float):
        """Start QEMU on a free loopback port (another one if that was taken meanwhile) and
        wait for the guest agent; its GuestClient."""
        from ...guest.client import GuestClient

        for _attempt in range(5):
            port = _free_port()
            argv = ["setpriv", "--pdeathsig", "KILL", "--",
                    *self._argv(vm_id, vm_dir, accel, port)]
            with open(vm_dir / "qemu.log", "wb") as qemu_log:
                try:
                    proc = _launcher().popen(argv, stdin=subprocess.DEVNULL, stdout=qemu_log,
                                             stderr=qemu_log, start_new_session=True)
                except OSError as exc:
                    raise VMError(f"cannot start {QEMU}: {exc}") from exc
            _children[proc.pid] = proc
            private.update(pid=proc.pid, create_time=_create_time(proc.pid), port=port,
                           accel=accel)
            self._write_meta(vm_id, vm_dir, private)
            client = GuestClient(f"http://127.0.0.1:{port}", timeout_s=2.0)
            try:
                _wait_for_agent(client, proc, deadline)
                return client
            except VMError:
                if proc.poll() is None or b"host forwarding" not in _read_bytes(
                        vm_dir / "qemu.log"):
                    raise
                _children.pop(proc.pid, None)  # the port was taken meanwhile: try another
        raise VMError("no free loopback port for the guest agent after 5 attempts")

    def _write_meta(self, vm_id: str, vm_dir: Path, private: dict) -> None:
        me = psutil.Process()
        meta = {"run_id": self.run_id, "vm_id": vm_id, "created": time.time(),
                "owner_pid": me.pid, "owner_create_time": me.create_time(), **private}
        tmp = vm_dir / "meta.json.tmp"
        tmp.write_text(json.dumps(meta, indent=1))
        tmp.replace(vm_dir / "meta.json")  # sweep must never read half a file


# --------------------------------------------------------------------- accelerator

_accel_lock = threading.Lock()
_accel_cache: dict[str, str] = {}


def detect_accelerator(probe_timeout_s: float = KVM_PROBE_TIMEOUT_S, *,
                       use_cache: bool = True) -> str:
    """"kvm" when a guest really boots under KVM here, else "tcg" (see the module doc)."""
    forced = os.environ.get(ACCEL_ENV)
    if forced:
        if forced not in ("kvm", "tcg"):
            raise ConfigError(f"{ACCEL_ENV} must be kvm or tcg, got {forced!r}")
        return forced
    key = f"{_boot_id()}|{_qemu_version()}"
    cache_file = image_dir() / "accel.json"
    with _accel_lock:
        if use_cache and key in _accel_cache:
            return _accel_cache[key]
        cached = _read_json(cache_file) if use_cache else None
        if cached and cached.get("key") == key and cached.get("accel") in ("kvm", "tcg"):
            _accel_cache[key] = cached["accel"]
            return cached["accel"]
        accel, reason = _probe_kvm(probe_timeout_s)
        log.info("qemu accelerator: %s (%s)", accel, reason)
        _accel_cache[key] = accel
        try:
            _write_json(cache_file, {"key": key, "accel": accel, "reason": reason,
                                     "probed": time.time()})
        except OSError:
            pass  # a read-only cache only costs a probe per process
        return accel


def _probe_kvm(timeout_s: float) -> tuple[str, str]:
    """Boot the image's kernel under KVM until its initramfs prints the marker."""
    if not os.access("/dev/kvm", os.R_OK | os.W_OK):
        return "tcg", "/dev/kvm is missing or not accessible"
    kernel, initrd = image_dir() / "vmlinuz", image_dir() / "initrd.img"
    if not (kernel.is_file() and initrd.is_file()):
        return "tcg", f"no built kernel to probe KVM with ({BUILD_COMMAND})"
    argv = [shutil.which(QEMU) or QEMU, "-machine", "pc", "-accel", "kvm", "-cpu", "host",
            "-m", "128", "-nodefaults", "-no-user-config", "-display", "none", "-no-reboot",
            "-serial", "stdio", "-kernel", str(kernel), "-initrd", str(initrd),
            "-append", "console=ttyS0 panic=-1 loglevel=1 pr.probe"]
    started = time.monotonic()
    try:
        # run() kills (SIGKILL) and reaps the probe when it outlives its timeout
        probe = subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True,
                               timeout=timeout_s)
    except subprocess.TimeoutExpired:
        return "tcg", f"a KVM guest did not boot within {timeout_s:.0f}s"
    except OSError as exc:
        return "tcg", f"cannot run {QEMU}: {exc}"
    output = (probe.stdout + probe.stderr).decode(errors="replace")
    if PROBE_MARKER in output:
        return "kvm", f"a KVM guest booted in {time.monotonic() - started:.1f}s"
    last = output.strip().splitlines()[-1:] or ["no output"]
    return "tcg", f"a KVM guest failed (exit {probe.returncode}): {last[0][:200]}"


def _boot_id() -> str:
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return "unknown"


def _qemu_version() -> str:
    binary = shutil.which(QEMU)
    if binary is None:
        return "none"
    stat = os.stat(binary)
    return f"{binary}:{stat.st_size}:{stat.st_mtime_ns}"


# ---------------------------------------------------------------------------- QMP


def _qmp_hmp(vm_dir: Path, command: str, timeout_s: float = QMP_TIMEOUT_S) -> str:
    """Run a silent human-monitor command over QMP; VMError when it fails or prints."""
    output = _qmp(vm_dir, "human-monitor-command", {"command-line": command}, timeout_s)
    # HMP reports failures as text, not as QMP errors; savevm and loadvm print nothing else
    if output:
        raise VMError(f"QEMU {command!r}: {str(output).strip()}")
    return output


def _qmp(vm_dir: Path, execute: str, arguments: dict | None = None,
         timeout_s: float = QMP_TIMEOUT_S):
    """One QMP command on a fresh connection; its "return" value, or VMError."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(timeout_s)
    try:
        sock.connect(str(vm_dir / "qmp.sock"))
        stream = sock.makefile("rwb")
        _qmp_read(stream)  # the greeting
        for name, args in (("qmp_capabilities", None), (execute, arguments)):
            message = {"execute": name, **({"arguments": args} if args else {})}
            stream.write(json.dumps(message).encode() + b"\n")
            stream.flush()
            answer = _qmp_read(stream)
            if "error" in answer:
                raise VMError(f"QMP {name}: {answer['error'].get('desc', answer['error'])}")
        return answer.get("return")
    except OSError as exc:
        raise VMError(f"QMP {execute} on {vm_dir / 'qmp.sock'}: {exc}") from None
    finally:
        sock.close()


def _qmp_read(stream) -> dict:
    while True:
        line = stream.readline()
        if not line:
            raise VMError("QEMU closed the QMP connection")
        message = json.loads(line)
        if "event" not in message:  # events may arrive between commands and answers
            return message


# ----------------------------------------------------------------------- processes

#: QEMU processes this process started, so it can reap them (no zombies)
_children: dict[int, subprocess.Popen] = {}
_ports_lock = threading.Lock()
_recent_ports: list[int] = []


def _free_port() -> int:
    """A loopback port free right now, not handed out to another VM of ours lately."""
    with _ports_lock:
        for _ in range(50):
            with socket.socket() as sock:
                sock.bind(("127.0.0.1", 0))
                port = sock.getsockname()[1]
            if port not in _recent_ports:
                _recent_ports.append(port)
                del _recent_ports[:-64]
                return port
    raise VMError("cannot find a free loopback port")


def _is_our_qemu(pid, create_time, vm_dir: Path) -> bool:
    """Whether ``pid`` is still the QEMU (or its setpriv) that runs ``vm_dir``."""
    if not _same_process(pid, create_time):
        return False
    try:
        return str(vm_dir) in " ".join(psutil.Process(pid).cmdline())
    except psutil.Error:
        return False


def _wait_for_agent(client, proc: subprocess.Popen | None, deadline: float) -> None:
    """Poll the agent's /health until it answers; VMError when QEMU exits or time is up."""
    delay = 0.01
    while True:
        if proc is not None and proc.poll() is not None:
            raise VMError(f"QEMU exited with status {proc.returncode} before the guest "
                          "agent answered")
        try:
            client.health()
            return
        except VMError:
            pass
        if time.monotonic() > deadline:
            raise VMError("the guest agent did not answer within the boot timeout")
        time.sleep(delay)
        delay = min(delay * 2, 0.2)


def _set_guest_clock(port: int, deadline: float) -> None:
    """Set the guest's clock to the host's: guest-init's relay takes a ``PR-SETTIME`` line
    on the forwarded port (tasks cannot reach that port: their namespace has only lo).
    Retried until ``deadline``, so it doubles as the wait for a guest resuming from loadvm."""
    delay = 0.005
    while True:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=5.0) as sock:
                sock.sendall(b"PR-SETTIME %.6f\n" % time.time())
                if sock.recv(16).startswith(b"ok"):
                    return
        except OSError:
            pass
        if time.monotonic() > deadline:
            raise VMError("the guest did not take the host's time (guest-init's relay does "
                          "not answer)")
        time.sleep(delay)
        delay = min(delay * 2, 0.2)


def _kill_qemu(private: dict, graceful: bool = False) -> None:
    """Stop the recorded QEMU: QMP quit first when ``graceful``, then SIGKILL; wait for it."""
    pid, created = private.get("pid"), private.get("create_time")
    proc = _children.pop(pid, None) if pid else None
    if _same_process(pid, created):
        if graceful and private.get("vm_dir"):
            try:
                _qmp(Path(private["vm_dir"]), "quit", timeout_s=2.0)
            except VMError:
                pass  # QMP is stuck or gone: SIGKILL below
            _wait_gone(pid, created, proc, QUIT_WAIT_S)
        if _same_process(pid, created):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
    if not _wait_gone(pid, created, proc, QUIT_WAIT_S):
        raise VMError(f"QEMU {pid} survived SIGKILL for {QUIT_WAIT_S}s")


def _wait_gone(pid, created, proc: subprocess.Popen | None, timeout_s: float) -> bool:
    if proc is not None:
        try:
            proc.wait(timeout=timeout_s)
            return True
        except subprocess.TimeoutExpired:
            return False
    deadline = time.monotonic() + timeout_s
    while _same_process(pid, created):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


def _failure_detail(vm_dir: Path) -> str:
    return (f"; qemu log: {_tail(vm_dir / 'qemu.log', 600)}; "
            f"serial log tail: {_tail(vm_dir / 'serial.log', 1500)}")


# ---------------------------------------------------------------------- filesystem

_IMAGE_FILES = ("vmlinuz", "initrd.img", "base.qcow2")


def _make_dir(vm_dir: Path) -> None:
    # a concurrent stop of the run's last VM may remove the run folder meanwhile: retry
    for _ in range(10):
        try:
            vm_dir.mkdir(parents=True)
            return
        except FileNotFoundError:
            continue
    vm_dir.mkdir(parents=True)


def _read_json(path: Path) -> dict | None:
    try:
        value = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return value if isinstance(value, dict) else None


def _write_json(path: Path, value: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(value, indent=1))
    tmp.replace(path)


def _read_bytes(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except OSError:
        return b""


def _run(argv: list[str], what: str, timeout_s: float = 600.0, **kwargs) -> str:
    """Run a tool; its stdout, or VMError with its stderr."""
    try:
        done = subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True,
                              timeout=timeout_s, **kwargs)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise VMError(f"{what}: {exc}") from None
    if done.returncode != 0:
        raise VMError(f"{what} failed (exit {done.returncode}): "
                      + done.stderr.decode(errors="replace").strip()[-1000:])
    return done.stdout.decode(errors="replace")


def _image_format(path: Path) -> str:
    info = json.loads(_run([QEMU_IMG, "info", "--output=json", str(path)], "qemu-img info"))
    return info.get("format", "raw")


# --------------------------------------------------------------------------- image


def _build_image(force: bool, log: Callable[[str], None]) -> str:
    """The build behind QemuProvider.build_image (see the module doc)."""
    for tool, package in ((QEMU_IMG, "qemu-utils"), ("mkfs.ext4", "e2fsprogs"),
                          ("apt-get", "apt"), ("dpkg-deb", "dpkg")):
        if shutil.which(tool) is None:
            raise ProviderUnavailable(f"building the qemu image needs {tool}; install it "
                                      f"with: apt-get install {package}")
    out = image_dir()
    out.mkdir(parents=True, exist_ok=True)
    with open(out / ".build.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # two builds at once: the second finds the first's
        manifest = _read_json(out / "image.json")
        if (not force and manifest and manifest.get("inputs") == image_inputs()
                and all((out / n).is_file() for n in _IMAGE_FILES)):
            log(f"[image] qemu image is current: {out} (built {manifest.get('built')}); "
                "--force rebuilds it")
            return str(out / "base.qcow2")
        started = time.monotonic()
        with tempfile.TemporaryDirectory(prefix=".build-", dir=out) as work_name:
            work = Path(work_name)
            kernel_version = _fetch_packages(work, log)
            modules = work / "pkgs" / "lib" / "modules" / kernel_version
            log(f"[image] initramfs: busybox + {', '.join(INITRD_MODULES)} (and dependencies)")
            _write_initrd(work / "initrd.img", work / "pkgs" / "bin" / "busybox", modules)
            tree = images.build_rootfs(work / "rootfs", log=log)
            _install_guest(tree)
            log("[image] ext4 filesystem from the tree (mkfs.ext4 -d), then qcow2")
            _make_disk(tree, work / "disk.ext4", work / "base.qcow2")
            shutil.copyfile(next((work / "pkgs" / "boot").glob("vmlinuz-*")),
                            work / "vmlinuz")
            for name in _IMAGE_FILES:
                (work / name).replace(out / name)  # a running VM keeps its open old inode
        sizes = {n: (out / n).stat().st_size for n in _IMAGE_FILES}
        build_s = time.monotonic() - started
        _write_json(out / "image.json", {
            "inputs": image_inputs(), "kernel": kernel_version,
            "built": time.strftime("%Y-%m-%d %H:%M:%S"), "build_s": round(build_s, 1),
            "sizes": sizes})
        log(f"[image] qemu image built in {build_s:.0f}s: {out} (kernel {kernel_version}; "
            + ", ".join(f"{n} {s / 1e6:.0f} MB" for n, s in sizes.items()) + ")")
        return str(out / "base.qcow2")


def _fetch_packages(work: Path, log: Callable[[str], None]) -> str:
    """apt-get download the kernel (what linux-image-amd64 depends on) and busybox-static,
    unpack both into work/pkgs; return the kernel version."""
    depends = _run(["apt-cache", "depends", "linux-image-amd64"], "apt-cache depends")
    kernel_pkg = next((line.split(":", 1)[1].strip() for line in depends.splitlines()
                       if line.strip().startswith("Depends:")
                       and "linux-image-" in line), None)
    if kernel_pkg is None:
        raise VMError("apt-cache knows no linux-image-amd64; run apt-get update first")
    debs = work / "debs"
    debs.mkdir()
    os.chmod(debs, 0o777)  # apt's download sandbox user must be able to write here
    log(f"[image] apt-get download {kernel_pkg} busybox-static")
    _run(["apt-get", "download", "-q", kernel_pkg, "busybox-static"], "apt-get download",
         cwd=debs)
    for deb in sorted(debs.glob("*.deb")):
        _run(["dpkg-deb", "-x", str(deb), str(work / "pkgs")], "dpkg-deb -x")
    return kernel_pkg[len("linux-image-"):]


def _install_guest(tree: Path) -> None:
    """The guest agent and guest-init into the tree; a root home and hostname."""
    agent = tree / images.GUEST_AGENT_PATH.lstrip("/")
    agent.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(_AGENT_SOURCE, agent)
    agent.chmod(0o644)
    init = tree / GUEST_INIT_PATH.lstrip("/")
    init.parent.mkdir(parents=True, exist_ok=True)
    init.write_text(GUEST_INIT)
    init.chmod(0o755)
    (tree / "root").mkdir(mode=0o700, exist_ok=True)
    (tree / "etc" / "hostname").write_text("guest\n")


def _make_disk(tree: Path, raw: Path, qcow2: Path) -> None:
    used = sum(p.lstat().st_size for p in tree.rglob("*") if not p.is_symlink())
    size_mb = used // 2**20 + DISK_HEADROOM_MB
    with open(raw, "wb") as handle:
        handle.truncate(size_mb * 2**20)  # sparse
    # no journal: overlays are thrown away, never recovered after a crash
    _run(["mkfs.ext4", "-q", "-F", "-L", "pr-root", "-O", "^has_journal",
          "-E", "root_owner=0:0", "-d", str(tree), str(raw)], "mkfs.ext4 -d")
    _run([QEMU_IMG, "convert", "-q", "-f", "raw", "-O", "qcow2", str(raw), str(qcow2)],
         "qemu-img convert")
    raw.unlink()


def _write_initrd(dest: Path, busybox: Path, modules_dir: Path) -> None:
    """A gzipped newc cpio: /init, busybox, the modules and the order to load them in."""
    order = _module_order(modules_dir, INITRD_MODULES)
    entries: list[tuple[str, int, bytes]] = [  # (path, mode, content)
        ("bin", 0o40755, b""), ("dev", 0o40755, b""), ("proc", 0o40755, b""),
        ("newroot", 0o40755, b""), ("lib", 0o40755, b""), ("lib/modules", 0o40755, b""),
        ("init", 0o100755, INITRD_INIT.encode()),
        ("bin/busybox", 0o100755, busybox.read_bytes()),
        ("modules", 0o100644, "".join(f"{name}\n" for name, _ in order).encode()),
    ]
    entries += [(f"lib/modules/{name}.ko", 0o100644, path.read_bytes()) for name, path in order]
    archive = bytearray()
    for ino, (path, mode, data) in enumerate(entries, start=1):
        archive += _cpio_entry(path, mode, data, ino)
    # the kernel opens /dev/console for init's stdio before /init runs
    archive += _cpio_entry("dev/console", 0o20600, b"", len(entries) + 1, rdev=(5, 1))
    archive += _cpio_entry("TRAILER!!!", 0, b"", 0)
    dest.write_bytes(gzip.compress(bytes(archive), compresslevel=6))


def _cpio_entry(path: str, mode: int, data: bytes, ino: int,
                rdev: tuple[int, int] = (0, 0)) -> bytes:
    name = path.encode() + b"\0"
    fields = (ino, mode, 0, 0, 1, 0, len(data), 0, 0, rdev[0], rdev[1], len(name), 0)
    header = b"070701" + b"".join(b"%08X" % f for f in fields)
    pad = lambda n: b"\0" * (-n % 4)  # noqa: E731
    return header + name + pad(len(header) + len(name)) + data + pad(len(data))


def _module_order(modules_dir: Path, wanted: tuple[str, ...]) -> list[tuple[str, Path]]:
    """``wanted`` and their dependencies (from each .ko's modinfo), dependencies first;
    modules built into the kernel are skipped."""
    paths = {p.name[:-3].replace("-", "_"): p for p in modules_dir.rglob("*.ko")}
    builtin = {Path(line).name[:-3].replace("-", "_")
               for line in _read_bytes(modules_dir / "modules.builtin").decode().split()}
    order: list[tuple[str, Path]] = []
    seen: set[str] = set()

    def visit(name: str) -> None:
        if name in seen or name in builtin:
            return
        seen.add(name)
        if name not in paths:
            raise VMError(f"kernel module {name} is neither built in nor in {modules_dir}")
        for dep in _modinfo(paths[name]).get("depends", "").split(","):
            if dep:
                visit(dep.replace("-", "_"))
        order.append((name, paths[name]))

    for name in wanted:
        visit(name)
    return order


def _modinfo(path: Path) -> dict[str, str]:
    """The key=value pairs of an ELF64 kernel module's .modinfo section."""
    data = path.read_bytes()
    shoff, = struct.unpack_from("<Q", data, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", data, 0x3A)

    def section(index: int) -> tuple[int, int, int]:
        name, _type, _flags, _addr, offset, size = struct.unpack_from(
            "<IIQQQQ", data, shoff + index * shentsize)
        return name, offset, size

    _, strtab, _ = section(shstrndx)
    for index in range(shnum):
        name, offset, size = section(index)
        if data[strtab + name:data.index(b"\0", strtab + name)] == b".modinfo":
            pairs = data[offset:offset + size].split(b"\0")
            return dict(p.decode(errors="replace").partition("=")[::2] for p in pairs if b"=" in p)
    return {}
