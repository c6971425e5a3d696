"""RolloutScheduler on the real engine (worker processes, the openai agent, the local test
server's table policy): whole groups, sync and async, stale groups, redundancy, failures,
the group filter, validation alongside training, the shared limit, batch partition; one
engine for the module (``scheduler_engine``). Weight updates (suspend, resume, version lag):
test_scheduler_versions.py; its processes' lifetimes (a SIGKILLed worker, close(), Ctrl-C in
a trainer, a timed-out member): test_scheduler_lifetimes.py."""

from __future__ import annotations

import itertools
import json
import random
import threading
import time
from collections import Counter
from pathlib import Path

import pytest

from parallel_rollout.errors import ConfigError, RolloutError
from parallel_rollout.results import read_records
from parallel_rollout.rl import EnvManagerConfig, drop_equal_rewards
from rl_support import TINY, by_group, lake_set
from scheduler_engine import LIMIT, shared, sibling, tiny  # noqa: F401 - fixtures
from table_policy import TablePolicy


def test_whole_groups_same_task_and_seed_oldest_first(shared, sibling):
    train = sibling(EnvManagerConfig(num_env_groups=4, group_size=4, tags=["tiny", "FrozenLake"],
                                     num_groups_partition=[2, 2], task_sets=tiny(shared)))
    batch = train.get_batch(batch_size=8, step=0)
    groups = by_group(batch)
    assert len(batch) == 8 and len(groups) == 2
    assert list(groups) == sorted(groups)  # oldest group first
    for members in groups.values():
        assert sorted(t.member for t in members) == [0, 1, 2, 3]
        assert len({(t.task_id, t.seed, t.tag, t.episode_id) for t in members}) == 1
    ids = [t.trajectory_id for t in batch]
    assert len(set(ids)) == len(ids)
    assert all(i == f"{train.run_dir.name}/{t.record['key']}" for i, t in zip(ids, batch))
    assert all(t.record["key"].endswith(f":{t.tag}/g{t.group_id}/e{t.episode_id}/m{t.member}") for t in batch)
    turn = batch[0].turns[0]
    assert {"observation", "action", "request", "reply", "token_ids", "logprobs", "policy_version"} <= set(turn)
    assert batch[0].timings["started_at"] <= batch[0].timings["ended_at"]
    with pytest.raises(ConfigError, match="multiple of group_size"):
        train.get_batch(batch_size=6, step=1)


def test_fractional_ratio_and_bad_partition_are_refused(shared, sibling):
    base = shared[0]
    for ratio in (0.5, -1, float("nan"), float("inf"), "1", True):  # nan and inf raised ValueError, OverflowError
        with pytest.raises(ConfigError, match="only whole numbers"):
            base.sibling(EnvManagerConfig(tags=["FrozenLake"]), async_generation_ratio=ratio)
    for seed in ("x", None, 1.5, -3):  # accepted, then the first get_batch failed with a TypeError
        with pytest.raises(ConfigError, match="seed must be a whole number >= 0"):
            base.sibling(EnvManagerConfig(tags=["FrozenLake"]), seed=seed)
    with pytest.raises(ConfigError, match="group_filter must be a function"):
        base.sibling(EnvManagerConfig(tags=["FrozenLake"]), group_filter=5)
    numpy = pytest.importorskip("numpy")
    train = sibling(EnvManagerConfig(group_size=2, tags=["tiny"], task_sets=tiny(shared)),
                    async_generation_ratio=numpy.int64(1), seed=numpy.int64(3))  # numpy's integers, as step takes them
    assert train.ratio == 1 and len(train.get_batch(numpy.int64(2), step=numpy.int64(0))) == 2
    with pytest.raises(ConfigError, match="sums to 3, not num_env_groups=4"):
        base.sibling(EnvManagerConfig(num_env_groups=4, tags=["FrozenLake", "FrozenLake8x8"],
                                      num_groups_partition=[2, 1]))


def test_a_siblings_misspelt_keyword_names_the_call_made(shared):
    """It named ``RolloutScheduler()``, a call the trainer never made."""
    with pytest.raises(ConfigError, match=r"^sibling\(\) got an unexpected keyword argument 'async_ratio'; "
                                          r"did you mean async_generation_ratio\?"):
        shared[0].sibling(EnvManagerConfig(tags=["FrozenLake"]), async_ratio=1)


