"""What a ``module:Class`` agent's ``act`` is handed in each mode: the keys the README's table
("Your own agent: --agent module:Class") names for it, run through the CLI."""

from __future__ import annotations

import json
import re
import shutil

import pytest
from click.testing import CliRunner

from conftest import SHELL_TASKS, write_tasks
from parallel_rollout.cli import main
from readme_support import readme_section

needs_bwrap = pytest.mark.skipif(shutil.which("bwrap") is None, reason="needs bubblewrap")


def table_keys(mode: str) -> set[str]:
    """The keys the README's observation column names for ``mode`` (those of its first
    observation: before any ';')."""
    own_agent = readme_section("Running").split("### Your own agent: ", 1)[1].split("\n### ", 1)[0]
    [row] = re.findall(rf"^\| `{mode}` \| ([^|]*) \|", own_agent, re.M)
    return set(re.findall(r"`(\w+)`", row.split(";")[0]))


@pytest.mark.parametrize("mode, data", [
    pytest.param("shell", lambda tmp_path: SHELL_TASKS, marks=needs_bwrap),
    pytest.param("py", lambda tmp_path: "humaneval", marks=needs_bwrap),
    ("math", lambda tmp_path: write_tasks(tmp_path / "math.jsonl", [{"id": "m1", "problem": "1+1?", "answer": "2"}])),
    ("rag", lambda tmp_path: "rag"),
    ("gym", lambda tmp_path: "frozenlake"),
])
def test_an_agents_first_observation_has_the_keys_the_readme_names(tmp_path, mode, data):
    """The shell mode's first observation had no 'error' (the table's `instruction`, `output`,
    `error`, `returncode`): an agent that read observation['error'] before its first command
    failed with KeyError; each later one has it."""
    observed = tmp_path / "observed.jsonl"
    result = CliRunner().invoke(main, ["--mode", mode, "--data", str(data(tmp_path)), "--limit", "1",
                                       "--agent", "user_plugins:ObservationKeysAgent", "--max-turns", "3",
                                       "--output-dir", str(tmp_path / "out"), "--run-id", "keys", "--no-progress"],
                                env={"OBSERVED_KEYS": str(observed)})
    assert result.exit_code == 0, (result.output, result.exception)
    seen = [set(json.loads(line)) for line in observed.read_text().splitlines()]
    named = table_keys(mode)
    assert named and seen and named <= seen[0], (named, seen)
    if mode == "shell":  # the README's example reads every key of each one
        assert len(seen) == 2 and all(named <= keys for keys in seen), seen
