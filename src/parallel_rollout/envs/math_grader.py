"""The math mode's grader: math-verify in a process of its own, bounded by a deadline.

::

    env loop thread ─► grade(expected, extracted, timeout_s)
                          │ takes an idle grader (or starts one: ``python -m`` this module,
                          │ math-verify imported and its LaTeX parser built once, ~1 s)
                          ▼
                        grader process ── one JSON line in, one JSON line out per grading
                          └─ past timeout_s of its CPU: SIGKILLed; the grading is ``timeout``,
                             and the next one starts a fresh grader

Why a process: math-verify bounds its work with ``signal.alarm``, which Python allows only
on the main thread, and envs run on a worker's loop threads; and a short answer can be
ruinous (``9^{9^{9}}`` is ten characters that sympy would spend hours on), so the bound
must be able to kill. Why not ``os.fork()`` of the worker (the former way): the worker is
multi-threaded, and a child forked while another thread holds a lock (an import, a stream,
a library's cache) can hang on it forever, which scored a correct answer ``timeout``. Nor a
``multiprocessing`` forkserver or pool: the worker is a daemonic process, and those may not
have children. A grader is started with ``subprocess`` (vfork + exec: no code of the
threaded parent runs in the child), is single-threaded itself, and serves many gradings.

Graders are per process (one per env loop that grades at once, reused), follow their
parent (its exit closes and reaps them, a worker's too, so that none is left to a pid 1 that
reaps nothing; its death closes their stdin and they exit; a worker's process-tree kill takes
them too), and bound each grading's CPU time themselves, so a grader orphaned mid-grading dies
within ``CPU_LIMIT_S``. When math-verify is missing, every grading says how to install it.

Whose doing a grader's death is: ``math_grader_deaths``. What an answer says that math-verify's
parse loses or misreads (a false equation, a dropped negation, a tiny decimal): ``math_answers``.
"""

from __future__ import annotations

import atexit
import json
import logging
import os
import resource
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

from ..errors import GraderKilled
from ..guest.agent_output import readable_within
from .math_answers import as_latex, as_parsed_latex, misread, off_in_size
from .math_grader_deaths import CPU_LIMIT_S, GraderDied, GraderError, death_verdict, oom_file, oom_kills

#: seconds one grade (parse both answers and compare them) may take
DEFAULT_GRADE_TIMEOUT_S = 5.0
#: seconds a new grader may take to import math-verify (a loaded machine is slow)
STARTUP_TIMEOUT_S = 120.0
#: a grading's deadline counts its grader's CPU seconds; this many times the deadline in wall
#: time is how long it may wait for CPU a busy machine does not give it (past it, a grader that
#: used less than its deadline could not run: not the answer's ``timeout``)
STARVED_WALL_FACTOR = 6
#: MB of address space a grading may take beyond what its grader holds as it begins (~90 MB warmed up)
MEMORY_LIMIT_MB = 256
#: seconds of one clock tick, the unit of /proc/PID/stat's CPU times
_TICK_S = 1 / os.sysconf("SC_CLK_TCK")
#: what to do when math-verify is missing
INSTALL_HINT = "math-verify is not installed: pip install 'parallel-rollout[math]'"


# -- inside a grader ---------------------------------------------------------------------------


def grade_now(expected: str, extracted: str) -> dict[str, Any]:
    """Parse both answers and compare them with math-verify, in this thread, unbounded."""
    from math_verify import parse, verify

    gold = as_parsed_latex(expected, parse(as_latex(expected), parsing_timeout=None))
    if not gold:
        return {"correct": False, "reason": "unparseable_expected"}
    pred = parse(as_latex(extracted), parsing_timeout=None)
    if not pred:
        return {"correct": False, "reason": "unparseable"}
    if extracted.strip() == expected.strip():  # the task's answer itself, whatever math-verify makes of it
        return {"correct": True, "reason": "correct", "parsed": str(pred[0])[:200]}
    flaw = misread(extracted, pred)
    if flaw is not None:
        detail, parsed = flaw
        return {"correct": False, "reason": "wrong", "detail": detail, "parsed": str(parsed)[:200]}
    correct = bool(verify(gold, pred, timeout_seconds=None)) and not off_in_size(gold[0], pred[0])
    # parse() falls back to the raw string when LaTeX parsing fails; only strings equal then.
    parsed = any(not isinstance(item, str) for item in pred)
    reason = "correct" if correct else ("wrong" if parsed else "unparseable")
    return {"correct": correct, "reason": reason, "parsed": str(pred[0])[:200]}


