"""A trainer's inference fleet under the RolloutScheduler: each scheduler's sampling visible
in its requests (validation at temperature 0 beside training at 1 on one engine), and two
servers with session affinity, one stopped mid-batch, one restarted serving another model."""

from __future__ import annotations

import itertools
import threading
import time
from collections import defaultdict

import pytest

from held_replies import wait_until
from llm_server import LLMServer, lake_tool_solver
from parallel_rollout.errors import ConfigError
from parallel_rollout.rl import EnvManagerConfig
from restarting_server import RESTART_FAILURES, Restarting
from rl_support import lake_set, rl_config
from table_policy import TablePolicy


def test_each_scheduler_sends_its_own_temperature(tmp_path, table, schedulers):
    _, server = table
    tasks = lake_set(tmp_path, count=4, max_steps=4)
    train = schedulers(rl_config(tmp_path, server, temperature=0.7),
                       EnvManagerConfig(num_env_groups=2, group_size=2, tags=["lakes"], task_sets=tasks),
                       name="train", sampling={"temperature": 1.0, "top_p": 0.95})
    val = train.sibling(EnvManagerConfig(num_env_groups=2, group_size=1, tags=["lakes"], task_sets=tasks),
                        name="val", sampling={"temperature": 0})
    inherits = train.sibling(EnvManagerConfig(num_env_groups=1, group_size=1, tags=["lakes"], task_sets=tasks),
                             name="again")
    train.get_batch(batch_size=4, step=0)
    val.get_batch(batch_size=-1, step=0)
    inherits.get_batch(batch_size=1, step=0)
    val.close()
    inherits.close()
    seen = defaultdict(set)
    for request in server.requests:
        scheduler = request["headers"]["x-session-id"].split(":", 1)[0]
        body = request["body"]
        seen[scheduler].add((body.get("temperature"), body.get("top_p")))
    assert seen == {"train": {(1.0, 0.95)}, "val": {(0, None)}, "again": {(1.0, 0.95)}}


def test_bad_sampling_is_refused_naming_the_field(tmp_path, table, schedulers):
    _, server = table
    with pytest.raises(ConfigError, match="temperature must be a number between 0 and 2"):
        schedulers(rl_config(tmp_path, server), EnvManagerConfig(tags=["lakes"], task_sets=lake_set(tmp_path)),
                   sampling={"temperature": 5})
    with pytest.raises(ConfigError, match="cannot set messages"):
        schedulers(rl_config(tmp_path, server), EnvManagerConfig(tags=["lakes"], task_sets=lake_set(tmp_path)),
                   sampling={"messages": []})


def test_two_servers_keep_affinity_and_a_stopped_one_moves_its_trajectories(tmp_path, schedulers):
    policy = TablePolicy(seed=1)
    a, b = LLMServer(policy=policy).start(), LLMServer(policy=policy).start()
    b.models.append("table")  # both serve the run's model (rl_config lists it on a)
    answered = {"b": 0}
    stopped = threading.Event()

    def b_policy(body):
        answered["b"] += 1
        if answered["b"] == 40:  # b dies in the middle of the second batch
            threading.Thread(target=lambda: (b.stop(), stopped.set())).start()
        return policy(body)

    b.policy = b_policy
    try:
        scheduler = schedulers(rl_config(tmp_path, a, base_url=[a.url, b.url], server_cooldown=600.0),
                               EnvManagerConfig(num_env_groups=4, group_size=2, tags=["lakes"],
                                                task_sets=lake_set(tmp_path, count=8, max_steps=6)))
        first = scheduler.get_batch(batch_size=8, step=0)
        on = {server.url: {r["headers"]["x-session-id"] for r in server.requests} for server in (a, b)}
        # affinity and balance before any failure: no session on both, both servers used
        assert not on[a.url] & on[b.url]
        assert len(on[a.url]) >= 2 and len(on[b.url]) >= 2, {u: len(s) for u, s in on.items()}
        batches = [scheduler.get_batch(batch_size=8, step=step) for step in range(1, 6)]
    finally:
        a.stop()
        b.stop()
    assert stopped.is_set()
    assert len(first) == 8 and all(len(batch) == 8 for batch in batches)
    records = [r for batch in [first, *batches] for r in batch]
    moves = [m for t in records for m in (t.record.get("usage") or {}).get("server_moves", [])]
    assert moves and all(m["from"] == b.url and m["to"] == a.url for m in moves)
    # after the stop every request went to a
    late = [r for r in a.requests if r["time"] > b.requests[-1]["time"]]
    assert late


