"""A command that cannot start because of what it holds is that command's failure, not a VM's.

An agent's shell command longer than one argument may be (Linux's MAX_ARG_STRLEN, 128 KiB)
used to fail the exec with E2BIG, which the guest agent answered 500, the client took for a
broken VM, and the worker graded ``sandbox_violation`` with the VM killed. Long shell
commands now run (the guest hands them to the shell as a script); content no command line
can carry (a NUL byte, an argv past the system's limit) is the command's exit 126 with a
message saying why, the episode goes on and the VM stays up. Run through the CLI, real
sandboxes (the process provider), as a user would.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from conftest import assert_exactly_once, write_tasks
from parallel_rollout.cli import main

pytestmark = pytest.mark.skipif(shutil.which("bwrap") is None, reason="needs bubblewrap")

LONG = 140_000  # past MAX_ARG_STRLEN (32 pages: 131072 bytes)


def _run(tmp_path: Path, tasks: list[dict]) -> Path:
    data = write_tasks(tmp_path / "tasks.jsonl", tasks)
    result = CliRunner().invoke(main, [
        "--mode", "shell", "--data", str(data), "--agent", "py_agents:ScriptedAnswerAgent",
        "--num-rollouts", "1", "--num-vms", "1", "--use-vm-pool", "--max-turns", "4",
        "--output-dir", str(tmp_path / "out"), "--run-id", "own", "--no-progress"])
    assert result.exit_code == 0, (result.output, result.exception)
    return tmp_path / "out" / "own"


def _turns(run_dir: Path, record: dict) -> list[dict]:
    return [json.loads(line) for line in (run_dir / record["trajectory"]).read_text().splitlines()]


def _vm_deaths(run_dir: Path) -> list[dict]:
    events = [json.loads(line) for line in (run_dir / "events.jsonl").read_text().splitlines()]
    return [e for e in events if e["event"] == "vm" and e["to"] == "dead" and e["reason"] != "pool shutdown"]


def test_a_command_past_the_argument_limit_runs_and_its_vm_lives(tmp_path):
    tasks = [
        {"id": "long", "mode": "shell", "instruction": "write 140000 x",
         "check": f"test \"$(wc -c < ~/long.txt)\" = {LONG}",
         "answers": ["printf %s " + "x" * LONG + " > ~/long.txt; echo \"$#\" done", "DONE"]},
        # a long command reads the same stdin as a short one (/dev/null): its script is no input
        {"id": "stdin", "mode": "shell", "instruction": "read nothing",
         "check": "test \"$(cat ~/in.txt)\" = empty",
         "answers": [": " + "y" * LONG + "; (cat; echo empty) > ~/in.txt", "DONE"]},
    ]
    run_dir = _run(tmp_path, tasks)
    finals = assert_exactly_once(run_dir, {"long#0", "stdin#0"})
    for record in finals.values():
        assert record["status"] == "success" and record["reward"] == 1.0, record
    first = _turns(run_dir, finals["long#0"])[0]["observation"]
    assert (first["returncode"], first["output"], first["error"]) == (0, "0 done\n", ""), first
    assert not _vm_deaths(run_dir)


def test_a_nul_byte_is_the_commands_exit_126_and_the_episode_goes_on(tmp_path):
    tasks = [{"id": "nul", "mode": "shell", "instruction": "run a NUL", "check": "test -e ~/after",
              "answers": ["echo a\u0000b", "echo " + "z" * LONG + "\u0000", "touch ~/after", "DONE"]}]
    run_dir = _run(tmp_path, tasks)
    record = assert_exactly_once(run_dir, {"nul#0"})["nul#0"]
    assert record["status"] == "success" and record["reward"] == 1.0, record
    for turn in _turns(run_dir, record)[:2]:  # short, and long enough to go through a script
        observation = turn["observation"]
        assert observation["returncode"] == 126, observation
        assert observation["error"] == "the command holds a NUL byte, which no command line can carry"
    assert not _vm_deaths(run_dir)
