"""A run's life as a user meets it: its folder, its processes, its signals and its end."""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import shutil
import signal
import subprocess
import sys
import time

import psutil
import pytest
from click.testing import CliRunner

from conftest import ROOT, shell_task, small_tmpfs, write_tasks
from parallel_rollout.cli import main
from parallel_rollout.exit_codes import EXIT_USAGE
from process_tree import needs_worker_cgroup, signal_at, sleeps_left, sleeps_of, worker_cgroups_usable
from test_runner import family, slow_tasks, start_cli, stop_signals_ignoring, wait_for_results, wait_gone


def cli(tmp_path, *args: str):
    return CliRunner().invoke(main, ["run", "--output-dir", str(tmp_path / "out"), "--no-progress", *args])


@pytest.mark.skipif(os.geteuid() != 0 or shutil.which("chattr") is None, reason="needs root and chattr")
def test_resuming_into_a_read_only_run_folder_is_a_usage_error(tmp_path):
    data = write_tasks(tmp_path / "tasks.jsonl", [shell_task("a")])
    run_dir = tmp_path / "out" / "ro"
    run_dir.mkdir(parents=True)
    # immutable: not even root may make its .lock
    if subprocess.run(["chattr", "+i", str(run_dir)], capture_output=True).returncode:
        pytest.skip("this file system has no immutable attribute")
    try:
        done = cli(tmp_path, "--mode", "shell", "--data", str(data), "--run-id", "ro", "--resume")
    finally:
        subprocess.run(["chattr", "-i", str(run_dir)], check=True)
    assert done.exit_code == EXIT_USAGE, (done.output, done.exception)
    assert f"cannot lock the run folder {run_dir}: Operation not permitted" in done.output
    assert "Traceback" not in done.output


def test_a_corrupt_config_json_resumes_with_the_flags_given_and_the_data_still_checked(tmp_path):
    data = write_tasks(tmp_path / "tasks.jsonl", [shell_task("a"), shell_task("b")])
    flags = ["--mode", "shell", "--data", str(data), "--run-id", "cj"]
    assert cli(tmp_path, *flags, "--limit", "1").exit_code == 0
    config = tmp_path / "out" / "cj" / "config.json"
    config.write_text(config.read_text()[:40])  # cut short
    alone = cli(tmp_path, "--run-id", "cj", "--resume")
    assert alone.exit_code == EXIT_USAGE
    assert "unreadable run config" in alone.output and "resume with every flag the run was started with" in alone.output
    # the advice works: every flag given again, the task data checked against summary.json
    write_tasks(data, [shell_task("a"), shell_task("c")])
    changed = cli(tmp_path, *flags, "--resume")
    assert changed.exit_code == EXIT_USAGE and f"the task file {data} changed since the run started" in changed.output
    write_tasks(data, [shell_task("a"), shell_task("b")])
    resumed = cli(tmp_path, *flags, "--resume")
    assert resumed.exit_code == 0, (resumed.output, resumed.exception)
    assert "2/2 samples finished, 2 succeeded" in resumed.output
    assert json.loads(config.read_text())["run_id"] == "cj"  # written anew


@pytest.mark.parametrize("signum", [signal.SIGHUP, signal.SIGTERM], ids=["SIGHUP", "SIGTERM"])
def test_a_signal_to_the_whole_process_group_stops_the_run_in_order(tmp_path, signum):
    """A closed terminal's SIGHUP, and the SIGTERM a job's stop sends to its whole process
    group (``timeout 6h parallel-rollout run …`` in a crontab, Airflow's task kill, ``kill
    -TERM -PGID``). With SIGTERM the pool's Manager and the workers' server died of it first,
    each saying "interrupted by signal 15 before the run started: nothing ran" (the CLI's
    early handler, inherited with the main module), and the run logged "the VM pool's
    manager process died" and lost the attempts it was finishing."""
    data, keys = slow_tasks(tmp_path)
    proc = start_cli(tmp_path, data)
    run_dir = tmp_path / "out" / "sig"
    wait_for_results(run_dir, 3, proc)
    procs = family(proc.pid)
    os.killpg(proc.pid, signum)  # the whole process group
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    assert f"interrupted by signal {int(signum)}; resume with:" in err and "--run-id sig" in err
    assert "nothing ran" not in err, err
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["interrupted"] and summary["unfinished"] > 0
    assert f"signal {int(signum)}: stopping" in (run_dir / "run.log").read_text()
    assert not wait_gone(procs, timeout=5)
    # the workers and the pool ignored it: none died, nothing was retried for it
    events = (run_dir / "events.jsonl").read_text()
    assert "worker_died" not in events and "manager process died" not in err, err


