"""The command agent: a program of the user's that answers each turn, one JSON line on its
stdin, with one JSON line on its stdout.

Full runs through the Runner: the shipped shell benchmark with an agent that replays each
task's reference (one long-lived process per env loop), an agent that prints garbage (each
attempt fails cleanly), one that kills its own worker (no agent left behind, the retry
succeeds). Then the protocol turn by turn: an agent that exits at once, a restart after its
death, a reply timeout, the checks of --agent-cmd. The openai agent: tests/test_openai_agent.py.
"""

from __future__ import annotations

import shlex
import sys
import time
from pathlib import Path

import psutil
import pytest

from agent_runs import SHELL_KEYS, make_config, needs_bwrap, run_shell
from conftest import SHELL_TASKS, assert_exactly_once, read_results, shell_task, write_tasks
from parallel_rollout.agents.base import AgentError
from parallel_rollout.agents.command import CommandAgent
from parallel_rollout.errors import ConfigError
from parallel_rollout.tasks import Task


# The reference is the answer key, which the agent is not given: it reads the task file.
REPLAY_AGENT = """\
import json, os, sys
log = open(sys.argv[1], "a")
tasks = {t["id"]: t for t in (json.loads(l) for l in open(sys.argv[2]) if l.strip())}
for line in sys.stdin:
    msg = json.loads(line)
    if msg["turn"] == 1:
        commands = list(tasks[msg["task_id"]]["reference"])
        log.write(f"{os.getpid()}\\n"); log.flush()
    action = {"command": commands[msg["turn"] - 1]} if msg["turn"] <= len(commands) else "DONE"
    print(json.dumps(action), flush=True)
"""


def assert_all_exited(pids, expected: int | None = None) -> None:
    """Every agent process in ``pids`` is gone. Checked here because an agent orphaned by its
    worker is re-parented to init, where conftest's leak check (descendants) cannot see it."""
    pids = [int(pid) for pid in pids]
    if expected is not None:
        assert len(pids) == expected, pids
    deadline = time.monotonic() + 5
    alive = pids
    while alive and time.monotonic() < deadline:
        alive = [pid for pid in pids if psutil.pid_exists(pid)
                 and psutil.Process(pid).status() != psutil.STATUS_ZOMBIE]
        time.sleep(0.05)
    for pid in alive:
        psutil.Process(pid).kill()
    assert not alive, f"agent processes left behind: {alive}"


def command_line(script: Path, *args: str) -> str:
    return " ".join(shlex.quote(part) for part in (sys.executable, str(script), *args))


@needs_bwrap
def test_command_agent_solves_the_shell_benchmark(tmp_path):
    script = tmp_path / "replay_agent.py"
    script.write_text(REPLAY_AGENT)
    episodes = tmp_path / "episodes.log"
    outcome = run_shell(tmp_path, agent="command", agent_cmd=command_line(script, str(episodes), str(SHELL_TASKS)))
    assert outcome.exit_code == 0, outcome.message
    finals = assert_exactly_once(outcome.run_dir, SHELL_KEYS)
    assert {r["status"] for r in finals.values()} == {"success"}, {k: r["failure"] for k, r in finals.items()}
    pids = episodes.read_text().split()
    assert len(pids) == 25
    assert len(set(pids)) <= 2, "one long-lived agent process per env loop, not one per episode"
    assert_all_exited(set(pids))


GARBAGE_AGENT = """\
import os, sys, time
open(sys.argv[1], "a").write(f"{os.getpid()}\\n")
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
    assert_all_exited(pids.read_text().split(), expected=3)


ORPHANED_AGENT = """\
import json, os, signal, sys, time
pids, marker = sys.argv[1], sys.argv[2]
open(pids, "a").write(f"{os.getpid()}\\n")
signal.signal(signal.SIGTERM, signal.SIG_IGN)
for line in sys.stdin:
    if not os.path.exists(marker):
        open(marker, "w").close()
        os.kill(os.getppid(), signal.SIGKILL)  # its worker dies, not by the runner's hand
        while True:
            time.sleep(1)  # ignores EOF and SIGTERM
    print(json.dumps("2"), flush=True)
"""


def test_a_command_agent_dies_with_a_worker_that_died_on_its_own(tmp_path):
    """A worker killed from outside (here by its own agent; an OOM kill alike) leaves no agent
    behind, even one that ignores EOF and SIGTERM: the runner kills only the trees of workers
    it kills itself, and the orphan would be init's. The retry on a new worker succeeds."""
    from click.testing import CliRunner
    from parallel_rollout.cli import main

    script, pids = tmp_path / "agent.py", tmp_path / "pids.log"
    script.write_text(ORPHANED_AGENT)
    data = write_tasks(tmp_path / "tasks.jsonl", [{"id": "m1", "mode": "math", "problem": "1+1", "answer": "2"}])
    result = CliRunner().invoke(main, [
        "--mode", "math", "--data", str(data), "--output-dir", str(tmp_path), "--run-id", "orphan",
        "--num-rollouts", "1", "--agent", "command", "--no-progress",
        "--agent-cmd", command_line(script, str(pids), str(tmp_path / "killed"))])
    assert result.exit_code == 0, result.output[-3000:]
    statuses = [r["status"] for r in read_results(tmp_path / "orphan")]
    assert statuses == ["worker_died", "success"], statuses
    assert_all_exited(pids.read_text().split(), expected=2)


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
for line in sys.stdin:
    msg = json.loads(line)
    print(json.dumps({"pid": os.getpid(), "turn": msg["turn"], "task": msg.get("task"),
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
    agent = command_agent(tmp_path, ECHO_AGENT)
    agent.reply_timeout_s = 0.5
    agent.act({"problem": "hang"})  # answers, then hangs before reading the next turn
    with pytest.raises(AgentError, match="no reply within 0.5 s"):
        agent.act({"problem": "1+1"})
    assert agent._process is None, "a process that missed a reply must not answer the next turn"


def test_command_check_config(tmp_path):
    with pytest.raises(ConfigError, match="needs --agent-cmd"):
        CommandAgent.check_config(make_config(agent="command", agent_cmd=None))
    with pytest.raises(ConfigError, match="not an executable"):
        CommandAgent.check_config(make_config(agent="command", agent_cmd="no-such-agent-binary --x"))
    with pytest.raises(ConfigError, match="No closing quotation"):
        CommandAgent.check_config(make_config(agent="command", agent_cmd="python 'unterminated"))
    CommandAgent.check_config(make_config(agent="command", agent_cmd=f"{sys.executable} agent.py"))
