"""The data plane on an OSWorld-shaped batch (tests/rl/screens.py: a screenshot per turn, the
openai agent's conversation with its last three screenshots inline): each screenshot is
stored once per trajectory, a trajectory's files grow linearly with its turns, and the
trainer gets every turn's full request back. The default run is 8 trajectories of 100 turns
with 300 KB screens; the slow one is the full 64."""

from __future__ import annotations

import base64
import json

import pytest

from parallel_rollout.config import RunConfig
from parallel_rollout.rl import EnvManagerConfig, TaskSet
from parallel_rollout.trajectories import images_path
from screens import AGENT, MODE, write_screens

TURNS = 100
SCREEN_BYTES = 300 * 1024


def _batch(tmp_path, schedulers, trajectories):
    screens = write_screens(tmp_path / "screens", TURNS, SCREEN_BYTES)
    tasks = tmp_path / "desk.jsonl"
    tasks.write_text(json.dumps({"id": "desk0", "mode": MODE, "turns": TURNS, "images": str(screens)}) + "\n")
    config = RunConfig(mode=MODE, agent=AGENT, num_rollouts=2, envs_per_worker=4, output_dir=str(tmp_path / "out"),
                       progress=False, task_timeout=600.0, max_turns=TURNS)
    train = schedulers(config, EnvManagerConfig(group_size=8, num_env_groups=1, tags=["desk"],
                                                task_sets={"desk": TaskSet(MODE, str(tasks))}))
    return train, train.get_batch(batch_size=trajectories, step=0), screens


def _small(tmp_path, schedulers, turns, size):
    """A scheduler of one group of 2 on a ``turns``-turn desk task (1 worker × 2 env loops)."""
    screens = write_screens(tmp_path / "screens", turns, size)
    tasks = tmp_path / "desk.jsonl"
    tasks.write_text(json.dumps({"id": "desk0", "mode": MODE, "turns": turns, "images": str(screens)}) + "\n")
    config = RunConfig(mode=MODE, agent=AGENT, num_rollouts=1, envs_per_worker=2, output_dir=str(tmp_path / "out"),
                       progress=False, max_turns=turns)
    return schedulers(config, EnvManagerConfig(group_size=2, tags=["desk"],
                                               task_sets={"desk": TaskSet(MODE, str(tasks))}))