def test_an_unnamed_sibling_never_takes_a_name_a_trainer_gave(shared, sibling):
    """An unnamed sibling is named ``<maker>-sibling<k>``: one named so by the trainer first
    made every later unnamed sibling a ConfigError ("already runs (or ran)") that asked for a
    name the trainer never gave. A name that could write another scheduler's sample keys (one
    holding ':', one ending in a later session's '@s<k>') is refused."""
    lake = EnvManagerConfig(group_size=1, tags=["FrozenLake"])
    first = sibling(lake)
    count = int(first.name.rsplit("sibling", 1)[1])
    named = sibling(lake, name=f"base-sibling{count + 2}")  # the name the next unnamed one took
    unnamed = [sibling(lake), sibling(lake)]
    names = [first.name, named.name, *(s.name for s in unnamed)]
    assert len(set(names)) == len(names) and all(n.startswith("base-sibling") for n in names), names
    with pytest.raises(ConfigError, match="already runs"):
        sibling(lake, name=unnamed[0].name)  # a name the trainer gives stays refused when taken
    for bad in ("val:greedy", "val@s1", 7):
        with pytest.raises(ConfigError, match="scheduler's name must be"):
            sibling(lake, name=bad)


def test_tags_of_two_modes_share_one_engine(shared, sibling):
    """A gym tag and a math tag (the issue's ["FrozenLake", "math"]) in one scheduler; a
    sibling whose tags need VMs the engine's pool was not made for is refused."""
    import json

    from parallel_rollout.rl import TaskSet

    switch, folder = shared[1], shared[3]
    sums = folder / "sums.jsonl"
    sums.write_text("".join(json.dumps({"id": f"sum{i}", "problem": f"What is {i} + 2?", "answer": str(i + 2)})
                            + "\n" for i in range(3)))
    coin = random.Random(1)
    table = TablePolicy(seed=6)
    switch.policy = lambda body: (table(body) if "You are at row" in str(body["messages"]) else
                                  {"reply": f"\\boxed{{{coin.choice(['0', '1', '2', '3', '4'])}}}"})
    train = sibling(EnvManagerConfig(num_env_groups=2, group_size=2, tags=["tiny", "sums"],
                                     task_sets={**tiny(shared), "sums": TaskSet("math", str(sums))}))
    batch = train.get_batch(batch_size=8, step=0)
    assert train.modes == ["gym", "math"] and {t.tag for t in batch} == {"tiny", "sums"}
    for trajectory in batch:
        assert trajectory.status != "error" and trajectory.turns, trajectory.record
        if trajectory.tag == "sums":
            assert trajectory.task_id.startswith("sum") and trajectory.reward in (0.0, 1.0)
    with pytest.raises(ConfigError, match="need VMs of mode shell"):
        sibling(EnvManagerConfig(tags=["checks"], task_sets={"checks": TaskSet("shell", str(
            Path(__file__).parents[2] / "benchmarks" / "shell_tasks.jsonl"))}))


def test_sync_starts_nothing_between_batches(shared, sibling):
    server = shared[2]
    train = sibling(EnvManagerConfig(num_env_groups=4, group_size=2, tags=["tiny"], task_sets=tiny(shared)),
                    async_generation_ratio=0)
    for step in range(3):
        train.get_batch(batch_size=8, step=step)
        returned = time.monotonic()
        time.sleep(0.5)  # the trainer trains
        late = [r for r in server.requests if r["time"] > returned]
        assert not late, f"{len(late)} model requests between batches in sync mode"
    assert train.stats()["groups_started"] == 12


def test_async_runs_ahead_and_stale_groups_are_dropped_and_counted(shared, sibling):
    train = sibling(EnvManagerConfig(num_env_groups=4, group_size=2, tags=["tiny"], task_sets=tiny(shared)),
                    async_generation_ratio=1)
    train.get_batch(batch_size=4, step=0)
    deadline = time.monotonic() + 20
    while train.stats()["groups_ready"] < 2 and time.monotonic() < deadline:
        time.sleep(0.05)  # generation goes on while the trainer "trains"
    time.sleep(0.3)
    stats = train.stats()
    assert stats["groups_ready"] == 2 and stats["groups_running"] == 0  # r=1: one batch ahead, no more
    batch = train.get_batch(batch_size=4, step=3)  # 3 > 0 + 1: everything made at step 0 is stale
    assert train.stats()["dropped_stale"] >= 2
    assert all(t.created_step == 3 for t in batch)
    deadline = time.monotonic() + 20
    while train.stats()["groups_ready"] < 2:  # made ahead again: ready when it closes
        assert time.monotonic() < deadline, train.stats()
        time.sleep(0.05)
    train.close()
    # the gate forgets the samples of the ready groups dropped as stale, and of those ready
    # at close() (they stayed for the life of the engine: a long async run grew it by every
    # stale group, a closed sibling by its ready ones)
    gate = shared[0]._shared.gate
    assert not [key for key in gate._oldest if key.startswith(f"{train._sample_prefix}:")]