def test_tool_calls_under_the_policy_gate_come_through_the_stream(tmp_path, schedulers):
    """Under a scheduler every request streams: a reply's tool calls arrive as deltas (the
    name, then the arguments in pieces) and still become the moves that solve the lakes."""
    server = LLMServer(policy=lake_tool_solver).start()
    try:
        train = schedulers(rl_config(tmp_path, server, tool_calls=True, num_rollouts=1),
                           EnvManagerConfig(group_size=2, tags=["lakes"], task_sets=lake_set(tmp_path, count=2)))
        batch = train.get_batch(batch_size=4, step=0)
        assert all(t.success for t in batch), [(t.status, t.reward) for t in batch]
        calls = [turn["tool_calls"] for t in batch for turn in t.turns]
        assert calls and all(c and c[0]["function"]["name"] == "move" for c in calls)
        assert all(r["body"].get("stream") for r in server.requests)  # the gate's streamed path
    finally:
        server.stop()


def test_a_server_that_refuses_the_model_is_left_out_and_every_one_refusing_is_a_config_error(tmp_path, schedulers):
    """A fleet's server that answers 404 for the model (restarted with another) is taken out:
    the batch comes from the other. When every server refuses, get_batch raises a ConfigError
    at the first member that failed so, as a run stops at it (exit 2): it spent
    max_failed_groups groups, each member's retries, before a RolloutError. The members that
    fail so after the raise (those running then) are not the next call's: once the servers
    serve the model it gets its batch; it raised the same ConfigError at once."""
    from parallel_rollout.errors import ConfigError

    asked = itertools.count()

    def refuses(body):  # some answer late: members that fail after the first one raised
        return {"sleep": 0.3 * (next(asked) % 2), "status": 404, "message": "The model `table` does not exist."}

    good, wrong = LLMServer(policy=TablePolicy(seed=1)).start(), LLMServer(policy=refuses).start()
    wrong.models.append("table")  # the check before the first batch found it serving: restarted since
    try:
        scheduler = schedulers(rl_config(tmp_path, good, base_url=[wrong.url, good.url], num_rollouts=1,
                                         envs_per_worker=4, max_retries=0),
                               EnvManagerConfig(num_env_groups=4, group_size=2, tags=["lakes"],
                                                task_sets=lake_set(tmp_path, count=4, max_steps=2)))
        batch = scheduler.get_batch(batch_size=4, step=0)
        moves = [m for t in batch for m in (t.record.get("usage") or {}).get("server_moves", [])]
        assert len(batch) == 4 and moves and all(m["from"] == wrong.url and m["refused"] for m in moves)
        good.policy = refuses
        before = len(good.requests) + len(wrong.requests)
        with pytest.raises(ConfigError, match="every server of the fleet refuses"):
            scheduler.get_batch(batch_size=4, step=1)
        assert len(good.requests) + len(wrong.requests) - before <= 16  # the first members' turns, not 10 groups'
        deadline = time.monotonic() + 60
        while scheduler.stats()["groups_running"] and time.monotonic() < deadline:
            time.sleep(0.05)  # the members running at the raise fail too, refused
        assert not scheduler.stats()["groups_running"]
        good.policy = wrong.policy = TablePolicy(seed=2)  # the servers serve the model again
        assert len(scheduler.get_batch(batch_size=4, step=2)) == 4
    finally:
        good.stop()
        wrong.stop()


def test_a_server_down_at_the_check_that_comes_up_with_another_model_gets_no_trajectory(tmp_path, schedulers):
    """A server that does not answer the check before the first batch stays in the rotation;
    up later serving another model (SGLang answers any model name), each worker asks its
    GET /models at its first visit and leaves it out: no chat POST reaches it."""
    import socket

    with socket.socket() as free:  # nothing listens there at the check
        free.bind(("127.0.0.1", 0))
        port = free.getsockname()[1]
    late: list[LLMServer] = []
    table = TablePolicy(seed=1)

    def first_reply_starts_the_late_server(body):
        if not late:  # past the check: the late server comes up, listing only 'test-model'
            late.append(LLMServer(policy=TablePolicy(seed=2), port=port).start())
        return table(body)

    good = LLMServer(policy=first_reply_starts_the_late_server).start()
    try:
        scheduler = schedulers(rl_config(tmp_path, good, base_url=[f"http://127.0.0.1:{port}/v1", good.url],
                                         envs_per_worker=2, server_cooldown=0.0),
                               EnvManagerConfig(num_env_groups=4, group_size=2, tags=["lakes"],
                                                task_sets=lake_set(tmp_path, count=4, max_steps=4)))
        batches = [scheduler.get_batch(batch_size=8, step=step) for step in range(2)]
    finally:
        good.stop()
        for server in late:
            server.stop()
    assert late and [r["path"] for r in late[0].requests if r["path"].endswith("completions")] == []
    assert late[0].model_listings >= 1
    assert {t.record["usage"]["server"] for batch in batches for t in batch} == {good.url}
    assert all(len(batch) == 8 for batch in batches)