def _check(train, batch, screens):
    expected = {f"sha{i}": base64.b64encode((screens / f"screen-{i}.png").read_bytes()).decode() for i in range(TURNS)}
    for trajectory in batch:
        assert trajectory.status == "success" and len(trajectory.turns) == TURNS, trajectory.record
        path = train.run_dir / trajectory.record["trajectory"]
        lines = path.read_bytes().splitlines()
        # each screenshot once, in the images file; none inline in a turn line
        images = [json.loads(line) for line in images_path(path).read_bytes().splitlines()]
        assert len(images) == TURNS and len({i["sha256"] for i in images}) == TURNS
        assert not any(b"base64" in line for line in lines)
        assert max(len(line) for line in lines) < 20_000
        # linear: the last 50 turns take about as many bytes as the first 50
        first, last = sum(map(len, lines[:50])), sum(map(len, lines[50:]))
        assert 0.8 < last / first < 1.25, (first, last)
        assert images_path(path).stat().st_size < TURNS * (SCREEN_BYTES * 4 // 3 + 200)
        # the trainer's turns carry the full request the agent sent
        for number, turn in enumerate(trajectory.turns, 1):
            urls = [part["image_url"]["url"] for message in turn["request"] if isinstance(message["content"], list)
                    for part in message["content"] if part["type"] == "image_url"]
            assert len(urls) == min(number, 3)
            assert urls[-1] == "data:image/png;base64," + expected[f"sha{number - 1}"]
        assert len(trajectory.segments()) == 1


def test_screenshots_stored_once_and_files_linear_in_turns(tmp_path, schedulers):
    train, batch, screens = _batch(tmp_path, schedulers, 8)
    _check(train, batch, screens)


@pytest.mark.slow
def test_64_trajectories_of_100_screens(tmp_path, schedulers):
    train, batch, screens = _batch(tmp_path, schedulers, 64)
    assert len(batch) == 64
    _check(train, batch, screens)


def _written(tmp_path, turns):
    """The trajectory file of ``turns``, as the worker writes it."""
    from parallel_rollout.trajectories import TrajectoryFile

    file = TrajectoryFile(tmp_path / "t", tmp_path, 0)
    for turn in turns:
        file.write(turn)
    file.close()
    return tmp_path / "t" / "attempt-0.jsonl"


def test_deltas_read_back_exactly_and_a_lost_image_is_named(tmp_path):
    """Requests that grow, drop an old image (a message changes) and restart; prompt ids that
    extend and drift: read_turns gives back what was written; a torn last line ends the turns;
    an images file that lost a line is an error naming the file and line."""
    from parallel_rollout.trajectories import TrajectoryError, read_turns

    def image(n):
        return {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{'QUJD' * 50}{n}"}}

    system = {"role": "system", "content": "s"}
    user = [{"role": "user", "content": [{"type": "text", "text": f"t{n}"}, image(n)]} for n in range(3)]
    turns = [
        {"turn": 1, "request": [system, user[0]], "prompt_token_ids": [1, 2], "token_ids": [3]},
        {"turn": 2, "request": [system, user[0], {"role": "assistant", "content": "a"}, user[1]],
         "prompt_token_ids": [1, 2, 3, 4], "token_ids": [5]},
        {"turn": 3, "request": [system, {"role": "user", "content": "[older screenshot omitted]"}, user[2]],
         "prompt_token_ids": [1, 9, 4, 6], "token_ids": [7]},   # drift: not prompt + reply
        {"turn": 4, "reply": "no request"},
    ]
    path = _written(tmp_path, turns)
    assert read_turns(path) == turns
    lines = path.read_text().splitlines()
    assert json.loads(lines[1])["prompt_delta"] == {"keep": 3, "new": [4]}
    assert json.loads(lines[2])["request_delta"]["keep"] == 1
    with path.open("a") as fh:
        fh.write('{"turn": 5, "torn')
    assert read_turns(path) == turns
    images = images_path(path)
    assert len(images.read_text().splitlines()) == 3
    images.write_text("\n".join(images.read_text().splitlines()[:2]) + "\n")
    with pytest.raises(TrajectoryError, match=r"attempt-0.jsonl:3: .*attempt-0.images.jsonl"):
        read_turns(path)


def test_a_turns_earlier_calls_are_stored_as_deltas_and_old_readers_still_read_its_own(tmp_path):
    """A turn of two model calls (agents/calls.py): its earlier call is stored as a delta from
    the previous turn's request and prompt + reply, and read back whole; the turn's own fields
    are stored as a turn's always were, so a reader that knows no earlier_calls (here: the
    lines without them) reads them right."""
    from parallel_rollout.trajectories import read_turns

    system = {"role": "system", "content": "s"}
    history = [system, {"role": "user", "content": "u1"}]
    plan_2 = {"request": history + [{"role": "user", "content": "u2"}], "prompt_token_ids": [1, 2, 3, 4, 5],
              "token_ids": [6, 7], "logprobs": [-0.1, -0.2], "stop_reason": "stop", "reply": "plan"}
    turns = [
        {"turn": 1, "request": history, "prompt_token_ids": [1, 2], "token_ids": [3], "reply": "a"},
        {"turn": 2, "earlier_calls": [plan_2],
         "request": plan_2["request"] + [{"role": "assistant", "content": "plan"}, {"role": "user", "content": "go"}],
         "prompt_token_ids": [1, 2, 3, 4, 5, 6, 7, 8], "token_ids": [9], "reply": "b"},
        {"turn": 3, "request": history + [{"role": "user", "content": "u3"}], "prompt_token_ids": [1, 2, 3, 4, 5, 6, 7, 8, 9, 10],
         "token_ids": [11], "reply": "c"},
    ]
    path = _written(tmp_path, turns)
    assert read_turns(path) == turns
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    (stored,) = lines[1]["earlier_calls"]
    assert stored["prompt_delta"] == {"keep": 3, "new": [4, 5]} and stored["request_delta"]["keep"] == 2
    assert lines[1]["prompt_delta"] == {"keep": 3, "new": [4, 5, 6, 7, 8]}  # from turn 1's, as ever
    assert lines[2]["prompt_delta"] == {"keep": 9, "new": [10]}
    old = tmp_path / "old.jsonl"
    old.write_text("".join(json.dumps({k: v for k, v in line.items() if k != "earlier_calls"}) + "\n"
                           for line in lines))
    assert read_turns(old) == [{k: v for k, v in turn.items() if k != "earlier_calls"} for turn in turns]


def test_a_turns_outlived_calls_are_stored_as_deltas_and_read_back_whole(tmp_path):
    """A turn whose act left a call running (agents/calls.py ``outlived_calls``, after the
    turn's own): that call is stored as a delta from the previous turn's request and prompt +
    reply, as an earlier call is, not whole, and read back whole; the next turn's deltas are
    still from the turn's own call."""
    from parallel_rollout.trajectories import read_turns, shown_turn

    history = [{"role": "system", "content": "s"}, {"role": "user", "content": "u1"}]
    late = {"request": history + [{"role": "user", "content": "critique"}], "prompt_token_ids": [1, 2, 3, 4],
            "token_ids": [5], "logprobs": [-0.1], "stop_reason": "stop", "reply": "late", "outlived_act": True}
    turns = [
        {"turn": 1, "request": history, "prompt_token_ids": [1, 2], "token_ids": [3], "reply": "a"},
        {"turn": 2, "request": history + [{"role": "user", "content": "u2"}], "prompt_token_ids": [1, 2, 3, 6],
         "token_ids": [7], "reply": "b", "outlived_calls": [late]},
        {"turn": 3, "request": history + [{"role": "user", "content": "u3"}], "prompt_token_ids": [1, 2, 3, 6, 7, 8],
         "token_ids": [9], "reply": "c"},
    ]
    path = _written(tmp_path, turns)
    assert read_turns(path) == turns
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    (stored,) = lines[1]["outlived_calls"]
    assert "request" not in stored and stored["request_delta"]["keep"] == 2, stored
    assert "prompt_token_ids" not in stored and stored["prompt_delta"] == {"keep": 3, "new": [4]}, stored
    assert lines[2]["prompt_delta"] == {"keep": 5, "new": [8]}  # from turn 2's own prompt + reply
    assert "prompt_token_ids" in shown_turn(lines[1])["outlived_calls"][0]  # the report's viewer shows it


def test_turns_are_read_in_the_trainers_thread_not_the_engines(tmp_path, schedulers, monkeypatch):
    """The engine calls the scheduler back on its dispatch thread: a trajectory is parsed
    only by get_batch, in the caller's thread."""
    import threading

    from parallel_rollout.rl import groups

    readers = []
    real = groups.read_turns

    def read_turns(path):
        readers.append(threading.current_thread())
        return real(path)

    monkeypatch.setattr(groups, "read_turns", read_turns)
    train = _small(tmp_path, schedulers, turns=3, size=1000)
    batch = train.get_batch(batch_size=4, step=0)
    assert all(len(t.turns) == 3 for t in batch)
    assert len(readers) == 4 and set(readers) == {threading.current_thread()}


def test_the_report_shows_each_turn_as_what_it_added(tmp_path, schedulers):
    """``parallel-rollout report`` on a scheduler's run folder: the turn viewer gets each
    stored delta as a ``request`` / ``prompt_token_ids`` of what the turn added after a note
    of what it kept (images as their sha256 references), never the storage's delta fields."""
    import hashlib
    import re

    from click.testing import CliRunner

    from parallel_rollout.cli import main

    turns = 5  # the fourth and fifth drop an older screenshot: a message changes, less is kept
    train = _small(tmp_path, schedulers, turns=turns, size=3000)
    batch = train.get_batch(batch_size=2, step=0)
    result = CliRunner().invoke(main, ["report", str(train.run_dir)])
    assert result.exit_code == 0, result.output
    html = (train.run_dir / "report.html").read_text()
    data = json.loads(re.search(r'<script type="application/json" id="report-data">(.*?)</script>', html, re.S).group(1))

    def referenced(message):  # a message with its inline images as the report holds them
        if not isinstance(message.get("content"), list):
            return message
        return {**message, "content": [
            {**part, "image_url": {"url": "sha256:" + hashlib.sha256(part["image_url"]["url"].encode()).hexdigest()}}
            if part["type"] == "image_url" else part for part in message["content"]]}

    for trajectory in batch:
        shown = data["trajectories"][trajectory.record["trajectory"]]["turns"]
        assert len(shown) == turns
        previous, previous_ids, kept = [], [], []
        for turn, view in zip(trajectory.turns, shown):
            assert not {"request_delta", "prompt_delta"} & set(view), view.keys()
            request = [referenced(m) for m in turn["request"]]
            keep = 0
            if isinstance(view["request"][0], str):
                keep = int(re.fullmatch(r"… the first (\d+) messages of the previous turn's request, then:",
                                        view["request"][0]).group(1))
            assert previous[:keep] + view["request"][1 if keep else 0:] == request
            kept.append(keep)
            ids = view["prompt_token_ids"]
            keep_ids = int(re.search(r"the first (\d+) ids", ids[0]).group(1)) if isinstance(ids[0], str) else 0
            assert previous_ids[:keep_ids] + ids[1 if keep_ids else 0:] == turn["prompt_token_ids"]
            previous, previous_ids = request, turn["prompt_token_ids"] + turn["token_ids"]
        assert kept == [0, 2, 4, 1, 3], kept  # turns 4 and 5 changed an older screenshot's message
        assert shown[1]["prompt_token_ids"] == ["… the first 6 ids of the previous turn's prompt + reply, then:", 4, 5]


def test_turns_that_are_not_on_this_host_make_get_batch_raise(tmp_path, schedulers):
    """A record whose trajectory file this host does not have (a node that wrote to its own
    disk, on a backend that did not carry the turns back): get_batch raises naming the file
    and the node, never a trajectory with its reward and no turns."""
    from parallel_rollout.errors import RolloutError
    from parallel_rollout.trajectories import images_path

    train = _small(tmp_path, schedulers, turns=3, size=1000)
    on_final, gone = train._on_final, []

    def elsewhere(record):  # the engine's callback, as if the attempt had run on another host
        path = train.run_dir / record["trajectory"]
        path.unlink()
        images_path(path).unlink()
        gone.append(path)
        on_final({**record, "node": "a1b2c3"})

    train._on_final = elsewhere
    with pytest.raises(RolloutError, match=r"its 3 turns are in .*attempt-0\.jsonl, which is not on this host "
                                           r"\(it ran on node a1b2c3\)"):
        train.get_batch(batch_size=2, step=0)
    assert len(gone) == 2 and train.stats()["groups_started"] == 1


def test_a_ready_groups_lost_file_neither_loses_its_group_nor_the_batchs_others(tmp_path, schedulers):
    """A trajectory file deleted (or its disk unmounted) before get_batch reads it: the call
    raises naming the file, and the batch's groups were lost, in neither the trainer's hands
    nor state_dict(). Now the group whose turns are gone is started again (same task, seed
    and episode; ``dropped_unreadable``) and the others go out with the next batch; a
    checkpoint taken after the error lists them all."""
    from llm_server import LLMServer
    from parallel_rollout.errors import RolloutError
    from rl_support import TINY, lake_set, rl_config

    server = LLMServer(policy=lambda body: {"reply": "<answer>Right</answer>"}).start()
    try:
        train = schedulers(rl_config(tmp_path, server, num_rollouts=1, envs_per_worker=4),
                           EnvManagerConfig(group_size=2, num_env_groups=2, tags=["lakes"],
                                            task_sets=lake_set(tmp_path, 2, desc=TINY)))
        on_final, gone = train._on_final, []

        def deleted(record):  # the first member of group 0 to end: its file gone before get_batch reads it
            if "/g0/" in record["key"] and not gone:
                gone.append(train.run_dir / record["trajectory"])
                gone[0].unlink()
            on_final(record)

        train._on_final = deleted
        with pytest.raises(RolloutError, match=r"attempt-0\.jsonl"):
            train.get_batch(batch_size=4, step=0)
        assert gone
        drawn = [(u["task_id"], u["seed"], u["episode"]) for u in train.state_dict()["unreturned"]]
        assert sorted(task for task, _, _ in drawn) == ["lakes0", "lakes1"], drawn  # a checkpoint now has both
        train._on_final = on_final
        batch = train.get_batch(batch_size=4, step=0)
        assert sorted({(t.task_id, t.seed, t.episode_id) for t in batch}) == sorted(drawn)
        assert all(len(t.turns) == t.record["turns"] > 0 for t in batch)
        assert train.stats()["dropped_unreadable"] == 1 and not train.state_dict()["unreturned"]
    finally:
        server.stop()
