"""A command agent's stray line: one its process wrote that no observation asked for.

Each reply answers exactly one observation; a second line after a reply (or one written after
the episode ended) used to be taken as the answer to the next request, the next turn's or the
next task's, so that one task's stray action ran in another task's VM and changed its score.
Now the attempt whose agent wrote it fails with a protocol error naming the line (the agent's
error, not infrastructure), its process is stopped, and the next task starts clean. Run
through the CLI as a user runs it, with real sandboxes (the process provider).
"""

from __future__ import annotations

import json
import shlex
import sys

from click.testing import CliRunner

from agent_runs import needs_bwrap
from conftest import assert_exactly_once, write_tasks
from parallel_rollout.cli import main

CHATTY_AGENT = """\
import json, sys

def reply(text):
    sys.stdout.write(text + "\\n")
    sys.stdout.flush()

for line in sys.stdin:
    msg = json.loads(line)
    task = msg["task_id"]
    if task == "chatty":
        # one write, so that both lines are there together (a reply, then a line no
        # observation asked for); two writes are caught the same way unless the second comes late
        reply(json.dumps("DONE") + "\\n" + json.dumps({"command": "touch ~/flag"}))
    elif task == "midway" and msg["turn"] == 1:
        reply(json.dumps({"command": "true"}) + "\\n" + json.dumps({"command": "touch ~/flag"}))
    else:
        print(json.dumps("DONE"), flush=True)
"""


def _task(task_id: str, check: str) -> dict:
    return {"id": task_id, "mode": "shell", "instruction": f"task {task_id}", "check": check}


@needs_bwrap
def test_a_stray_line_fails_its_own_attempt_and_never_reaches_another_task(tmp_path):
    script = tmp_path / "chatty.py"
    script.write_text(CHATTY_AGENT)
    # one env loop: the three tasks run one after the other on the same agent process
    data = write_tasks(tmp_path / "chatty.jsonl", [
        _task("chatty", "true"), _task("quiet", "test -e ~/flag"),
        _task("midway", "true"), _task("after", "test -e ~/flag")])
    result = CliRunner().invoke(main, [
        "--mode", "shell", "--data", str(data), "--agent", "command", "--num-rollouts", "1",
        "--agent-cmd", " ".join(shlex.quote(p) for p in (sys.executable, str(script))),
        "--output-dir", str(tmp_path / "out"), "--run-id", "strays", "--no-progress", "--max-retries", "0"])
    assert result.exit_code in (0, 1), (result.output[-3000:], result.exception)
    run_dir = tmp_path / "out" / "strays"
    finals = assert_exactly_once(run_dir, {"chatty#0", "quiet#0", "midway#0", "after#0"})

    for key in ("chatty#0", "midway#0"):
        record = finals[key]
        assert record["status"] == "error" and not record["infrastructure"], record
        message = record["failure"]["message"]
        assert "protocol error" in message, message
        assert """'{"command": "touch ~/flag"}'""" in message, message
    # the stray line of chatty was never run in quiet's VM, nor midway's in after's
    for key in ("quiet#0", "after#0"):
        record = finals[key]
        assert record["status"] == "failure" and record["reward"] == 0.0, record
        turns = [json.loads(line) for line in (run_dir / record["trajectory"]).read_text().splitlines()]
        assert [t["action"] for t in turns] == ["DONE"], turns
    # midway's turn 2 got no answer: the stray line was refused, not run as that turn's action
    midway = [json.loads(line) for line in (run_dir / finals["midway#0"]["trajectory"]).read_text().splitlines()]
    assert [t["action"] for t in midway] == [{"command": "true"}], midway


TWICE_AGENT = """\
import json, os, sys
ME = os.urandom(8).hex()  # which process: each has pid 2, in a PID namespace of its own
for line in sys.stdin:
    msg = json.loads(line)
    print(json.dumps({"pid": ME, "task": msg["task_id"], "turn": msg["turn"]}), flush=True)
    if msg["task_id"] == "c1":
        print(json.dumps("stray"), flush=True)
"""


def test_a_stray_line_written_after_an_episode_was_checked_never_answers_the_next_one(tmp_path):
    """A stray line that came too late for the episode's check (``end_episode``, skipped
    here as if the line came after it): the next episode's first turn finds it, stops that
    process and asks a fresh one; it is never the new task's answer."""
    import time

    from agent_runs import make_config
    from parallel_rollout.agents.command import CommandAgent
    from parallel_rollout.tasks import Task

    script = tmp_path / "twice.py"
    script.write_text(TWICE_AGENT)
    agent = CommandAgent(make_config(agent="command", agent_cmd=f"{sys.executable} {script}"))
    try:
        agent.reset(Task(id="c1", mode="math", payload={"problem": "1+1"}))
        first = agent.act({"problem": "1+1"})
        time.sleep(0.3)  # the stray line is read meanwhile
        agent.reset(Task(id="c2", mode="math", payload={"problem": "2+2"}))
        second = agent.act({"problem": "2+2"})
        assert second["task"] == "c2" and second["turn"] == 1, second
        assert second["pid"] != first["pid"], "the process that wrote the stray line must not go on"
    finally:
        agent.close()
