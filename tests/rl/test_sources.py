"""The trainer's data: the built-in task order and its state (resume at step N), explicit
tasks per batch, batch_partition and a trainer's own task source (rl/sources.py). The
saved state's shape, checkpoints after close() and restarts with tasks a source made:
test_source_states.py."""

from __future__ import annotations

import json
import threading
import time
from collections import Counter

import pytest

from llm_server import LLMServer
from parallel_rollout.errors import ConfigError, RolloutError
from parallel_rollout.rl import EnvManagerConfig, TaskSource, TaskSourceError
from parallel_rollout.rl.config import load_tasks_of
from parallel_rollout.rl.sources import BatchShares, ShuffledTasks, quotas
from rl_support import RIGHT, TINY, rl_config, tiny_lakes

def test_shuffled_tasks_every_task_once_per_pass_and_state_round_trips():
    tasks = {"a": [f"a{i}" for i in range(5)], "b": ["b0", "b1"]}
    source = ShuffledTasks(tasks, seed=3)
    first_pass = [source.next_task("a") for _ in range(5)]
    assert sorted(first_pass) == tasks["a"]
    drawn = [source.next_task("a") for _ in range(2)] + [source.next_task("b")]
    state = json.loads(json.dumps(source.state_dict()))
    uninterrupted = [source.next_task("a") for _ in range(6)] + [source.next_task("b") for _ in range(3)]
    restored = ShuffledTasks(tasks, seed=0)
    restored.load_state_dict(state)
    assert [restored.next_task("a") for _ in range(6)] + [restored.next_task("b") for _ in range(3)] == uninterrupted
    assert ShuffledTasks(tasks, seed=3).next_task("a") == first_pass[0]  # the seed decides the order
    assert drawn  # (drawn before the state was taken)
    with pytest.raises(ConfigError, match="tags"):
        restored.load_state_dict({"pass": {"zzz": 1}})
    before = restored.state_dict()
    with pytest.raises(ConfigError, match=r"pass\['a'\] must be a whole number >= 0, got 'x'"):
        restored.load_state_dict({"seed": 9, "pass": {"a": "x"}})
    assert restored.state_dict() == before  # nothing loaded: not the seed either


