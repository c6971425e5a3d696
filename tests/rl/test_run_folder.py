"""A scheduler's run folder (rl/run_folder.py): one engine writes into it at a time, a later
session of the same run_id neither overwrites nor mixes with an earlier one's samples, and
turns read back are the attempt's own."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import threading

import pytest
from click.testing import CliRunner

from parallel_rollout.api import load_run
from parallel_rollout.cli import main
from parallel_rollout.errors import ConfigError, RolloutError, RunLocked
from parallel_rollout.results import read_records
from parallel_rollout.rl import EnvManagerConfig, RolloutScheduler
from rl_support import TINY, lake_set, rl_config


def _lake(**changes):
    return EnvManagerConfig(**{"num_env_groups": 2, "group_size": 2, "tags": ["FrozenLake"], **changes})


def _files(run_dir):
    """Every trajectory file of the folder -> its sha256."""
    return {str(p.relative_to(run_dir)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted((run_dir / "trajectories").rglob("*.jsonl"))}


def _own_turns(batch):
    """Each trajectory's turns are the attempt's: as many as its record counts, its reward's episode."""
    for trajectory in batch:
        assert len(trajectory.turns) == trajectory.record["turns"], trajectory.trajectory_id


def test_a_second_scheduler_on_a_live_run_folder_is_refused(tmp_path, table, schedulers):
    _, server = table
    train = schedulers(rl_config(tmp_path, server, num_rollouts=1, run_id="grpo"), _lake(), async_generation_ratio=1)
    train.get_batch(4, step=0)
    before = read_records(train.run_dir / "results.jsonl")
    with pytest.raises(RunLocked, match="another run .*is writing to .*grpo"):
        RolloutScheduler(rl_config(tmp_path, server, num_rollouts=1, run_id="grpo"), _lake())
    batch = train.get_batch(4, step=1)
    _own_turns(batch)
    records = read_records(train.run_dir / "results.jsonl")
    assert records[:len(before)] == before
    finals = [(r["key"], r["attempt"]) for r in records if r.get("final")]
    assert len(finals) == len(set(finals)), finals  # no sample written twice


def test_a_later_session_of_a_run_id_is_refused_or_kept_apart(tmp_path, table, schedulers):
    _, server = table
    first = schedulers(rl_config(tmp_path, server, num_rollouts=1, run_id="grpo"), _lake())
    first.get_batch(4, step=0)
    closer = threading.Thread(target=first.close)  # another thread's close() releases the folder too
    closer.start()
    closer.join()
    run_dir = first.run_dir
    listed = CliRunner().invoke(main, ["runs", "list", "--output-dir", str(run_dir.parent), "--json"])
    assert listed.exit_code == 0 and json.loads(listed.output.splitlines()[0])["status"] == "rl", listed.output  # not partial
    results = run_dir / "results.jsonl"
    whole = results.read_bytes()
    results.write_bytes(whole[:-40])  # a session killed mid-write (the OOM killer): half its last line
    torn = whole[whole.rstrip(b"\n").rfind(b"\n") + 1:-40]
    files, records = _files(run_dir), read_records(results)
    with pytest.raises(ConfigError, match="already holds the results of an earlier run.*resume=True"):
        RolloutScheduler(rl_config(tmp_path, server, num_rollouts=1, run_id="grpo"), _lake())
    assert _files(run_dir) == files  # refused before anything was written
    again = schedulers(rl_config(tmp_path, server, num_rollouts=1, run_id="grpo", resume=True), _lake())
    batch = again.get_batch(8, step=0)
    _own_turns(batch)
    assert all(t.record["key"].startswith("train@s1:") for t in batch)
    now = _files(run_dir)
    assert {name: now[name] for name in files} == files  # the first session's files are untouched
    assert read_records(results)[:len(records)] == records
    # the torn line was set aside, not glued onto by the next session's first record (a
    # corrupt line in the middle, which made every reader refuse the run folder)
    assert (run_dir / "results.jsonl.torn").read_bytes() == torn + b"\n"
    assert len(load_run(run_dir).records) == len(read_records(results)) > len(records)
    finals = [r["key"] for r in read_records(results) if r.get("final")]
    assert len(finals) == len(set(finals)), finals
    sessions = [json.loads(line)["session"] for line in (run_dir / "sessions.jsonl").read_text().splitlines()]
    assert sessions == [0, 1]


