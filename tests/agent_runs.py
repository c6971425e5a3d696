"""What the agent tests share: a RunConfig as the CLI builds it, the shipped shell benchmark's
tasks and sample keys, a Runner run of it with an agent (tests/test_openai_agent.py,
tests/test_command_agent.py), and a command agent's run through the CLI.
"""

from __future__ import annotations

import json
import shutil

import pytest
from click.testing import CliRunner

from conftest import SHELL_TASKS, read_results
from parallel_rollout.cli import main
from parallel_rollout.config import RunConfig, build_config
from parallel_rollout.runner import Runner

SHELL_LINES = [json.loads(line) for line in SHELL_TASKS.read_text().splitlines() if line.strip()]
SHELL_KEYS = {f"{t['id']}#0" for t in SHELL_LINES}
needs_bwrap = pytest.mark.skipif(shutil.which("bwrap") is None, reason="needs bubblewrap")


def make_config(**values) -> RunConfig:
    """A RunConfig as the CLI would build it."""
    return build_config(values)


def run_shell(tmp_path, data=SHELL_TASKS, **overrides):
    values = dict(mode="shell", data=str(data), num_rollouts=2, output_dir=str(tmp_path / "out"),
                  run_id="agents", task_timeout=60.0, max_retries=2, progress=False)
    values.update(overrides)
    return Runner(make_config(**values)).run()


def run_cli(tmp_path, run_id: str, *args: str) -> list[dict]:
    """A run through the CLI as a user starts it; its records."""
    result = CliRunner().invoke(main, ["--output-dir", str(tmp_path / "out"), "--run-id", run_id, "--num-rollouts", "1",
                                       "--agent", "command", "--no-progress", *args])
    assert result.exit_code == 0, result.output[-3000:]
    return read_results(tmp_path / "out" / run_id)
