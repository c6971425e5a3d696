"""The math grader's isolation (envs/math_grader.py): grading from a process whose other
threads hold locks, never by forking it; a grading that hangs is killed and the next one
gets a fresh grader; a missing math-verify is refused with the way to install it."""

from __future__ import annotations

import json
import logging
import os
import re
import resource
import shutil
import signal
import subprocess
import sys
import threading
import time
from contextlib import contextmanager
from pathlib import Path

import psutil
import pytest

from conftest import ROOT, child_cgroup, limited_cgroup
from parallel_rollout.envs.math import grade
from parallel_rollout.envs.math_grader import MEMORY_LIMIT_MB, close_graders, grader_pids
from parallel_rollout.envs.math_grader_deaths import GraderDied, death_verdict
from parallel_rollout.errors import GraderKilled

pytest.importorskip("math_verify")

_forks: list[int] = []
_counting = threading.Event()
# Counts os.fork() of this process while a test watches (subprocess's vfork+exec runs no
# Python at-fork hook: only a fork that copies this process's threads' state is counted).
os.register_at_fork(before=lambda: _counting.is_set() and _forks.append(os.getpid()))


@pytest.fixture(autouse=True)
def stop_graders():
    """Stop this process's graders before the leak check."""
    yield
    close_graders()


def busy_threads(stop: threading.Event, count: int = 4) -> list[threading.Thread]:
    """Threads that hold locks most of the time: their own, logging's, an import's."""
    log = logging.getLogger("parallel_rollout.test_busy")
    lock = threading.Lock()

    def spin() -> None:
        while not stop.is_set():
            with lock:
                log.debug("busy")  # takes the logging module's and handler locks
                __import__("json.decoder")
                time.sleep(0.001)

    threads = [threading.Thread(target=spin, daemon=True) for _ in range(count)]
    for thread in threads:
        thread.start()
    return threads


@pytest.mark.slow
def test_grading_beside_busy_threads_holding_locks_never_forks_this_process():
    stop = threading.Event()
    threads = busy_threads(stop)
    results: list[dict] = []
    _forks.clear()
    _counting.set()
    try:
        graders = [threading.Thread(target=lambda i=i: results.append(grade(f"\\frac{{{i}}}{{2}}", f"{i / 2}")))
                   for i in range(1, 7)]
        for thread in graders:
            thread.start()
        for thread in graders:
            thread.join(timeout=120)
    finally:
        _counting.clear()
        stop.set()
        for thread in threads:
            thread.join()
    assert len(results) == 6 and all(r["correct"] for r in results), results
    assert _forks == [], "a grading forked the threaded process"
    # the graders are separate processes, started fresh (not copies of this one), and reused
    for pid in grader_pids():
        assert "parallel_rollout.envs.math_grader" in " ".join(psutil.Process(pid).cmdline())


def test_a_hanging_grading_times_out_its_grader_is_killed_and_the_next_works():
    assert grade("5", "5")["correct"]
    (first,) = grader_pids()
    started = time.monotonic()
    result = grade("5", "9^{9^{9}}", timeout_s=1.0)
    assert result["reason"] == "timeout" and result["correct"] is False, result
    assert time.monotonic() - started < 10
    assert not psutil.pid_exists(first) or psutil.Process(first).status() == psutil.STATUS_ZOMBIE
    assert grade("\\frac{1}{2}", "0.5")["correct"]
    assert grader_pids() and grader_pids()[0] != first