@pytest.mark.parametrize("batch_partition", [None, [1]], ids=["plain", "batch_partition"])
def test_finished_members_free_their_slots_and_a_last_chance_group_is_waited_for(shared, sibling, batch_partition):
    """ratio 1, one straggling member in each of the first two groups: their finished
    members' env slots start the next groups, which make step 0's batch (slots bound what
    runs, not groups); at step 1, the last step the stragglers' groups may go out in, the batch
    waits for them instead of taking newer groups that finished first, so none is dropped.
    With ``batch_partition`` too: its batches took the newer groups, and dropped the old."""
    server, switch = shared[2], shared[1]

    def straggling_m1(body):
        headers = next(e["headers"] for e in reversed(server.requests) if e["body"] is body)
        session = headers.get("x-session-id", "")
        if "/m1@" in session and ("/g0/" in session or "/g1/" in session):
            time.sleep(2.0)  # member 1 of each of the first two groups, every turn
        return switch.default(body)

    switch.policy = straggling_m1
    train = sibling(EnvManagerConfig(num_env_groups=2, group_size=2, tags=["tiny"], task_sets=tiny(shared)),
                    async_generation_ratio=1, batch_partition=batch_partition)
    first = train.get_batch(batch_size=4, step=0)
    assert sorted({t.group_id for t in first}) == [2, 3]  # on the slots of groups 0 and 1's member 0
    second = train.get_batch(batch_size=4, step=1)
    assert sorted({t.group_id for t in second}) == [0, 1]  # not 4 and 5, which finished first
    assert train.stats()["groups_dropped"] == 0


@pytest.mark.parametrize("ratio", [0, 1])
def test_batch_partition_gives_each_tag_its_share_over_batches_that_do_not_divide(shared, sibling, ratio):
    """batch_partition=[1, 1] with one group a batch: each batch rounded alone gave the first
    tag every group, and the second tag never ran; three a batch gave it a third. The
    rounding is carried from batch to batch: they alternate, and a restarted scheduler given
    the state goes on with the tag an uninterrupted one would."""
    sets = {**tiny(shared), **lake_set(shared[3], name="other", desc=TINY, max_steps=2)}
    config = EnvManagerConfig(group_size=1, tags=["tiny", "other"], task_sets=sets)
    train = sibling(config, async_generation_ratio=ratio, batch_partition=[1, 1])
    assert [[t.tag for t in train.get_batch(batch_size=1, step=step)] for step in range(5)] == \
        [["tiny"], ["other"], ["tiny"], ["other"], ["tiny"]]
    restarted = sibling(config, async_generation_ratio=ratio, batch_partition=[1, 1])
    restarted.load_state_dict(json.loads(json.dumps(train.state_dict())))
    assert [t.tag for t in restarted.get_batch(batch_size=1, step=5)] == ["other"]
    thirds = Counter(t.tag for step in (5, 6) for t in train.get_batch(batch_size=3, step=step))
    assert thirds == {"tiny": 3, "other": 3}, thirds


def test_redundancy_cancels_the_slowest_members(shared, sibling):
    base, switch, _, _ = shared
    policy = TablePolicy(seed=1)
    rng = random.Random(5)

    def slow_sometimes(body):
        step = policy(body)
        if rng.random() < 0.5:
            time.sleep(1.0)
        return step

    switch.policy = slow_sometimes
    train = sibling(EnvManagerConfig(num_env_groups=1, group_size=2, group_size_redundancy=2, tags=["tiny"],
                                     task_sets=tiny(shared)))
    batch = train.get_batch(batch_size=4, step=0)
    assert train.stats()["members_cancelled"] >= 1
    time.sleep(1.2)  # let a cancelled member that was mid-turn end, if it was going to
    records = read_records(base.run_dir / "results.jsonl")
    for members in by_group(batch).values():
        assert len(members) == 2
        kept = {t.record["key"] for t in members}
        last_kept = max(t.timings["ended_at"] for t in members)
        # every other member of the group that finished at all finished after the kept ones
        others = [r for r in records if r["meta"]["scheduler"] == train.name
                  and r["meta"]["group"] == members[0].group_id and r["key"] not in kept]
        assert all(r["ended_at"] >= last_kept for r in others)


