"""The command agent's life as a plugin author meets it, through the CLI: a program that dies
within an episode fails its attempt (it is not started again mid-episode); one that hangs is
``task_timeout``, its stderr tail recorded.
"""

from __future__ import annotations

import shlex
import sys

from click.testing import CliRunner

from agent_runs import needs_bwrap
from conftest import read_results, shell_task, write_tasks
from parallel_rollout.cli import main


def run(tmp_path, run_id: str, agent_cmd: str, *flags: str, tasks: int = 2):
    """A shell run of ``tasks`` small tasks on one env loop, driven by ``agent_cmd``."""
    data = write_tasks(tmp_path / "tasks.jsonl", [shell_task(f"t{i}") for i in range(tasks)])
    return CliRunner().invoke(main, [
        "--mode", "shell", "--data", str(data), "--output-dir", str(tmp_path / "out"), "--run-id", run_id,
        "--num-rollouts", "1", "--agent", "command", "--no-progress", "--agent-cmd", agent_cmd, *flags])


def python_agent(tmp_path, name: str, source: str) -> str:
    script = tmp_path / name
    script.write_text(source)
    return " ".join(shlex.quote(part) for part in (sys.executable, str(script)))


# Replies to turn 1, then crashes; a process started again would get turn 2 without the
# task, and say DONE: the attempt would pass, graded on a process that never saw the episode.
CRASH_AFTER_REPLY = """\
import json, sys
msg = json.loads(sys.stdin.readline())
if msg["turn"] == 1:
    print(json.dumps({"command": f"sleep 0.5; touch ~/{msg['task_id']}.done"}), flush=True)
    raise RuntimeError("agent crashed after its first reply")
print(json.dumps("DONE"), flush=True)
"""


@needs_bwrap
def test_an_agent_that_dies_within_an_episode_fails_the_attempt(tmp_path):
    result = run(tmp_path, "crash", python_agent(tmp_path, "crash.py", CRASH_AFTER_REPLY))
    assert result.exit_code == 0, result.output[-3000:]
    records = read_results(tmp_path / "out" / "crash")
    assert sorted((r["task_id"], r["status"]) for r in records) == [("t0", "error"), ("t1", "error")], records
    for record in records:
        message = record["failure"]["message"]
        assert "turn 2: the agent" in message and "it exited with status 1" in message, message
        assert "during the episode (after its reply to turn 1" in message, message
        assert "agent crashed after its first reply" in message, message  # its stderr tail


# Hangs: one never reads its stdin, one reads it to the end (which never comes) first.
HANGS = """\
import sys, time
print("thinking forever", file=sys.stderr, flush=True)
time.sleep(600)
"""
READS_ALL = """\
import sys
print("reading until EOF", file=sys.stderr, flush=True)
sys.stdin.read()
"""


@needs_bwrap
def test_a_hanging_agent_is_a_task_timeout_with_its_stderr(tmp_path):
    """One outcome, not a race between the agent's wait for a reply (an ``error``) and the
    runner's kill at --task-timeout (a ``task_timeout`` that lost the stderr): the agent's
    wait ends first, its record is ``task_timeout`` and quotes the agent's stderr, and no
    worker is killed."""
    for name, source, said in (("hang", HANGS, "thinking forever"), ("readall", READS_ALL, "reading until EOF")):
        result = run(tmp_path, name, python_agent(tmp_path, f"{name}.py", source), "--task-timeout", "4")
        assert result.exit_code == 0, result.output[-3000:]
        records = read_results(tmp_path / "out" / name)
        assert [r["status"] for r in records] == ["task_timeout"] * 2, records
        for record in records:
            failure = record["failure"]
            assert failure["type"] == "TaskTimeout" and not record["infrastructure"], failure
            assert "turn 1: no reply within --task-timeout 4s" in failure["message"], failure
            assert f"stderr tail:\n{said}" in failure["message"], failure
        assert "killed after task_timeout" not in result.output, result.output