def _grade_guarded(expected: str, extracted: str) -> dict[str, Any]:
    try:
        return grade_now(expected, extracted)
    except MemoryError:
        return {"correct": False, "reason": "memory_limit",
                "error": f"the grading used up its memory limit ({MEMORY_LIMIT_MB} MB)"}
    except BaseException as exc:  # noqa: BLE001 - a grader crash is a 0, not an env error
        return {"correct": False, "reason": "grader_error", "error": f"{type(exc).__name__}: {exc}"[:500]}


class _DropTimeoutWarning(logging.Filter):
    """math-verify warns that its timeouts are off; they are, on purpose (the deadline is
    the parent's)."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not record.getMessage().startswith("Timeout is disabled")


def _limit_cpu() -> None:
    """Let this grading use ``CPU_LIMIT_S`` more CPU seconds: past them SIGXCPU ends it."""
    used = resource.getrusage(resource.RUSAGE_SELF)
    spent = int(used.ru_utime + used.ru_stime) + 1
    _, hard = resource.getrlimit(resource.RLIMIT_CPU)
    soft = spent + CPU_LIMIT_S
    if hard != resource.RLIM_INFINITY:
        soft = min(soft, hard)
    resource.setrlimit(resource.RLIMIT_CPU, (soft, hard))


def _limit_memory() -> int:
    """Bound this grader's address space to what it holds now and ``MEMORY_LIMIT_MB`` more
    (an allocation past it fails: MemoryError, which math-verify may swallow and call the
    answer wrong); what it holds now, in bytes. Set as each grading begins: every grading has
    the same room, whatever the gradings before it left held (RLIMIT_AS's hard limit, when
    set, bounds it)."""
    with open("/proc/self/statm") as statm:
        held = int(statm.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")
    _, hard = resource.getrlimit(resource.RLIMIT_AS)
    limit = held + (MEMORY_LIMIT_MB << 20)
    if hard != resource.RLIM_INFINITY:
        limit = min(limit, hard)
    resource.setrlimit(resource.RLIMIT_AS, (limit, hard))
    return held


def _peak_bytes() -> int:
    """The most address space this process ever held (VmPeak)."""
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmPeak:"):
                return int(line.split()[1]) << 10
    return 0


def serve() -> None:
    """A grader's main: warm up, say ready, then one JSON line out per JSON line in."""
    # Answers go to a private copy of stdout; whatever a library prints goes to stderr.
    out = os.fdopen(os.dup(1), "wb", buffering=0)
    os.dup2(2, 1)

    def answer(message: dict[str, Any]) -> None:
        out.write(json.dumps(message).encode() + b"\n")

    try:
        for name in ("math_verify.parser", "math_verify.grader"):
            logging.getLogger(name).addFilter(_DropTimeoutWarning())
        grade_now("1", "\\frac{1}{2}")  # builds the LaTeX parser once; small: cannot hang
    except ImportError:
        answer({"error": INSTALL_HINT})
        return
    except Exception as exc:  # noqa: BLE001 - reported to the parent, which records it
        answer({"error": f"{type(exc).__name__}: {exc}"[:500]})
        return
    answer({"ready": True})
    for line in sys.stdin.buffer:
        request = json.loads(line)
        held = _limit_memory()  # each grading the same room, whatever the ones before it left
        _limit_cpu()
        verdict = _grade_guarded(request["expected"], request["extracted"])
        # a grading that took half its memory allowance or more ends its grader (VmPeak is the
        # grader's whole life's: the next grading starts in a fresh one, with a peak of its own)
        retire = _peak_bytes() - held >= (MEMORY_LIMIT_MB << 20) // 2
        answer({**verdict, "retire": True} if retire else verdict)
        if retire:
            return


# -- in the process that grades ----------------------------------------------------------------


