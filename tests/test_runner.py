"""The runner end to end: isolation through resets, scale, concurrency cap, signals, resume."""

from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from conftest import (ROOT, SHELL_TASKS, assert_exactly_once, leftover_sandboxes, max_overlap, read_results,
                      shell_task, write_tasks)
from parallel_rollout.config import build_config
from parallel_rollout.pool.providers.process import ProcessProvider
from parallel_rollout.runner import Runner

ISOLATION_TASKS = {"no-leftover", "no-stray-process", "tmp-clean"}


def run(tmp_path, **flags):
    base = dict(mode="shell", data=str(SHELL_TASKS), output_dir=str(tmp_path / "out"), run_id="r", progress=False)
    base.update(flags)
    return Runner(build_config(base)).run()


def test_isolation_tasks_fail_without_reset_and_pass_with_it(tmp_path):
    """The shipped benchmark detects a VM that is not reset between tasks."""
    dirty = run(tmp_path, run_id="noreset", num_rollouts=1, num_vms=1, use_vm_pool=True,
                provider_name="chaos_plugins:NoResetProvider", verify_reset="off")
    statuses = {r["task_id"]: r["status"] for r in read_results(dirty.run_dir)}
    assert {t for t, s in statuses.items() if s != "success"} == ISOLATION_TASKS
    clean = run(tmp_path, run_id="reset", num_rollouts=1, num_vms=1, use_vm_pool=True)
    assert clean.summary["successes"] == 25 and clean.summary["status_counts"] == {"success": 25}


@pytest.mark.slow
def test_200_tasks_eight_workers_three_vms_two_loops(tmp_path):
    lines = SHELL_TASKS.read_text().splitlines()
    tasks = []
    for copy in range(8):
        for line in lines:
            task = json.loads(line)
            task["id"] = f"{task['id']}-{copy}"
            tasks.append(task)
    data = write_tasks(tmp_path / "t200.jsonl", tasks)
    outcome = run(tmp_path, data=str(data), num_rollouts=8, num_vms=3, use_vm_pool=True, envs_per_worker=2)
    assert outcome.exit_code == 0
    finals = assert_exactly_once(outcome.run_dir, {f"{t['id']}#0" for t in tasks})
    assert {r["status"] for r in finals.values()} == {"success"}
    assert {r["vm"] for r in finals.values()} == {"vm-0", "vm-1", "vm-2"}
    assert len({r["worker"] for r in finals.values()}) == 8
    assert {r["slot"] for r in finals.values()} == {0, 1}
    assert outcome.summary["vm"]["resets"] >= 199


def test_max_concurrent_rollouts_is_one_limit_across_workers(tmp_path):
    tasks = [shell_task(f"s{i}", reference=["sleep 0.4", f"touch ~/s{i}.done"]) for i in range(12)]
    data = write_tasks(tmp_path / "slow.jsonl", tasks)
    capped = run(tmp_path, run_id="capped", data=str(data), num_rollouts=3, envs_per_worker=2,
                 num_vms=6, use_vm_pool=True, max_concurrent_rollouts=2)
    free = run(tmp_path, run_id="free", data=str(data), num_rollouts=3, envs_per_worker=2,
               num_vms=6, use_vm_pool=True)
    assert max_overlap(read_results(capped.run_dir)) <= 2
    assert max_overlap(read_results(free.run_dir)) >= 4
    assert "[Concurrency] Set max concurrent rollouts to 2" in (capped.run_dir / "run.log").read_text()


def test_private_vms_without_pool(tmp_path):
    outcome = run(tmp_path, num_rollouts=3)
    records = read_results(outcome.run_dir)
    assert {r["status"] for r in records} == {"success"}
    owners = {}
    for r in records:
        owners.setdefault(r["vm"], set()).add(r["worker"])
    assert set(owners) == {"vm-0", "vm-1", "vm-2"} and all(len(w) == 1 for w in owners.values())


# -- signals and resume, with the CLI as a real main process --------------------------------

def slow_tasks(tmp_path, count=40, seconds=0.25):
    tasks = [shell_task(f"k{i}", reference=[f"sleep {seconds}", f"touch ~/k{i}.done"]) for i in range(count)]
    return write_tasks(tmp_path / "slow.jsonl", tasks), {f"k{i}#0" for i in range(count)}


def stop_signals_ignoring(*ignored: int):
    """A ``preexec_fn``: the child's stop signals at their defaults but ``ignored``, whatever
    this process inherited: a test run started in the background (``nohup … &``, as a CI job
    may be) ignores SIGINT and SIGHUP, and the CLI rightly keeps an ignored signal ignored."""
    def preexec() -> None:
        for sig in (signal.SIGINT, signal.SIGHUP, signal.SIGTERM):
            signal.signal(sig, signal.SIG_IGN if sig in ignored else signal.SIG_DFL)
    return preexec


def start_cli(tmp_path, data, *extra, ignored: tuple[int, ...] = ()):
    argv = [sys.executable, str(ROOT / "run_parallel_rollout.py"), "--mode", "shell", "--data", str(data),
            "--num-rollouts", "4", "--num-vms", "2", "--use-vm-pool", "--output-dir", str(tmp_path / "out"),
            "--run-id", "sig", "--no-progress", *extra]
    return subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True, preexec_fn=stop_signals_ignoring(*ignored))


