"""The crash table: one run body, one fault per row; every sample ends with exactly one final
record and nothing is left behind (the leak check in conftest runs after each row).

Faults are injected by real parts that break on purpose (``chaos_plugins``): a worker that
exits (an agent's os._exit: its own error) or is SIGKILLed mid-attempt (infrastructure), an agent
that raises or hangs, a record that cannot be
serialized, a sandbox whose guest agent is killed mid-task, a reset that fails.
"""

from __future__ import annotations

import json

import pytest

from conftest import ROOT, assert_exactly_once, read_results, shell_task, write_tasks
from parallel_rollout.config import build_config
from parallel_rollout.run_end import format_summary
from parallel_rollout.runner import Runner

#: fault -> (provider, final status of the chaos task, whether it was retried, event to find)
CRASHES = {
    # an agent that ends its worker (os._exit) is graded on what it did: not retried
    "exit": ("process", "error", False, "worker_died"),
    "sigkill": ("process", "success", True, "worker_died"),
    "raise": ("process", "error", False, None),
    "system_exit": ("process", "error", False, None),
    "hang": ("process", "task_timeout", False, "task_timeout"),
    "unpicklable": ("process", "unstorable_result", False, None),
    # killed from the host, not by the task: infrastructure, retried on another VM
    "kill_sandbox": ("process", "success", True, None),
    "reset_fails": ("chaos_plugins:FlakyResetProvider", "success", False, None),
    "nan_result": ("process", "unstorable_result", False, None),
    "unencodable_result": ("process", "unstorable_result", False, None),
}


def run(tmp_path, tasks, **overrides):
    data = write_tasks(tmp_path / "tasks.jsonl", tasks)
    flags = dict(mode="shell", data=str(data), agent="chaos_plugins:ChaosAgent", num_rollouts=3,
                 num_vms=2, use_vm_pool=True, output_dir=str(tmp_path / "out"), run_id="crash",
                 task_timeout=4.0, max_retries=2, progress=False)
    flags.update(overrides)
    return Runner(build_config(flags)).run()


@pytest.mark.parametrize("fault", sorted(CRASHES))
def test_crash_table(tmp_path, monkeypatch, fault):
    provider, chaos_status, retried, event = CRASHES[fault]
    monkeypatch.setenv("PR_CHAOS_DIR", str(tmp_path))
    tasks = [shell_task(f"t{i}") for i in range(8)]
    tasks[3]["chaos"] = fault if fault != "reset_fails" else None
    outcome = run(tmp_path, tasks, provider_name=provider)
    assert outcome.exit_code == 0, outcome.message
    finals = assert_exactly_once(outcome.run_dir, {f"t{i}#0" for i in range(8)})
    others = {k: r["status"] for k, r in finals.items() if k != "t3#0"}
    assert set(others.values()) == {"success"}, others
    assert finals["t3#0"]["status"] == chaos_status
    attempts_of_t3 = [r for r in read_results(outcome.run_dir) if r["key"] == "t3#0"]
    assert (len(attempts_of_t3) > 1) == retried
    if retried:
        first = attempts_of_t3[0]
        assert first["infrastructure"] and not first["final"] and first["attempt"] == 0
    events = [json.loads(line) for line in (outcome.run_dir / "events.jsonl").read_text().splitlines()]
    if event:
        assert any(e.get("event") == event and (e.get("task") in (None, "t3#0")) for e in events), event
    if fault == "unpicklable":
        failure = finals["t3#0"]["failure"]
        assert failure["type"] == "UnstorableResult" and "field 'usage'['callback'] is of type function" in \
            failure["message"], failure
    if fault == "raise":
        assert "chaos: the agent raised" in finals["t3#0"]["failure"]["message"]
    if fault == "exit":
        failure = finals["t3#0"]["failure"]
        assert failure["type"] == "AgentEndedWorker" and not finals["t3#0"]["infrastructure"], failure
        assert "worker exited with code 3" in failure["message"] and failure["phase"] == "agent", failure
    if fault == "system_exit":  # at once, not after --task-timeout
        assert finals["t3#0"]["failure"]["type"] == "SystemExit" and finals["t3#0"]["duration_s"] < 3
    if fault == "kill_sandbox":  # not the task's failure: retried; its VM restarted for free
        failure = attempts_of_t3[0]["failure"]
        assert attempts_of_t3[0]["status"] == "vm_error" and failure["type"] == "VMKilled", failure
        assert "killed from outside" in failure["message"] and "SIGKILL" in failure["message"], failure
        assert any(e.get("to") == "dead" and "killed from outside" in e.get("reason", "") for e in events)
        assert outcome.summary["vm"]["restarts"] >= 1 and outcome.summary["vm"]["replacements"] == 0
        # the summary's line says the VM was restarted, not "1 died, 0 replaced"
        restarts = outcome.summary["vm"]["restarts"]
        assert f"died, {restarts} restarted from the snapshot, 0 replaced" in format_summary(outcome.summary, outcome.run_dir)
    if fault in ("nan_result", "unencodable_result"):
        assert finals["t3#0"]["failure"]["type"] == "UnstorableResult"
        assert "field 'usage'" in finals["t3#0"]["failure"]["message"]
    if fault == "reset_fails":
        assert any("reset failed" in (e.get("reason") or "") for e in events if e.get("to") == "dead")
        # a reset may fail because of what the task left: a restart, not the budget's
        assert outcome.summary["vm"]["restarts"] >= 1 and outcome.summary["vm"]["replacements"] == 0
    summary = json.loads((outcome.run_dir / "summary.json").read_text())
    assert summary["finished"] == 8 and summary["unfinished"] == 0


