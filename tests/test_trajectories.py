"""An attempt's trajectory file as the worker writes it: the folders it makes, one line per
turn, the path the record names, a retry beside the first attempt, a folder that cannot
take it (the run stops with a StorageError, not a traceback), and lines that are strict JSON
whatever the turn holds (through the CLI too: an env whose observation holds NaN and an
object)."""

from __future__ import annotations

import json
import logging
import os

import numpy
import pytest
from click.testing import CliRunner

from conftest import assert_exactly_once, write_tasks
from parallel_rollout.cli import main
from parallel_rollout.envs.base import Env, StepResult

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
    assert read_turns(tmp_path / file.relpath)[1]["action"] == "not JSON: <odd>"


def test_an_attempt_s_extra_folder_is_absolute_whatever_the_run_folder_s_spelling(tmp_path, monkeypatch):
    """A run in a relative --output-dir gave screenshots paths relative to the folder the run
    started in (results/r/trajectories/…), which an observation's reader elsewhere could not
    open; the extra folder, and so every screenshot_path, is absolute."""
    monkeypatch.chdir(tmp_path)
    file = TrajectoryFile(os.path.join("results", "r", "trajectories", "t", "0"), os.path.join("results", "r"), 0)
    assert file.extra_dir == tmp_path / "results" / "r" / "trajectories" / "t" / "0" / "attempt-0"
    assert file.relpath == os.path.join("trajectories", "t", "0", "attempt-0.jsonl")  # the record's: as it was


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


def _strict(text: str) -> list:
    """Each line as a strict JSON reader takes it: NaN and Infinity are not JSON."""
    def refuse(constant):
        raise ValueError(f"{constant} is not JSON")
    return [json.loads(line, parse_constant=refuse) for line in text.splitlines()]


def test_every_line_is_strict_json_and_the_first_replacement_is_warned_of(tmp_path, caplog, monkeypatch):
    from parallel_rollout import trajectories

    monkeypatch.setattr(trajectories, "_warned", False)  # a fresh worker's
    file = TrajectoryFile(tmp_path / "trajectories" / "t1" / "0", tmp_path, 0)
    loop: list = []
    loop.append(loop)
    with caplog.at_level(logging.WARNING, logger="parallel_rollout"):
        file.write({"turn": 1, "observation": {"o": object(), "nan": float("nan"), "inf": [float("-inf")],
                                               "set": {1}, "bytes": b"x", "pair": (1, 2), 3: "int key",
                                               (1, 2): "tuple key", "loop": loop, "text": "é\ud800",
                                               "np": [numpy.float64(0.5), numpy.int64(3), numpy.bool_(True),
                                                      numpy.arange(3), numpy.float32("nan")]}})
        file.write({"turn": 2, "observation": {"nan": float("nan")}})
    file.close()
    first, second = _strict((tmp_path / file.relpath).read_text(encoding="utf-8"))
    observation = first["observation"]
    assert observation["o"].startswith("not JSON: <object object at 0x"), observation
    assert (observation["nan"], observation["inf"], observation["set"], observation["bytes"]) == \
        (None, [None], "not JSON: {1}", "not JSON: b'x'")
    assert (observation["pair"], observation["3"], observation["not JSON: (1, 2)"]) == ([1, 2], "int key", "tuple key")
    assert observation["loop"] == ["not JSON: ..."] and observation["text"] == "é\ud800"
    assert observation["np"] == [0.5, 3, True, [0, 1, 2], None]
    assert second == {"turn": 2, "observation": {"nan": None}}
    warnings = [r.getMessage() for r in caplog.records if "JSON cannot hold" in r.getMessage()]
    assert len(warnings) == 1, warnings  # once per worker, not once per turn
    assert warnings[0].startswith(f"{file.relpath}, turn 1: values JSON cannot hold were replaced"), warnings
    assert "observation.o: object → 'not JSON: <object object at" in warnings[0]
    assert "observation.nan: nan → null" in warnings[0]


class OddObservationEnv(Env):
    """A mode whose step observes what JSON cannot hold."""

    name = "odd-observation"
    vm_scope = None

    def reset(self, task, vm):
        return {}

    def step(self, action):
        return StepResult({"o": object(), "nan": float("nan")}, done=True)

    def evaluate(self):
        return 1.0, {}


def test_a_runs_trajectory_of_an_odd_observation_is_strict_json_and_run_log_says_so(tmp_path):
    data = write_tasks(tmp_path / "tasks.jsonl", [{"id": "odd", "answers": ["go"]}])
    result = CliRunner().invoke(main, [
        "--mode", "test_trajectories:OddObservationEnv", "--data", str(data), "--agent",
        "py_agents:ScriptedAnswerAgent", "--num-rollouts", "1", "--output-dir", str(tmp_path / "out"),
        "--run-id", "odd", "--no-progress"])
    assert result.exit_code == 0, (result.output, result.exception)
    run_dir = tmp_path / "out" / "odd"
    record = assert_exactly_once(run_dir, {"odd#0"})["odd#0"]
    assert record["status"] == "success", record
    (turn,) = _strict((run_dir / record["trajectory"]).read_text(encoding="utf-8"))
    assert turn["observation"]["nan"] is None and turn["observation"]["o"].startswith("not JSON: <object object")
    log = (run_dir / "run.log").read_text()
    assert f"{record['trajectory']}, turn 1: values JSON cannot hold were replaced in the trajectory: " \
           "observation.o: object → " in log, log
