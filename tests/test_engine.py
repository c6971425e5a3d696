"""The engine's API as a front end other than the batch Runner uses it: several front ends on
one engine, one shared concurrency limit, cancel (queued and running), pause/resume, close."""

from __future__ import annotations

import json
import logging
import queue
import time

import pytest

from conftest import leftover_sandboxes, max_overlap, shell_task, write_tasks
from parallel_rollout.config import build_config
from parallel_rollout.engine import Engine, EngineStopped
from parallel_rollout.envs import task_validators
from parallel_rollout.messages import Assignment
from parallel_rollout.results import ResultStore
from parallel_rollout.tasks import Task, load_tasks


def tasks(tmp_path, specs, name="tasks.jsonl"):
    path = write_tasks(tmp_path / name, specs)
    return {t.id: t for t in load_tasks(str(path), default_mode="shell", validators=task_validators())}


def engine_for(tmp_path, sink=None, **flags):
    base = dict(mode="shell", output_dir=str(tmp_path / "out"), run_id="eng", num_rollouts=2,
                envs_per_worker=2, num_vms=3, use_vm_pool=True, progress=False)
    base.update(flags)
    if not base["use_vm_pool"]:
        del base["num_vms"]
    config = build_config(base)
    return Engine(config, tmp_path / "out" / "eng", record_sink=sink)


def test_two_front_ends_share_one_engine_and_one_limit(tmp_path, caplog):
    caplog.set_level(logging.INFO, logger="parallel_rollout")
    by_id = tasks(tmp_path, [shell_task(f"s{i}", reference=["sleep 0.3", f"touch ~/s{i}.done"]) for i in range(6)])
    store = ResultStore(tmp_path / "out" / "eng")
    (tmp_path / "out" / "eng").mkdir(parents=True)
    engine = engine_for(tmp_path, sink=store.append, max_concurrent_rollouts=3)
    train, val = queue.Queue(), queue.Queue()
    with engine:
        engine.start()
        for task in by_id.values():
            # The same task in both front ends: the names keep the samples apart.
            engine.submit(Assignment(task, 0, 0, name=f"train/{task.id}", meta={"front": "train"}), train.put)
            engine.submit(Assignment(task, 0, 0, name=f"val/{task.id}", meta={"front": "val"}), val.put)
        with pytest.raises(ValueError, match="already submitted"):
            engine.submit(Assignment(by_id["s0"], 0, 0, name="train/s0"), train.put)
        assert engine.wait_idle(timeout=120)
    finals = [train.get_nowait() for _ in range(6)] + [val.get_nowait() for _ in range(6)]
    assert train.empty() and val.empty()
    assert {r["status"] for r in finals} == {"success"}
    assert {r["key"] for r in finals} == {f"{f}/s{i}" for f in ("train", "val") for i in range(6)}
    assert all(r["meta"]["front"] == r["key"].split("/")[0] for r in finals)
    assert max_overlap(finals) <= 3
    # every attempt went to the sink, with final and run_id set, and its own trajectory file
    lines = [json.loads(line) for line in (tmp_path / "out" / "eng" / "results.jsonl").read_text().splitlines()]
    assert len(lines) == 12 and all(r["final"] and r["run_id"] == "eng" for r in lines)
    assert len({r["trajectory"] for r in lines}) == 12
    said = [r for r in caplog.records if "[Concurrency] Set max concurrent rollouts to 3" in r.getMessage()]
    assert len(said) == 1
    with pytest.raises(EngineStopped):
        engine.submit(Assignment(by_id["s1"], 0, 0, name="late"), train.put)
    engine.close()  # idempotent
    assert not leftover_sandboxes()


def test_cancel_queued_and_running_and_pause(tmp_path):
    long = shell_task("long", reference=["sleep 0.1"] * 30 + ["touch ~/long.done"])
    by_id = tasks(tmp_path, [long] + [shell_task(f"q{i}") for i in range(3)])
    finals = queue.Queue()
    engine = engine_for(tmp_path, num_rollouts=1, envs_per_worker=1, num_vms=1, max_turns=200)
    with engine:
        engine.start()
        engine.submit(Assignment(by_id["long"], 0, 0), finals.put)
        engine.submit(Assignment(by_id["q0"], 0, 0), finals.put)
        deadline = time.monotonic() + 60
        while not (engine.in_flight() == 1 and engine.pending() == 1):
            # q0 waits behind "long" (C = 1)
            assert time.monotonic() < deadline
            time.sleep(0.05)
        assert engine.cancel("q0#0")  # queued: dropped
        assert not engine.cancel("q0#0")
        turns = tmp_path / "out" / "eng" / "trajectories" / "long" / "0" / "attempt-0.jsonl"
        while not (turns.exists() and turns.read_text().count("\n") >= 2):  # "long" holds its VM
            assert time.monotonic() < deadline
            time.sleep(0.05)
        pid_before = engine.worker_pids()["w0"]
        assert engine.cancel("long#0")  # running: stops at its next turn
        engine.pause()
        engine.submit(Assignment(by_id["q1"], 0, 0), finals.put)
        time.sleep(1.5)
        assert engine.in_flight() == 0 and engine.pending() == 1, "dispatched while paused"
        assert finals.empty()
        engine.resume()
        assert engine.wait_idle(timeout=60)
        # the soft cancel did not cost the worker: same process, no death
        assert engine.worker_pids()["w0"] == pid_before
        record = finals.get_nowait()
        assert record["key"] == "q1#0" and record["status"] == "success"
        assert finals.empty(), "a cancelled sample reached its front end"
        # the settled cancel is forgotten: the same key submitted again runs to its end
        engine.submit(Assignment(by_id["long"], 0, 1), finals.put)
        assert engine.wait_idle(timeout=60)
    record = finals.get_nowait()
    assert record["key"] == "long#0" and record["status"] == "success", record
    events = [json.loads(line) for line in (tmp_path / "out" / "eng" / "events.jsonl").read_text().splitlines()]
    assert not [e for e in events if e["event"] == "worker_died"]
    # the cancelled attempt's VM went back through a reset before q1 got it
    released = [e for e in events if e.get("task") == "long#0" and e.get("to") == "resetting"]
    assert released, ("the cancelled attempt's VM was not reset", events)
    assert engine.stats.cancelled == 2


