"""The qemu provider's guest image: a Debian kernel, a busybox initramfs, and a disk.

``parallel-rollout image build --provider qemu`` (``QemuProvider.build_image``) makes three
files under ``<cache>/qemu/``: ``vmlinuz`` from the package ``linux-image-amd64`` depends on
(``apt-get download``); ``initrd.img``, a tiny gzipped cpio written here — static busybox,
the virtio/ext4 modules in dependency order and an ``/init`` that loads them and hands over to
the real root; and ``base.qcow2``, the debootstrap tree of ``images.build_rootfs`` plus the
guest package (``images.guest_files``: the agent, the desktop's routes, the shims), the
process sandbox's seccomp filter (the agent loads it) and ``guest-init`` (a Python PID 1:
``qemu_guest_init``), turned into ext4 with ``mkfs.ext4 -d`` (no mount needed) and then into
qcow2. ``image.json`` records a hash of every input, so a changed agent, shim, filter or init
makes the image stale and a build with nothing changed is a no-op. With ``--desktop`` the same
three files go to ``<cache>/qemu-desktop/``, the tree holding
``images.guest_recipe(desktop=True)`` (the desktop and LibreOffice). The guest's user works in
``/home/user``, as on OSWorld's images and the other providers.
"""

from __future__ import annotations

import fcntl
import gzip
import hashlib
import json
import os
import platform
import shutil
import struct
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Callable

from ...errors import ProviderUnavailable, VMError
from . import grading_fronts, images, seccomp
from .qemu_guest_init import GUEST_INIT, GUEST_INIT_PATH, GUEST_SECCOMP_PATH, SANDBOX_UID

QEMU_IMG = "qemu-img"
#: what the initramfs prints when booted to probe KVM
PROBE_MARKER = "parallel-rollout-kvm-probe-ok"


def read_bytes(path: Path) -> bytes:
    """The file's bytes; empty when it cannot be read (a log not written yet)."""
    try:
        return path.read_bytes()
    except OSError:
        return b""


#: bump when the image recipe changes in a way the input hash does not capture
IMAGE_VERSION = 2


#: free space the guest gets on top of the tree (the ext4 image is sparse until written)
DISK_HEADROOM_MB = 1536


#: modules the initramfs loads (with their dependencies) to reach a virtio ext4 root and NIC
INITRD_MODULES = ("virtio_pci", "virtio_blk", "virtio_net", "crc32c_generic", "ext4")


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




def image_dir(desktop: bool = False) -> Path:
    """Where the built kernel, initramfs and base image live (those of desktop modes apart)."""
    return images.cache_dir() / ("qemu-desktop" if desktop else "qemu")


def image_inputs(desktop: bool = False) -> str:
    """Hash of what we put into an image; a built image with another hash is stale."""
    return images.recipe_key("qemu-image", IMAGE_VERSION, INITRD_INIT, GUEST_INIT,
                             INITRD_MODULES, images.guest_recipe(desktop), images.guest_digest(), grading_fronts.image_key(),
                             hashlib.sha256(guest_seccomp()).hexdigest())


def guest_seccomp() -> bytes:
    """The BPF program the guest's agent loads: the host's compiled filter, which is the
    guest's only where both are x86_64 (a filter checks the calling convention); empty
    otherwise, and the guest then runs without one."""
    return seccomp.program() if platform.machine() == "x86_64" else b""


IMAGE_FILES = ("vmlinuz", "initrd.img", "base.qcow2")


def damaged_files(where: Path, manifest: dict) -> list[str]:
    """The image files in ``where`` that are missing or not the size the build recorded in
    ``manifest`` (a truncated copy, a disk that filled up): each as a phrase naming it."""
    found, sizes = [], manifest.get("sizes") or {}  # an image.json of old records none
    for name in IMAGE_FILES:
        try:
            actual = (where / name).stat().st_size
        except OSError:
            found.append(f"{name} is missing")
            continue
        if name in sizes and actual != sizes[name]:
            found.append(f"{name} has {actual} bytes, built with {sizes[name]}")
    return found


def read_json(path: Path) -> dict | None:
    """The JSON object in ``path``; None when it is missing, unreadable or not an object."""
    try:
        value = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return value if isinstance(value, dict) else None


def write_json(path: Path, value: dict) -> None:
    """Write ``value`` to ``path`` atomically (a temporary file, then a rename)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(value, indent=1))
    tmp.replace(path)


def run(argv: list[str], what: str, timeout_s: float = 600.0, **kwargs) -> str:
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


def image_format(path: Path) -> str:
    """The disk image's format as ``qemu-img info`` reports it (``raw`` when it names none)."""
    info = json.loads(run([QEMU_IMG, "info", "--output=json", str(path)], "qemu-img info"))
    return info.get("format", "raw")