def _workers(proc) -> list[psutil.Process]:
    """The run's worker processes: the children of its workers' server."""
    server = [p for p in family(proc.pid) if "forkserver" in " ".join(_cmdline(p))]
    return server[0].children()


def test_a_sigterm_to_every_process_of_the_job_stops_the_run_in_order(tmp_path):
    """``systemctl stop`` signals every process of the unit's cgroup at once, the workers
    (each the leader of a group of its own) with the run: they died of it before the run
    stopped them, each attempt under way recorded ``worker_died`` and retried."""
    data, keys = slow_tasks(tmp_path)
    proc = start_cli(tmp_path, data)
    run_dir = tmp_path / "out" / "sig"
    wait_for_results(run_dir, 3, proc)
    assert _workers(proc)
    for member in family(proc.pid):  # the run, its pool, its workers, its VMs
        with contextlib.suppress(ProcessLookupError):
            os.kill(member.pid, signal.SIGTERM)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    assert "interrupted by signal 15; resume with:" in err and "died: worker exited" not in err, err
    assert json.loads((run_dir / "summary.json").read_text())["interrupted"]
    assert "worker_died" not in (run_dir / "events.jsonl").read_text()


@pytest.mark.slow  # ~15 s: the run must outlast the worker's wait (the whole-job case above stays quick)
def test_a_sigterm_to_one_worker_alone_still_ends_it(tmp_path):
    """An operator's ``kill PID`` of one worker: no STOP from the run follows, so the worker
    dies of it (within ``SIGTERM_WAIT_S``), its attempt is retried and the run finishes."""
    data, keys = slow_tasks(tmp_path, count=36, seconds=0.5)  # 9 s on 2 VMs: longer than its wait
    proc = start_cli(tmp_path, data)
    run_dir = tmp_path / "out" / "sig"
    wait_for_results(run_dir, 1, proc)
    victim = _workers(proc)[0]
    victim.send_signal(signal.SIGTERM)
    victim.wait(timeout=30)  # gone (not our child: its status is the run's to see)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    assert f"(pid {victim.pid}) died: worker exited with code -15" in err, err
    assert json.loads((run_dir / "summary.json").read_text())["successes"] == len(keys)


def test_a_sigterm_to_the_whole_job_as_the_pool_starts_exits_130(tmp_path):
    """``timeout``'s or Airflow's SIGTERM to the job's process group in the run's first
    seconds, while the pool's Manager process is still starting (importing, before it takes
    SIGTERM from the run): it died of it, the run's wait for its address ended in EOFError,
    and the CLI said "Aborted!" and exited 1 instead of 130."""
    data, keys = slow_tasks(tmp_path)
    proc = start_cli(tmp_path, data)
    deadline = time.monotonic() + 60
    manager = None
    while manager is None:
        assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
        manager = next((p for p in psutil.Process(proc.pid).children() if "spawn_main" in " ".join(_cmdline(p))), None)
    manager.suspend()
    caught = int(next(line for line in open(f"/proc/{manager.pid}/status") if line.startswith("SigCgt")).split()[1], 16)
    os.killpg(proc.pid, signal.SIGTERM)  # the Manager gets it as it goes on (or dies of it at once)
    with contextlib.suppress(psutil.NoSuchProcess):
        manager.resume()
    out, err = proc.communicate(timeout=60)
    if caught & (1 << (signal.SIGTERM - 1)):
        pytest.skip("the Manager had set its SIGTERM handler before it was stopped")
    assert proc.returncode == 130, err
    assert "Aborted!" not in err and "interrupted by signal 15; resume with:" in err, err
    assert json.loads((tmp_path / "out" / "sig" / "summary.json").read_text())["interrupted"]