class Grader:
    """One grader process and the pipe to it."""

    def __init__(self) -> None:
        package_root = str(Path(__file__).resolve().parents[2])
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (package_root, env.get("PYTHONPATH")) if p)
        try:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", __name__], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL, env=env, close_fds=True)
        except OSError as exc:  # EAGAIN, ENOMEM: the machine's state, not the answer's
            raise GraderKilled(f"the math grader could not be started: {exc}") from None
        self._buffer = b""
        #: RLIMIT_CPU's hard limit, which the grader inherits from this process
        self.cpu_hard = resource.getrlimit(resource.RLIMIT_CPU)[1]
        try:
            hello = self._read_line(STARTUP_TIMEOUT_S)
        except GraderDied as died:
            self.kill()  # no answer is in it yet: not the answer's doing
            how = "was killed from outside" if died.code < 0 else "ended"
            raise GraderKilled(f"the math grader {how} as it started: {died}") from None
        except BaseException:
            self.kill()
            raise
        if hello is None:
            self.kill()
            raise GraderKilled(f"the math grader did not start within {STARTUP_TIMEOUT_S:g}s")
        if "error" in hello:  # math-verify's own (missing, or failing on its warm-up)
            self.kill()
            raise GraderError(hello["error"])
        #: the file counting OOM kills in its memory cgroup (None: none readable)
        self.oom_file = oom_file(self.proc.pid)

    @property
    def pid(self) -> int:
        """The grader's process id."""
        return self.proc.pid

    def grade(self, expected: str, extracted: str, timeout_s: float) -> dict[str, Any] | None:
        """The verdict, or None when ``timeout_s`` passed (the grader is killed then)."""
        oom_before = oom_kills(self.oom_file)
        try:
            self.proc.stdin.write(json.dumps({"expected": expected, "extracted": extracted}).encode() + b"\n")
            self.proc.stdin.flush()
        except OSError as exc:  # dead before it had the answer: not the answer's doing
            raise GraderKilled(f"the math grader is gone: {exc} (status {self.proc.poll()})") from None
        cpu_before = self._cpu_s()
        try:
            result = self._read_line(timeout_s, cpu_before)
        except GraderDied as died:
            if died.code == -signal.SIGKILL and oom_before is not None:
                died.oom_killed = (oom_kills(self.oom_file) or 0) > oom_before
            raise
        if result is None:
            stopped, used = self._stopped(), self._cpu_s() - cpu_before
            self.kill()
            if stopped:  # the answer cannot stop it: its deadline passed while it could not run
                raise GraderKilled(f"the math grader was {stopped} from outside during a grading "
                                   f"and reached its deadline ({timeout_s:g}s)")
            if used < timeout_s - _TICK_S:  # a busy machine gave it no CPU: it could not run
                raise GraderKilled(f"the math grader had {used:.2f} CPU seconds of its {timeout_s:g}s deadline "
                                   f"in {timeout_s * STARVED_WALL_FACTOR:g}s: the machine was too busy to grade")
        return result

    def _cpu_s(self) -> float:
        """The CPU seconds the grader has used (0 once it cannot be read: gone)."""
        try:
            with open(f"/proc/{self.proc.pid}/stat", "rb") as stat:
                fields = stat.read().rsplit(b")", 1)[1].split()
        except (OSError, IndexError):
            return 0.0
        return (int(fields[11]) + int(fields[12])) * _TICK_S

    def _stopped(self) -> str | None:
        """``stopped`` or ``traced`` when the grader is (SIGSTOP, ptrace), else None."""
        try:
            with open(f"/proc/{self.proc.pid}/status") as status:
                fields = dict(line.rstrip("\n").split(":\t", 1) for line in status if ":\t" in line)
        except OSError:
            return None
        if fields.get("TracerPid", "0") != "0":
            return "traced"
        return "stopped" if fields.get("State", "")[:1] in ("T", "t") else None

    def _read_line(self, timeout_s: float, cpu_before: float | None = None) -> dict[str, Any] | None:
        """The grader's answer; None past ``timeout_s``, or with ``cpu_before`` past ``timeout_s``
        CPU seconds since then, stopped, or ``STARVED_WALL_FACTOR`` times ``timeout_s`` in all."""
        now = time.monotonic()
        deadline, last = now + timeout_s, now + timeout_s * STARVED_WALL_FACTOR
        fd = self.proc.stdout.fileno()
        while b"\n" not in self._buffer:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                if cpu_before is None:
                    return None
                left = timeout_s - (self._cpu_s() - cpu_before)
                if left < _TICK_S or time.monotonic() >= last or self._stopped():
                    return None
                deadline = min(time.monotonic() + left, last)  # the CPU a busy machine did not give it
                continue
            if not readable_within(fd, remaining):  # poll: any fd, select() none above 1023
                continue
            chunk = os.read(fd, 65536)
            if not chunk:
                raise self._reaped()
            self._buffer += chunk
        line, _, self._buffer = self._buffer.partition(b"\n")
        return json.loads(line)

    def _reaped(self) -> GraderDied:
        """Reap the grader, which closed its output, with the CPU time it used."""
        if self.proc.returncode is not None:
            return GraderDied(self.proc.returncode, None)
        try:
            _, status, usage = os.wait4(self.proc.pid, 0)
        except ChildProcessError:
            return GraderDied(self.proc.wait(), None)
        self.proc.returncode = os.waitstatus_to_exitcode(status)
        return GraderDied(self.proc.returncode, usage.ru_utime + usage.ru_stime)

    def alive(self) -> bool:
        """Whether the process still runs."""
        return self.proc.poll() is None

    def kill(self) -> None:
        """SIGKILL it and reap it."""
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()
        for stream in (self.proc.stdin, self.proc.stdout):
            try:
                stream.close()
            except OSError:
                pass

    def close(self) -> None:
        """Let it exit (end of its input), then make sure it has."""
        try:
            self.proc.stdin.close()
            self.proc.wait(timeout=5)
        except (OSError, subprocess.TimeoutExpired):
            pass
        self.kill()


