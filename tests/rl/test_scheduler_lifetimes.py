"""RolloutScheduler's processes and their lifetimes, on the real engine against the local test
server: a SIGKILLed worker loses and doubles nothing, close() and Ctrl-C in a trainer process
leave nothing running, a tags mode's tasks are checked before the engine starts, a timed-out
member is recorded once and drops its group."""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from collections import Counter
from pathlib import Path

import psutil
import pytest

from llm_server import LLMServer
from process_tree import worker_processes
from parallel_rollout.errors import ConfigError, RolloutError
from parallel_rollout.results import read_records
from parallel_rollout.rl import EnvManagerConfig, RolloutScheduler, SchedulerClosed
from rl_support import TINY, by_group, lake_set, rl_config
from table_policy import TablePolicy


def workers_since(before: set[int]) -> list[psutil.Process]:
    """Worker processes of this test process started after ``before`` was taken (other
    engines of the module have theirs)."""
    return [p for p in worker_processes() if p.pid not in before]


def test_sigkilled_worker_loses_and_doubles_nothing(tmp_path, table, schedulers):
    policy, server = table
    policy.delay_s = 0.1
    before = {p.pid for p in worker_processes()}
    train = schedulers(rl_config(tmp_path, server), EnvManagerConfig(
        num_env_groups=4, group_size=4, tags=["lakes"], task_sets=lake_set(tmp_path, max_steps=6)))
    engine = train._shared.engine
    killed = []

    def kill_one():
        deadline = time.monotonic() + 60
        while len(server.requests) < 12 and time.monotonic() < deadline:
            time.sleep(0.02)  # both workers are up and mid-episode
        pid = next(p.pid for p in workers_since(before) if p.pid != engine.manager_pid)
        os.kill(pid, signal.SIGKILL)
        killed.append(pid)

    threading.Thread(target=kill_one, daemon=True).start()
    batch = train.get_batch(batch_size=16, step=0)
    assert killed
    groups = by_group(batch)
    assert len(groups) == 4 and all(sorted(t.member for t in m) == [0, 1, 2, 3] for m in groups.values())
    assert len({t.trajectory_id for t in batch}) == 16
    records = read_records(train.run_dir / "results.jsonl")
    finals = Counter(r["key"] for r in records if r.get("final"))
    assert all(n == 1 for n in finals.values())
    assert len({(r["key"], r["attempt"]) for r in records}) == len(records)
    died = [r for r in records if r["status"] == "worker_died"]
    assert died and all(not r["final"] for r in died)
    assert set(finals) == {t.record["key"] for t in batch}  # nothing lost, nothing extra
    engine.stop("the VM pool is exhausted (simulated)")  # the engine cannot go on: get_batch says why
    with pytest.raises(RolloutError, match=r"engine stopped: .*exhausted \(simulated\)"):
        train.get_batch(batch_size=16, step=1)


TRAINER = textwrap.dedent("""
    import faulthandler, signal, sys, time
    faulthandler.register(signal.SIGUSR1, all_threads=True)
    sys.path[:0] = [{tests!r}, {rl_tests!r}]
    from llm_server import LLMServer
    from table_policy import TablePolicy
    from parallel_rollout.rl import EnvManagerConfig, RolloutScheduler
    from rl_support import rl_config
    from pathlib import Path
    server = LLMServer(policy=TablePolicy(delay_s=0.05)).start()
    train = RolloutScheduler(rl_config(Path({tmp!r}), server), EnvManagerConfig(
        num_env_groups=4, group_size=2, tags=["FrozenLake"]), async_generation_ratio=1)
    val = train.sibling(EnvManagerConfig(group_size=1, tags=["FrozenLake"]))
    try:
        step = 0
        while True:
            train.get_batch(batch_size=8, step=step)
            print("batch", step, flush=True)
            step += 1
    finally:
        train.close()
        server.stop()
""")


def test_ctrl_c_in_the_trainer_leaves_nothing_running(tmp_path):
    script = TRAINER.format(tests=str(Path(__file__).parent.parent), rl_tests=str(Path(__file__).parent),
                            tmp=str(tmp_path))
    # As from a terminal: Ctrl-C raises KeyboardInterrupt. A child inherits an ignored SIGINT (a
    # test run started in the background, as CI may start it), and Python then installs no
    # handler: the signal would do nothing, as it did in the background runs that "hung".
    trainer = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               text=True, preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        assert trainer.stdout.readline().startswith("batch 0"), trainer.stderr.read()
        family = psutil.Process(trainer.pid).children(recursive=True)
        assert family, "the trainer runs no worker"
        trainer.send_signal(signal.SIGINT)
        # read while it exits: a full stderr pipe (the test server's reset connections)
        # would block it on a write
        try:
            _, err = trainer.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            status = Path(f"/proc/{trainer.pid}/status").read_text()
            signals = "\n".join(line for line in status.splitlines() if line.startswith(("Sig", "ShdPnd")))
            trainer.send_signal(signal.SIGUSR1)  # faulthandler: every thread's stack, for the report
            time.sleep(1)
            trainer.kill()
            _, err = trainer.communicate()
            raise AssertionError(f"the trainer did not exit 60 s after Ctrl-C:\n{signals}\n{err[:3000]}\n...\n{err[-6000:]}")
        assert "KeyboardInterrupt" in err
        gone, alive = psutil.wait_procs(family, timeout=10)
        assert not alive, f"left running after Ctrl-C: {[p.pid for p in alive]}"
    finally:
        if trainer.poll() is None:
            trainer.kill()
            trainer.wait()