def test_quotas_split_in_proportion():
    assert quotas({"a": 1, "b": 1}, 4) == {"a": 2, "b": 2}
    assert quotas({"a": 1, "b": 1}, 3) == {"a": 2, "b": 1}
    assert quotas({"a": 3, "b": 1}, 4) == {"a": 3, "b": 1}
    assert sum(quotas({"a": 1, "b": 2, "c": 4}, 10).values()) == 10
    # batch after batch the rounding is carried: each batch a share rounded down or up, and
    # over batches every tag its share (each batch rounded alone: "a" every odd group)
    shares = BatchShares({"a": 1, "b": 2, "c": 4})
    assert shares.next(7, batches=2) == {"a": 2, "b": 4, "c": 8}  # whole shares: as they are
    taken = Counter()
    for groups in [1, 3, 2, 5, 1, 1, 4, 3] * 7:
        batch = shares.next(groups)
        assert sum(batch.values()) == groups
        assert all(int(groups * w / 7) <= batch[t] <= -(-groups * w // 7) for t, w in shares.weights.items()), batch
        shares.take(groups)
        taken.update(batch)
    assert taken == {"a": 20, "b": 40, "c": 80}, taken  # 140 groups: 1:2:4


def test_a_restarted_scheduler_gets_the_same_next_tasks(tmp_path, schedulers, monkeypatch):
    """A Ctrl-C as a batch is handed out (its turns read), or as the groups after it start,
    leaves its groups drawn and not handed out: in state_dict(), and the next call's batch
    (they were in neither, and a checkpoint saved then skipped their tasks)."""
    from parallel_rollout.rl import batches

    def interrupted(trajectories):
        raise KeyboardInterrupt

    server = LLMServer(policy=lambda body: RIGHT).start()
    try:
        config = EnvManagerConfig(group_size=2, tags=["lakes"], task_sets=tiny_lakes(tmp_path, "lakes", 7))
        first = schedulers(rl_config(tmp_path, server, num_rollouts=1), config, seed=5)
        ids = []
        for step in range(6):
            if step == 4:
                with monkeypatch.context() as patch:
                    patch.setattr(batches, "with_turns", interrupted)
                    with pytest.raises(KeyboardInterrupt):
                        first.get_batch(batch_size=4, step=step)
                assert len(first.state_dict()["unreturned"]) == 2
            if step == 2:  # as the next groups start, the batch taken: it goes out next time too
                fill, calls = first._fill, []

                def fill_once():  # the trainer's thread's second fill is interrupted (the engine's run)
                    if threading.current_thread() is not threading.main_thread():
                        return fill()
                    calls.append(1)
                    return fill() if len(calls) == 1 else interrupted(None)

                with monkeypatch.context() as patch:
                    patch.setattr(first, "_fill", fill_once)
                    with pytest.raises(KeyboardInterrupt):
                        first.get_batch(batch_size=4, step=step)
                assert len(first.state_dict()["unreturned"]) == 2 and len(calls) == 2
            ids.append([t.task_id for t in first.get_batch(batch_size=4, step=step)])
            first.resume(policy_version=step + 1)  # the trainer's weight update after each step
            if step == 3:
                state = json.loads(json.dumps(first.state_dict()))
        first.close()
        second = schedulers(rl_config(tmp_path, server, num_rollouts=1, run_id="restarted"), config, seed=5)
        second.load_state_dict(state)
        # the policy version goes on from the saved one (its gate started at 0: the restarted
        # trainer's tokens were dated version 0, and its first update's resume(5) put every
        # group in flight past a max_version_lag)
        assert second.policy_version == 4
        resumed = []
        for step in (4, 5):
            batch = second.get_batch(batch_size=4, step=step)
            assert {v for t in batch for v in t.policy_versions} == {step}
            resumed.append([t.task_id for t in batch])
            second.resume(policy_version=step + 1)
        assert resumed == ids[4:], (ids, resumed)
        assert len({tid for batch in ids for tid in batch}) == 7  # every task came round
    finally:
        server.stop()


def test_explicit_tasks_run_exactly_and_in_order(tmp_path, schedulers):
    server = LLMServer(policy=lambda body: RIGHT).start()
    try:
        sets = tiny_lakes(tmp_path, "lakes", 4)
        train = schedulers(rl_config(tmp_path, server, num_rollouts=1), EnvManagerConfig(
            group_size=2, tags=["lakes"], task_sets=sets), async_generation_ratio=1)
        batch = train.get_batch(batch_size=6, step=0, tasks=["lakes3", "lakes0", "lakes3"])
        assert [t.task_id for t in batch] == ["lakes3"] * 2 + ["lakes0"] * 2 + ["lakes3"] * 2
        assert len({t.group_id for t in batch}) == 3
        # a Task object of the trainer's own, in no tag's file, runs as given
        from parallel_rollout.tasks import Task

        own = Task(id="mine", mode="gym", payload={"desc": TINY, "max_steps": 3}, seed=9)
        batch = train.get_batch(batch_size=4, step=1, tasks=[own, "lakes1"])
        assert [(t.task_id, t.seed) for t in batch] == [("mine", 9)] * 2 + [("lakes1", 1)] * 2
        assert all(t.success for t in batch[:2])  # two moves right on SFG
        with pytest.raises(ConfigError, match="no task 'nope'"):
            train.get_batch(batch_size=2, step=2, tasks=["nope"])
        for one in ("lakes1", own):  # a task not in a list: "no task 'l'", or a TypeError
            with pytest.raises(ConfigError, match=r"get_batch\(tasks=...\) takes a list of tasks"):
                train.get_batch(batch_size=2, step=2, tasks=one)
        with pytest.raises(ConfigError, match="len\\(tasks\\) x group_size"):
            train.get_batch(batch_size=2, step=2, tasks=["lakes1", "lakes2"])
        # tasks=[] with its batch_size, 0 x group_size: it said "batch_size must be a positive
        # multiple of group_size (2) or -1, got 0", of the size the README's rule gave
        with pytest.raises(ConfigError, match=r"^get_batch\(tasks=\[\]\) names no task to run"):
            train.get_batch(batch_size=0, step=2, tasks=[])
        with pytest.raises(ConfigError, match=r"batch_size '4' must be len\(tasks\) x group_size \(2 x 2\)"):
            train.get_batch(batch_size="4", step=2, tasks=["lakes1", "lakes2"])
        started = train.stats()["groups_started"]
        with pytest.raises(ConfigError, match=r"batch_size=-1 runs every task .* not with tasks="):
            train.get_batch(batch_size=-1, step=2, tasks=["lakes1"])  # it used to ignore tasks
        assert train.stats()["groups_started"] == started
    finally:
        server.stop()


def test_given_tasks_whose_members_all_failed_are_run_again_under_placeholder_too(tmp_path, schedulers):
    """get_batch(tasks=[…]) runs a group whose members fail again: under
    failed_member="placeholder" too when every member failed (it handed back a group of
    placeholders only, nothing of the task the trainer asked for); a task that keeps failing
    ends in RolloutError after max_failed_groups, and a group some of whose members made an
    episode keeps placeholders for the others."""
    import threading

    lock, rejects = threading.Lock(), [2]  # how many requests the model refuses next

    def policy(body):
        with lock:
            rejects[0] -= 1
            return {"status": 400, "message": "rejected"} if rejects[0] >= 0 else RIGHT

    server = LLMServer(policy=policy).start()
    try:
        config = EnvManagerConfig(group_size=2, tags=["lakes"], task_sets=tiny_lakes(tmp_path, "lakes", 2))
        train = schedulers(rl_config(tmp_path, server, num_rollouts=1, max_retries=0), config,
                           failed_member="placeholder", max_failed_groups=2)
        batch = train.get_batch(batch_size=2, step=0, tasks=["lakes0"], timeout=60)  # its first group: 400s
        assert [(t.task_id, t.placeholder, t.success) for t in batch] == [("lakes0", False, True)] * 2
        assert train.stats()["dropped_failed"] == 1
        rejects[0] = 1  # one member fails: its group is handed out, a placeholder in its place
        batch = train.get_batch(batch_size=2, step=1, tasks=["lakes1"], timeout=60)
        assert sorted((t.task_id, t.placeholder) for t in batch) == [("lakes1", False), ("lakes1", True)]
        assert train.stats()["dropped_failed"] == 1
        rejects[0] = 10**6  # the model refuses everything now
        with pytest.raises(RolloutError, match=r"groups in a row failed \(max_failed_groups=2\)"):
            train.get_batch(batch_size=2, step=1, tasks=["lakes1"], timeout=60)
    finally:
        server.stop()



class _Mistyped(TaskSource):
    """A curriculum that names its task by an id the tag does not have."""

    def next_task(self, tag):
        return "frozenlake-4x4-s02"

    def state_dict(self):
        return {}

    def load_state_dict(self, state):
        pass


def test_a_task_id_the_tags_lack_is_refused_naming_ids_they_have(tmp_path, schedulers):
    """get_batch(tasks=[…]) and a task_source take the ids of the tags' tasks; one they lack
    said "no task 'frozenlake-4x4-s02' in the tags ['FrozenLake']" and no more, where the
    built-in tags' ids are written nowhere a trainer reads: the error now names the closest
    ids (else the first few), and the one it names runs."""
    import re

    server = LLMServer(policy=lambda body: RIGHT).start()
    try:
        train = schedulers(rl_config(tmp_path, server, num_rollouts=1), EnvManagerConfig(tags=["FrozenLake"]))
        with pytest.raises(ConfigError, match=r"no task 'frozenlake-4x4-s02' in the tags \['FrozenLake'\]; the "
                                              r"closest: ") as refused:
            train.get_batch(batch_size=1, step=0, tasks=["frozenlake-4x4-s02"])
        closest = re.search(r"the closest: (\S+?)(,|$)", str(refused.value)).group(1)
        (trajectory,) = train.get_batch(batch_size=1, step=0, tasks=[closest])
        assert trajectory.task_id == closest and trajectory.tag == "FrozenLake"
        with pytest.raises(ConfigError, match=r"no task 'lake' .*; its ids are (frozenlake-\S+, ){4}frozenlake-\S+ … "
                                              r"\(17 in all\)"):
            train.get_batch(batch_size=1, step=1, tasks=["lake"])
        train.close()
        mistyped = schedulers(rl_config(tmp_path, server, num_rollouts=1, run_id="mistyped"),
                              EnvManagerConfig(tags=["FrozenLake"]), task_source=_Mistyped())
        with pytest.raises(ConfigError, match=r"returned 'frozenlake-4x4-s02': no task of the scheduler's tags has "
                                              r"that id; the closest: " + re.escape(closest)):
            mistyped.get_batch(batch_size=1, step=0, timeout=60)
    finally:
        server.stop()

def test_batch_partition_gives_half_and_half_batches(tmp_path, schedulers):
    def policy(body):
        if "FFFFFFG" in json.dumps(body["messages"]):
            time.sleep(0.3)  # the slow tag's model calls take their time
        return RIGHT

    server = LLMServer(policy=policy).start()
    try:
        sets = {**tiny_lakes(tmp_path, "fast", 4), **tiny_lakes(tmp_path, "slow", 4, desc=["SFFFFFFG"])}
        train = schedulers(rl_config(tmp_path, server), EnvManagerConfig(
            group_size=2, tags=["fast", "slow"], task_sets=sets), async_generation_ratio=1,
            batch_partition=[1, 1])
        for step in range(3):
            batch = train.get_batch(batch_size=8, step=step)
            assert Counter(t.tag for t in batch) == {"fast": 4, "slow": 4}, [t.tag for t in batch]
        with pytest.raises(ConfigError, match="one weight per tag"):
            train.sibling(EnvManagerConfig(group_size=2, tags=["fast", "slow"], task_sets=sets), batch_partition=[1])
    finally:
        server.stop()


class _Curriculum(TaskSource):
    """A trainer's own TaskSource: each tag's tasks easiest first (by id, reversed here),
    round and round; its position is the one number it saves."""

    def __init__(self, tasks: dict[str, list]) -> None:
        self.order = {tag: sorted(items, key=lambda t: t.id, reverse=True) for tag, items in tasks.items()}
        self.drawn = 0
        self.asked: list[str] = []

    def next_task(self, tag):
        self.asked.append(tag)
        task = self.order[tag][self.drawn % len(self.order[tag])]
        self.drawn += 1
        return task

    def state_dict(self):
        return {"drawn": self.drawn}

    def load_state_dict(self, state):
        self.drawn = state["drawn"]


def _own_source_setup(tmp_path, count):
    """(the tag's tasks by tag, the EnvManagerConfig) of ``count`` lakes for a source of the trainer's."""
    sets = tiny_lakes(tmp_path, "lakes", count)
    return {"lakes": load_tasks_of("lakes", sets["lakes"])}, EnvManagerConfig(group_size=2, tags=["lakes"],
                                                                               task_sets=sets)


def test_a_trainers_task_source_decides_and_resumes(tmp_path, schedulers):
    server = LLMServer(policy=lambda body: RIGHT).start()
    try:
        tasks, config = _own_source_setup(tmp_path, 5)
        source = _Curriculum(tasks)
        train = schedulers(rl_config(tmp_path, server, num_rollouts=1), config, task_source=source)
        ids = [[t.task_id for t in train.get_batch(batch_size=4, step=step)] for step in range(3)]
        assert ids == [["lakes4"] * 2 + ["lakes3"] * 2, ["lakes2"] * 2 + ["lakes1"] * 2,
                       ["lakes0"] * 2 + ["lakes4"] * 2]
        assert source.asked == ["lakes"] * 6  # nothing else chose a task
        state = json.loads(json.dumps(train.state_dict()))
        assert state["source"] == {"drawn": 6}
        train.close()
        again = _Curriculum(tasks)
        resumed = schedulers(rl_config(tmp_path, server, num_rollouts=1, run_id="again"), config, task_source=again)
        resumed.load_state_dict(state)
        assert again.drawn == 6
        assert [t.task_id for t in resumed.get_batch(batch_size=4, step=3)] == ["lakes3"] * 2 + ["lakes2"] * 2
    finally:
        server.stop()


def test_a_restarted_scheduler_running_ahead_gets_the_same_next_tasks(tmp_path, schedulers):
    """With async_generation_ratio=1 the groups of the next step are running when the state
    is taken: the restarted scheduler starts them again first (same tasks, seeds, episodes)."""
    server = LLMServer(policy=lambda body: RIGHT).start()
    try:
        config = EnvManagerConfig(group_size=2, tags=["lakes"], task_sets=tiny_lakes(tmp_path, "lakes", 7))
        first = schedulers(rl_config(tmp_path, server, num_rollouts=1), config, seed=5, async_generation_ratio=1)
        batches = []
        for step in range(6):
            batches.append([(t.task_id, t.seed, t.group_id) for t in first.get_batch(batch_size=4, step=step)])
            if step == 3:
                state = json.loads(json.dumps(first.state_dict()))
        first.close()
        assert len(state["unreturned"]) >= 2, state  # step 4's groups were under way
        second = schedulers(rl_config(tmp_path, server, num_rollouts=1, run_id="restarted"), config, seed=5,
                            async_generation_ratio=1)
        second.load_state_dict(state)
        resumed = [[(t.task_id, t.seed) for t in second.get_batch(batch_size=4, step=step)] for step in (4, 5)]
        # the same tasks and seeds over the two steps; which step a group lands in is the
        # order groups finish in, a race of the env loops in either run (seen under load)
        assert sorted(sum(resumed, [])) == sorted((tid, seed) for batch in batches[4:] for tid, seed, _ in batch), \
            (batches, resumed)
    finally:
        server.stop()


class _Finite(_Curriculum):
    """A curriculum that runs dry: its third task is an error of the trainer's."""

    def next_task(self, tag):
        if self.drawn == 2:
            raise LookupError("the curriculum has no more tasks")
        return super().next_task(tag)


class _Ids(_Finite):
    """A source that answers task ids, and at last something that is no task."""

    def next_task(self, tag):
        self.drawn += 1
        return {1: "lakes1", 2: "lakes0"}.get(self.drawn, {"id": "lakes2"})


def test_a_task_source_that_fails_or_answers_no_task_fails_get_batch(tmp_path, schedulers):
    server = LLMServer(policy=lambda body: RIGHT).start()
    try:
        tasks, config = _own_source_setup(tmp_path, 3)
        finite = schedulers(rl_config(tmp_path, server, num_rollouts=1), config, task_source=_Finite(tasks),
                            async_generation_ratio=1)
        assert len(finite.get_batch(batch_size=4, step=0)) == 4
        started = time.monotonic()
        expected = "task_source .*_Finite.*next_task\\('lakes'\\).*no more tasks"
        with pytest.raises(TaskSourceError, match=expected) as failed:
            finite.get_batch(batch_size=4, step=1, timeout=60)
        assert time.monotonic() - started < 30
        assert isinstance(failed.value, RolloutError) and isinstance(failed.value.__cause__, LookupError)
        finite.close()
        ids = schedulers(rl_config(tmp_path, server, num_rollouts=1, run_id="ids"), config, task_source=_Ids(tasks))
        assert [t.task_id for t in ids.get_batch(batch_size=4, step=0)] == ["lakes1"] * 2 + ["lakes0"] * 2
        with pytest.raises(ConfigError, match="next_task\\('lakes'\\) returned .*'id': 'lakes2'.*a Task or the id"):
            ids.get_batch(batch_size=2, step=1, timeout=60)
    finally:
        server.stop()
