"""The seccomp filter of a process sandbox: the kernel calls graded code may not make.

bubblewrap loads a compiled BPF program from a file descriptor (``bwrap --seccomp FD``) and
applies it to the sandbox's first process, so every process of the sandbox inherits it (a
filter can never be removed, only narrowed). The program is compiled here with libseccomp
(``libseccomp.so.2``, Debian's ``libseccomp2``) through ctypes: the library knows the syscall
numbers of the machine and writes a correct BPF program, including the check that the
calling convention is the native one (a 32-bit ``int 0x80`` call is killed, so no syscall
slips through under another number). Only the C library is needed, not a Python binding.

What is refused, with ``EPERM`` (programs see an ordinary "operation not permitted"):

* mounts and namespaces: ``mount``, ``umount2``, ``pivot_root``, ``chroot``, ``unshare``,
  ``setns``, and ``clone`` asking for a new namespace (``CLONE_NEW*``); ``clone3`` answers
  ``ENOSYS`` so that the C library falls back to ``clone``, whose flags a filter can read;
* other processes and the kernel's keyring: ``ptrace``, ``process_vm_readv/writev``,
  ``pidfd_getfd`` (another process's file descriptors: the agent's socket), ``keyctl``,
  ``add_key``, ``request_key``;
* the kernel itself: ``kexec_load``, ``kexec_file_load``, ``init_module``,
  ``finit_module``, ``delete_module``, ``bpf``, ``perf_event_open``, ``userfaultfd``,
  ``open_by_handle_at``, ``reboot``, ``swapon``, ``swapoff``, ``acct``, ``quotactl``,
  ``iopl``, ``ioperm``, ``syslog``;
* io_uring (``io_uring_setup``, ``io_uring_enter``, ``io_uring_register``: a steady source
  of kernel escapes, refused by Docker and containerd since 2023) and the new mount API
  (``fsopen``, ``fsconfig``, ``fsmount``, ``fspick``, ``move_mount``, ``open_tree``,
  ``mount_setattr``), which would otherwise fail only for want of a capability. A
  libseccomp too old to know their names gets their numbers (:data:`NEW_SYSCALLS`, the
  same on every architecture since Linux 5.1), so none is left out silently;
* ``io_setup`` (Linux native AIO) answers ``ENOSYS``, as a kernel built without AIO does:
  its contexts come from one pool for the whole machine (``fs.aio-max-nr``, 65536 events),
  so one VM could take them all and leave every other VM (and the host's databases) none.
  Programs that use it fall back to threads on ``ENOSYS`` (glibc's POSIX AIO never uses it).

A desktop VM (osworld) gets the same filter: its desktop and apps run as the commands'
unprivileged user, so VLC (which refuses root) needs no user namespace of its own, and
Chromium runs with ``--no-sandbox`` (``guest/desktop_routes.py``), as it must without one.

The program is compiled once per process and copied into a fresh memfd for every sandbox.
A docker container gets it too: its guest agent loads it from a file at start (``server.py
--seccomp``), on top of Docker's own profile, which lets io_uring through on some daemons.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import errno
import os
import threading

from ...errors import ProviderUnavailable

DENIED = (
    "mount", "umount2", "pivot_root", "chroot", "unshare", "setns",
    "ptrace", "process_vm_readv", "process_vm_writev", "pidfd_getfd",
    "keyctl", "add_key", "request_key",
    "kexec_load", "kexec_file_load", "init_module", "finit_module", "delete_module",
    "bpf", "perf_event_open", "userfaultfd", "open_by_handle_at", "reboot",
    "swapon", "swapoff", "acct", "quotactl", "iopl", "ioperm", "syslog",
    *("io_uring_setup", "io_uring_enter", "io_uring_register"),
    *("fsopen", "fsconfig", "fsmount", "fspick", "move_mount", "open_tree", "mount_setattr"),
)
#: answered ENOSYS, so that callers fall back: clone3 to clone (whose flags a filter can
#: read), io_setup to threads (its contexts are the whole machine's, see the module doc)
NOT_IMPLEMENTED = ("clone3", "io_setup")
#: syscalls added after Linux 5.0, numbered alike on every architecture (the kernel's
#: unified table): what a rule uses when libseccomp does not know the name
NEW_SYSCALLS = {"io_uring_setup": 425, "io_uring_enter": 426, "io_uring_register": 427,
                "open_tree": 428, "move_mount": 429, "fsopen": 430, "fsconfig": 431,
                "fsmount": 432, "fspick": 433, "mount_setattr": 442}
#: every CLONE_NEW* flag: cgroup, uts, ipc, user, pid, net, mount, time
CLONE_NEW_FLAGS = (0x02000000, 0x04000000, 0x08000000, 0x10000000, 0x20000000,
                   0x40000000, 0x00020000, 0x00000080)

_SCMP_ACT_ALLOW = 0x7FFF0000
_SCMP_CMP_MASKED_EQ = 7


def _act_errno(code: int) -> int:
    return 0x00050000 | (code & 0xFFFF)


class _ArgCmp(ctypes.Structure):
    """libseccomp's ``struct scmp_arg_cmp``."""

    _fields_ = [("arg", ctypes.c_uint), ("op", ctypes.c_int),
                ("datum_a", ctypes.c_uint64), ("datum_b", ctypes.c_uint64)]