def _cmdline(proc: psutil.Process) -> list[str]:
    """Its command line; none for one that ended meanwhile (a zombie, gone)."""
    try:
        return proc.cmdline()
    except psutil.Error:
        return []


@pytest.mark.parametrize("signum", [signal.SIGHUP, signal.SIGTERM], ids=["SIGHUP", "SIGTERM"])
def test_a_signal_ignored_at_start_stays_ignored_by_the_run_and_its_workers(tmp_path, signum):
    """``nohup`` (SIGHUP ignored) or a scheduler that starts the run with a signal ignored:
    the run set its handler over it, and stopped at a hang-up (130: resume) that nohup was
    there to keep from it; a worker, which reset SIGTERM to its default, died of one sent
    to every process of the job. It stays ignored: the run finishes, exit 0."""
    data, keys = slow_tasks(tmp_path)
    proc = start_cli(tmp_path, data, ignored=(signum,))
    run_dir = tmp_path / "out" / "sig"
    wait_for_results(run_dir, 3, proc)
    os.killpg(proc.pid, signum)  # the whole process group, as a hang-up
    for worker in _workers(proc):  # and each worker, which leads a group of its own
        os.kill(worker.pid, signum)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    assert "interrupted" not in err
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["successes"] == len(keys) and not summary["interrupted"]
    assert "worker_died" not in (run_dir / "events.jsonl").read_text()


def _start_run(tmp_path, data, *flags: str, closed: int | None = None, **streams):
    """The CLI on ``data`` as a user starts it, with the standard streams given (files, pipes)
    and the descriptor ``closed`` closed (``>&-``)."""
    argv = [sys.executable, str(ROOT / "run_parallel_rollout.py"), "--mode", "shell", "--data", str(data),
            "--num-rollouts", "2", "--output-dir", str(tmp_path / "out"), "--run-id", "r", *flags]

    def preexec() -> None:
        stop_signals_ignoring()()
        if closed is not None:
            os.close(closed)
    return subprocess.Popen(argv, preexec_fn=preexec, **streams)


