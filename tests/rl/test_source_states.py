"""The scheduler's saved task state and its restarts: a state of another shape is refused
naming the field, a checkpoint after close() keeps the groups close stopped, and a restarted
scheduler runs again the tasks its own source made (in Python, or as files in its folder),
its saved groups within its env slots (rl/sources.py, rl/run_folder.py)."""

from __future__ import annotations

import json
import time

import pytest

from llm_server import LLMServer
from parallel_rollout.errors import ConfigError, RunLocked
from parallel_rollout.rl import EnvManagerConfig, TaskSet, TaskSource
from parallel_rollout.rl.run_folder import RunFolder
from rl_support import RIGHT, TINY, rl_config, tiny_lakes


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
        config = EnvManagerConfig(group_size=2, tags=["lakes"], task_sets=tiny_lakes(tmp_path, "lakes", 3))
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
        config = EnvManagerConfig(group_size=2, tags=["lakes"], task_sets=tiny_lakes(tmp_path, "lakes", 5))
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
        config = EnvManagerConfig(group_size=2, tags=["lakes"], task_sets=tiny_lakes(tmp_path, "lakes", 1))
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
                                  task_sets=tiny_lakes(tmp_path, "lakes", 5))
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


def test_a_restarted_scheduler_hands_out_its_saved_groups_first(tmp_path, schedulers):
    """The groups drawn and not handed out before the checkpoint are older than any the
    restarted scheduler draws: its first batch took a new group that finished first, leaving
    the saved one to a later batch (or to be dropped as stale), where one that never stopped
    hands them out oldest first."""
    slow_saved = []

    def policy(body):
        session = next(e["headers"] for e in reversed(server.requests) if e["body"] is body).get("x-session-id", "")
        if slow_saved and "/g0/" in session:  # the restarted scheduler's group 0: the saved group, started again
            return {**RIGHT, "sleep": 1.0}
        return RIGHT

    server = LLMServer(policy=policy).start()
    try:
        config = EnvManagerConfig(group_size=2, tags=["lakes"], task_sets=tiny_lakes(tmp_path, "lakes", 5))
        first = schedulers(rl_config(tmp_path, server, num_rollouts=1, run_id="grpo"), config,
                           async_generation_ratio=1)
        first.get_batch(batch_size=2, step=0)
        state = json.loads(json.dumps(first.state_dict()))
        first.close()
        assert len(state["unreturned"]) == 1, state
        slow_saved.append(True)
        second = schedulers(rl_config(tmp_path, server, num_rollouts=1, run_id="grpo", resume=True), config,
                            async_generation_ratio=1)
        second.load_state_dict(state)
        batch = second.get_batch(batch_size=2, step=1)
        started = second.stats()["groups_started"]
    finally:
        server.stop()
    assert started == 2  # the saved group and a new one ran together
    assert {(t.task_id, t.episode_id) for t in batch} == {(u["task_id"], u["episode"]) for u in state["unreturned"]}
