"""The command agent: a program of the user's that answers each turn, one JSON line on its
stdin, with one JSON line on its stdout.

Full runs through the Runner: the shipped shell benchmark with an agent that replays each
task's reference (one long-lived process per env loop), an agent that prints garbage (each
attempt fails cleanly), a worker killed from outside (no agent left behind, the retry
succeeds), an agent that tries to kill its worker and cannot. Then the protocol turn by
turn: an agent that exits at once, a restart after its death, a reply timeout, the checks of
--agent-cmd. The openai agent: tests/test_openai_agent.py.
"""

from __future__ import annotations

import json
import os
import shlex
import sys
import time
from pathlib import Path

import psutil
import pytest

from agent_runs import SHELL_KEYS, SHELL_LINES, make_config, needs_bwrap, run_cli, run_shell
from conftest import assert_exactly_once, read_results, shell_task, write_tasks
from parallel_rollout.agents.base import AgentError
from parallel_rollout.agents.command import CommandAgent
from parallel_rollout.errors import ConfigError, TaskTimeout
from parallel_rollout.tasks import Task


# The reference is the answer key, which the agent is not given, nor can read in the run's task
# file (hidden from it): it reads a copy the test wrote for it (``references``).
REPLAY_AGENT = """\
import json, os, sys
ME = os.urandom(8).hex()  # which process: each has pid 2, in a PID namespace of its own
log = open(sys.argv[1], "a")
references = json.load(open(sys.argv[2]))
for line in sys.stdin:
    msg = json.loads(line)
    if msg["turn"] == 1:
        commands = list(references[msg["task_id"]])
        log.write(f"{ME}\\n"); log.flush()
    action = {"command": commands[msg["turn"] - 1]} if msg["turn"] <= len(commands) else "DONE"
    print(json.dumps(action), flush=True)
"""


def assert_all_exited(script: Path, starts=None, expected: int | None = None) -> None:
    """No process runs ``script`` any more (found by its command line: an agent's pid in its
    own PID namespace says nothing out here); ``starts``, the processes' own log of their
    starts, one line each, numbers ``expected``. Checked here because an agent orphaned by
    its worker would be re-parented to init, where conftest's leak check cannot see it."""
    if expected is not None:
        assert len(starts) == expected, starts
    deadline = time.monotonic() + 5
    while True:
        alive = []
        for proc in psutil.process_iter(["cmdline", "status"]):
            if str(script) in (proc.info["cmdline"] or ()) and proc.info["status"] != psutil.STATUS_ZOMBIE:
                alive.append(proc)
        if not alive or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    for proc in alive:
        proc.kill()
    assert not alive, f"agent processes left behind: {alive}"


def agent_bubblewrap(script: Path, marker: Path) -> psutil.Process:
    """The bubblewrap of the agent running ``script``, once it made ``marker``."""
    deadline = time.monotonic() + 120
    while not marker.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    return next(p for p in psutil.process_iter(["cmdline"])
                if "bwrap" in " ".join(p.info["cmdline"] or ()) and str(script) in p.info["cmdline"])


def command_line(script: Path, *args: str) -> str:
    return " ".join(shlex.quote(part) for part in (sys.executable, str(script), *args))


def references(tmp_path: Path, tasks: list[dict]) -> Path:
    """A copy of the tasks' references, out of the run's task file, for REPLAY_AGENT."""
    path = tmp_path / "references.json"
    path.write_text(json.dumps({t["id"]: t["reference"] for t in tasks}))
    return path


@needs_bwrap
def test_command_agent_solves_the_shell_benchmark(tmp_path):
    script = tmp_path / "replay_agent.py"
    script.write_text(REPLAY_AGENT)
    episodes = tmp_path / "episodes.log"
    outcome = run_shell(tmp_path, agent="command",
                        agent_cmd=command_line(script, str(episodes), str(references(tmp_path, SHELL_LINES))))
    assert outcome.exit_code == 0, outcome.message
    finals = assert_exactly_once(outcome.run_dir, SHELL_KEYS)
    assert {r["status"] for r in finals.values()} == {"success"}, {k: r["failure"] for k, r in finals.items()}
    processes = episodes.read_text().split()
    assert len(processes) == 25
    assert len(set(processes)) <= 2, "one long-lived agent process per env loop, not one per episode"
    assert_all_exited(script)