def test_failed_members_drop_the_group_or_become_placeholders(shared, sibling):
    switch = shared[1]
    policy = TablePolicy(seed=2)
    rng = random.Random(3)
    switch.policy = lambda body: {"status": 400} if rng.random() < 0.3 else policy(body)
    config = EnvManagerConfig(num_env_groups=4, group_size=2, tags=["tiny"], task_sets=tiny(shared))
    drop = sibling(config)
    batch = drop.get_batch(batch_size=8, step=0)
    assert not any(t.failed or t.placeholder for t in batch)
    assert drop.stats()["dropped_failed"] >= 1
    keep = sibling(config, failed_member="placeholder")
    batch = keep.get_batch(batch_size=16, step=0)
    placeholders = [t for t in batch if t.placeholder]
    assert placeholders and all(t.reward == 0.0 and t.status == "placeholder" for t in placeholders)
    assert keep.stats()["placeholders"] == len(placeholders)
    assert all(len(members) == 2 for members in by_group(batch).values())


def test_group_filter_drops_equal_rewards(shared, sibling):
    switch = shared[1]
    policy = TablePolicy(seed=4)
    answered = itertools.count()
    # The first 8 requests (both members' two moves in the first two groups) walk into the
    # wall: those groups are all reward 0 and must be dropped; then the random policy.
    switch.policy = lambda body: ({"reply": "<answer>Left</answer>"} if next(answered) < 8 else policy(body))
    # (a random policy on the tiny lake passes ~1 group in 5: room past the default bound of
    # 10 batches' worth of filtered groups, which a 2-group batch can reach by chance)
    train = sibling(EnvManagerConfig(num_env_groups=2, group_size=2, tags=["tiny"], task_sets=tiny(shared)),
                    group_filter=drop_equal_rewards, max_filtered_groups=500)
    batch = train.get_batch(batch_size=4, step=0)
    for members in by_group(batch).values():
        assert len({t.reward for t in members}) == 2
    stats = train.stats()
    assert stats["dropped_filtered"] >= 2 and stats["groups_started"] >= 4
    train.close()
    # the gate forgets the samples of the groups the filter dropped (it kept them for the
    # life of the engine: a long filtered run grew it without bound)
    gate = shared[0]._shared.gate
    assert not [key for key in gate._oldest if key.startswith(f"{train._sample_prefix}:")]


def test_a_group_filter_that_raises_ends_the_get_batch_with_its_error(shared, sibling):
    """The trainer's filter raises on a complete group: get_batch raises it (as a
    RolloutError naming the group, the filter's exception its cause) instead of logging it
    on the engine's thread while the group went nowhere and the next one started in its
    place, without end; nothing more starts until a get_batch says so, and a trainer that
    fixes its filter gets its batch from the next call."""
    train = sibling(EnvManagerConfig(num_env_groups=2, group_size=2, tags=["tiny"], task_sets=tiny(shared)),
                    group_filter=lambda group: group[0].record["nonexistent_key"] > 0, async_generation_ratio=1)
    with pytest.raises(RolloutError, match=r"group_filter raised on group \d+ \(tag 'tiny'\): KeyError") as caught:
        train.get_batch(batch_size=4, step=0, timeout=30)
    assert isinstance(caught.value.__cause__, KeyError)
    time.sleep(1.0)  # the trainer looks at its error; the groups running at the raise settle
    started = train.stats()["groups_started"]
    time.sleep(1.5)  # a tiny lake's episode takes milliseconds: regeneration would show here
    stats = train.stats()
    assert stats["groups_started"] == started <= 6, stats  # it started 1,474 groups in 20 s
    assert stats["dropped_filter_error"] >= 1
    train.group_filter = None  # fixed
    assert len(train.get_batch(batch_size=4, step=0, timeout=60)) == 4