def build_image(force: bool, log: Callable[[str], None], desktop: bool = False) -> str:
    """The build behind QemuProvider.build_image (see the module doc)."""
    for tool, package in ((QEMU_IMG, "qemu-utils"), ("mkfs.ext4", "e2fsprogs"),
                          ("apt-get", "apt"), ("dpkg-deb", "dpkg")):
        if shutil.which(tool) is None:
            raise ProviderUnavailable(f"building the qemu image needs {tool}; install it "
                                      f"with: apt-get install {package}")
    out = image_dir(desktop)
    out.mkdir(parents=True, exist_ok=True)
    with open(out / ".build.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # two builds at once: the second finds the first's
        manifest = read_json(out / "image.json")
        if (not force and manifest and manifest.get("inputs") == image_inputs(desktop)
                and all((out / n).is_file() for n in IMAGE_FILES) and not damaged_files(out, manifest)):
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
            tree = images.build_rootfs(work / "rootfs", **images.guest_recipe(desktop), log=log)
            _install_guest(tree)
            log("[image] ext4 filesystem from the tree (mkfs.ext4 -d), then qcow2")
            _make_disk(tree, work / "disk.ext4", work / "base.qcow2")
            shutil.copyfile(next((work / "pkgs" / "boot").glob("vmlinuz-*")),
                            work / "vmlinuz")
            for name in IMAGE_FILES:
                (work / name).replace(out / name)  # a running VM keeps its open old inode
        sizes = {n: (out / n).stat().st_size for n in IMAGE_FILES}
        build_s = time.monotonic() - started
        write_json(out / "image.json", {
            "inputs": image_inputs(desktop), "kernel": kernel_version,
            "built": time.strftime("%Y-%m-%d %H:%M:%S"), "build_s": round(build_s, 1),
            "sizes": sizes})
        log(f"[image] qemu image built in {build_s:.0f}s: {out} (kernel {kernel_version}; "
            + ", ".join(f"{n} {s / 1e6:.0f} MB" for n, s in sizes.items()) + ")")
        return str(out / "base.qcow2")


def _fetch_packages(work: Path, log: Callable[[str], None]) -> str:
    """apt-get download the kernel (what linux-image-amd64 depends on) and busybox-static,
    unpack both into work/pkgs; return the kernel version."""
    depends = run(["apt-cache", "depends", "linux-image-amd64"], "apt-cache depends")
    kernel_pkg = next((line.split(":", 1)[1].strip() for line in depends.splitlines()
                       if line.strip().startswith("Depends:")
                       and "linux-image-" in line), None)
    if kernel_pkg is None:
        raise VMError("apt-cache knows no linux-image-amd64; run apt-get update first")
    debs = work / "debs"
    debs.mkdir()
    os.chmod(debs, 0o777)  # apt's download sandbox user must be able to write here
    log(f"[image] apt-get download {kernel_pkg} busybox-static")
    run(["apt-get", "download", "-q", kernel_pkg, "busybox-static"], "apt-get download",
        cwd=debs)
    for deb in sorted(debs.glob("*.deb")):
        run(["dpkg-deb", "-x", str(deb), str(work / "pkgs")], "dpkg-deb -x")
    return kernel_pkg[len("linux-image-"):]


def _install_guest(tree: Path) -> None:
    """The guest package and guest-init into the tree; the user's home, name and a hostname."""
    for name, (data, mode) in images.guest_files().items():
        path = tree / name.lstrip("/")
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
        path.chmod(mode)
    grading_fronts.install_in_tree(tree)  # a check's /usr/bin/env, git … lead to the wrappers
    if program := guest_seccomp():
        (tree / GUEST_SECCOMP_PATH.lstrip("/")).write_bytes(program)
    init = tree / GUEST_INIT_PATH.lstrip("/")
    init.parent.mkdir(parents=True, exist_ok=True)
    init.write_text(GUEST_INIT)
    init.chmod(0o755)
    (tree / "root").mkdir(mode=0o700, exist_ok=True)
    (tree / "home" / "user").mkdir(mode=0o755, parents=True, exist_ok=True)
    for kind in ("passwd", "group"):  # the user's name: a desktop's bus and xterm need it
        path = tree / "etc" / kind
        path.write_text(images.with_guest_user(kind, path.read_text(), SANDBOX_UID))
    (tree / "etc" / "hostname").write_text("guest\n")


def _make_disk(tree: Path, raw: Path, qcow2: Path) -> None:
    used = sum(p.lstat().st_size for p in tree.rglob("*") if not p.is_symlink())
    size_mb = used // 2**20 + DISK_HEADROOM_MB
    with open(raw, "wb") as handle:
        handle.truncate(size_mb * 2**20)  # sparse
    # no journal: overlays are thrown away, never recovered after a crash
    run(["mkfs.ext4", "-q", "-F", "-L", "pr-root", "-O", "^has_journal",
         "-E", "root_owner=0:0", "-d", str(tree), str(raw)], "mkfs.ext4 -d")
    run([QEMU_IMG, "convert", "-q", "-f", "raw", "-O", "qcow2", str(raw), str(qcow2)],
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
               for line in read_bytes(modules_dir / "modules.builtin").decode().split()}
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