GARBAGE_AGENT = """\
import os, sys, time
open(sys.argv[1], "a").write("started\\n")
sys.stderr.write("garbage-agent: loaded the wrong model\\n"); sys.stderr.flush()
print("Hello! I am a chatty agent.", flush=True)
time.sleep(60)  # and ignores EOF on stdin: the agent must escalate to a signal
"""


@needs_bwrap
def test_a_command_agent_that_prints_garbage_fails_each_attempt_cleanly(tmp_path):
    script = tmp_path / "garbage_agent.py"
    script.write_text(GARBAGE_AGENT)
    data = write_tasks(tmp_path / "tasks.jsonl", [shell_task(f"g{i}") for i in range(3)])
    pids = tmp_path / "pids.log"
    outcome = run_shell(tmp_path, data=data, agent="command", agent_cmd=command_line(script, str(pids)))
    assert outcome.exit_code == 0, outcome.message
    finals = assert_exactly_once(outcome.run_dir, {"g0#0", "g1#0", "g2#0"})
    for record in finals.values():
        assert record["status"] == "error" and not record["infrastructure"]
        message = record["failure"]["message"]
        assert "the reply is not JSON: 'Hello! I am a chatty agent.'" in message
        assert "garbage-agent: loaded the wrong model" in message
    # One process per attempt (each is stopped after its bad reply), and none survives.
    assert_all_exited(script, pids.read_text().split(), expected=3)


AGENT_THAT_STAYS = """\
import json, os, signal, subprocess, sys, time
started, marker = sys.argv[1], sys.argv[2]
open(started, "a").write("started\\n")
signal.signal(signal.SIGTERM, signal.SIG_IGN)
for line in sys.stdin:
    if not os.path.exists(marker):
        subprocess.Popen(["sleep", "600"], start_new_session=True)  # a child of its own, in a session of its own
        open(marker, "w").close()
        while True:
            time.sleep(1)  # ignores EOF and SIGTERM
    print(json.dumps("2"), flush=True)
"""


def test_a_worker_killed_from_outside_takes_its_command_agent_and_what_it_started(tmp_path):
    """A worker killed from outside (an OOM kill, an operator: here the test) leaves no agent
    behind, even one that ignores EOF and SIGTERM, nor what that agent started in a session
    of its own: the runner kills only the trees of workers it kills itself, but the agent's
    PID namespace dies with its worker. The retry on a new worker succeeds."""
    import threading

    from click.testing import CliRunner
    from parallel_rollout.cli import main

    script, started, marker = tmp_path / "agent.py", tmp_path / "started.log", tmp_path / "stuck"
    script.write_text(AGENT_THAT_STAYS)
    data = write_tasks(tmp_path / "tasks.jsonl", [{"id": "m1", "mode": "math", "problem": "1+1", "answer": "2"}])

    def kill_the_worker() -> None:
        agent_bubblewrap(script, marker).parent().kill()  # the worker, as the OOM killer would

    killer = threading.Thread(target=kill_the_worker)
    killer.start()
    result = CliRunner().invoke(main, [
        "--mode", "math", "--data", str(data), "--output-dir", str(tmp_path), "--run-id", "orphan",
        "--num-rollouts", "1", "--agent", "command", "--no-progress",
        "--agent-cmd", command_line(script, str(started), str(marker))])
    killer.join()
    assert result.exit_code == 0, result.output[-3000:]
    statuses = [r["status"] for r in read_results(tmp_path / "orphan")]
    assert statuses == ["worker_died", "success"], statuses
    assert_all_exited(script, started.read_text().split(), expected=2)
    sleepers = [p for p in psutil.process_iter(["cmdline"]) if p.info["cmdline"] == ["sleep", "600"]
                and p.environ().get("PR_TEST_SANDBOX_ROOT") == os.environ["PR_TEST_SANDBOX_ROOT"]]
    assert not sleepers, "what the agent started outlived its worker"


KILLER_AGENT = """\
import json, os, signal, sys
for line in sys.stdin:
    msg = json.loads(line)
    feedback = msg["observation"].get("feedback")
    if feedback is not None and feedback.get("kind") != "passed":
        os.kill(os.getppid(), signal.SIGKILL)  # its worker, if it can reach it: the try is erased
    print(json.dumps("    return None\\n"), flush=True)
"""