def test_a_server_whose_models_lack_the_runs_model_gets_no_trajectory(tmp_path, schedulers, caplog):
    """The check before the first batch finds a server whose GET /models lists another model
    (SGLang answers any model name in a POST, so only the check tells): every worker leaves it
    out, for the engine's life, not for a cool-down (server_cooldown=0 here): no chat POST
    reaches it, in the first batch or the next, and each trajectory ran on the other server.
    The warning says so."""
    good, other = LLMServer(policy=TablePolicy(seed=1)).start(), LLMServer(policy=TablePolicy(seed=2)).start()
    try:  # other lists the test server's models, not 'table'; rl_config lists the run's model 'table' on good alone
        scheduler = schedulers(rl_config(tmp_path, good, base_url=[other.url, good.url], envs_per_worker=2,
                                         server_cooldown=0.0),
                               EnvManagerConfig(num_env_groups=4, group_size=2, tags=["lakes"],
                                                task_sets=lake_set(tmp_path, count=4, max_steps=4)))
        with caplog.at_level("WARNING"):
            batches = [scheduler.get_batch(batch_size=8, step=step) for step in range(2)]
    finally:
        good.stop()
        other.stop()
    assert "table" not in other.models and other.model_listings >= 1
    assert [r["path"] for r in other.requests if r["path"].endswith("completions")] == []
    assert {t.record["usage"]["server"] for batch in batches for t in batch} == {good.url}
    assert all(len(batch) == 8 for batch in batches)
    said = [r.getMessage() for r in caplog.records if other.url in r.getMessage()]
    assert said and "for the whole run: it is not asked again" in said[0], said


def test_a_server_restarted_with_another_model_mid_batch_gets_no_more_trajectories(tmp_path, schedulers, caplog):
    """A server that passed the check before the first batch restarts mid-batch serving
    another model (SGLang answers any model name): the stream its restart hung up on makes it
    unheard again, and the worker (one process, four env loops) asks its GET /models before
    its next request and leaves it out: no completion request reaches the restarted server,
    and every batch is whole (the members it failed went on at the other), one warning naming
    the URL, the model it lists and the run's. Before, its trajectories came from the other model."""
    wrong = Restarting(RESTART_FAILURES["hang-up"], at=12, models=("test-model",), policy=TablePolicy(seed=2),
                       served="table")
    good = LLMServer(policy=wrong.holding(TablePolicy(seed=1))).start()
    try:
        scheduler = schedulers(rl_config(tmp_path, good, base_url=[wrong.url, good.url], server_cooldown=0.0,
                                         num_rollouts=1),
                               EnvManagerConfig(num_env_groups=4, group_size=2, tags=["lakes"],
                                                task_sets=lake_set(tmp_path, count=4, max_steps=6)))
        with caplog.at_level("WARNING"):
            batches = [scheduler.get_batch(batch_size=8, step=step) for step in range(3)]
    finally:
        good.stop()
        wrong.stop()
    assert wrong.restarted.is_set() and wrong.sampled() == [] and wrong.new.model_listings >= 1
    assert all(len(batch) == 8 for batch in batches)
    said = [r.getMessage() for r in caplog.records if wrong.url in r.getMessage() and "it lists" in r.getMessage()]
    assert len(said) == 1 and "does not list the model 'table'" in said[0] and "it lists test-model" in said[0], said


def test_a_fleet_whose_every_server_restarted_with_another_model_is_a_config_error(tmp_path, schedulers):
    """Both servers restart serving another model: get_batch raises the ConfigError of a fleet
    that refuses the model, as it does when they answer 404, instead of a batch the other
    model answered or a wait."""
    first, second = (Restarting(RESTART_FAILURES["hang-up"], at=3, models=("test-model",),
                                policy=TablePolicy(seed=seed), served="table") for seed in (1, 2))
    try:
        scheduler = schedulers(rl_config(tmp_path, first.old, base_url=[first.url, second.url], server_cooldown=0.0,
                                         num_rollouts=1),
                               EnvManagerConfig(num_env_groups=4, group_size=2, tags=["lakes"],
                                                task_sets=lake_set(tmp_path, count=4, max_steps=6)))
        with pytest.raises(ConfigError, match="every server of the fleet refuses.*it lists test-model"):
            for step in range(3):
                scheduler.get_batch(batch_size=8, step=step)
    finally:
        first.stop()
        second.stop()
    assert first.restarted.is_set() and second.restarted.is_set()
    assert first.sampled() == [] and second.sampled() == []


