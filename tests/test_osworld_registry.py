"""The registry of supported steps, getters and metrics; the census script over a task
folder; the file getters' ``multi`` form."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

from parallel_rollout.envs.osworld import registry
from parallel_rollout.envs.osworld.getters import GETTERS

ROOT = Path(__file__).resolve().parent.parent

TASK = {
    "id": "t1", "instruction": "x",
    "config": [{"type": "execute", "parameters": {"command": "true"}},
               {"type": "no_such_step", "parameters": {}}],
    "evaluator": {"func": ["compare_table", "no_such_metric"],
                  "result": [{"type": "vm_file", "path": "/a", "dest": "a"}, {"type": "no_such_getter"}],
                  "expected": [{"type": "cloud_file", "path": "file:///b", "dest": "b"}, None],
                  "postconfig": [{"type": "sleep", "parameters": {"seconds": 1}}]},
}


def test_features_and_every_unsupported_one():
    assert registry.features(TASK) == {
        "step": {"execute", "no_such_step", "sleep"},
        "getter": {"vm_file", "cloud_file", "no_such_getter"},
        "metric": {"compare_table", "no_such_metric"}}
    assert registry.unsupported(TASK) == ["getter no_such_getter", "metric no_such_metric",
                                          "step no_such_step"]
    assert registry.supported("metric", "compare_table")
    assert not registry.supported("getter", "no_such_getter")
    assert registry.unsupported({"instruction": "x", "evaluator": "broken"}) == []


def test_census_script_counts_tasks_per_name(tmp_path):
    examples = tmp_path / "examples" / "calc"
    examples.mkdir(parents=True)
    other = {"id": "t2", "instruction": "y", "config": [],
             "evaluator": {"func": "compare_table", "result": {"type": "vm_file", "path": "/a", "dest": "a"}}}
    for task in (TASK, other):
        (examples / f"{task['id']}.json").write_text(json.dumps(task))
    (tmp_path / "test_all.json").write_text(json.dumps({"calc": ["t1", "t2"]}))
    out = subprocess.run([sys.executable, str(ROOT / "scripts" / "osworld_census.py"), str(tmp_path)],
                         capture_output=True, text=True, check=True).stdout
    assert "ok     2  compare_table" in out
    assert "--     1  no_such_metric" in out
    assert "metrics: covered 1/2 names (2/3 uses)" in out
    assert out.rstrip().endswith("tasks whose every feature is supported: 1 of 2")


def census(*args: str) -> subprocess.CompletedProcess:
    """The census script run on ``args``, as README gives it."""
    return subprocess.run([sys.executable, str(ROOT / "scripts" / "osworld_census.py"), *args],
                          capture_output=True, text=True)


def test_census_reads_a_checkout_and_says_what_is_no_task_set(tmp_path):
    """README's census over a folder: a checkout (what `run --data OSWorld` takes), a missing
    folder, examples/ itself, a domain's folder, a missing index each ended in a Python traceback
    (FileNotFoundError: 'OSWorld/test_all.json'). Now the checkout is read, and the rest are said
    as the run says them, exit 2."""
    examples = tmp_path / "OSWorld" / "evaluation_examples" / "examples" / "calc"
    examples.mkdir(parents=True)
    (examples / "t1.json").write_text(json.dumps(TASK))
    (examples.parent.parent / "test_all.json").write_text(json.dumps({"calc": ["t1"]}))
    checkout = census(str(tmp_path / "OSWorld"))
    assert checkout.returncode == 0, checkout.stderr
    assert checkout.stdout.rstrip().endswith("tasks whose every feature is supported: 0 of 1"), checkout.stdout
    for args, says in [
        ([str(tmp_path / "nosuch")], f"{tmp_path / 'nosuch'}: no such folder (EVALUATION_EXAMPLES: the task set's "
                                     "folder, examples/ beside test_all.json, or the checkout that holds it"),
        ([str(examples.parent)], f"{examples.parent}: this is the examples/ folder of an OSWorld task set; give the "
                                 f"folder that holds it and its indexes as EVALUATION_EXAMPLES: {examples.parent.parent}"),
        ([str(examples)], f"{examples}: no OSWorld task set; EVALUATION_EXAMPLES is its folder"),
        ([str(tmp_path / "OSWorld"), "--index", "test_small.json"],
         f"{examples.parent.parent}: no index test_small.json (OSWorld's layout: an index such as test_all.json + "
         "examples/<domain>/<id>.json; indexes here: test_all.json)"),
    ]:
        said = census(*args)
        assert said.returncode == 2 and "Traceback" not in said.stderr, (args, said.stderr)
        assert f"error: {says}" in said.stderr, (args, said.stderr)


def test_cloud_file_multi_gives_the_picked_files(tmp_path):
    sources = []
    for name in ("one.txt", "two.txt", "three.txt"):
        (tmp_path / name).write_text(name)
        sources.append(f"file://{tmp_path / name}")
    env = SimpleNamespace(task=SimpleNamespace(id="t", source=None), cache_dir=tmp_path / "cache",
                          cache_root=tmp_path / "dl")
    config = {"type": "cloud_file", "multi": True, "path": sources, "dest": ["a", "b", "c"], "gives": [0, 2]}
    picked = GETTERS["cloud_file"](env, config)
    assert [Path(p).read_text() for p in picked] == ["one.txt", "three.txt"]
    single = GETTERS["cloud_file"](env, {**config, "gives": [1]})
    assert Path(single).read_text() == "two.txt"