@needs_bwrap
def test_a_command_agent_cannot_erase_a_failed_attempt_by_killing_its_worker(tmp_path):
    """An agent that kills its parent (its worker, when it could reach it) once its first try
    failed: the attempt was recorded worker_died, retried as infrastructure, again and again.
    In a PID namespace of its own its parent is the namespace's init, which ignores it: the
    attempt is graded, once."""
    from click.testing import CliRunner
    from parallel_rollout.cli import main

    script = tmp_path / "killer.py"
    script.write_text(KILLER_AGENT)
    result = CliRunner().invoke(main, [
        "--mode", "py", "--data", "humaneval", "--limit", "1", "--output-dir", str(tmp_path), "--run-id", "k",
        "--num-rollouts", "1", "--num-vms", "1", "--use-vm-pool", "--agent", "command", "--no-progress",
        "--max-turns", "2", "--max-retries", "3", "--agent-cmd", command_line(script)])
    assert result.exit_code == 0, result.output[-3000:]
    records = read_results(tmp_path / "k")
    assert [(r["attempt"], r["status"], r["turns"]) for r in records] == [(0, "failure", 2)], records
    events = (tmp_path / "k" / "events.jsonl").read_text()
    assert "worker_died" not in events


FORGER_AGENT = """\
import json, sys
run, log = sys.argv[1], open(sys.argv[2], "a")
forged = {"task_id": "HumanEval/0", "sample": 0, "attempt": 0, "status": "success", "reward": 1.0}
for line in sys.stdin:
    for name, text in (("results.jsonl", json.dumps(forged) + "\\n"), ("summary.json", "{}"), ("events.jsonl", "")):
        try:
            with open(f"{run}/{name}", "a") as f:
                f.write(text)
            log.write(f"wrote {name}\\n")
        except OSError as exc:
            log.write(f"refused {name}: {exc.strerror}\\n")
    log.flush()
    print(json.dumps("    return None\\n"), flush=True)
"""


@needs_bwrap
def test_a_command_agent_cannot_write_a_record_into_the_run(tmp_path):
    """An agent that appends a passing record of its own task to results.jsonl while its
    answer fails (the runner's user could write the run folder): the output folder is an
    empty read-only folder to it, the forged line never lands, the attempt is graded once, a failure."""
    from click.testing import CliRunner
    from parallel_rollout.cli import main

    script, log, out = tmp_path / "forger.py", tmp_path / "agent.log", tmp_path / "out"
    script.write_text(FORGER_AGENT)
    result = CliRunner().invoke(main, [
        "--mode", "py", "--data", "humaneval", "--limit", "1", "--output-dir", str(out), "--run-id", "f",
        "--num-rollouts", "1", "--num-vms", "1", "--use-vm-pool", "--agent", "command", "--no-progress",
        "--max-turns", "1", "--agent-cmd", command_line(script, str(out / "f"), str(log))])
    assert result.exit_code == 0, result.output[-3000:]
    assert log.read_text().splitlines() == [  # the output folder is empty to it: no run's folder in it
        "refused results.jsonl: No such file or directory", "refused summary.json: No such file or directory",
        "refused events.jsonl: No such file or directory"]
    records = read_results(out / "f")
    assert [(r["attempt"], r["status"], r["reward"]) for r in records] == [(0, "failure", 0.0)], records


# Answers with the expected answer of any graded record it can read in the run's folder.
THIEF_AGENT = r"""
import glob, json, sys
for line in sys.stdin:
    answer = "0"
    for path in glob.glob(sys.argv[1] + "/*/results.jsonl"):
        for record in open(path):
            expected = (json.loads(record).get("eval") or {}).get("expected")
            answer = expected or answer
    print(json.dumps(answer), flush=True)
"""


@needs_bwrap
def test_a_command_agent_cannot_read_its_runs_records(tmp_path):
    """A graded record's ``eval`` holds the expected answer: an agent that read its run's
    results.jsonl (read-only to it) answered the later samples of a task with it, 2 of 3
    with --group-size 3. The run's folder is hidden: it finds nothing, every sample fails."""
    script = tmp_path / "thief.py"
    script.write_text(THIEF_AGENT)
    data = write_tasks(tmp_path / "tasks.jsonl",
                       [{"id": "m1", "mode": "math", "problem": "What is 1234*5678?", "answer": "7006652"}])
    records = run_cli(tmp_path, "thief", "--mode", "math", "--data", str(data), "--group-size", "3",
                      "--agent-cmd", command_line(script, str(tmp_path / "out")))
    assert [(r["status"], r["reward"]) for r in records] == [("failure", 0.0)] * 3, records
    assert records[0]["eval"]["expected"] == "7006652", records[0]  # there to be stolen