def test_a_server_restarted_with_another_model_between_batches_gets_no_trajectory(tmp_path, schedulers):
    """A server restarts serving another model while the scheduler is idle (the trainer's step
    between two batches): no request of any worker process met the restart, so none failed.
    Each of the two worker processes has had no answer from it for longer than
    RECHECK_IDLE_S, so it asks its GET /models before its next request and leaves it out: the
    next batches come whole from the other server. Before, they came from the other model."""
    from parallel_rollout.agents.servers import RECHECK_IDLE_S

    wrong = Restarting(RESTART_FAILURES["hang-up"], at=None, models=("test-model",), policy=TablePolicy(seed=2),
                       served="table")
    good = LLMServer(policy=TablePolicy(seed=1)).start()
    try:
        scheduler = schedulers(rl_config(tmp_path, good, base_url=[wrong.url, good.url], server_cooldown=0.0),
                               EnvManagerConfig(num_env_groups=4, group_size=2, tags=["lakes"],
                                                task_sets=lake_set(tmp_path, count=4, max_steps=6)))
        first = scheduler.get_batch(batch_size=8, step=0)
        deadline = time.monotonic() + 60
        while scheduler.stats()["groups_running"] and time.monotonic() < deadline:
            time.sleep(0.05)  # the groups started after the batch end too: the scheduler is idle
        assert not scheduler.stats()["groups_running"] and wrong.old.requests
        wrong.restart()
        assert wrong.restarted.wait(10)
        # a restart takes longer than RECHECK_IDLE_S (the new server loads its model): the time
        # it took since the old server's last request, the premise under test, not a wait for an event
        time.sleep(max(0.0, wrong.old.requests[-1]["time"] + RECHECK_IDLE_S + 0.5 - time.monotonic()))
        batches = [scheduler.get_batch(batch_size=8, step=step) for step in (1, 2)]
    finally:
        good.stop()
        wrong.stop()
    assert wrong.sampled() == [] and wrong.new.model_listings >= 2  # each worker process asked it
    assert len(first) == 8 and all(len(batch) == 8 for batch in batches)
    assert {t.record["usage"]["server"] for batch in batches for t in batch} == {good.url}


def test_a_request_held_by_a_weight_update_is_not_sent_to_a_server_restarted_meanwhile():
    """A request waits at the policy gate while the weights update; its server restarts
    meanwhile serving another model (the update outlasts RECHECK_IDLE_S). Past the gate the
    request asks the server's GET /models first and moves on to the other server: the
    restarted one gets no completion request. Before, the ask came before the wait, so the
    request went to the other model."""
    from parallel_rollout.agents.openai_agent import OpenAIAgent
    from parallel_rollout.agents.servers import RECHECK_IDLE_S
    from parallel_rollout.config import RunConfig
    from parallel_rollout.policy_gate import PolicyGate
    from parallel_rollout.tasks import Task

    observation = {"grid": "SFFF\nFHFH\nFFFH\nHFFG", "position": [0, 0], "steps": 0, "max_steps": 16}
    wrong = Restarting(RESTART_FAILURES["hang-up"], at=None, served="m")
    good = LLMServer(policy=lambda body: {"reply": "<answer>Right</answer>"}).start()
    good.models = ["m"]
    gate = PolicyGate(version=6)
    try:
        agent = OpenAIAgent(RunConfig(mode="gym", agent="openai", base_url=[wrong.url, good.url], model="m",
                                      policy_gate=gate.path, policy_gate_key=gate.key, max_retries=2))
        agent.reset(Task(id="lake", mode="gym", payload={"size": 4}))
        agent.act(observation)  # the trajectory's first turn, on the first server
        gate.suspend()  # a weight update
        done = threading.Event()
        threading.Thread(target=lambda: (agent.act(observation), done.set()), daemon=True).start()
        wait_until(lambda: gate.waiting == 1)
        wrong.restart()
        assert wrong.restarted.wait(10)
        # the update (and the restart) outlast RECHECK_IDLE_S since the server's last answer:
        # the premise under test, not a wait for an event
        time.sleep(max(0.0, wrong.old.requests[-1]["time"] + RECHECK_IDLE_S + 0.5 - time.monotonic()))
        gate.resume(7)
        assert done.wait(30)
    finally:
        gate.close()
        good.stop()
        wrong.stop()
    assert [r["path"] for r in wrong.old.requests] == ["/v1/chat/completions"] and wrong.sampled() == []
    assert len(good.requests) == 1 and wrong.new.model_listings == 1
    (move,) = agent.model.usage()["server_moves"]
    assert (move["from"], move["to"], move.get("left_out")) == (wrong.url, good.url, True), move
    assert "it lists other-model" in move["reason"]
