"""What the agent tests share: a RunConfig as the CLI builds it, the shipped shell benchmark's
tasks and sample keys, and a Runner run of it with an agent (tests/test_openai_agent.py,
tests/test_command_agent.py).
"""

from __future__ import annotations

import json
import shutil

import pytest

from conftest import SHELL_TASKS
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
