"""The trainer's data: the built-in task order and its state (resume at step N), explicit
tasks per batch, and batch_partition (rl/sources.py)."""

from __future__ import annotations

import json
import threading
import time
from collections import Counter

import pytest

from llm_server import LLMServer
from parallel_rollout.errors import ConfigError, RolloutError, RunLocked
from parallel_rollout.rl import EnvManagerConfig, TaskSet, TaskSource, TaskSourceError
from parallel_rollout.rl.config import load_tasks_of
from parallel_rollout.rl.run_folder import RunFolder
from parallel_rollout.rl.sources import BatchShares, ShuffledTasks, quotas
from rl_support import TINY, rl_config

RIGHT = {"reply": "<answer>Right</answer>"}


def _lakes(tmp_path, name, count, desc=TINY):
    """``count`` different lakes (distinct ids) of one tag."""
    path = tmp_path / f"{name}.jsonl"
    path.write_text("".join(json.dumps({"id": f"{name}{i}", "mode": "gym", "desc": desc, "max_steps": 3,
                                        "seed": i}) + "\n" for i in range(count)))
    return {name: TaskSet("gym", str(path))}


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
        config = EnvManagerConfig(group_size=2, tags=["lakes"], task_sets=_lakes(tmp_path, "lakes", 7))
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
        sets = _lakes(tmp_path, "lakes", 4)
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
        config = EnvManagerConfig(group_size=2, tags=["lakes"], task_sets=_lakes(tmp_path, "lakes", 2))
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
        sets = {**_lakes(tmp_path, "fast", 4), **_lakes(tmp_path, "slow", 4, desc=["SFFFFFFG"])}
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
    sets = _lakes(tmp_path, "lakes", count)
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
        config = EnvManagerConfig(group_size=2, tags=["lakes"], task_sets=_lakes(tmp_path, "lakes", 7))
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


GOOD_STATE = {"version": 1, "source": {"seed": 0, "pass": {"lakes": 0}, "drawn": {"lakes": 1}},
              "episodes": {"lakes": 1}, "unreturned": [{"tag": "lakes", "task_id": "lakes0", "episode": 0, "seed": 0}]}
BAD_STATES = {
    "none": (None, r"the state must be the dict state_dict\(\) returned, got NoneType"),
    "nonsense": ({"nonsense": 1}, r"the state is no scheduler's state_dict\(\): unknown field\(s\) \['nonsense'\]; missing "
                                  r"field\(s\) \['episodes', 'source', 'unreturned'\]"),
    "version": ({**GOOD_STATE, "version": 2}, r"state version 2, where this scheduler reads version 1"),
    "episodes": ({**GOOD_STATE, "episodes": {"lakes": "1"}}, r"episodes must map each tag to a whole number"),
    "episodes-tag": ({**GOOD_STATE, "episodes": {"other": 1}}, r"episodes names tags this scheduler does not have"),
    "unreturned": ({**GOOD_STATE, "unreturned": {}}, r"unreturned must be a list, got dict"),
    "entry": ({**GOOD_STATE, "unreturned": [{"tag": "lakes"}]}, r"unreturned\[0\] must be a dict of tag, task_id"),
    "episode": ({**GOOD_STATE, "unreturned": [{**GOOD_STATE["unreturned"][0], "episode": -1}]},
                r"unreturned\[0\]\.episode must be a whole number >= 0, got -1"),
    "task": ({**GOOD_STATE, "unreturned": [{**GOOD_STATE["unreturned"][0], "task_id": "zzz"}]},
             r"names task 'zzz' of tag 'lakes'"),
    "source": ({**GOOD_STATE, "source": None}, r"the state's source must be a dict of seed, pass and drawn"),
    # the seed was set before a pass that was no number raised ValueError: half loaded
    "source-pass": ({**GOOD_STATE, "source": {"seed": 9, "pass": {"lakes": "x"}}},
                    r"the state's source: pass\['lakes'\] must be a whole number >= 0, got 'x'"),
    "source-seed": ({**GOOD_STATE, "source": {"seed": "9"}}, r"the state's source: seed must be a whole number"),
    "source-tag": ({**GOOD_STATE, "source": {"drawn": {"zzz": 1}}}, r"the state's source: drawn names tags"),
    "shares": ({**GOOD_STATE, "shares": {"zzz": 0.5}}, r"shares must map tags of this scheduler to numbers"),
    "policy_version": ({**GOOD_STATE, "policy_version": -1}, r"policy_version must be a whole number >= 0, got -1"),
}