@pytest.mark.parametrize("returned, said", [("keep", "'keep' (type str)"), (1, "1 (type int)"), ([], "[] (type list)")],
                         ids=["str", "int", "list"])
def test_a_group_filter_that_returns_no_bool_ends_the_get_batch_naming_what_it_returned(shared, sibling,
                                                                                        returned, said):
    """A filter that returns 'keep', 1 or a list: its group was dropped or kept by Python's
    truthiness ('keep' dropped every group). get_batch raises, as for a filter that raises,
    naming group_filter and what it returned; numpy's bool is a bool."""
    import numpy

    train = sibling(EnvManagerConfig(num_env_groups=2, group_size=2, tags=["tiny"], task_sets=tiny(shared)),
                    group_filter=lambda group: returned, async_generation_ratio=1)
    with pytest.raises(RolloutError, match=r"group_filter returned ") as caught:
        train.get_batch(batch_size=4, step=0, timeout=30)
    assert f"group_filter returned {said} on group " in str(caught.value), caught.value
    assert "True drops the group, False keeps it" in str(caught.value)
    train.group_filter = lambda group: numpy.bool_(False)
    assert len(train.get_batch(batch_size=4, step=0, timeout=60)) == 4

def test_validation_runs_each_task_once_while_training_goes_on(shared, sibling):
    base = shared[0]
    train = sibling(EnvManagerConfig(num_env_groups=2, group_size=2, tags=["tiny"], task_sets=tiny(shared)),
                    async_generation_ratio=1)
    val = sibling(EnvManagerConfig(num_env_groups=2, group_size=1, tags=["lakes", "tiny"],
                                   task_sets={**lake_set(shared[3], count=6, max_steps=4), **tiny(shared)}))
    train.get_batch(batch_size=4, step=0)
    report: list = []
    thread = threading.Thread(target=lambda: report.extend(val.get_batch(batch_size=-1, step=0)))
    thread.start()
    train_times = []
    step = 1
    while thread.is_alive() and step < 500:
        train.get_batch(batch_size=4, step=step)
        train_times.append(time.time())
        step += 1
    thread.join(120)
    expected = Counter([*(f"lakes{i}" for i in range(6)), "tiny0"])
    assert Counter(t.task_id for t in report) == expected
    assert val.stats()["groups_returned"] == 7  # as a batch's groups are counted (it said none)
    # one log for both: validation's keys apart from training's, its own numbers
    logged = {**train.metrics(), **val.metrics(prefix="val/")}
    assert logged["val/batch/trajectories"] == 7 and logged["batch/trajectories"] == train.metrics()["batch/trajectories"]
    # each scheduler counts its own model requests, those its samples sent (the session
    # header names the sample): val's stats counted every request of the engine, train's too
    sent = Counter(next((v for k, v in r["headers"].items() if k.lower() == "x-session-id"), "").split(":")[0]
                   for r in shared[2].requests)
    assert val.stats()["model_requests"] == sent[val.name] > 0
    # (train goes on generating: a request or two may have passed the gate and not yet come)
    assert sent[train.name] <= train.stats()["model_requests"] < sent[train.name] + sent[val.name]
    val_start = min(t.timings["started_at"] for t in report)
    val_end = max(t.timings["ended_at"] for t in report)
    assert sum(val_start < when < val_end for when in train_times) >= 2, "training paused during validation"
    # one limit for every scheduler of the engine, never exceeded: measured from the start
    # and end times of every record the engine wrote so far
    records = read_records(base.run_dir / "results.jsonl")
    events = sorted([(r["started_at"], 1) for r in records] + [(r["ended_at"], -1) for r in records])
    running = peak = 0
    for _, delta in events:
        running += delta
        peak = max(peak, running)
    assert 1 < peak <= LIMIT


