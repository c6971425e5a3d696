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