@needs_bwrap
def test_a_command_agent_can_neither_read_nor_rewrite_earlier_runs(tmp_path):
    """The whole output folder is hidden, not only the run's own: an earlier run's records
    hold the same task's expected answer (the thief answered with it: success), and a
    baseline that ``compare`` reads later was the agent's to rewrite. Where the agent's own
    folder lies in the output folder, only its run's folder can be hidden, and it still runs."""
    script, forger, log = tmp_path / "thief.py", tmp_path / "forger.py", tmp_path / "agent.log"
    script.write_text(THIEF_AGENT)
    forger.write_text(FORGER_AGENT)
    data = write_tasks(tmp_path / "tasks.jsonl",
                       [{"id": "m1", "mode": "math", "problem": "What is 1234*5678?", "answer": "7006652"}])
    out = tmp_path / "out"
    first = run_cli(tmp_path, "first", "--mode", "math", "--data", str(data), "--agent-cmd", command_line(script, str(out)))
    assert first[0]["eval"]["expected"] == "7006652", first  # in out/first/results.jsonl, to be stolen
    again = run_cli(tmp_path, "again", "--mode", "math", "--data", str(data), "--agent-cmd", command_line(script, str(out)))
    assert [(r["status"], r["reward"]) for r in again] == [("failure", 0.0)], again
    baseline = (out / "first" / "results.jsonl").read_bytes()
    run_cli(tmp_path, "forge", "--mode", "math", "--data", str(data),
            "--agent-cmd", command_line(forger, str(out / "first"), str(log)))
    assert log.read_text().splitlines()[0].startswith("refused results.jsonl: "), log.read_text()  # not there to it
    assert (out / "first" / "results.jsonl").read_bytes() == baseline

    # The agent's program inside the output folder: the output folder stays visible, its run's is not.
    inside = out / "agents" / "thief.py"
    inside.parent.mkdir()
    inside.write_text(THIEF_AGENT)
    records = run_cli(tmp_path, "inside", "--mode", "math", "--data", str(data),
                      "--agent-cmd", command_line(inside, str(out)))
    assert [(r["status"], r["reward"]) for r in records] == [("success", 1.0)], records  # it read out/first


SLOW_AGENT = r"""
import json, os, signal, sys, time
marker = sys.argv[1]
for line in sys.stdin:
    msg = json.loads(line)
    if sys.argv[2] == "kill-own-group":
        os.kill(0, signal.SIGKILL)  # its process group: in a session of its own, itself only
    if not os.path.exists(marker):
        open(marker, "w").close()
        time.sleep(60)  # thinking, when its bubblewrap is killed from outside
    print(json.dumps("2"), flush=True)
"""


@needs_bwrap
def test_a_command_agent_killed_from_outside_is_retried_not_graded(tmp_path):
    """The agent's bubblewrap SIGKILLed from outside (an operator, the OOM killer) while the
    agent thinks: nothing inside its namespace and session can signal it, so the runner's
    failure, not the agent's: infrastructure, retried, and the retry is graded."""
    import threading

    script, marker = tmp_path / "slow.py", tmp_path / "thinking"
    script.write_text(SLOW_AGENT)
    data = write_tasks(tmp_path / "tasks.jsonl", [{"id": "m1", "mode": "math", "problem": "1+1", "answer": "2"}])

    killer = threading.Thread(target=lambda: agent_bubblewrap(script, marker).kill())
    killer.start()
    records = run_cli(tmp_path, "outside", "--mode", "math", "--data", str(data),
                      "--agent-cmd", command_line(script, str(marker), "think"))
    killer.join()
    assert [(r["status"], r["infrastructure"]) for r in records] == [("agent_killed", True), ("success", False)], \
        records
    assert "its bubblewrap was killed by signal 9, from outside" in records[0]["failure"]["message"]
    # An agent that kills its own process group kills only itself: its own error, graded.
    records = run_cli(tmp_path, "inside", "--mode", "math", "--data", str(data),
                      "--agent-cmd", command_line(script, str(marker), "kill-own-group"))
    assert [(r["status"], r["infrastructure"]) for r in records] == [("error", False)], records
    assert_all_exited(script)