def test_a_math_run_without_math_verify_says_how_to_install_it(tmp_path):
    # a site that hides math_verify, as an install without the [math] extra
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text("import sys\nsys.modules['math_verify'] = None\n")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(site), str(ROOT / "src")]))
    proc = subprocess.run(
        [sys.executable, "-m", "parallel_rollout", "run", "--mode", "math", "--data",
         str(ROOT / "benchmarks" / "math_tasks.jsonl"), "--output-dir", str(tmp_path / "out")],
        capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode == 2, proc.stderr
    assert "pip install 'parallel-rollout[math]'" in proc.stderr


def test_a_graders_death_is_the_answers_only_when_its_own_limits_or_faults_explain_it():
    hard = 60
    for code, cpu_s, reason in [(-signal.SIGXCPU, 31.0, "cpu_limit"), (-signal.SIGKILL, 60.2, "cpu_limit"),
                                (-signal.SIGSEGV, 1.0, "grader_error"), (-signal.SIGABRT, None, "grader_error"),
                                (1, 0.5, "grader_error")]:
        verdict = death_verdict(GraderDied(code, cpu_s), hard)
        assert verdict["reason"] == reason and verdict["correct"] is False, (code, verdict)
    for code, cpu_s, limit in [(-signal.SIGKILL, 2.0, hard), (-signal.SIGKILL, 90.0, resource.RLIM_INFINITY),
                               (-signal.SIGKILL, None, hard), (-signal.SIGTERM, 1.0, hard)]:
        with pytest.raises(GraderKilled, match="killed from outside"):
            death_verdict(GraderDied(code, cpu_s), limit)


def test_a_grading_past_rlimit_cpus_hard_limit_is_the_answers_cpu_limit():
    """RLIMIT_CPU's hard limit ends a grader by SIGKILL, as a kill from outside would: the
    CPU time it used tells them apart (a grader inherits the hard limit of its parent)."""
    code = ("import resource, json\n"
            "from parallel_rollout.envs.math import grade\n"
            "resource.setrlimit(resource.RLIMIT_CPU, (8, 8))\n"
            "print(json.dumps(grade('5', '9^{9^{9}}', timeout_s=600)))\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=900,
                          env=dict(os.environ, PYTHONPATH=str(ROOT / "src")))
    assert done.returncode == 0, done.stderr[-2000:]
    verdict = json.loads(done.stdout.strip().splitlines()[-1])
    assert verdict["reason"] == "cpu_limit" and verdict["correct"] is False, verdict


def test_a_grader_is_bounded_in_memory_and_a_grading_that_used_much_ends_it():
    """``2^{2^{36}}`` grows an unbounded grader by gigabytes; a grader's address space is
    bounded, the grading fails, and the grader that held so much is not reused."""
    assert grade("5", "5")["correct"]
    (pid,) = grader_pids()
    limits = Path(f"/proc/{pid}/limits").read_text()
    soft = re.search(r"^Max address space\s+(\S+)", limits, re.M).group(1)
    assert soft != "unlimited", limits
    assert int(soft) <= psutil.Process(pid).memory_info().vms + (MEMORY_LIMIT_MB << 20)
    result = grade("5", "2^{2^{36}}", timeout_s=120)
    assert result["correct"] is False and result["reason"] != "timeout", result
    assert pid not in grader_pids()
    assert grade("\\frac{1}{2}", "0.5")["correct"]


SLOW_CORRECT = "The final answer is $\\\\boxed{2^{2^{26}}}$."  # 4^{2^{25}}: a second or so to compare


def _kill_graders(done: threading.Event, killed: list[str]) -> None:
    """SIGKILL this test's math grader twice from outside: once as it starts, once mid-grading
    (its CPU limit set, which it does as a grading begins)."""
    me, seen = os.getpid(), set()
    while len(killed) < 2 and not done.is_set():
        for proc in psutil.Process(me).children(recursive=True):
            try:
                if "parallel_rollout.envs.math_grader" not in " ".join(proc.cmdline()) or proc.pid in seen:
                    continue
                limits = Path(f"/proc/{proc.pid}/limits").read_text()
            except (psutil.Error, OSError):
                continue
            grading = re.search(r"^Max cpu time\s+\d", limits, re.M) is not None
            if not killed and time.time() - proc.create_time() > 0.3:
                seen.add(proc.pid)
                proc.kill()
                killed.append("starting" if not grading else "grading")
            elif killed and grading:
                seen.add(proc.pid)
                proc.kill()
                killed.append("grading")
        time.sleep(0.02)


def test_a_grader_killed_from_outside_is_retried_not_the_answers_failure(tmp_path):
    """Through the CLI: a correct answer whose grader is SIGKILLed from outside, as it starts
    and then mid-grading, is retried (``GraderKilled``: infrastructure) and scores 1."""
    from click.testing import CliRunner

    from parallel_rollout.cli import main

    data = tmp_path / "math.jsonl"
    data.write_text(json.dumps({"id": "big", "mode": "math", "problem": "4^{2^{25}}?", "answer": "4^{2^{25}}"}) + "\n")
    agent = tmp_path / "agent.py"
    agent.write_text(f"import json, sys\nfor line in sys.stdin:\n    print(json.dumps(\"{SLOW_CORRECT}\"), flush=True)\n")
    done, killed = threading.Event(), []
    killer = threading.Thread(target=_kill_graders, args=(done, killed), daemon=True)
    killer.start()
    try:
        result = CliRunner().invoke(main, [
            "--mode", "math", "--data", str(data), "--agent", "command", "--agent-cmd",
            f"{sys.executable} {agent}", "--num-rollouts", "1", "--max-retries", "2",
            "--output-dir", str(tmp_path / "out"), "--run-id", "mathkill", "--no-progress"])
    finally:
        done.set()
        killer.join(5)
    assert result.exit_code == 0, (result.output[-3000:], result.exception)
    records = [json.loads(line) for line in (tmp_path / "out" / "mathkill" / "results.jsonl").read_text().splitlines()]
    assert records[0]["status"] != "failure", records[0]  # once: grader_error, reward 0, final
    assert killed == ["starting", "grading"], killed
    assert [(r["status"], r["infrastructure"], r["final"]) for r in records] == [
        ("worker_died", True, False), ("worker_died", True, False), ("success", False, True)], records
    assert all(r["failure"]["type"] == "GraderKilled" for r in records[:2]), records


def test_a_grader_stopped_from_outside_past_its_deadline_is_not_the_answers_timeout():
    """SIGSTOP from outside holds a grader until its deadline: it could not run, so that is
    ``GraderKilled`` (retried), not the answer's ``timeout``."""
    assert grade("5", "5")["correct"]
    (pid,) = grader_pids()
    timer = threading.Timer(0.3, os.kill, (pid, signal.SIGSTOP))
    timer.start()
    try:
        with pytest.raises(GraderKilled, match="stopped from outside"):
            grade("4^{2^{25}}", "2^{2^{26}}", timeout_s=2.0)
    finally:
        timer.cancel()
    assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    assert grade("\\frac{1}{2}", "0.5")["correct"]


@contextmanager
def cpu_share(pid: int, percent: int):
    """``pid`` in a child of our own cpu cgroup allowed ``percent`` % of one CPU: the share a
    busy machine leaves it. Root only; removed after."""
    quota = str(percent * 1000)
    with child_cgroup("cpu", lambda version: {"cpu.max": f"{quota} 100000"} if version == 2 else
                      {"cpu.cfs_period_us": "100000", "cpu.cfs_quota_us": quota}, "pr-busy") as path:
        (path / "cgroup.procs").write_text(str(pid))
        try:
            yield
        finally:
            if psutil.pid_exists(pid):
                (path.parent / "cgroup.procs").write_text(str(pid))


def test_a_grading_a_busy_machine_gave_no_cpu_until_its_deadline_is_not_the_answers_timeout():
    """The deadline counts the grader's CPU seconds: a grader held to 5% of a CPU (a busy
    machine's share) that used less than its deadline in 6 times it could not run: ``GraderKilled``
    (retried), not the answer's ``timeout`` (a grading that used its deadline is: the test above)."""
    assert grade("5", "5")["correct"]
    (pid,) = grader_pids()
    with cpu_share(pid, 5), pytest.raises(GraderKilled, match=r"CPU seconds of its 0.5s deadline in 3s: the machine was too busy"):
        grade("4^{2^{25}}", "2^{2^{26}}", timeout_s=0.5)
    assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE


def test_a_grader_that_cannot_start_is_infrastructure_not_the_answers_0(monkeypatch):
    """A grader that cannot be spawned (EAGAIN, ENOMEM), ends as it starts, or does not start
    within its start timeout has no answer in it: ``GraderKilled`` (retried), not the answer's
    ``grader_error``."""
    import errno

    from parallel_rollout.envs import math_grader

    close_graders()

    def no_fork(*args, **kwargs):
        raise BlockingIOError(errno.EAGAIN, "Resource temporarily unavailable")

    with monkeypatch.context() as patch:
        patch.setattr(math_grader.subprocess, "Popen", no_fork)
        with pytest.raises(GraderKilled, match="could not be started"):
            grade("5", "5")
    with monkeypatch.context() as patch:
        patch.setattr(math_grader.sys, "executable", shutil.which("false"))  # exits 1 at once
        with pytest.raises(GraderKilled, match="ended as it started"):
            grade("5", "5")
    with monkeypatch.context() as patch:
        patch.setattr(math_grader, "STARTUP_TIMEOUT_S", 0.001)
        with pytest.raises(GraderKilled, match="did not start within"):
            grade("5", "5")
    assert grade("5", "5")["correct"]


def test_an_oom_kill_during_a_grading_is_the_answers_memory_limit():
    verdict = death_verdict(GraderDied(-signal.SIGKILL, 2.0, oom_killed=True), 60)
    assert verdict["reason"] == "memory_limit" and verdict["correct"] is False, verdict
    with pytest.raises(GraderKilled, match="killed from outside"):
        death_verdict(GraderDied(-signal.SIGKILL, 2.0, oom_killed=False), 60)


def test_a_grader_oom_killed_in_its_memory_cgroup_is_the_answers_memory_limit():
    """Under a memory cgroup tighter than the grader's own RLIMIT_AS room, the answer's growth
    gets the grader OOM-killed (SIGKILL, below its CPU limit): the cgroup's ``oom_kill``
    count, up during the grading, makes it the answer's ``memory_limit``, not a kill from
    outside retried until it is never graded."""
    with limited_cgroup(180, prefix="pr-grader-oom") as cgroup:  # ~80 MB grader, ~20 MB parent: no room for 256 MB more
        code = ("import json, os, sys\n"
                "open(sys.argv[1] + '/cgroup.procs', 'w').write(str(os.getpid()))\n"
                "from parallel_rollout.envs.math import grade\n"
                "assert grade('5', '5')['correct']\n"
                "print(json.dumps(grade('5', '2^{2^{36}}', timeout_s=120)))\n")
        done = subprocess.run([sys.executable, "-c", code, str(cgroup)], capture_output=True, text=True,
                              timeout=600, env=dict(os.environ, PYTHONPATH=str(ROOT / "src")))
    assert done.returncode == 0, done.stderr[-2000:]
    verdict = json.loads(done.stdout.strip().splitlines()[-1])
    assert verdict["reason"] == "memory_limit" and verdict["correct"] is False, verdict


def test_every_grading_gets_the_same_memory_room(tmp_path, monkeypatch):
    """A grading that leaves its grader 60 MB bigger (kept: less than the growth that retires
    a grader) does not take that from the next grading's room: RLIMIT_AS is set as each
    grading begins, to what the grader holds then and MEMORY_LIMIT_MB more."""
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(
        "import math_verify\n"
        "kept, parse = [], math_verify.parse\n"
        "def growing(text, *args, **kwargs):\n"
        "    if 'grow' in text:\n"
        "        kept.append(bytearray(60 << 20))\n"
        "    return parse(text, *args, **kwargs)\n"
        "math_verify.parse = growing\n")
    close_graders()
    monkeypatch.setenv("PYTHONPATH", str(site))
    assert grade("5", "5")["correct"]
    (pid,) = grader_pids()
    grade("5", "grow")
    assert grader_pids() == [pid]  # not retired
    assert grade("5", "5")["correct"] and grader_pids() == [pid]
    limits = Path(f"/proc/{pid}/limits").read_text()
    soft = int(re.search(r"^Max address space\s+(\S+)", limits, re.M).group(1))
    room = soft - psutil.Process(pid).memory_info().vms
    assert room >= (MEMORY_LIMIT_MB - 8) << 20, room >> 20


def test_a_grader_s_oom_count_is_read_from_the_nearest_cgroup_with_the_memory_controller(monkeypatch):
    """On a cgroup v2 host a worker runs in a cgroup of its own without controllers
    (process_group.py): its graders' OOM kills are counted in the nearest one above that has
    memory.events (hierarchical), not lost."""
    import builtins
    import io

    from parallel_rollout.envs import math_grader_deaths

    files = {"/proc/123/cgroup": "0::/run.slice/parallel-rollout-workers/123\n",
             "/sys/fs/cgroup/run.slice/memory.events": "low 0\nhigh 0\nmax 3\noom 1\noom_kill 2\n"}

    def fake_open(name, *args, **kwargs):
        if name in files:
            return io.StringIO(files[name])
        if str(name).startswith(("/proc/", "/sys/")):
            raise FileNotFoundError(name)
        return builtins.open(name, *args, **kwargs)

    monkeypatch.setattr(math_grader_deaths, "open", fake_open, raising=False)
    assert math_grader_deaths.oom_file(123) == "/sys/fs/cgroup/run.slice/memory.events"
    assert math_grader_deaths.oom_kills(math_grader_deaths.oom_file(123)) == 2