class GraderPool:
    """This process's idle graders; a grading takes one, or starts one."""

    def __init__(self) -> None:
        self._idle: list[Grader] = []
        self._lock = threading.Lock()
        self._pid = os.getpid()
        #: the process whose exit closes the idle graders (atexit and multiprocessing's finalizer)
        self._closer: int | None = None

    def grade(self, expected: str, extracted: str, timeout_s: float) -> dict[str, Any]:
        """One grading on an idle grader; ``{"reason": "timeout"}`` past ``timeout_s``."""
        grader = self._take()
        try:
            result = grader.grade(expected, extracted, timeout_s)
        except GraderDied as died:
            grader.kill()
            return death_verdict(died, grader.cpu_hard)
        except GraderError:
            grader.kill()
            raise
        except BaseException:
            grader.kill()  # its answer would be read by the next grading: never reuse it
            raise
        if result is None:
            return {"correct": False, "reason": "timeout", "error": f"grading took longer than {timeout_s:g}s"}
        if result.pop("retire", False):  # it exits: never handed another grading
            grader.close()
            return result
        with self._lock:
            self._idle.append(grader)
        return result

    def _take(self) -> Grader:
        with self._lock:
            if os.getpid() != self._pid:  # a forked copy of this process: not its graders
                self._idle, self._pid = [], os.getpid()
            if self._closer != self._pid:
                # a worker ends as a multiprocessing child, which runs its finalizers, not
                # atexit: its idle graders would outlive it, their zombies left to a pid 1
                # that may reap nothing (a container's); a finalizer is of its own process
                import multiprocessing.util  # here: a grader process (python -m this) needs none

                multiprocessing.util.Finalize(None, self.close, exitpriority=10)
                self._closer = self._pid
            while self._idle:
                grader = self._idle.pop()
                if grader.alive():
                    return grader
                grader.kill()
        return Grader()

    def close(self) -> None:
        """Stop every idle grader."""
        with self._lock:
            idle, self._idle = self._idle, []
        for grader in idle:
            grader.close()

    def pids(self) -> list[int]:
        """The idle graders' process ids."""
        with self._lock:
            return [g.pid for g in self._idle]


_pool = GraderPool()
atexit.register(_pool.close)


def grade_isolated(expected: str, extracted: str, timeout_s: float) -> dict[str, Any]:
    """``{"correct": bool, "reason": ...}`` from a grader process; safe on any thread,
    bounded by ``timeout_s``; raises only ``GraderKilled`` (a grader killed from outside:
    infrastructure)."""
    try:
        return _pool.grade(expected, extracted, timeout_s)
    except GraderError as exc:
        return {"correct": False, "reason": "grader_error", "error": str(exc)[:500]}


def close_graders() -> None:
    """Stop this process's idle graders (they also stop when it exits)."""
    _pool.close()


def grader_pids() -> list[int]:
    """The process ids of this process's idle graders."""
    return _pool.pids()


if __name__ == "__main__":
    serve()
