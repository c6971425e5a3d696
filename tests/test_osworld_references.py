"""The project's oracle references for real OSWorld tasks: each names a task of OSWorld's set,
in its domain, that this version supports, and replays as valid actions; through the CLI
(``run --mode osworld --data <OSWorld folder> --osworld-index <ids> --agent oracle``) and a
pool of desktop VMs, with the tasks' inputs in a local download cache, a few of them (default
run) and all of them (slow) are graded 1 as OSWorld grades them."""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
from collections import Counter
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
    """... naming the project's references file by a path that is there, wherever the package
    is installed: it said envs/data/osworld_references.jsonl, a path from no folder a user has."""
    with pytest.raises(ValueError, match="osworld_references.jsonl") as missing:
        OSWorldEnv.reference_actions(Task(id="no-such-task", mode="osworld", payload={}))
    named = str(missing.value).rsplit("see ", 1)[1].rstrip(")")
    assert os.path.isabs(named) and os.path.isfile(named), named


needs_desktop = pytest.mark.skipif(
    not all(shutil.which(p) for p in ("Xvfb", "openbox", "xdotool", "wmctrl", "chromium", "vlc")),
    reason="the desktop packages are missing (./dev installs them)")

#: a few real tasks, one a domain, none downloading anything: the default run's oracle check
FAST = {"os": ["5ea617a3-0e86-4ba6-aab2-dac9aa2e8d57"],
        "vlc": ["5ac2891a-eacd-4954-b339-98abba077adb"],
        "chrome": ["9656a811-9b5b-4ddf-99c7-5117bcef0626"]}


def oracle_through_cli(tmp_path: Path, index: dict[str, list[str]], timeout: float) -> dict[str, dict]:
    """Run the tasks of ``index`` (OSWorld's index layout) with the oracle agent through the
    CLI, a pool of 2 process desktop VMs, their inputs from a local download cache filled
    here: task id -> the final record of its one sample."""
    # loaded by its path: benchmarks/ on sys.path would shadow tests/providers with its
    # providers.py for every test after this one
    spec = importlib.util.spec_from_file_location("osworld_oracle", ROOT / "benchmarks" / "osworld_oracle.py")
    osworld_oracle = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(osworld_oracle)
    cache = tmp_path / "cache"
    osworld_oracle.fill_cache(EXAMPLES, index, cache)
    environ = dict(os.environ, PARALLEL_ROLLOUT_OSWORLD_CACHE=str(cache))
    (tmp_path / "index.json").write_text(json.dumps(index))
    argv = [sys.executable, "-m", "parallel_rollout.cli", "run", "--mode", "osworld",
            "--data", str(EXAMPLES), "--osworld-index", str(tmp_path / "index.json"),
            "--agent", "oracle", "--action-space", "pyautogui", "--provider-name", "process",
            "--use-vm-pool", "--num-vms", "2", "--num-rollouts", "2", "--max-turns", "5",
            "--task-timeout", "600", "--output-dir", str(tmp_path / "out"), "--run-id", "oracle",
            "--no-progress"]  # reset verification as a user gets it (fast, the default)
    done = subprocess.run(argv, env=environ, stdin=subprocess.DEVNULL, capture_output=True,
                          text=True, timeout=timeout)
    assert done.returncode == 0, done.stderr[-3000:]
    # a clean desktop reset is never quarantined (its session's runtime folder fills lazily)
    events = [json.loads(line) for line in
              (tmp_path / "out" / "oracle" / "events.jsonl").read_text().splitlines() if line.strip()]
    quarantined = [e for e in events if e.get("differences")]
    assert not quarantined, quarantined[:2]
    lines = (tmp_path / "out" / "oracle" / "results.jsonl").read_text().splitlines()
    return {r["task_id"]: r for r in map(json.loads, lines) if r.get("final")}


def failures(finals: dict[str, dict], index: dict[str, list[str]]) -> list[str]:
    """The tasks of ``index`` not graded 1, each with why."""
    wanted = [task_id for ids in index.values() for task_id in ids]
    return [f"{task_id}: {finals[task_id]['status']} {finals[task_id].get('eval')} "
            f"{(finals[task_id].get('failure') or {}).get('message')}" if task_id in finals
            else f"{task_id}: no final record"
            for task_id in wanted if finals.get(task_id, {}).get("reward") != 1.0]


@pytest.mark.slow
@needs_set
@needs_desktop
def test_the_oracle_passes_three_real_tasks_through_the_cli(tmp_path):
    # a file restored from the Trash, a VLC option and a Chrome setting, as OSWorld grades them
    finals = oracle_through_cli(tmp_path, FAST, timeout=240)
    assert failures(finals, FAST) == []


@needs_set
@needs_desktop
@pytest.mark.slow
@pytest.mark.timeout(3900)  # 68 tasks on 2 VMs: 9 min here, up to ~40 on a loaded machine
def test_the_oracle_passes_every_referenced_task_through_a_pool(tmp_path):
    index = reference_index()
    finals = oracle_through_cli(tmp_path, index, timeout=3600)
    assert failures(finals, index) == []
    feasible = Counter()
    for entry in references().values():
        payload = json.loads((EXAMPLES / "examples" / entry["domain"] / f"{entry['id']}.json").read_text())
        feasible[entry["domain"]] += payload["evaluator"]["func"] != "infeasible"
    assert sum(feasible.values()) >= 40 and len(+feasible) >= 7, feasible