def test_turns_that_are_not_the_attempts_own_are_refused(tmp_path, table, schedulers):
    _, server = table
    train = schedulers(rl_config(tmp_path, server, num_rollouts=1), _lake())
    trajectory = next(t for t in train.get_batch(4, step=0) if t.record["turns"] >= 1)
    other = dataclasses.replace(trajectory, _turns=None, _segments=None)
    lines = trajectory.turns_file.read_text().splitlines()
    trajectory.turns_file.write_text("\n".join(lines[:-1]) + "\n")  # one turn short: another attempt's file
    with pytest.raises(RolloutError, match=f"record counts {len(lines)} turn.*holds {len(lines) - 1}"):
        other.turns  # noqa: B018


def test_trajectory_ids_are_unique_across_siblings_and_sessions(tmp_path, table, schedulers):
    """A train scheduler and its validation sibling both play FrozenLake group 0, episode 0,
    and a resumed session starts its group ids at 0 again: each trajectory_id is still its
    own (both gave ``FrozenLake/g0/e0/m0``, so a trainer logging or deduplicating by id
    mixed them). The id is the run id and the member's key in results.jsonl."""
    _, server = table
    train = schedulers(rl_config(tmp_path, server, num_rollouts=1, run_id="grpo"), _lake())
    val = train.sibling(EnvManagerConfig(num_env_groups=2, group_size=1, tags=["FrozenLake"]), name="val")
    trained, validated = train.get_batch(4, step=0), val.get_batch(2, step=0)
    assert {(t.tag, t.group_id, t.episode_id, t.member) for t in validated} <= \
        {(t.tag, t.group_id, t.episode_id, t.member) for t in trained}  # the same coordinates
    assert all(t.trajectory_id == f"grpo/{t.record['key']}" for t in trained + validated)
    assert trained[0].trajectory_id.startswith("grpo/train:FrozenLake/g")
    train.close()
    again = schedulers(rl_config(tmp_path, server, num_rollouts=1, run_id="grpo", resume=True), _lake())
    resumed = again.get_batch(4, step=0)
    assert resumed[0].trajectory_id.startswith("grpo/train@s1:FrozenLake/g")
    ids = [t.trajectory_id for t in trained + validated + resumed]
    assert len(set(ids)) == len(ids), ids


def test_a_start_whose_clean_up_a_second_ctrl_c_cut_short_is_finished_by_the_next_scheduler(tmp_path, table,
                                                                                           schedulers, monkeypatch):
    """A Ctrl-C as the engine starts, and a second one inside the clean-up that follows: no
    scheduler came to be, so the trainer (a notebook's next cell) has nothing to close. Its
    workers, their server and the run folder's lock stayed for the interpreter's life (the
    next scheduler's workers forked from that old server, with the old run's environment and
    modules); now the next scheduler finishes that stop before it starts its own."""
    import psutil

    from parallel_rollout.backends import local, worker_start
    from parallel_rollout.engine import Engine

    _, server = table
    started, real_start, real_kill, kills = [], Engine.start, local.kill_tree, []

    def start(engine):
        real_start(engine)
        started.append(([pid for pid in engine.worker_pids().values() if pid], worker_start._started))
        raise KeyboardInterrupt  # the first, as the workers came up

    def kill_tree(*args, **kwargs):
        kills.append(1)
        if len(kills) == 1:
            raise KeyboardInterrupt  # the second, as the clean-up stops the workers
        return real_kill(*args, **kwargs)

    monkeypatch.setattr(Engine, "start", start)
    monkeypatch.setattr(local, "kill_tree", kill_tree)
    with pytest.raises(KeyboardInterrupt):
        RolloutScheduler(rl_config(tmp_path, server, num_rollouts=1, run_id="grpo"), _lake())
    monkeypatch.undo()
    (workers, server_pid), = started
    assert workers and server_pid and psutil.pid_exists(server_pid)
    train = schedulers(rl_config(tmp_path, server, num_rollouts=1, run_id="grpo", resume=True), _lake())
    _, alive = psutil.wait_procs([psutil.Process(pid) for pid in [*workers, server_pid] if psutil.pid_exists(pid)],
                                 timeout=10)
    assert not alive, f"the first start's processes left running: {alive}"
    assert worker_start._started not in (None, server_pid)  # its workers fork from a server of its own
    _own_turns(train.get_batch(4, step=0))