def test_a_state_of_another_shape_is_refused_naming_the_field_and_nothing_loads(tmp_path, schedulers):
    """load_state_dict({"nonsense": 1}) started afresh without a word, and None raised
    AttributeError; a bad entry after the source's state left the source half loaded."""
    server = LLMServer(policy=lambda body: RIGHT).start()
    try:
        config = EnvManagerConfig(group_size=2, tags=["lakes"], task_sets=_lakes(tmp_path, "lakes", 3))
        train = schedulers(rl_config(tmp_path, server, num_rollouts=1), config, seed=5)
        fresh = train.state_dict()
        assert fresh["version"] == 1
        for name, (state, says) in BAD_STATES.items():
            with pytest.raises(ConfigError, match=r"load_state_dict: " * (name != "task") + says):
                train.load_state_dict(state)
            assert train.state_dict() == fresh, name  # nothing loaded
        train.load_state_dict({k: v for k, v in GOOD_STATE.items() if k != "version"})  # a state saved before it
        assert train.state_dict()["unreturned"] == GOOD_STATE["unreturned"]
        assert [t.task_id for t in train.get_batch(batch_size=2, step=0)] == ["lakes0"] * 2
    finally:
        server.stop()


def test_a_checkpoint_taken_after_close_keeps_the_groups_close_stopped(tmp_path, schedulers, monkeypatch):
    """A trainer stopped (Ctrl-C, a preemption) closes its scheduler in ``finally`` and then
    saves its checkpoint: state_dict() still answers on a closed scheduler, and the groups
    close() stopped mid-way (drawn, never handed out) are in it, so the restarted session
    (same run_id, resume=True) runs those tasks next instead of skipping them. A Ctrl-C that
    lands inside close() lists each of them once still (the groups it had noted as stopped
    while they ran on were listed twice, and a resume played them twice), and the next
    close() finishes it (it returned at once, leaving the engine running and the folder
    locked till the exit)."""
    server = LLMServer(policy=lambda body: {**RIGHT, "sleep": 0.3}).start()
    try:
        config = EnvManagerConfig(group_size=2, tags=["lakes"], task_sets=_lakes(tmp_path, "lakes", 5))
        first = schedulers(rl_config(tmp_path, server, num_rollouts=1, run_id="grpo"), config,
                           async_generation_ratio=1)
        handed = first.get_batch(batch_size=4, step=0)
        running = first.state_dict()

        def interrupted(*args, **kwargs):
            raise KeyboardInterrupt

        monkeypatch.setattr(first, "_drop", interrupted)  # after close() noted its groups, before it stops them
        with pytest.raises(KeyboardInterrupt):
            first.close()
        assert first.state_dict() == running
        monkeypatch.undo()
        monkeypatch.setattr(first._shared.engine, "close", interrupted)  # the next one, as the engine stops
        with pytest.raises(KeyboardInterrupt):
            first.close()
        assert first.state_dict() == running
        with pytest.raises(RunLocked):  # the engine may still run: its folder stays locked
            RunFolder.open(first.run_dir, resume=True)  # (a new scheduler's start finishes the stop first)
        monkeypatch.undo()
        first.close()
        state = json.loads(json.dumps(first.state_dict()))
        assert len(running["unreturned"]) == 2, running  # step 1's groups were under way
        assert state == running, (running, state)
        second = schedulers(rl_config(tmp_path, server, num_rollouts=1, run_id="grpo", resume=True), config,
                            async_generation_ratio=1)
        second.load_state_dict(state)
        resumed = second.get_batch(batch_size=4, step=1)
    finally:
        server.stop()
    assert sorted({(t.task_id, t.seed, t.episode_id) for t in resumed}) == \
        sorted((u["task_id"], u["seed"], u["episode"]) for u in running["unreturned"])
    assert not {t.trajectory_id for t in handed} & {t.trajectory_id for t in resumed}