def wait_for_results(run_dir: Path, count: int, proc, timeout=60.0):
    deadline = time.monotonic() + timeout
    path = run_dir / "results.jsonl"
    while time.monotonic() < deadline:
        if path.exists() and path.read_text().count("\n") >= count:
            return
        assert proc.poll() is None, proc.communicate()
        time.sleep(0.05)
    raise AssertionError(f"{count} results did not appear")


def family(pid):
    root = psutil.Process(pid)
    return [root, *root.children(recursive=True)]


def wait_gone(procs, timeout=20.0):
    gone, alive = psutil.wait_procs(procs, timeout=timeout)
    alive = [p for p in alive if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]
    for proc in alive:
        proc.kill()
    return alive


@pytest.mark.parametrize("after", [3, 20])
def test_resume_after_main_process_is_sigkilled(tmp_path, after):
    data, keys = slow_tasks(tmp_path)
    proc = start_cli(tmp_path, data)
    run_dir = tmp_path / "out" / "sig"
    wait_for_results(run_dir, after, proc)
    procs = family(proc.pid)
    os.kill(proc.pid, signal.SIGKILL)
    proc.communicate()
    # Workers see their pipe close, the Manager sees its parent gone: all of them exit and
    # the Manager stops every sandbox on its way out.
    assert not wait_gone(procs), "processes of the killed run stayed alive"
    deadline = time.monotonic() + 10
    while leftover_sandboxes() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not leftover_sandboxes()
    resumed = start_cli(tmp_path, data, "--resume")
    out, err = resumed.communicate(timeout=120)
    assert resumed.returncode == 0, err
    finals = assert_exactly_once(run_dir, keys)
    assert {r["status"] for r in finals.values()} == {"success"}
    assert ProcessProvider.sweep() == []


def test_sigint_stops_cleanly_with_130_and_resumes(tmp_path):
    data, keys = slow_tasks(tmp_path)
    proc = start_cli(tmp_path, data)
    run_dir = tmp_path / "out" / "sig"
    wait_for_results(run_dir, 4, proc)
    procs = family(proc.pid)
    sent = time.monotonic()
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == 130, err
    assert time.monotonic() - sent < 10
    assert "--resume" in err and "--run-id sig" in err
    assert not wait_gone(procs, timeout=5)
    assert not leftover_sandboxes()
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["interrupted"] and summary["unfinished"] > 0
    records = read_results(run_dir)
    assert len({(r["key"], r["attempt"]) for r in records}) == len(records)
    # The printed resume command works as printed, said once, last: the run's settings come
    # from config.json, and it names the script the run was started with.
    assert err.count("resume with:") == 1, err
    hint = err.rstrip().splitlines()[-1]
    argv = shlex.split(hint.split("resume with:", 1)[1])
    assert argv[:3] == [sys.executable, str(ROOT / "run_parallel_rollout.py"), "run"] and "--data" not in argv
    resumed = subprocess.run(argv, capture_output=True, text=True, timeout=120)
    assert resumed.returncode == 0, resumed.stderr
    assert_exactly_once(run_dir, keys)


@pytest.mark.slow
def test_manager_death_stops_the_run_and_resume_finishes_it(tmp_path):
    data, keys = slow_tasks(tmp_path)
    proc = start_cli(tmp_path, data)
    run_dir = tmp_path / "out" / "sig"
    wait_for_results(run_dir, 4, proc)
    manager = next(p for p in psutil.Process(proc.pid).children()
                   if "resource_tracker" not in " ".join(p.cmdline())
                   and any(c.name() == "bwrap" for c in p.children(recursive=True)))
    manager.kill()
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == 1
    assert "manager process died (exit code -9)" in err and "--resume" in err
    assert not leftover_sandboxes()
    resumed = start_cli(tmp_path, data, "--resume")
    out, err = resumed.communicate(timeout=120)
    assert resumed.returncode == 0, err
    assert_exactly_once(run_dir, keys)


def test_missing_bubblewrap_is_a_clear_error_before_anything_runs(tmp_path, monkeypatch):
    from click.testing import CliRunner

    from parallel_rollout.cli import main

    empty = tmp_path / "bin"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))
    result = CliRunner().invoke(main, ["run", "--mode", "shell", "--data", str(SHELL_TASKS),
                                       "--output-dir", str(tmp_path / "out"), "--run-id", "nobwrap"])
    assert result.exit_code == 2  # a setup error: nothing ran, nothing to resume
    assert "apt-get install bubblewrap" in result.output
    assert not (tmp_path / "out" / "nobwrap").exists()


def test_a_sweep_of_a_live_run_s_id_leaves_its_vms(tmp_path):
    """`vms sweep --run-id X` beside a live run X removed its VMs: the run's tasks failed as
    killed VMs (docker even as the tasks' own sandbox_violation). A sweep takes what a gone
    run left, whatever it names; the live run finishes with every task a success."""
    from click.testing import CliRunner

    from parallel_rollout.cli import main

    data, keys = slow_tasks(tmp_path, count=12)
    proc = start_cli(tmp_path, data)
    run_dir = tmp_path / "out" / "sig"
    wait_for_results(run_dir, 2, proc)
    swept = CliRunner().invoke(main, ["vms", "sweep", "--run-id", "sig"])
    assert swept.exit_code == 0 and swept.output.strip() == "removed 0 process VM(s)", swept.output
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err[-3000:]
    finals = assert_exactly_once(run_dir, keys)
    assert {r["status"] for r in finals.values()} == {"success"}
    assert {r["attempt"] for r in read_results(run_dir)} == {0}  # none retried on a swept VM
