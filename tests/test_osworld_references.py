"""The project's oracle references for real OSWorld tasks: each names a task of OSWorld's set,
in its domain, that this version supports, and replays as valid actions; the slow test runs
them all through a pool of desktop VMs (benchmarks/osworld_oracle.py)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from parallel_rollout.envs.osworld import actions as acts
from parallel_rollout.envs.osworld import registry
from parallel_rollout.envs.osworld.env import OSWorldEnv
from parallel_rollout.envs.osworld.references import reference_index, references
from parallel_rollout.tasks import Task

EXAMPLES = Path("/work/shared/osworld/evaluation_examples")
ROOT = Path(__file__).resolve().parents[1]

needs_set = pytest.mark.skipif(not (EXAMPLES / "test_all.json").is_file(),
                               reason="OSWorld's task set is not at /work/shared/osworld")


@needs_set
def test_every_reference_is_a_supported_osworld_task_with_valid_actions():
    index = json.loads((EXAMPLES / "test_all.json").read_text())
    assert len(references()) >= 40 and len(reference_index()) >= 7
    for task_id, entry in references().items():
        assert task_id in index[entry["domain"]], task_id
        payload = json.loads((EXAMPLES / "examples" / entry["domain"] / f"{task_id}.json").read_text())
        assert registry.unsupported(payload) == [], task_id
        actions = OSWorldEnv.reference_actions(Task(id=task_id, mode="osworld", payload=payload))
        assert acts.special(actions[-1]) in ("DONE", "FAIL")
        infeasible = payload["evaluator"]["func"] == "infeasible"
        assert (acts.special(actions[-1]) == "FAIL") == infeasible, task_id
        for action in actions[:-1]:
            compile(acts.to_code(action, "pyautogui", 1920, 1080), task_id, "exec")


def test_a_task_without_any_reference_says_so():
    with pytest.raises(ValueError, match="osworld_references.jsonl"):
        OSWorldEnv.reference_actions(Task(id="no-such-task", mode="osworld", payload={}))


@needs_set
@pytest.mark.slow
def test_the_oracle_passes_the_referenced_tasks_through_a_pool(tmp_path, monkeypatch):
    monkeypatch.setenv("PARALLEL_ROLLOUT_OSWORLD_CACHE", str(tmp_path / "cache"))
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import osworld_oracle

    assert osworld_oracle.main(["--data", str(EXAMPLES), "--out", str(tmp_path / "out")]) == 0