def test_a_stop_signal_as_the_run_writes_its_summary_and_report_lets_it_finish(tmp_path):
    """A scheduler's SIGTERM that lands as a run ends: every sample final, its summary,
    report and JUnit file being written (seconds, for a big run). The CLI's early handler
    was back in place then: the finish broke off without its report or JUnit file, exit 130
    and "interrupted by signal 15 before the run started: nothing ran"."""
    data = write_tasks(tmp_path / "tasks.jsonl", [shell_task(f"t{i}") for i in range(30)])
    run_dir, junit = tmp_path / "out" / "r", tmp_path / "junit.xml"
    assert _start_run(tmp_path, data, "--no-progress", stdout=subprocess.DEVNULL).wait(timeout=120) == 0
    summary, report = run_dir / "summary.json", run_dir / "report.html"
    for _ in range(20):  # until the signal lands between the summary and the report
        before = summary.stat().st_mtime_ns, report.stat().st_mtime_ns
        junit.unlink(missing_ok=True)
        proc = _start_run(tmp_path, data, "--no-progress", "--resume", "--junit-xml", str(junit),
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        landed = signal_at(proc, lambda: summary.stat().st_mtime_ns != before[0], signal.SIGTERM,
                           still=lambda: report.stat().st_mtime_ns == before[1])
        out, err = proc.communicate(timeout=60)
        if landed:
            break
    assert landed, "the signal never landed between the summary and the report"
    assert proc.returncode == 0, err
    assert "nothing ran" not in err and "signal 15 after the run's end" in err, err
    assert "30/30 samples finished, 30 succeeded" in out
    assert report.stat().st_mtime_ns != before[1] and junit.exists()


@pytest.mark.parametrize("both, progress", [(False, "--no-progress"), (True, "--no-progress"), (True, "--progress")],
                         ids=["stdout", "stdout-and-stderr", "stdout-and-stderr-with-a-progress-bar"])
def test_a_run_whose_reader_went_away_exits_with_its_own_status(tmp_path, both, progress):
    """``run … | true``, ``run … 2>&1 | head -1``: what the run prints is lost, its exit
    status stays its own (0: finished). The summary's BrokenPipeError made click exit 1
    (aborted: resume) after a complete run, with nothing said; a progress bar on the closed
    pipe stopped the run before its first sample."""
    data = write_tasks(tmp_path / "tasks.jsonl", [shell_task(k) for k in "abc"])
    reader, writer = os.pipe()
    os.close(reader)  # gone before the first line, as `| true` is
    with open(tmp_path / "err.txt", "w") as err:
        proc = _start_run(tmp_path, data, progress, stdout=writer, stderr=writer if both else err)
    os.close(writer)
    assert proc.wait(timeout=120) == 0, (tmp_path / "err.txt").read_text()
    summary = json.loads((tmp_path / "out" / "r" / "summary.json").read_text())
    assert summary["successes"] == 3 and summary["unfinished"] == 0
    said = (tmp_path / "err.txt").read_text()
    assert "Traceback" not in said and "BrokenPipe" not in said and "Exception ignored" not in said


@pytest.mark.parametrize("streams", ["stdout", "stdout-and-stderr"])
def test_a_run_whose_console_log_is_on_a_full_disk_exits_with_its_own_status(tmp_path, streams):
    """A scheduler's log on a full disk (``run … >> /var/log/nightly.log 2>&1``, the run
    folder elsewhere): every console line is lost (ENOSPC), the run's status is its own. The
    summary's write to stdout raised: exit 1 (aborted: resume) after a complete, passing run."""
    data = write_tasks(tmp_path / "tasks.jsonl", [shell_task(k) for k in "abc"])
    with small_tmpfs(tmp_path / "logs", "64k") as logs:
        (logs / "filler").write_bytes(b"f" * 64 * 1024)
        with open(logs / "nightly.log", "a") as log, open(tmp_path / "err.txt", "w") as err:
            proc = _start_run(tmp_path, data, "--no-progress", "--fail-under", "0.5", stdout=log,
                              stderr=log if streams == "stdout-and-stderr" else err)
            assert proc.wait(timeout=120) == 0, (tmp_path / "err.txt").read_text()
    summary = json.loads((tmp_path / "out" / "r" / "summary.json").read_text())
    assert summary["successes"] == 3 and summary["unfinished"] == 0
    said = (tmp_path / "err.txt").read_text()
    assert "Traceback" not in said and "Logging error" not in said, said


@pytest.mark.parametrize("closed", [1, 2], ids=["stdout", "stderr"])
def test_a_run_started_with_a_standard_stream_closed_finds_dev_null_there(tmp_path, closed):
    """``run … >&-``: every worker ended with AttributeError (sys.stdout None) on the
    console; and the closed descriptor went to the first file the run opened (the run
    folder's lock), where anything written to fd 1 or 2 landed. It is /dev/null now."""
    data, keys = slow_tasks(tmp_path, count=12)
    with open(tmp_path / "said.txt", "w") as said:
        proc = _start_run(tmp_path, data, "--no-progress", closed=closed, stdout=said, stderr=said)
    wait_for_results(tmp_path / "out" / "r", 2, proc)
    assert os.readlink(f"/proc/{proc.pid}/fd/{closed}") == "/dev/null"
    assert proc.wait(timeout=120) == 0, (tmp_path / "said.txt").read_text()
    text = (tmp_path / "said.txt").read_text()
    assert "Traceback" not in text and "AttributeError" not in text, text
    assert json.loads((tmp_path / "out" / "r" / "summary.json").read_text())["successes"] == len(keys)


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGHUP, signal.SIGINT])
def test_a_signal_while_the_command_loads_exits_130_and_says_nothing_ran(signum):
    # (a program that imports the module keeps its own handlers: see the next test)
    # the handler is set as the CLI module starts loading, before its imports
    code = ("import sys; sys.argv[0] = 'parallel-rollout'\n"  # as the console script's process
            f"import os, time, parallel_rollout.cli; os.kill(os.getpid(), {int(signum)}); time.sleep(10)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                          preexec_fn=stop_signals_ignoring())
    assert done.returncode == 130, done.stderr
    assert f"interrupted by signal {int(signum)} before the run started: nothing ran" in done.stderr


def test_events_lines_stay_whole_on_a_full_disk(tmp_path):
    from parallel_rollout.output_checks import EventsFile

    with small_tmpfs(tmp_path / "disk", "64k") as disk:
        (disk / "filler").write_bytes(b"f" * 40 * 1024)
        events = EventsFile(disk / "events.jsonl")
        line = json.dumps({"event": "vm", "reason": "x" * 1800}) + "\n"
        written = 0
        with pytest.raises(OSError):
            for _ in range(100):
                events.write(line)
                written += 1
        data = (disk / "events.jsonl").read_bytes()
        assert data.endswith(b"\n") and len(data.splitlines()) == written  # the failed line cut back
        (disk / "filler").unlink()
        events.write(line)  # space freed: the next line starts a line of its own
        events.close()
        assert all(json.loads(x) for x in (disk / "events.jsonl").read_bytes().splitlines())


def test_a_torn_events_line_is_set_aside_before_the_next_session_appends(tmp_path):
    data = write_tasks(tmp_path / "tasks.jsonl", [shell_task("a"), shell_task("b")])
    flags = ["--mode", "shell", "--data", str(data), "--run-id", "ev"]
    assert cli(tmp_path, *flags, "--limit", "1", "--num-vms", "1", "--use-vm-pool").exit_code == 0
    events = tmp_path / "out" / "ev" / "events.jsonl"
    with open(events, "ab") as fh:
        fh.write(b'{"time": 1, "event": "vm", "vm": "vm-0", "reas')  # what a disk-full write left
    resumed = cli(tmp_path, "--run-id", "ev", "--resume", "--limit", "2")
    assert resumed.exit_code == 0, (resumed.output, resumed.exception)
    lines = events.read_bytes().splitlines()
    assert [json.loads(x) for x in lines]  # every line whole: none glued onto the torn one
    assert sum(b'"task": "b#0"' in x for x in lines) >= 1  # the second session's lines are there
    assert (tmp_path / "out" / "ev" / "events.jsonl.torn").read_bytes() == b'{"time": 1, "event": "vm", "vm": "vm-0", "reas\n'


@pytest.mark.parametrize("agent", ["SpawnsAndReturns", "ForkAndExit", "Detaches",
                                   pytest.param("LeavesSession", marks=needs_worker_cgroup),
                                   pytest.param("LeavesSessionAndExits", marks=needs_worker_cgroup)])
def test_processes_an_agent_starts_die_with_its_worker(tmp_path, agent):
    marker = f"{900 + os.getpid() % 97}.{len(agent)}"
    data = write_tasks(tmp_path / "tasks.jsonl", [shell_task(k, instruction=marker) for k in "abc"])
    done = cli(tmp_path, "--mode", "shell", "--data", str(data), "--run-id", "kids", "--agent",
               f"lifecycle_plugins:{agent}", "--num-rollouts", "2", "--num-vms", "2", "--use-vm-pool",
               "--max-retries", "0")
    assert done.exit_code in (0, 1), (done.output, done.exception)
    left = sleeps_left(marker)
    assert not left, f"{len(left)} process(es) the agent started outlived the run"
    # the pool's VMs were the Manager's: stopped by the pool, not killed with a worker's group
    summary = json.loads((tmp_path / "out" / "kids" / "summary.json").read_text())
    assert summary["vm"]["marked_dead"] == 0


def test_what_an_agent_started_dies_when_its_runner_is_sigkilled(tmp_path):
    """A runner killed with SIGKILL (the OOM killer, a scheduler's hard stop) is not there to
    kill its workers' groups: each worker sees its pipe close and takes its process group
    (and its cgroup, where the host has one) with it, mid-attempt: a process of its group moved
    out of its cgroup too (its helper's group kill). Where there is no cgroup, a process in a
    session of its own is out of reach (README)."""
    marker = f"{700 + os.getpid() % 97}.{secrets.randbelow(10**6) + 1}"
    data = write_tasks(tmp_path / "tasks.jsonl", [shell_task("a", instruction=marker)])
    argv = [sys.executable, str(ROOT / "run_parallel_rollout.py"), "--mode", "shell", "--data", str(data),
            "--agent", "lifecycle_plugins:LeavesBothAndHangs", "--num-rollouts", "1", "--num-vms", "1",
            "--use-vm-pool", "--output-dir", str(tmp_path / "out"), "--run-id", "orphans", "--no-progress"]
    tests = str(ROOT / "tests")
    with open(tmp_path / "out.txt", "w") as out, open(tmp_path / "err.txt", "w") as err:
        proc = subprocess.Popen(argv, stdout=out, stderr=err, cwd=tests, env={**os.environ, "PYTHONPATH": tests},
                                start_new_session=True)
    sleeps: list[psutil.Process] = []
    try:
        deadline = time.monotonic() + 60
        started = 3 if worker_cgroups_usable() else 2  # the third: of its group, out of its cgroup
        while len(sleeps) < started:
            assert proc.poll() is None and time.monotonic() < deadline, (tmp_path / "err.txt").read_text()
            time.sleep(0.05)
            sleeps = sleeps_of(marker)
        in_session = [p for p in sleeps if os.getsid(p.pid) == p.pid]
        assert len(in_session) == 1, sleeps
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(10)
    finally:
        if proc.poll() is None:
            proc.kill()
        left = wait_gone(sleeps, timeout=10)  # killed once counted
    expected_left = [] if worker_cgroups_usable() else in_session
    assert left == expected_left, f"{left} outlived the runner's SIGKILL"


def _run_plugin(tmp_path, deadline_s: float, env: dict[str, str]):
    """A run whose agent's module is tests/lifecycle_lock.py, through the CLI."""
    data = write_tasks(tmp_path / "tasks.jsonl", [shell_task("a", instruction="1")])  # the agent's sleep 1
    config = tmp_path / "run.toml"
    config.write_text(f"start-timeout-s = {deadline_s}\n")
    argv = [sys.executable, str(ROOT / "run_parallel_rollout.py"), "--config", str(config), "--mode", "shell",
            "--data", str(data), "--agent", "lifecycle_lock:Locked", "--num-rollouts", "2", "--num-vms", "1",
            "--use-vm-pool", "--output-dir", str(tmp_path / "out"), "--run-id", "lock", "--no-progress"]
    tests = str(ROOT / "tests")
    return subprocess.run(argv, capture_output=True, text=True, timeout=120, cwd=tests,
                          env={**os.environ, "PYTHONPATH": tests, **env})


def test_a_plugin_import_that_never_ends_stops_the_run_at_the_start_deadline(tmp_path):
    began = time.monotonic()
    done = _run_plugin(tmp_path, 7, {"LIFE_LOCK": str(tmp_path / "plugin.lock")})
    assert time.monotonic() - began < 60
    assert done.returncode == 1, done.stderr
    said = " ".join(done.stderr.split())
    assert ("no worker started: the workers' server did not finish importing the run's plugin modules "
            "(lifecycle_lock) within 7s (start_timeout_s)") in said
    assert "agent 'lifecycle_lock:Locked'" in said and "resume with:" in said, said[-2000:]
    # said while it waited: the 5 s line
    assert "workers starting: their server is still importing the run's plugin modules (lifecycle_lock) (5s" in said


def test_a_slow_plugin_import_is_said_while_the_workers_start(tmp_path):
    done = _run_plugin(tmp_path, 60, {"LIFE_SLOW": "6"})
    assert done.returncode == 0, done.stderr
    said = " ".join(done.stderr.split())
    assert "workers starting: their server is still importing the run's plugin modules (lifecycle_lock) (5s" in said
    assert "1/1 samples finished" in said + done.stdout


def test_a_program_that_imports_the_cli_keeps_its_signal_handlers():
    code = "import signal, parallel_rollout.cli; print(signal.getsignal(signal.SIGINT) is signal.default_int_handler)"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                          preexec_fn=stop_signals_ignoring())
    assert done.stdout.strip() == "True", done.stderr