def test_close_leaves_nothing_running_and_the_limit_is_logged_once(tmp_path, table, caplog):
    _, server = table
    caplog.set_level(logging.INFO, logger="parallel_rollout")
    before = {p.pid for p in worker_processes()}
    train = RolloutScheduler(rl_config(tmp_path, server), EnvManagerConfig(
        num_env_groups=4, group_size=2, tags=["lakes"], task_sets=lake_set(tmp_path), max_env_num_per_worker=2),
        async_generation_ratio=2, max_concurrent_rollouts=3)
    assert train._shared.engine.config.envs_per_worker == 2
    with pytest.raises(ConfigError, match="max_env_num_per_worker"):
        train.sibling(EnvManagerConfig(tags=["FrozenLake"], max_env_num_per_worker=5))
    val = train.sibling(EnvManagerConfig(group_size=1, tags=["FrozenLake"]))
    train.get_batch(batch_size=4, step=0)
    family = workers_since(before)
    assert len(family) == 2
    outcome: list = []

    def validate():
        try:
            val.get_batch(batch_size=-1, step=0)
        except SchedulerClosed as exc:
            outcome.append(exc)

    waiting = threading.Thread(target=validate)
    waiting.start()
    time.sleep(0.3)
    train.close()  # with a validation under way in another thread
    train.close()  # idempotent
    waiting.join(10)
    assert not waiting.is_alive() and len(outcome) == 1, "a get_batch blocked in another thread did not end"
    gone, alive = psutil.wait_procs(family, timeout=10)
    assert not alive
    for scheduler in (train, val):
        with pytest.raises(SchedulerClosed):
            scheduler.get_batch(batch_size=4, step=1)
    lines = [r.getMessage() for r in caplog.records if "[Concurrency]" in r.getMessage()]
    assert lines == ["[Concurrency] Set max concurrent rollouts to 3"]


def test_a_tags_mode_checks_its_tasks_before_the_engine_starts(tmp_path):
    """rag's prepare_run (check every corpus, build the index once) runs for a scheduler's
    tags as for the batch runner: a missing corpus names the task file and line at once."""
    import json

    from parallel_rollout.errors import TaskFileError
    from parallel_rollout.rl import TaskSet

    tasks = tmp_path / "questions.jsonl"
    tasks.write_text(json.dumps({"id": "q0", "question": "What is JSON?", "answers": ["a format"],
                                 "corpus": "missing.jsonl"}) + "\n")
    before = {p.pid for p in worker_processes()}
    with pytest.raises(TaskFileError, match=r"questions.jsonl:1:.*missing.jsonl"):
        RolloutScheduler(rl_config(tmp_path, LLMServer()), EnvManagerConfig(
            tags=["docs"], task_sets={"docs": TaskSet("rag", str(tasks))}))
    assert workers_since(before) == []


@pytest.mark.slow
def test_a_timed_out_member_is_recorded_once_and_drops_its_group(tmp_path, schedulers):
    """A member past --task-timeout is recorded task_timeout (final, not retried), its group is
    dropped and counted; the attempts its killed worker held are retried; no key has two
    final records and every returned trajectory is one of them. (The timeout leaves room for
    a respawned worker's first episode on a loaded machine.)"""
    release = threading.Event()
    policy = TablePolicy(seed=8)

    def stuck_on_the_long_lake(body):
        if "FFFFG" in str(body["messages"][-1].get("content")):
            release.wait(60)  # far past the task timeout
        return policy(body)

    server = LLMServer(policy=stuck_on_the_long_lake).start()
    try:
        sets = {**lake_set(tmp_path, name="tiny", desc=TINY, max_steps=2),
                **lake_set(tmp_path, name="long", desc=["SFFFFG"], max_steps=2)}
        train = schedulers(rl_config(tmp_path, server, task_timeout=15.0), EnvManagerConfig(
            num_env_groups=2, group_size=2, tags=["tiny", "long"], num_groups_partition=[1, 1], task_sets=sets),
            async_generation_ratio=1)
        batch = train.get_batch(batch_size=4, step=0)
        deadline = time.monotonic() + 90
        while train.stats().get("dropped_failed", 0) < 1 and time.monotonic() < deadline:
            time.sleep(0.1)
        assert train.stats()["dropped_failed"] >= 1
        assert {t.tag for t in batch} == {"tiny"} and all(t.status != "task_timeout" for t in batch)
        records = read_records(train.run_dir / "results.jsonl")
        finals = Counter(r["key"] for r in records if r.get("final"))
        assert all(n == 1 for n in finals.values())
        timed_out = [r for r in records if r["status"] == "task_timeout"]
        # (a tiny member may time out too when a respawned worker's imports crawl on a loaded
        # machine: the same rules hold for it)
        assert any(r["task_id"] == "long0" for r in timed_out) and all(r["final"] for r in timed_out)
        assert not {r["key"] for r in timed_out} & {t.record["key"] for t in batch}
        assert {t.record["key"] for t in batch} <= set(finals)
    finally:
        release.set()
        server.stop()