def test_retries_stop_at_max_retries(tmp_path, monkeypatch):
    """An infrastructure failure on every attempt ends as one ``never_graded`` record (not
    final: it has no score, so it is not the one that counts)."""
    monkeypatch.setenv("PR_CHAOS_DIR", str(tmp_path))
    tasks = [shell_task("a"), shell_task("doomed", chaos="sigkill_always")]
    outcome = run(tmp_path, tasks, max_retries=1)
    finals = assert_exactly_once(outcome.run_dir, {"a#0", "doomed#0"})
    assert finals["a#0"]["status"] == "success"
    assert finals["doomed#0"]["infrastructure"] and finals["doomed#0"]["attempt"] == 1
    assert finals["doomed#0"]["never_graded"] and not finals["doomed#0"]["final"]
    assert [r["attempt"] for r in read_results(outcome.run_dir) if r["key"] == "doomed#0"] == [0, 1]


def test_a_worker_killed_for_a_timeout_is_handed_nothing_first(tmp_path, monkeypatch):
    """The engine hands a freed env loop its next attempt before it writes the last record,
    but a loop freed by the backend's own verdict (a timeout: its worker is about to be
    killed) is not free: the next task goes to the worker that replaces it, once."""
    from parallel_rollout.backends.local import LocalBackend

    sent = []
    original = LocalBackend.send

    def send(self, item):
        handed = original(self, item)
        if handed:
            sent.append(item.key)
        return handed

    monkeypatch.setattr(LocalBackend, "send", send)
    monkeypatch.setenv("PR_CHAOS_DIR", str(tmp_path))
    tasks = [shell_task("t0", chaos="hang"), shell_task("t1"), shell_task("t2")]
    outcome = run(tmp_path, tasks, num_rollouts=1, num_vms=1, task_timeout=2.0)
    finals = assert_exactly_once(outcome.run_dir, {"t0#0", "t1#0", "t2#0"})
    assert finals["t0#0"]["status"] == "task_timeout"
    assert finals["t1#0"]["status"] == finals["t2#0"]["status"] == "success"
    assert sent == ["t0#0", "t1#0", "t2#0"], sent


