"""Validation on a tag that generates its rooms (the Sokoban tags: one unseeded task, each
group's seed picks its room): ``get_batch(-1)`` plays the same rooms at every call, as ROLL's
val env managers do (their episode ids start again at 0 each validation, from the fixed
``seed``), so validation scores compare across training steps; and it says once that such a
tag validates on one generated room, naming the shipped fixed rooms."""

from __future__ import annotations

import json
import logging

from llm_server import LLMServer
from parallel_rollout.rl import EnvManagerConfig, TaskSet
from parallel_rollout.rl.generation import TAG_SEED_STRIDE
from rl_support import rl_config


def _up(body):
    return {"reply": "<answer>Up</answer>"}


def test_validation_on_a_generated_tag_replays_the_same_rooms_at_every_call(tmp_path, schedulers, caplog):
    server = LLMServer(policy=_up).start()
    try:
        train = schedulers(rl_config(tmp_path, server), EnvManagerConfig(tags=["SimpleSokoban"], group_size=2))
        trained = train.get_batch(2, step=0)
        val = train.sibling(EnvManagerConfig(tags=["LargerSokoban", "SimpleSokoban"], group_size=1), seed=7)
        drawn = tmp_path / "drawn.jsonl"  # unseeded, but their maps are drawn: nothing is generated
        drawn.write_text("".join(json.dumps({"id": f"lake{i}", "mode": "gym", "desc": ["SFG"], "max_steps": 3}) + "\n"
                                 for i in range(2)))
        fixed = train.sibling(EnvManagerConfig(group_size=1, tags=["drawn"],
                                               task_sets={"drawn": TaskSet("gym", str(drawn))}))
        with caplog.at_level(logging.WARNING, logger="parallel_rollout"):
            assert len(fixed.get_batch(-1, step=0)) == 2
            reports = [val.get_batch(-1, step=step) for step in (0, 1, 2)]
        train.get_batch(2, step=3)  # training goes on drawing new rooms
        after = train.get_batch(2, step=4)
    finally:
        server.stop()
    rooms = [sorted((t.tag, t.seed, tuple(t.record["eval"]["room"])) for t in report) for report in reports]
    assert len(rooms[0]) == 2 and rooms[0] == rooms[1] == rooms[2], rooms
    # the validation scheduler's own seed picks its rooms: seed + stride x tag index + the task's place
    assert sorted(t.seed for t in reports[0]) == [7, 7 + TAG_SEED_STRIDE]
    assert len({t.trajectory_id for report in reports for t in report}) == 6  # ids still unique
    # training's rooms are its own: validation took none of its episodes
    assert trained[0].seed == 0 and after[0].seed == 2, (trained[0].seed, after[0].seed)
    warned = [r.getMessage() for r in caplog.records if "generate a new room per group" in r.getMessage()]
    assert len(warned) == 1, warned  # once per scheduler, however often it validates; none of drawn maps
    assert "SimpleSokoban" in warned[0] and "LargerSokoban" in warned[0]
    assert 'TaskSet("gym", "sokoban"' in warned[0]


def test_a_closed_validation_sibling_is_let_go_and_its_name_stays_taken(tmp_path, schedulers):
    """A trainer that makes a validation sibling for each evaluation (``with train.sibling(…)
    as val:``) gets it freed once closed: the engine kept every closed sibling, with the last
    report it handed out (every trajectory's turns, an OSWorld run's screenshots), for the
    whole training. Its name stays taken: a later sibling of that name would write its
    samples under the closed one's names in the run folder."""
    import gc
    import weakref

    import pytest

    from parallel_rollout.errors import ConfigError
    from rl_support import lake_set

    server = LLMServer(policy=lambda body: {"reply": "<answer>Right</answer>"}).start()
    try:
        train = schedulers(rl_config(tmp_path, server), EnvManagerConfig(tags=["FrozenLake"], group_size=1))
        lakes = lake_set(tmp_path, count=1, name="val")
        names, gone = [], []
        for step in range(2):
            with train.sibling(EnvManagerConfig(group_size=1, tags=["val"], task_sets=lakes)) as val:
                (report,) = val.get_batch(-1, step=step)
                names.append(val.name)
                gone.append(weakref.ref(val))
            del val, report
        gc.collect()
        assert [ref() for ref in gone] == [None, None]
        assert len(set(names)) == 2, names  # a new name each time: their samples never meet
        with pytest.raises(ConfigError, match=f"a scheduler named {names[0]!r} already runs"):
            train.sibling(EnvManagerConfig(group_size=1, tags=["val"], task_sets=lakes), name=names[0])
    finally:
        server.stop()


def test_a_restarted_scheduler_plays_the_rooms_its_checkpoint_would_have(tmp_path, schedulers):
    """The built-in task order saved in state_dict() carries the scheduler's seed, and a
    scheduler given the state draws on in that order; the rooms of its next groups (an unseeded
    task's seed: seed + stride x tag index + episode id) follow that seed too, not the seed the
    restarted trainer passed (ROLL draws a new train seed per run): it played the saved order's
    tasks in rooms the uninterrupted run never had."""
    server = LLMServer(policy=_up).start()
    try:
        config = EnvManagerConfig(tags=["SimpleSokoban"], group_size=1)
        first = schedulers(rl_config(tmp_path, server, run_id="grpo"), config, seed=5)
        first.get_batch(1, step=0)
        state = json.loads(json.dumps(first.state_dict()))
        uninterrupted = [t.seed for step in (1, 2) for t in first.get_batch(1, step=step)]
        first.close()
        second = schedulers(rl_config(tmp_path, server, run_id="grpo", resume=True), config, seed=9)
        second.load_state_dict(state)
        resumed = [t.seed for step in (1, 2) for t in second.get_batch(1, step=step)]
    finally:
        server.stop()
    assert uninterrupted == [6, 7] and resumed == uninterrupted, (uninterrupted, resumed)


def test_a_validation_member_that_fails_leaves_its_place_to_a_spare_still_running(tmp_path, schedulers):
    """get_batch(-1) with group_size_redundancy: the first group_size members to finish an
    episode make the group, as in training; a member that failed (here every request of
    member 0 is refused) is handed back only when no spare is left to take its place. It made
    the group as it failed, first, and the spare about to succeed was cancelled."""

    class ByMember(LLMServer):
        def next_step(self, body, authorization=None, headers=None, path=None):
            session = (headers or {}).get("x-session-id", "")
            if "/m0@" in session:
                return {"status": 400, "message": "refused"}
            return super().next_step(body, authorization, headers, path)

    server = ByMember(policy=lambda body: {"reply": "<answer>Up</answer>", "sleep": 0.5}).start()  # the spare: slower
    try:
        drawn = tmp_path / "drawn.jsonl"
        drawn.write_text(json.dumps({"id": "lake", "mode": "gym", "desc": ["SFG"], "max_steps": 3}) + "\n")
        val = schedulers(rl_config(tmp_path, server), EnvManagerConfig(
            group_size=1, group_size_redundancy=1, tags=["drawn"], task_sets={"drawn": TaskSet("gym", str(drawn))}))
        (member,) = val.get_batch(-1, step=0)
    finally:
        server.stop()
    assert (member.member, member.status) == (1, "failure"), (member.member, member.status, member.record.get("failure"))
