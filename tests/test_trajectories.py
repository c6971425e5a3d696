"""An attempt's trajectory file as the worker writes it: the folders it makes, one line per
turn, the path the record names, a retry beside the first attempt, and a folder that cannot
take it (the run stops with a StorageError, not a traceback)."""

from __future__ import annotations

import json
import os

import pytest

from parallel_rollout.results import StorageError
from parallel_rollout.trajectories import TrajectoryFile, read_turns


def test_a_new_task_gets_its_folders_and_each_turn_is_one_line(tmp_path):
    folder = tmp_path / "trajectories" / "t1" / "0"
    file = TrajectoryFile(folder, tmp_path, 0)
    assert file.relpath == os.path.join("trajectories", "t1", "0", "attempt-0.jsonl")
    assert file.extra_dir == folder / "attempt-0"
    assert not (tmp_path / "trajectories").exists()  # nothing is made before the first turn
    file.write({"turn": 1, "action": "ls", "observation": {"text": "é"}})
    # written through at once: a reader sees the turn before the attempt ends
    assert json.loads((tmp_path / file.relpath).read_text(encoding="utf-8")) == {
        "turn": 1, "action": "ls", "observation": {"text": "é"}}
    file.write({"turn": 2, "action": object.__new__(type("Odd", (), {"__repr__": lambda s: "<odd>"}))})
    file.close()
    file.close()  # a second close does nothing
    assert [t["turn"] for t in read_turns(tmp_path / file.relpath)] == [1, 2]
    assert read_turns(tmp_path / file.relpath)[1]["action"] == "<odd>"


def test_a_second_sample_and_a_retry_use_the_folders_already_there(tmp_path):
    first = TrajectoryFile(tmp_path / "trajectories" / "t1" / "0", str(tmp_path), 0)
    first.write({"turn": 1})
    first.close()
    retry = TrajectoryFile(str(tmp_path / "trajectories" / "t1" / "0"), tmp_path, 1)
    retry.write({"turn": 1, "retry": True})
    retry.close()
    sample = TrajectoryFile(tmp_path / "trajectories" / "t1" / "1", tmp_path, 0)
    sample.write({"turn": 1, "sample": 1})
    sample.close()
    assert sorted(p.relative_to(tmp_path).as_posix() for p in (tmp_path / "trajectories").rglob("*.jsonl")) == [
        "trajectories/t1/0/attempt-0.jsonl", "trajectories/t1/0/attempt-1.jsonl",
        "trajectories/t1/1/attempt-0.jsonl"]
    assert read_turns(tmp_path / retry.relpath) == [{"turn": 1, "retry": True}]


def test_a_folder_outside_the_run_is_refused(tmp_path):
    with pytest.raises(ValueError, match="not inside the run folder"):
        TrajectoryFile(tmp_path / "elsewhere", tmp_path / "run", 0)
    with pytest.raises(ValueError, match="not inside the run folder"):
        TrajectoryFile(tmp_path / "run-2" / "t", tmp_path / "run", 0)  # a prefix is not a parent


def test_a_folder_that_cannot_be_made_is_a_storage_error(tmp_path):
    (tmp_path / "trajectories").write_text("a file where the folder should be")
    file = TrajectoryFile(tmp_path / "trajectories" / "t1" / "0", tmp_path, 0)
    with pytest.raises(StorageError, match=r"cannot write .*attempt-0.jsonl.*--resume"):
        file.write({"turn": 1})
    file.close()