def test_vms_killed_under_tasks_cost_neither_the_tasks_nor_the_budget(tmp_path, monkeypatch):
    """M = 1 and no replacement budget at all: tasks whose sandbox is killed from the host
    mid-task are retried (not the task's doing) and succeed on the restarted VM; tasks that
    answer ``kill -9 -1`` are graded 0; the VM restarts from its snapshot each time, for
    free, and every honest task still succeeds. (A VM broken from inside by the answer is
    the task's ``sandbox_violation``: test_hostile_answers.py's kill_agent row as nobody.)"""
    monkeypatch.setenv("PR_CHAOS_DIR", str(tmp_path))
    tasks = [shell_task(f"honest{i}") for i in range(4)]
    tasks += [shell_task(f"killed{i}", chaos="kill_sandbox") for i in range(3)]
    tasks += [shell_task(f"killall{i}", reference=["kill -9 -1"], check="test -e ~/never") for i in range(3)]
    outcome = run(tmp_path, tasks, num_rollouts=1, num_vms=1, max_vm_replacements=0)
    assert outcome.exit_code == 0, outcome.message
    finals = assert_exactly_once(outcome.run_dir, {f"{t['id']}#0" for t in tasks})
    for key, record in finals.items():
        if key.startswith("killall"):
            assert record["reward"] == 0.0 and not record["infrastructure"], record
            assert record["attempt"] == 0  # graded, not retried as infrastructure
        else:
            assert record["status"] == "success", record
    for i in range(3):
        first = [r for r in read_results(outcome.run_dir) if r["key"] == f"killed{i}#0"][0]
        assert first["infrastructure"] and first["failure"]["type"] == "VMKilled", first
        assert finals[f"killed{i}#0"]["attempt"] == 1
    assert outcome.summary["vm"]["restarts"] >= 3 and outcome.summary["vm"]["replacements"] == 0


def test_a_result_no_json_line_can_hold_fails_its_sample_not_the_run(tmp_path, monkeypatch):
    """Through the CLI: an agent whose result holds a NaN or a lone surrogate (once, the
    engine thread died on it: exit 1, a traceback, no results.jsonl) fails that sample as
    ``unstorable_result``; the rest of the run completes and every line of results.jsonl is
    strict JSON in UTF-8."""
    from click.testing import CliRunner

    from parallel_rollout.cli import main

    monkeypatch.setenv("PR_CHAOS_DIR", str(tmp_path))
    tasks = [shell_task(f"t{i}") for i in range(6)]
    tasks[1]["chaos"], tasks[4]["chaos"] = "nan_result", "unencodable_result"
    data = write_tasks(tmp_path / "tasks.jsonl", tasks)
    result = CliRunner().invoke(main, [
        "--mode", "shell", "--data", str(data), "--agent", "chaos_plugins:ChaosAgent",
        "--num-rollouts", "2", "--num-vms", "2", "--use-vm-pool", "--output-dir", str(tmp_path / "out"),
        "--run-id", "r", "--no-progress"])
    assert result.exit_code == 0, result.output
    raw = (tmp_path / "out" / "r" / "results.jsonl").read_bytes().decode("utf-8")  # strict UTF-8

    def no_constants(name):
        raise AssertionError(f"results.jsonl holds {name}, which is not JSON")

    records = [json.loads(line, parse_constant=no_constants) for line in raw.split("\n") if line]
    finals = {r["key"]: r for r in records if r["final"]}
    assert len(finals) == 6 and len(records) == 6
    assert {k: r["status"] for k, r in finals.items() if k not in ("t1#0", "t4#0")} == \
        {f"t{i}#0": "success" for i in (0, 2, 3, 5)}
    for key in ("t1#0", "t4#0"):
        assert finals[key]["status"] == "unstorable_result" and finals[key]["reward"] == 0.0, finals[key]
        assert not finals[key]["infrastructure"] and finals[key]["attempt"] == 0
    assert "nan" in finals["t1#0"]["failure"]["message"]
    assert "lone surrogate" in finals["t4#0"]["failure"]["message"]