def test_a_stop_signal_as_the_pool_starts_starts_no_attempt(tmp_path):
    """A SIGTERM that lands while the run starts its pool and workers (seconds; a QEMU pool's
    boots go on meanwhile): the run then queued every sample all the same, and the attempts
    its workers took ran in the stop's grace, after the stop was asked (model calls paid for)."""
    data, keys = slow_tasks(tmp_path, count=8)
    run_dir = tmp_path / "out" / "sig"
    events, log = run_dir / "events.jsonl", run_dir / "run.log"
    for attempt in range(10):  # until the signal lands after the pool's start began, before the engine's
        shutil.rmtree(run_dir, ignore_errors=True)
        proc = start_cli(tmp_path, data)
        landed = signal_at(proc, events.exists, signal.SIGTERM,
                           still=lambda: not log.exists() or "Set max concurrent rollouts" not in log.read_text())
        out, err = proc.communicate(timeout=60)
        if landed:
            break
    assert landed, "the signal never landed as the pool started"
    assert proc.returncode == 130, err
    results = run_dir / "results.jsonl"
    assert not results.exists() or not results.read_text().strip(), results.read_text()
    assert json.loads((run_dir / "summary.json").read_text())["unfinished"] == len(keys)


def test_a_new_run_names_no_run_of_its_settings_that_is_still_going(tmp_path):
    """Tonight's run (a new --run-id) started while last night's of the same settings still
    ran said that one 'was partial … --run-id … --resume goes on with that one instead': a
    resume the lock refuses (exit 75), of a run that was not stopped short. Once that run is
    stopped short, it is named. A dry run of that resume says the lock is held (it passed
    in silence a command that exits 75), and the resume, refused, names the lock's holder."""
    data, _ = slow_tasks(tmp_path, count=20, seconds=0.5)
    going = start_cli(tmp_path, data)
    try:
        wait_for_results(tmp_path / "out" / "sig", 1, going)
        flags = ["--mode", "shell", "--data", str(data), "--num-rollouts", "4", "--num-vms", "2", "--use-vm-pool",
                 "--run-id", "tonight", "--dry-run"]
        dry = cli(tmp_path, *flags)
        assert dry.exit_code == 0, (dry.output, dry.exception)
        assert "an earlier run" not in dry.output, dry.output
        busy = cli(tmp_path, *flags[:-3], "--run-id", "sig", "--resume", "--dry-run")
        assert busy.exit_code == 0, (busy.output, busy.exception)
        assert "another run is writing to it now (its lock is held): the run would exit 75" in busy.output, busy.output
        # the resume itself exits 75 naming the process that holds the lock (a hung run is told apart)
        locked = cli(tmp_path, "--run-id", "sig", "--resume")
        assert locked.exit_code == 75, (locked.output, locked.exception)
        assert f"another run (pid {going.pid}, running since " in locked.output, locked.output
    finally:
        going.send_signal(signal.SIGTERM)
        assert going.wait(timeout=60) == 130, going.communicate()
    stopped = cli(tmp_path, *flags)
    assert "an earlier run of these settings, sig, was interrupted" in stopped.output, stopped.output
    # its task file edited since: a resume of it is refused, so it is not named (it was: the
    # note compared the settings, not the task data, and sent the user to an exit 2)
    data.write_text(data.read_text() + json.dumps(shell_task("added")) + "\n")
    refused = cli(tmp_path, *flags[:-3], "--run-id", "sig", "--resume", "--dry-run")
    assert refused.exit_code == 2 and "changed since the run started" in refused.output, refused.output
    edited = cli(tmp_path, *flags)
    assert edited.exit_code == 0 and "an earlier run" not in edited.output, edited.output


