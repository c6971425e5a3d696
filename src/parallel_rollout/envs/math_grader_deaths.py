"""Whose doing a math grader's death is: the answer's (graded 0) or the machine's
(``GraderKilled``: infrastructure, retried), from how it ended (``death_verdict``) and its
memory cgroup's count of OOM kills (``oom_file``, ``oom_kills``).

A grading bounded by the grader's own limits is the answer's: past its deadline it is
``timeout``; past its CPU limit (SIGXCPU, or SIGKILL at RLIMIT_CPU's hard limit, which the
kernel sends itself) ``cpu_limit``; past its memory limit (``MEMORY_LIMIT_MB`` of address space
more than the grader holds as the grading begins: ``2^{2^{36}}`` would grow by gigabytes; or
the OOM killer's SIGKILL during the grading, told by its memory cgroup's ``oom_kill`` count,
see ``oom_file``) ``memory_limit``; a crash of the grading (SIGSEGV, SIGABRT …: a fault of its
own) or an exit ``grader_error``; each graded 0, since the same answer would do it again. The
answer is a string and signals nothing, so a grader that died of any other signal (SIGKILL
below its CPU limit with no OOM kill counted, SIGTERM …) was killed from outside:
``GraderKilled``, infrastructure, retried, never the answer's 0. So is a grader found dead
before it was handed the answer, one that could not be started (spawning failed: EAGAIN,
ENOMEM), did not start within ``STARTUP_TIMEOUT_S`` or ended as it started (no answer in it
yet; math-verify's own reported error at start stays ``grader_error``), and one that reached
its deadline stopped (SIGSTOP) or traced from outside, or starved of CPU
(``STARVED_WALL_FACTOR``): it could not run.
"""

from __future__ import annotations

import resource
import signal
from typing import Any

from ..errors import GraderKilled

#: CPU seconds one grading may use before the kernel stops its grader, even as an orphan
CPU_LIMIT_S = 30
#: signals a grader raises on itself when its grading faults: the answer's doing
CRASH_SIGNALS = frozenset({signal.SIGSEGV, signal.SIGABRT, signal.SIGBUS, signal.SIGFPE, signal.SIGILL})


class GraderError(Exception):
    """A grader could not start or answer (math-verify missing, the process died)."""


class GraderDied(GraderError):
    """The grader ended during a grading: its exit ``code`` (``Popen.returncode``), the CPU
    seconds it used (None when not known) and whether the OOM killer killed it (``oom_killed``:
    its memory cgroup counted an OOM kill during the grading)."""

    def __init__(self, code: int, cpu_s: float | None, oom_killed: bool = False) -> None:
        super().__init__(f"the grader ended with status {code}")
        self.code, self.cpu_s, self.oom_killed = code, cpu_s, oom_killed


def oom_file(pid: int) -> str | None:
    """The file that counts the OOM kills of ``pid``'s memory cgroup (``oom_kill``: v1's
    ``memory.oom_control``, v2's ``memory.events``; the kernel counts a kill there before it
    sends the SIGKILL, whichever limit, the cgroup's, an ancestor's or the machine's, was
    reached); None where none is readable (no memory cgroup, another cgroup namespace). The
    count is the cgroup's, which the worker and its other graders share: a grader killed from
    outside while the OOM killer killed another of them would be taken for OOM-killed."""
    try:
        with open(f"/proc/{pid}/cgroup") as lines:
            entries = [line.rstrip("\n").split(":", 2) for line in lines]
    except OSError:
        return None
    candidates = [f"/sys/fs/cgroup/memory{path}/memory.oom_control"
                  for _, controllers, path in entries if "memory" in controllers.split(",")]
    # v2: the nearest cgroup up from ``pid``'s that has the memory controller (a worker's own,
    # process_group.py, has none: its parent's memory.events counts its kills too)
    candidates += [f"{root}{folder}/memory.events" for _, controllers, path in entries if not controllers
                   for folder in _upward(path) for root in ("/sys/fs/cgroup", "/sys/fs/cgroup/unified")]
    return next((name for name in candidates if oom_kills(name) is not None), None)


def _upward(path: str) -> list[str]:
    """``path`` and each cgroup above it, the root's as ``""``."""
    parts = path.strip("/").split("/") if path.strip("/") else []
    return ["/" + "/".join(parts[:n]) if n else "" for n in range(len(parts), -1, -1)]


def oom_kills(name: str | None) -> int | None:
    """The ``oom_kill`` count in ``name`` (see ``oom_file``), None when not readable."""
    if name is None:
        return None
    try:
        with open(name) as fields:
            counts = dict(line.split() for line in fields if len(line.split()) == 2)
        return int(counts["oom_kill"])
    except (OSError, KeyError, ValueError):
        return None


def death_verdict(died: GraderDied, cpu_hard: int) -> dict[str, Any]:
    """The verdict of a grading whose grader ``died`` when its own limits or a fault of its
    own explain it (RLIMIT_CPU's hard limit ``cpu_hard``); else ``GraderKilled``: it was
    killed from outside (see the module doc)."""
    code = died.code
    at_hard_limit = (cpu_hard != resource.RLIM_INFINITY and died.cpu_s is not None
                     and died.cpu_s >= cpu_hard - 1)
    if code == -signal.SIGXCPU or (code == -signal.SIGKILL and at_hard_limit):
        return {"correct": False, "reason": "cpu_limit",
                "error": f"the grading used its CPU limit ({CPU_LIMIT_S}s, or RLIMIT_CPU's hard limit)"}
    if code == -signal.SIGKILL and died.oom_killed:  # the answer's growth, below RLIMIT_AS
        return {"correct": False, "reason": "memory_limit",
                "error": "the grading used up its memory cgroup's limit: the OOM killer killed its grader"}
    if code >= 0 or -code in CRASH_SIGNALS:
        return {"correct": False, "reason": "grader_error", "error": str(died)}
    raise GraderKilled(f"the math grader was killed from outside during a grading: it died of "
                       f"{signal.Signals(-code).name if -code in signal.valid_signals() else -code}"
                       f" ({died.cpu_s if died.cpu_s is not None else '?'} CPU seconds used), which no "
                       "limit of its own sends")