def command_agent(tmp_path, source: str, **overrides) -> CommandAgent:
    script = tmp_path / "agent.py"
    script.write_text(source)
    agent = CommandAgent(make_config(agent="command", agent_cmd=command_line(script), **overrides))
    agent.reset(Task(id="c1", mode="math", payload={"problem": "1+1"}))
    return agent


def test_a_command_agent_that_exits_at_once(tmp_path):
    agent = command_agent(tmp_path, "import sys\nsys.stderr.write('no model configured\\n')\nsys.exit(3)\n")
    with pytest.raises(AgentError) as caught:
        agent.act({"problem": "1+1"})
    message = str(caught.value)
    assert "exited with status 3" in message and "no model configured" in message
    assert "task 'c1' turn 1" in message


ECHO_AGENT = """\
import json, os, sys
ME = os.urandom(8).hex()  # which process: each has pid 2, in a PID namespace of its own
for line in sys.stdin:
    msg = json.loads(line)
    print(json.dumps({"pid": ME, "turn": msg["turn"], "task": msg.get("task"),
                      "observation": msg["observation"]}), flush=True)
    if msg["observation"].get("problem") == "die":
        sys.exit(0)
    if msg["observation"].get("problem") == "hang":
        import time; time.sleep(60)
"""


def test_command_protocol_and_restart_after_death(tmp_path):
    agent = command_agent(tmp_path, ECHO_AGENT)
    first = agent.act({"problem": "1+1"})
    assert first["turn"] == 1 and first["observation"] == {"problem": "1+1"}
    assert first["task"] == {"id": "c1", "mode": "math", "seed": None, "tags": [], "problem": "1+1"}
    second = agent.act({"problem": "die"})
    assert second["turn"] == 2 and second["task"] is None and second["pid"] == first["pid"]
    agent.reset(Task(id="c2", mode="math", payload={"problem": "2+2"}))
    third = agent.act({"problem": "2+2"})  # the process exited after "die": a new one answers
    assert third["turn"] == 1 and third["task"]["id"] == "c2" and third["pid"] != first["pid"]
    agent.close()


def test_command_reply_timeout_stops_the_process(tmp_path):
    agent = command_agent(tmp_path, ECHO_AGENT, task_timeout=2.0)  # replies end 1.5 s after reset
    agent.act({"problem": "hang"})  # answers, then hangs before reading the next turn
    with pytest.raises(TaskTimeout, match=r"turn 2: no reply within --task-timeout 2s \(.* less 0.5s"):
        agent.act({"problem": "1+1"})
    assert agent._process is None, "a process that missed a reply must not answer the next turn"


def test_command_reply_budget_is_spent_only_waiting_for_replies(tmp_path):
    """The budget was the wall time since reset: 1.6 s of the env's step (or a VM lease, a
    weight update: time the runner's clock may not count) after a quick reply left turn 2
    a task_timeout within milliseconds. Only the waits for replies are spent."""
    agent = command_agent(tmp_path, ECHO_AGENT, task_timeout=2.0)  # replies may take 1.5 s in all
    assert agent.act({"problem": "1+1"})["turn"] == 1
    time.sleep(1.6)  # the env's step
    assert agent.act({"problem": "2+2"})["turn"] == 2
    agent.act({"problem": "hang"})
    started = time.monotonic()
    with pytest.raises(TaskTimeout, match=r"turn 4: no reply within --task-timeout 2s"):
        agent.act({"problem": "1+1"})  # a hang still ends with what is left of the budget
    assert time.monotonic() - started < 1.5


def test_command_check_config(tmp_path):
    with pytest.raises(ConfigError, match="needs --agent-cmd"):
        CommandAgent.check_config(make_config(agent="command", agent_cmd=None))
    with pytest.raises(ConfigError, match="not an executable"):
        CommandAgent.check_config(make_config(agent="command", agent_cmd="no-such-agent-binary --x"))
    with pytest.raises(ConfigError, match="No closing quotation"):
        CommandAgent.check_config(make_config(agent="command", agent_cmd="python 'unterminated"))
    script = tmp_path / "agent.py"
    script.write_text("")  # a script the interpreter is given must exist (check_script)
    CommandAgent.check_config(make_config(agent="command", agent_cmd=f"{sys.executable} {script}"))