_lock = threading.Lock()
#: the compiled program, once compiled
_program: list[bytes] = []


def _library() -> ctypes.CDLL:
    name = ctypes.util.find_library("seccomp") or "libseccomp.so.2"
    try:
        lib = ctypes.CDLL(name, use_errno=True)
    except OSError as exc:
        raise ProviderUnavailable(
            f"the process sandbox's seccomp filter needs libseccomp ({exc}); install it "
            "with: apt-get install libseccomp2") from None
    lib.seccomp_init.restype = ctypes.c_void_p
    lib.seccomp_init.argtypes = [ctypes.c_uint32]
    lib.seccomp_release.argtypes = [ctypes.c_void_p]
    lib.seccomp_syscall_resolve_name.argtypes = [ctypes.c_char_p]
    lib.seccomp_rule_add_array.argtypes = [ctypes.c_void_p, ctypes.c_uint32, ctypes.c_int,
                                           ctypes.c_uint, ctypes.POINTER(_ArgCmp)]
    lib.seccomp_export_bpf.argtypes = [ctypes.c_void_p, ctypes.c_int]
    return lib


def _compile() -> bytes:
    lib = _library()
    ctx = lib.seccomp_init(_SCMP_ACT_ALLOW)
    if not ctx:
        raise ProviderUnavailable("libseccomp cannot create a filter")
    try:
        def rule(name: str, action: int, *cmps: _ArgCmp) -> None:
            number = lib.seccomp_syscall_resolve_name(name.encode())
            if number < 0:
                number = NEW_SYSCALLS.get(name, number)
            if number < 0:
                return  # not a syscall of this architecture (iopl on arm64, say)
            array = (_ArgCmp * len(cmps))(*cmps) if cmps else None
            rc = lib.seccomp_rule_add_array(ctx, action, number, len(cmps), array)
            if rc < 0:
                raise ProviderUnavailable(f"libseccomp refused the rule for {name}: "
                                          f"{os.strerror(-rc)}")

        for name in DENIED:
            rule(name, _act_errno(errno.EPERM))
        for flag in CLONE_NEW_FLAGS:  # rules of one syscall are or-ed: any flag refuses
            rule("clone", _act_errno(errno.EPERM), _ArgCmp(0, _SCMP_CMP_MASKED_EQ, flag, flag))
        for name in NOT_IMPLEMENTED:
            rule(name, _act_errno(errno.ENOSYS))
        read_fd, write_fd = os.pipe()
        try:
            rc = lib.seccomp_export_bpf(ctx, write_fd)
            os.close(write_fd)
            write_fd = -1
            if rc < 0:
                raise ProviderUnavailable(f"libseccomp cannot export the filter: "
                                          f"{os.strerror(-rc)}")
            chunks = []
            while chunk := os.read(read_fd, 65536):
                chunks.append(chunk)
            return b"".join(chunks)
        finally:
            os.close(read_fd)
            if write_fd >= 0:
                os.close(write_fd)
    finally:
        lib.seccomp_release(ctx)


def program() -> bytes:
    """The compiled BPF program (compiled on first use); ProviderUnavailable without
    libseccomp."""
    with _lock:
        if not _program:
            _program.append(_compile())
        return _program[0]


def write(path) -> None:
    """The program into the file ``path`` (a guest agent loads it: ``server.py --seccomp``)."""
    with open(path, "wb") as handle:
        handle.write(program())


def program_fd() -> int:
    """A fresh file descriptor positioned at the start of the BPF program, for bwrap's
    ``--seccomp``; the caller closes it once bwrap has started."""
    data = program()
    fd = os.memfd_create("parallel-rollout-seccomp", os.MFD_CLOEXEC)
    os.write(fd, data)
    os.lseek(fd, 0, os.SEEK_SET)
    return fd