def test_given_tasks_of_a_tag_of_their_own_run_and_every_named_batch_has_metrics(shared, sibling):
    """get_batch(tasks=[Task]) with an unseeded task whose tag (its own, or its mode's) is
    none of the scheduler's: its seed came from the scheduler's tags and it failed with
    "ValueError: 'custom' is not in list", leaving the call's first group running on;
    metrics() stayed empty (or the batch before's) after get_batch(tasks=…) and get_batch(-1)."""
    from parallel_rollout.tasks import Task

    train = sibling(EnvManagerConfig(num_env_groups=2, group_size=2, tags=["tiny"], task_sets=tiny(shared)))
    assert train.metrics() == {}
    mine = Task(id="mine", mode="gym", payload={"desc": TINY, "max_steps": 3}, tags=("custom",))
    plain = Task(id="plain", mode="gym", payload={"desc": TINY, "max_steps": 3})
    batch = train.get_batch(batch_size=6, step=0, tasks=[mine, plain, "tiny0"])
    assert [(t.task_id, t.tag) for t in batch] == [("mine", "custom")] * 2 + [("plain", "gym")] * 2 + \
        [("tiny0", "tiny")] * 2
    seeds = [t.seed for t in batch]
    assert all(isinstance(s, int) for s in seeds) and seeds[0] == seeds[1] and seeds[2] == seeds[3]
    assert len({seeds[0], seeds[2], seeds[4]}) == 3  # the tags' seeds do not meet
    assert train.metrics()["batch/trajectories"] == 6 and train.metrics()["batch/groups"] == 3
    assert train.stats()["groups_running"] == 0
    every = train.get_batch(batch_size=-1, step=1)
    assert [t.task_id for t in every] == ["tiny0", "tiny0"]
    assert train.metrics()["batch/trajectories"] == 2


def test_a_batch_put_back_takes_no_tags_share_and_the_next_batches_keep_the_shares(shared, sibling):
    """batch_partition=[1, 1], one group a batch: a get_batch that raised after taking its
    batch (a trajectory file gone before it was read) put the group back to run again, but
    counted its tag's share as handed out; the next call then asked for the other tag while
    the put-back group filled the only slot the ratio allows, and waited for ever. Nothing
    went out: the shares stand as before, and the next batches are an unbroken run's."""
    sets = {**tiny(shared), **lake_set(shared[3], name="other", desc=TINY, max_steps=2)}
    train = sibling(EnvManagerConfig(group_size=1, tags=["tiny", "other"], task_sets=sets), batch_partition=[1, 1])
    on_final, gone = train._on_final, []

    def deleted(record):  # the batch's group: its file gone before get_batch reads it
        if not gone:
            gone.append(train.run_dir / record["trajectory"])
            gone[0].unlink()
        on_final(record)

    train._on_final = deleted
    shares = train.state_dict()["shares"]
    with pytest.raises(RolloutError, match=r"attempt-0\.jsonl"):
        train.get_batch(batch_size=1, step=0)
    assert gone and train.state_dict()["shares"] == shares
    train._on_final = on_final
    tags = [[t.tag for t in train.get_batch(batch_size=1, step=step, timeout=30)] for step in range(3)]
    assert tags == [["tiny"], ["other"], ["tiny"]]
    assert train.stats()["dropped_unreadable"] == 1


def test_a_partial_batch_under_batch_partition_is_what_passed_and_the_short_tag_is_owed(shared, sibling):
    """batch_partition=[1, 1] with filter_fallback='partial': the filter dropped the group of
    the tag the batch wanted and the other tag's passed. Each look at the ready groups while
    get_batch waited counted a batch toward the shares, an empty one too, and only that drift
    let the other tag's group out (without it the call waited for ever on a tag nothing would
    start). The batch is what passed, and the tag it lacked is owed its share."""
    sets = {**tiny(shared), **lake_set(shared[3], name="other", desc=TINY, max_steps=2)}
    dropped = []

    def drop_the_first_tiny(group):
        if group[0].tag == "tiny" and not dropped:
            dropped.append(group[0].group_id)
            return True
        return False

    train = sibling(EnvManagerConfig(group_size=2, num_env_groups=2, tags=["tiny", "other"], task_sets=sets),
                    async_generation_ratio=1, batch_partition=[1, 1], group_filter=drop_the_first_tiny,
                    max_filtered_groups=0, filter_fallback="partial")
    batch = train.get_batch(batch_size=2, step=0, timeout=30)
    assert dropped and [t.tag for t in batch] == ["other", "other"]
    assert train.state_dict()["shares"] == {"tiny": 0.5, "other": -0.5}  # tiny is owed the half it lacked
    tags = [t.tag for step in (1, 2, 3) for t in train.get_batch(batch_size=2, step=step, timeout=30)][::2]
    assert tags == ["tiny", "tiny", "other"], tags  # over the four batches, two each