def test_the_next_attempt_runs_while_the_last_record_is_written(tmp_path):
    """A final record frees its env loop before the sink writes it: with one loop, the next
    attempt is with the worker while a slow sink still writes the last record (the worker
    and the engine thread do not take turns)."""
    math = [Task(f"m{i}", "math", {"problem": f"{i}+1", "answer": str(i + 1)}) for i in range(3)]
    held_while_writing: dict[str, int | None] = {}

    def slow_sink(record):
        following = f"m{int(record['task_id'][1:]) + 1}#0"
        deadline = time.monotonic() + (20 if following != "m3#0" else 0.5)
        while engine.holder_pid(following) is None and time.monotonic() < deadline:
            time.sleep(0.01)
        held_while_writing[record["key"]] = engine.holder_pid(following)

    engine = engine_for(tmp_path, sink=slow_sink, mode="math", agent="oracle", num_rollouts=1,
                        envs_per_worker=1, use_vm_pool=False)
    finals = queue.Queue()
    with engine:
        engine.start()
        for task in math:
            engine.submit(Assignment(task, 0, 0), finals.put)
        assert engine.wait_idle(timeout=120)
    assert sorted(finals.get_nowait()["status"] for _ in math) == ["success"] * 3
    # the worker held m1 while m0's record was written, and m2 while m1's was
    assert held_while_writing["m0#0"] is not None and held_while_writing["m1#0"] is not None, held_while_writing
    assert held_while_writing["m2#0"] is None  # nothing was left to hand out


def test_a_close_cut_short_by_ctrl_c_is_finished_by_the_next(tmp_path, monkeypatch):
    """A Ctrl-C that lands while close() waits for the workers to exit leaves the engine to be
    stopped by the next close() (``finally: close()``): workers and VMs, not at interpreter exit."""
    import psutil

    from parallel_rollout.backends import local

    by_id = tasks(tmp_path, [shell_task("a")])
    finals = queue.Queue()
    engine = engine_for(tmp_path, num_rollouts=2, envs_per_worker=1, num_vms=2)
    engine.start()
    engine.submit(Assignment(by_id["a"], 0, 0), finals.put)
    assert engine.wait_idle(timeout=60)
    family = [psutil.Process(pid) for pid in engine.worker_pids().values() if pid]
    assert family and leftover_sandboxes()
    real_wait, calls = local.wait, []

    def interrupted(*args, **kwargs):
        calls.append(1)
        if len(calls) == 1:
            raise KeyboardInterrupt  # as from the terminal, in the shutdown's wait for the workers
        return real_wait(*args, **kwargs)

    monkeypatch.setattr(local, "wait", interrupted)
    with pytest.raises(KeyboardInterrupt):
        engine.close()
    engine.close()  # finishes the stop
    _, alive = psutil.wait_procs(family, timeout=10)
    assert not alive, f"workers left running: {[p.pid for p in alive]}"
    assert not leftover_sandboxes()
    assert finals.get_nowait()["status"] == "success"


def test_two_threads_closing_at_once(tmp_path):
    """A trainer closes from another thread while its own finally: close() runs: the second
    close() waits for the first to finish stopping (both ran the backend's shutdown at once)."""
    import threading

    import psutil

    by_id = tasks(tmp_path, [shell_task("a")])
    engine = engine_for(tmp_path, num_rollouts=2, envs_per_worker=1, num_vms=2)
    engine.start()
    engine.submit(Assignment(by_id["a"], 0, 0), lambda record: None)
    assert engine.wait_idle(timeout=60)
    family = [psutil.Process(pid) for pid in engine.worker_pids().values() if pid]
    errors: list = []

    def close():
        try:
            engine.close()
        except BaseException as exc:  # noqa: BLE001 - the test reports it
            errors.append(exc)

    threads = [threading.Thread(target=close) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert not errors, errors
    _, alive = psutil.wait_procs(family, timeout=10)
    assert not alive
    assert not leftover_sandboxes()
