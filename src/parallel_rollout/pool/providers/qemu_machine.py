"""Talking to QEMU itself: which accelerator really works here (KVM or TCG), whether the
host's RAM holds the pool's guests, and QMP.

**KVM or TCG.** ``/dev/kvm`` existing proves little (nested virtualisation that hangs, a
device without permission); :func:`detect_accelerator` boots the image's kernel under KVM
until its initramfs prints a marker, and falls back to TCG otherwise. The answer is cached
per host boot and QEMU binary (``accel.json`` next to the image), and
``$PARALLEL_ROLLOUT_QEMU_ACCEL`` forces one.

**RAM.** A guest's ``-m`` is memory the host must give it as it runs (a snapshot brings
back every page it had), so :func:`check_host_memory` refuses a pool whose guests together
need more than the host has: QEMU would start them all, and the OOM killer end them mid-run.

**QMP.** One command per fresh connection on the VM's ``qmp.sock`` (:func:`qmp`), and
HMP commands through it (``savevm``/``loadvm``, :func:`qmp_hmp`), errors as VMError.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import socket
import subprocess
import threading
import time
from pathlib import Path

from ...errors import ConfigError, VMError
from .images import build_command
from .qemu_image import PROBE_MARKER, read_json, write_json, image_dir

log = logging.getLogger(__name__)

QEMU = "qemu-system-x86_64"
ACCEL_ENV = "PARALLEL_ROLLOUT_QEMU_ACCEL"
#: a working KVM boots the probe in about a second; a broken one hangs
KVM_PROBE_TIMEOUT_S = 15.0
QMP_TIMEOUT_S = 10.0

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
    key = f"{boot_id()}|{_qemu_version()}"
    cache_file = image_dir() / "accel.json"
    with _accel_lock:
        if use_cache and key in _accel_cache:
            return _accel_cache[key]
        cached = read_json(cache_file) if use_cache else None
        if cached and cached.get("key") == key and cached.get("accel") in ("kvm", "tcg"):
            _accel_cache[key] = cached["accel"]
            return cached["accel"]
        accel, reason = probe_kvm(probe_timeout_s)
        log.info("qemu accelerator: %s (%s)", accel, reason)
        _accel_cache[key] = accel
        try:
            write_json(cache_file, {"key": key, "accel": accel, "reason": reason,
                                    "probed": time.time()})
        except OSError:
            pass  # a read-only cache only costs a probe per process
        return accel


def probe_kvm(timeout_s: float) -> tuple[str, str]:
    """Boot the image's kernel under KVM until its initramfs prints the marker."""
    if not os.access("/dev/kvm", os.R_OK | os.W_OK):
        return "tcg", "/dev/kvm is missing or not accessible"
    # either image's kernel will do: both come from linux-image-amd64
    built = next((d for d in (image_dir(), image_dir(desktop=True))
                  if (d / "vmlinuz").is_file() and (d / "initrd.img").is_file()), image_dir())
    kernel, initrd = built / "vmlinuz", built / "initrd.img"
    if not (kernel.is_file() and initrd.is_file()):
        return "tcg", f"no built kernel to probe KVM with ({build_command('qemu')})"
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


def boot_id() -> str:
    """This host boot's id (the accelerator cache is valid for one boot), or ``unknown``."""
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




def qmp_hmp(vm_dir: Path, command: str, timeout_s: float = QMP_TIMEOUT_S) -> str:
    """Run a silent human-monitor command over QMP; VMError when it fails or prints."""
    output = qmp(vm_dir, "human-monitor-command", {"command-line": command}, timeout_s)
    # HMP reports failures as text, not as QMP errors; savevm and loadvm print nothing else
    if output:
        raise VMError(f"QEMU {command!r}: {str(output).strip()}")
    return output


def qmp(vm_dir: Path, execute: str, arguments: dict | None = None,
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


def check_host_memory(memory_mb: int, vms: int, *, explicit: bool) -> None:
    """ConfigError when ``vms`` guests of ``memory_mb`` each cannot all fit in the host's RAM,
    or in a memory limit of the runner's cgroup (its guests are its processes:
    ``host_share.memory_total_mb``) when that is less (QEMU would start them, and the OOM
    killer would end them mid-run, or the run itself); a warning when they fit only beyond
    the memory the host has free now."""
    import psutil

    from .host_share import memory_total_mb

    need = vms * memory_mb
    total, ceiling = memory_total_mb()
    free = psutil.virtual_memory().available // 2**20
    where = f"this host's {total} MB of RAM" if ceiling is None else f"the runner's cgroup's memory limit, {ceiling}"
    if need > total:
        fits = total // memory_mb
        if not fits:
            raise ConfigError(f"one QEMU VM of {memory_mb} MB is more than {where}: lower --vm-memory-mb")
        setting = "--vm-memory-mb" if explicit else "the default guest RAM (--vm-memory-mb)"
        raise ConfigError(
            f"{vms} QEMU VMs of {memory_mb} MB each (the pool and its spares) need {need} MB, more "
            f"than {where}: use at most {fits} VMs in all (--num-vms plus --spare-vms), "
            f"or lower {setting}")
    if need > free:
        log.warning("%d QEMU VMs of %d MB each need up to %d MB; the host has %d MB free now",
                    vms, memory_mb, need, free)