class _Generated(TaskSource):
    """A curriculum that makes its tasks in Python (no task file holds them): Task objects."""

    def __init__(self) -> None:
        self.made = 0

    def next_task(self, tag):
        from parallel_rollout.tasks import Task

        self.made += 1
        desc = TINY if self.made % 2 else ["SFFG"]  # two moves to the goal, or three
        return Task(id=f"gen{self.made}", mode="gym", payload={"desc": desc, "max_steps": 4}, seed=100 + self.made)

    def state_dict(self):
        return {"made": self.made}

    def load_state_dict(self, state):
        self.made = state["made"]


def test_a_restarted_scheduler_runs_again_the_tasks_its_own_source_made_in_python(tmp_path, schedulers):
    """A task source may return Task objects of its own making (a generated curriculum): the
    groups of such tasks drawn but not handed out are in state_dict() with the task itself,
    and a restarted scheduler starts them again first. load_state_dict refused the state
    ("names task 'gen3' … which this scheduler does not have"): a generated curriculum's
    checkpoint could not be resumed once a group was under way."""
    server = LLMServer(policy=lambda body: RIGHT).start()
    try:
        config = EnvManagerConfig(group_size=2, tags=["lakes"], task_sets=_lakes(tmp_path, "lakes", 1))
        first = schedulers(rl_config(tmp_path, server, num_rollouts=1, run_id="grpo"), config,
                           task_source=_Generated(), async_generation_ratio=1)
        first.get_batch(batch_size=4, step=0)
        state = json.loads(json.dumps(first.state_dict()))
        first.close()
        unreturned = [(u["task_id"], u["seed"]) for u in state["unreturned"]]
        assert len(unreturned) == 2, state  # step 1's groups were under way
        source = _Generated()
        second = schedulers(rl_config(tmp_path, server, num_rollouts=1, run_id="grpo", resume=True), config,
                            task_source=source, async_generation_ratio=1)
        bad = json.loads(json.dumps(state))
        bad["unreturned"][0]["task"]["id"] = "another"
        with pytest.raises(ConfigError, match=r"unreturned\[0\]\.task\.id must be the entry's task_id"):
            second.load_state_dict(bad)
        bad = json.loads(json.dumps(state))
        bad["unreturned"][0]["tag"] = "mazes"
        named = bad["unreturned"][0]["task_id"]
        with pytest.raises(ConfigError, match=f"names task '{named}' of tag 'mazes', which this scheduler does not have"):
            second.load_state_dict(bad)
        second.load_state_dict(state)
        assert source.made == 4  # it draws on after the tasks it made before
        # started again first (the lowest group ids); the batch is the first groups to end, and a
        # new group may end before a restarted one of a longer episode (gen5's 2 turns, gen4's 3):
        # then the next batch has it
        resumed = second.get_batch(batch_size=4, step=1)
        if not set(unreturned) <= {(t.task_id, t.seed) for t in resumed}:
            resumed += second.get_batch(batch_size=4, step=2)
        started = {(t.task_id, t.seed): t.group_id for t in resumed}
    finally:
        server.stop()
    assert set(unreturned) <= set(started), started
    assert sorted(sorted(started, key=started.get)[:2]) == sorted(unreturned), started
    # the same tasks, not only their names: the lake each was made with
    assert all(len(t.turns) == (2 if int(t.task_id[3:]) % 2 else 3) and t.success for t in resumed), \
        [(t.task_id, len(t.turns)) for t in resumed]