def test_a_socket_removed_from_outside_is_the_pool_s_failure_not_the_task_s(tmp_path, monkeypatch):
    """Through the CLI: a process VM's agent.sock deleted on the host mid-task (an operator's
    `find … -name agent.sock -delete`; no code in the sandbox sees that folder) was graded as
    the task's final `sandbox_violation` (0, never retried). It is `vm_error` (`VMKilled`,
    the removal named), retried on the restarted VM, where the task succeeds."""
    from click.testing import CliRunner

    from parallel_rollout.cli import main

    monkeypatch.setenv("PR_CHAOS_DIR", str(tmp_path))
    monkeypatch.syspath_prepend(str(ROOT / "tests"))
    data = write_tasks(tmp_path / "t.jsonl", [shell_task("gone", chaos="remove_socket"), shell_task("ok")])
    result = CliRunner().invoke(main, [
        "run", "--mode", "shell", "--data", str(data), "--agent", "chaos_plugins:ChaosAgent", "--num-rollouts", "1",
        "--num-vms", "1", "--use-vm-pool", "--output-dir", str(tmp_path / "out"), "--run-id", "sock",
        "--no-progress"])
    run_dir = tmp_path / "out" / "sock"
    records = [r for r in read_results(run_dir) if r["key"] == "gone#0"]
    assert result.exit_code == 0, (result.output, records)
    first = records[0]
    assert first["status"] == "vm_error" and first["infrastructure"] and not first["final"], first
    assert first["failure"]["type"] == "VMKilled", first
    assert "agent.sock was removed from outside" in first["failure"]["message"], first
    finals = assert_exactly_once(run_dir, {"gone#0", "ok#0"})
    assert finals["gone#0"]["status"] == "success" and finals["gone#0"]["attempt"] == 1


def test_a_never_graded_record_that_cannot_be_stored_still_ends_its_sample(tmp_path, monkeypatch):
    """The worker_died record the backend builds (from its attempt's meta, the worker's last
    Progress) may hold a value no JSON line can: its stored replacement keeps ``never_graded`` (and
    ``infrastructure``), so the engine settles the sample and the run ends."""
    from parallel_rollout.backends import local

    original = local.died_record

    def died_record(*args, **kwargs):
        record = original(*args, **kwargs)
        record["meta"] = {"weight": float("nan")}
        return record

    monkeypatch.setattr(local, "died_record", died_record)
    monkeypatch.setenv("PR_CHAOS_DIR", str(tmp_path))
    tasks = [shell_task("a"), shell_task("doomed", chaos="sigkill_always")]
    outcome = run(tmp_path, tasks, max_retries=1, num_rollouts=1)
    finals = assert_exactly_once(outcome.run_dir, {"a#0", "doomed#0"})
    doomed = finals["doomed#0"]
    assert doomed["status"] == "unstorable_result" and doomed["attempt"] == 1, doomed
    assert doomed["never_graded"] and doomed["infrastructure"] and not doomed["final"], doomed
    assert outcome.summary["ungraded"] == 1 and outcome.summary["finished"] == 2, outcome.summary
    assert outcome.exit_code == 1  # a sample never graded, as without the NaN


def test_a_vm_the_provider_cannot_stop_is_one_line_not_a_traceback(tmp_path, monkeypatch):
    """A provider that says why it could not stop a VM (its daemon stopped answering) is
    logged in one line naming the VM and the sweep: a traceback per VM read as a crash. The
    sweep is named as the user runs the tool, with the provider (``./dev vms sweep`` swept the
    default provider's, the process VMs, not a docker run's containers)."""
    monkeypatch.setenv("PR_CHAOS_DIR", str(tmp_path))
    monkeypatch.setenv("PARALLEL_ROLLOUT_PROG", "parallel-rollout")  # as the user types the tool
    outcome = run(tmp_path, [shell_task("t0")], agent="oracle", num_rollouts=1, num_vms=1,
                  provider_name="chaos_plugins:StopFailsProvider")
    assert outcome.exit_code == 0, outcome.message
    log = (outcome.run_dir / "run.log").read_text()
    assert ("stopping vm-0 failed: chaos: no daemon answers to stop vm-0 (parallel-rollout vms sweep "
            "--provider-name process removes what is left)") in log, log[-3000:]
    assert "Traceback" not in log, log[-3000:]
