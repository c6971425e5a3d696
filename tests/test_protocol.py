"""The worker protocol never hangs and never aborts on ordinary events (issue 16 item 4): one
test per defect. A raising agent, SystemExit and pid reuse have their rows in test_crash.py
and test_pool.py."""

from __future__ import annotations

import json
import logging
import subprocess
import sys
import time

import filelock
import pytest

from conftest import ROOT, assert_exactly_once, read_results, shell_task, write_tasks
from parallel_rollout.config import build_config
from parallel_rollout.errors import ConfigError
from parallel_rollout.runner import Runner


def run(tmp_path, tasks, **flags):
    data = write_tasks(tmp_path / "tasks.jsonl", tasks)
    base = dict(mode="shell", data=str(data), output_dir=str(tmp_path / "out"), run_id="proto",
                num_vms=1, use_vm_pool=True, progress=False)
    base.update(flags)
    return Runner(build_config(base)).run()


def test_an_agent_whose_constructor_raises_stops_the_run_and_its_resume_runs_every_task(tmp_path):
    """Its constructor raises in every worker, whatever the task: each sample was a final
    ``error`` graded 0, so the run exited 0 and its resume after the fix ran none. The run
    stops at the first (exit 1, not a hang until the task timeout), naming the constructor's
    error and where it was raised; nothing is final, and the resume runs every task."""
    tasks = [shell_task(f"t{i}") for i in range(3)]
    broken = tmp_path / "out" / "agent-broken"
    broken.parent.mkdir()
    broken.touch()
    started = time.monotonic()
    outcome = run(tmp_path, tasks, agent="chaos_plugins:BrokenConstructorAgent", num_rollouts=2,
                  task_timeout=120.0)
    assert time.monotonic() - started < 60
    assert outcome.exit_code == 1, outcome
    assert "could not be made: its constructor raised RuntimeError: chaos: the agent's constructor raised (at " \
        in outcome.message and "chaos_plugins.py" in outcome.message, outcome.message
    records = read_results(outcome.run_dir)
    assert records and not any(r["final"] for r in records), records
    assert {r["status"] for r in records} == {"agent_not_made"}, records
    broken.unlink()  # the agent fixed
    resumed = run(tmp_path, tasks, agent="chaos_plugins:BrokenConstructorAgent", num_rollouts=2,
                  task_timeout=120.0, resume=True)
    finals = assert_exactly_once(resumed.run_dir, {f"t{i}#0" for i in range(3)})
    assert resumed.exit_code == 0 and {r["status"] for r in finals.values()} == {"success"}, finals


@pytest.mark.parametrize("timeouts", [
    # more than the real crash limit of 10·N + 10 = 20 deaths; the default run has
    # tests/test_crash_loop.py's 8 past a limit of 4 (25 s of the default run saved)
    pytest.param(21, marks=pytest.mark.slow),
    pytest.param(50, marks=pytest.mark.slow),
])
def test_many_task_timeouts_with_one_worker_finish_the_run(tmp_path, monkeypatch, timeouts):
    monkeypatch.setenv("PR_CHAOS_DIR", str(tmp_path))
    tasks = [shell_task(f"h{i}", chaos="hang") for i in range(timeouts)] + [shell_task("ok")]
    # 1 s: the honest task must fit in it on a loaded 2-core machine (0.3 s did not always)
    outcome = run(tmp_path, tasks, agent="chaos_plugins:ChaosAgent", num_rollouts=1,
                  task_timeout=1.0, max_retries=0)
    assert outcome.exit_code == 0, outcome.message
    finals = assert_exactly_once(outcome.run_dir, {f"h{i}#0" for i in range(timeouts)} | {"ok#0"})
    assert {r["status"] for k, r in finals.items() if k != "ok#0"} == {"task_timeout"}
    assert finals["ok#0"]["status"] == "success"


def test_waiting_for_a_vm_is_not_task_time(tmp_path):
    """N = 8 workers, M = 1 VM, episodes of ~1 s, --task-timeout 3 s: the last attempt waits
    ~7 s for the VM and is still graded on its own time."""
    tasks = [shell_task(f"e{i}", reference=["sleep 1", f"touch ~/e{i}.done"]) for i in range(8)]
    outcome = run(tmp_path, tasks, num_rollouts=8, task_timeout=3.0)
    assert outcome.exit_code == 0, outcome.message
    finals = assert_exactly_once(outcome.run_dir, {f"e{i}#0" for i in range(8)})
    assert {r["status"] for r in finals.values()} == {"success"}
    assert max(r["lease_wait_s"] for r in finals.values()) > 3.0  # the test means something


def test_a_corrupt_middle_line_is_a_usage_error_naming_it_and_releases_everything(tmp_path):
    first = run(tmp_path, [shell_task("a"), shell_task("b")], num_rollouts=1)
    results = first.run_dir / "results.jsonl"
    lines = results.read_text().splitlines()
    results.write_text(lines[0] + "\n" + '{"key": "x", "attempt": 0, oops\n' + lines[1] + "\n")
    # nothing ran: the resume is refused as bad input (the CLI's exit 2), before the engine starts
    with pytest.raises(ConfigError, match=r"cannot resume proto: .*results\.jsonl:2: corrupted record"):
        run(tmp_path, [shell_task("a"), shell_task("b")], num_rollouts=1, resume=True)
    # the lock is free and no handler still writes to run.log
    filelock.FileLock(str(first.run_dir / ".lock")).acquire(timeout=0)
    handlers = logging.getLogger("parallel_rollout").handlers
    assert not [h for h in handlers if getattr(h, "baseFilename", "").startswith(str(first.run_dir))]


def test_two_runs_of_one_run_id_in_two_folders_keep_their_own_sandboxes(tmp_path):
    slow = [shell_task(f"k{i}", reference=["sleep 0.3", f"touch ~/k{i}.done"]) for i in range(16)]
    data = write_tasks(tmp_path / "slow.jsonl", slow)
    first = subprocess.Popen(
        [sys.executable, str(ROOT / "run_parallel_rollout.py"), "--mode", "shell", "--data", str(data),
         "--num-rollouts", "2", "--num-vms", "2", "--use-vm-pool", "--output-dir", str(tmp_path / "a"),
         "--run-id", "same", "--no-progress"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    results = tmp_path / "a" / "same" / "results.jsonl"
    deadline = time.monotonic() + 60
    while not (results.exists() and results.read_text().count("\n") >= 2):
        assert first.poll() is None and time.monotonic() < deadline, first.communicate()
        time.sleep(0.05)
    # the second run starts (and sweeps leftovers of "same") while the first one runs
    second = Runner(build_config(dict(mode="shell", data=str(data), output_dir=str(tmp_path / "b"),
                                      run_id="same", num_rollouts=2, num_vms=2, use_vm_pool=True,
                                      progress=False, limit=2))).run()
    assert second.exit_code == 0, second.message
    out, err = first.communicate(timeout=120)
    assert first.returncode == 0, err
    records = assert_exactly_once(tmp_path / "a" / "same", {f"k{i}#0" for i in range(16)})
    assert {r["status"] for r in records.values()} == {"success"}
    events = [json.loads(line) for line in (tmp_path / "a" / "same" / "events.jsonl").read_text().splitlines()]
    assert not [e for e in events if (e.get("to") == "dead" and e["reason"] != "pool shutdown")
                or e["event"] == "retry"], \
        "the second run swept the first run's sandboxes"