def test_a_restarted_scheduler_starts_its_saved_groups_within_its_env_slots(tmp_path, schedulers):
    """The groups a restarted scheduler starts again (load_state_dict) wait for their tag's
    env slots as every group does (num_env_groups, num_groups_partition): they all started at
    once, so a tag held more slots than its share (an OSWorld tag, as many VMs) as it began."""
    server = LLMServer(policy=lambda body: {**RIGHT, "sleep": 0.3}).start()
    try:
        config = EnvManagerConfig(num_env_groups=1, group_size=2, tags=["lakes"],
                                  task_sets=_lakes(tmp_path, "lakes", 5))
        first = schedulers(rl_config(tmp_path, server, num_rollouts=1, run_id="grpo"), config,
                           async_generation_ratio=2)
        first.get_batch(batch_size=2, step=0)
        deadline = time.monotonic() + 60  # the next group finishes, the one after starts (its slot)
        while len(first.state_dict()["unreturned"]) < 2 and time.monotonic() < deadline:
            time.sleep(0.1)
        state = json.loads(json.dumps(first.state_dict()))
        first.close()
        assert len(state["unreturned"]) == 2, state
        second = schedulers(rl_config(tmp_path, server, num_rollouts=1, run_id="grpo", resume=True), config,
                            async_generation_ratio=2)
        second.load_state_dict(state)
        resumed = second.get_batch(batch_size=2, step=1) + second.get_batch(batch_size=2, step=2)
        spans = [(t.record["started_at"], t.record["ended_at"]) for t in resumed]
    finally:
        server.stop()
    assert sorted((t.task_id, t.episode_id) for t in resumed) == \
        sorted((u["task_id"], u["episode"]) for u in state["unreturned"] for _ in range(2))
    at_once = max(sum(1 for s, e in spans if s <= start < e) for start, _ in spans)
    assert at_once <= 2, spans  # one group's two members: the slots of num_env_groups=1


class _Asked(TaskSource):
    """Questions a trainer's source makes in Python from a folder of its own, each with the
    ``source`` a task file gives (``file:line``): their corpus is named from that folder."""

    def __init__(self, folder) -> None:
        self.folder, self.made = folder, 0

    def next_task(self, tag):
        from parallel_rollout.tasks import Task

        self.made += 1
        return Task(id=f"asked{self.made}", mode="rag", source=f"{self.folder / 'asked.jsonl'}:{self.made}",
                    payload={"question": "What is JSON?", "answers": ["a format"], "corpus": "docs.jsonl"})

    def state_dict(self):
        return {"made": self.made}

    def load_state_dict(self, state):
        self.made = state["made"]


def test_a_restarted_scheduler_reads_a_python_made_tasks_files_from_its_folder(tmp_path, schedulers, monkeypatch):
    """A task made in Python keeps in the state the file it came from (``source``), from
    whose folder its relative paths are read (a rag task's corpus, an OSWorld task's gold
    file): restored without it, the restarted scheduler looked for the corpus in the current
    folder, and each such group it started again ended in the env's error."""
    monkeypatch.setenv("PARALLEL_ROLLOUT_CACHE", str(tmp_path / "cache"))
    folder = tmp_path / "asked"
    folder.mkdir()
    (folder / "docs.jsonl").write_text(json.dumps({"id": "json", "title": "JSON", "text": "JSON is a format."}) + "\n")
    (folder / "asked.jsonl").write_text(json.dumps({"id": "asked0", "question": "What is JSON?",
                                                    "answers": ["a format"], "corpus": "docs.jsonl"}) + "\n")
    server = LLMServer(policy=lambda body: {"reply": '{"answer": "a format"}'}).start()
    try:
        config = EnvManagerConfig(group_size=1, tags=["asked"],
                                  task_sets={"asked": TaskSet("rag", str(folder / "asked.jsonl"))})
        first = schedulers(rl_config(tmp_path, server, num_rollouts=1, run_id="grpo"), config,
                           task_source=_Asked(folder), async_generation_ratio=1)
        (played,) = first.get_batch(batch_size=1, step=0)
        state = json.loads(json.dumps(first.state_dict()))
        first.close()
        second = schedulers(rl_config(tmp_path, server, num_rollouts=1, run_id="grpo", resume=True), config,
                            task_source=_Asked(folder))  # in step: the saved group alone starts
        second.load_state_dict(state)
        (resumed,) = second.get_batch(batch_size=1, step=1)
    finally:
        server.stop()
    assert played.status == "success", played.record
    (saved,) = [u["task_id"] for u in state["unreturned"]]  # the group drawn but not handed out
    assert (resumed.task_id, resumed.status) == (saved, "success"), resumed.record.get("failure")
    assert second.stats().get("members_failed", 0) == 0