@pytest.mark.slow  # two engines start (~15 s); the start cut short above keeps the area in the default run
def test_a_close_a_ctrl_c_cut_short_is_finished_by_the_next_scheduler(tmp_path, table, schedulers, monkeypatch):
    """A second Ctrl-C inside a trainer's finally: close(), as it stops the workers, and the
    notebook's next cell makes a scheduler: the first engine's server stayed with the
    interpreter, and the new scheduler's workers forked from it (the old run's environment
    and modules), as after a start cut short (the test above). Now the new start finishes
    that stop first: the old processes end and its folder is free to resume."""
    import psutil

    from parallel_rollout.backends import local, worker_start

    _, server = table
    lake = _lake(tags=["tiny"], task_sets=lake_set(tmp_path, 2, name="tiny", desc=TINY, max_steps=2))
    first = schedulers(rl_config(tmp_path, server, num_rollouts=1, run_id="grpo"), lake)
    first.get_batch(4, step=0)
    workers, server_pid = [pid for pid in first._shared.engine.worker_pids().values() if pid], worker_start._started
    real_kill = local.kill_tree

    def kill_tree(*args, **kwargs):
        monkeypatch.setattr(local, "kill_tree", real_kill)
        raise KeyboardInterrupt  # as the close stops the workers

    monkeypatch.setattr(local, "kill_tree", kill_tree)
    with pytest.raises(KeyboardInterrupt):
        first.close()
    assert workers and server_pid and psutil.pid_exists(server_pid)
    train = schedulers(rl_config(tmp_path, server, num_rollouts=1, run_id="grpo", resume=True), lake)
    _, alive = psutil.wait_procs([psutil.Process(pid) for pid in [*workers, server_pid] if psutil.pid_exists(pid)],
                                 timeout=10)
    assert not alive, f"the first engine's processes left running: {alive}"
    assert worker_start._started not in (None, server_pid)  # its workers fork from a server of its own
    _own_turns(train.get_batch(4, step=0))
    first.close()  # the trainer's own second close(): nothing left to do


def test_a_start_that_ran_no_sample_leaves_the_run_id_free(tmp_path, table, schedulers, monkeypatch):
    """A scheduler whose start failed (here a Ctrl-C as its workers came up: a script that
    imports torch takes seconds there) ran no sample, but its session line stayed in
    sessions.jsonl: the same script started again was refused, "already holds the results of
    an earlier run" (it held none), and could only go on with resume=True, its samples named
    as a second session's. Now a session that ran no sample takes its line back."""
    from parallel_rollout.engine import Engine

    _, server = table
    real_start = Engine.start

    def start(engine):
        real_start(engine)
        raise KeyboardInterrupt

    monkeypatch.setattr(Engine, "start", start)
    with pytest.raises(KeyboardInterrupt):
        RolloutScheduler(rl_config(tmp_path, server, num_rollouts=1, run_id="grpo"), _lake())
    monkeypatch.undo()
    schedulers(rl_config(tmp_path, server, num_rollouts=1, run_id="grpo"), _lake())  # was a ConfigError
    run_dir = tmp_path / "out" / "grpo"  # the first session again: its samples are named train:…, not train@s1:…
    assert [json.loads(line)["session"] for line in (run_dir / "sessions.jsonl").read_text().splitlines()] == [0]