def test_a_resume_draws_no_progress_bar_that_the_session_it_resumes_asked_for(tmp_path):
    """A run started at a terminal with --progress, resumed by cron into a log file: the
    resume took --progress from config.json and drew its bar into the log, carriage returns
    and all. The bar is the session's: a resume without the flag decides by its own stderr."""
    data = write_tasks(tmp_path / "tasks.jsonl", [shell_task("a"), shell_task("b")])
    run = ["run", "--output-dir", str(tmp_path / "out"), "--run-id", "bar"]
    first = CliRunner().invoke(main, [*run, "--mode", "shell", "--data", str(data), "--limit", "1", "--progress"])
    assert first.exit_code == 0 and "\r" in first.output, first.output  # asked for: drawn
    resumed = CliRunner().invoke(main, [*run, "--resume", "--limit", "2"])
    assert resumed.exit_code == 0, (resumed.output, resumed.exception)
    assert "\r" not in resumed.output and "2/2 samples finished" in resumed.output, resumed.output



def test_a_full_disk_as_the_run_writes_its_report_exits_1_and_the_resume_writes_it(tmp_path):
    """Every sample final, but the disk full when the run's end writes its files (here a
    resume of the finished run, which is the run's end alone; one page left: summary.json
    fits, report.html does not): it said the error and exited 0, so a cron job never learnt
    to resume. Exit 1, naming the file and the resume that writes it; that resume, the disk
    grown, does."""
    data = write_tasks(tmp_path / "tasks.jsonl", [shell_task(k) for k in "abc"])
    (tmp_path / "settings.toml").write_text("min-free-disk-mb = 0\n")
    with small_tmpfs(tmp_path / "disk", "1m") as disk:
        argv = [sys.executable, str(ROOT / "run_parallel_rollout.py"), "--mode", "shell", "--data", str(data),
                "--config", str(tmp_path / "settings.toml"), "--output-dir", str(disk), "--run-id", "r",
                "--no-progress"]
        done = subprocess.run(argv, capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr
        run_dir = disk / "r"
        (run_dir / "report.html").unlink()
        with open(disk / "filler", "wb", buffering=0) as fh:  # the disk full but for one page
            with contextlib.suppress(OSError):
                while True:
                    fh.write(b"f" * 4096)
            fh.truncate(fh.tell() - 4096)
        done = subprocess.run([*argv, "--resume"], capture_output=True, text=True, timeout=120)
        said = " ".join(done.stderr.split())
        assert done.returncode == 1, said
        assert f"cannot write {run_dir / 'report.html'}: No space left on device" in said, said
        assert f"--output-dir {disk} --run-id r --resume" in said, said
        assert not (run_dir / "report.html").exists()
        subprocess.run(["mount", "-o", "remount,size=4m", str(disk)], check=True)
        done = subprocess.run([*argv, "--resume"], capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr
        assert json.loads((run_dir / "summary.json").read_text())["successes"] == 3
        assert (run_dir / "report.html").exists()
