"""Weight updates in flight, against the test server streaming tokens at a fixed rate:
suspend(abort=True) ends every model request at the server within a second; after resume the
turn is regenerated, or continued from its partial tokens with each token's version; an abort
is never a retry; max_version_lag drops a group holding tokens of an older policy; a cancelled
member's request is aborted without killing its worker."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import pytest

from llm_server import llm_server  # noqa: F401 - fixture
from parallel_rollout.agents.openai_agent import OpenAIAgent
from parallel_rollout.config import RunConfig
from parallel_rollout.errors import AttemptCancelled, ConfigError
from parallel_rollout.policy_gate import PolicyGate
from parallel_rollout.results import read_records
from parallel_rollout.rl import EnvManagerConfig, SchedulerClosed
from parallel_rollout.rl.segments import build_segments
from parallel_rollout.tasks import Task
from held_replies import IDS, PROMPT, REPLY, continuing, each_streamed, held, wait_until
from rl_support import TINY, lake_set, rl_config
from table_policy import TablePolicy

OBSERVATION = {"grid": "PFFF\nFHFH\nFFFH\nHFFG", "position": [0, 0], "steps": 0, "max_steps": 16}
def _agent(url: str, gate: PolicyGate, **changes) -> OpenAIAgent:
    config = RunConfig(mode="gym", agent="openai", base_url=url, model="m", policy_gate=gate.path, policy_gate_key=gate.key,
                       max_retries=2, **changes)
    agent = OpenAIAgent(config)
    agent.model.backoff_base_s = 0.01
    agent.reset(Task(id="lake", mode="gym", payload={"size": 4}))
    return agent


@pytest.fixture
def gate():
    gate = PolicyGate(version=6)
    yield gate
    gate.close()


@pytest.mark.parametrize("partial", [False, True], ids=["regenerate", "partial"])
def test_suspend_aborts_eight_turns_at_the_server(gate, llm_server, partial):
    policy, asked = held(8)
    server = llm_server(policy=policy, token_rate=40)  # after the update, 76 tokens: about 2 s a reply
    agents = [_agent(server.url, gate, partial_rollout=partial) for _ in range(8)]
    results: list = []
    threads = [threading.Thread(target=lambda a=a: results.append(a.act(OBSERVATION)), daemon=True)
               for a in agents]
    for thread in threads:
        thread.start()
    wait_until(lambda: len(server.requests) == 8, timeout=60)
    asked.set()
    wait_until(lambda: gate.in_flight == 8 and each_streamed(server, 8))
    started = time.monotonic()
    gate.suspend(abort=True)
    assert time.monotonic() - started < 1.0
    wait_until(lambda: len(server.aborts) == 8, timeout=1.0)
    assert max(a["time"] for a in server.aborts) - started < 1.0
    time.sleep(0.3)
    assert len(server.requests) == 8 and not results, "a request started while suspended"
    gate.resume(7)
    for thread in threads:
        thread.join(10)
    assert results == [REPLY] * 8
    for agent in agents:
        turn = agent.turn_record()
        assert turn["reply"] == REPLY and turn["token_ids"] == IDS and turn["policy_version"] == 7
        assert turn["redone"] == 1 and agent.usage()["retries"] == 0
        assert turn["prompt_token_ids"] == PROMPT
        (segment,) = build_segments([turn])
        sampled = [v for v, m in zip(segment.versions, segment.loss_mask) if m]
        if partial:
            assert turn["partial"] is True
            assert sampled[0] == 6 and sampled[-1] == 7 and sampled == sorted(sampled)
            assert 1 <= sampled.count(6) < len(IDS)
        else:
            assert "partial" not in turn and sampled == [7] * len(IDS)
    continued = [r["body"] for r in server.requests[8:]]
    assert all(bool(b.get("continue_final_message")) == partial for b in continued)
    assert all(b["stream"] is True and b["stream_options"] == {"include_usage": True} for b in continued)


# regenerating is the gate-level test's too (test_suspend_aborts_eight_turns_at_the_server):
# through a scheduler, the default run keeps the partial one
@pytest.mark.parametrize("partial", [pytest.param(False, marks=pytest.mark.slow), True],
                         ids=["regenerate", "partial"])
def test_a_scheduler_aborts_eight_env_loops_mid_turn(tmp_path, llm_server, schedulers, partial):
    """The same through a RolloutScheduler: 2 workers x 4 env loops, each mid-turn;
    suspend(abort=True) returns within a second and the server logs 8 aborts within a second;
    nothing starts while suspended; after resume(7) every turn completes (regenerated at 7,
    or continued: versions [6…, 7…]) and no attempt spent a retry."""
    policy, asked = held(8)
    server = llm_server(policy=policy, token_rate=20)  # after the update, 76 tokens: about 4 s a reply
    train = schedulers(rl_config(tmp_path, server, num_rollouts=2, envs_per_worker=4, partial_rollout=partial,
                                 max_retries=1),
                       EnvManagerConfig(num_env_groups=2, group_size=4, tags=["tiny"],
                                        task_sets=lake_set(tmp_path, name="tiny", desc=TINY, max_steps=2)))
    train.resume(6)  # the policy the first turns are sampled by
    got: list = []
    thread = threading.Thread(target=lambda: got.append(train.get_batch(batch_size=8, step=0)), daemon=True)
    thread.start()
    wait_until(lambda: len(server.requests) == 8, timeout=120)  # every loop is in its first model request
    asked.set()
    wait_until(lambda: each_streamed(server, 8))
    assert not server.aborts
    started = time.monotonic()
    train.suspend(abort=True)
    assert time.monotonic() - started < 1.0
    wait_until(lambda: len(server.aborts) == 8, timeout=1.0)
    assert max(a["time"] for a in server.aborts) - started < 1.0
    assert sorted(a["request"] for a in server.aborts) == list(range(8)) and all(a["tokens"] for a in server.aborts)
    time.sleep(0.3)
    assert len(server.requests) == 8, "a model request started while suspended"
    train.resume(7)
    thread.join(120)
    (batch,) = got
    assert len(batch) == 8 and all(t.success for t in batch), [(t.status, t.record.get("failure")) for t in batch]
    for trajectory in batch:
        first, second = trajectory.turns
        assert first["redone"] == 1 and first["policy_version"] == 7 and first["token_ids"] == IDS
        assert second["policy_version"] == 7 and "redone" not in second
        assert trajectory.record["usage"]["retries"] == 0
        sampled = [v for v, m in zip(trajectory.segments()[0].versions, trajectory.segments()[0].loss_mask) if m]
        if partial:
            assert first["partial"] is True
            assert sampled[0] == 6 and sampled == sorted(sampled) and sampled[-1] == 7, sampled
        else:
            assert "partial" not in first and set(sampled) == {7}
    continued = [r["body"] for r in server.requests[8:16]]
    assert all(bool(b.get("continue_final_message")) == partial for b in continued)


def test_an_abort_is_never_a_retry(gate, llm_server):
    server = llm_server(policy=continuing, token_rate=100)
    agent = _agent(server.url, gate)  # max_retries=2
    results: list = []
    thread = threading.Thread(target=lambda: results.append(agent.act(OBSERVATION)), daemon=True)
    thread.start()
    for version in range(7, 12):  # five aborts in a row
        streamed = server.tokens_streamed
        wait_until(lambda: gate.in_flight == 1 and server.tokens_streamed > streamed + 2)
        gate.suspend(abort=True)
        gate.resume(version)
    thread.join(10)
    assert results == [REPLY]
    turn = agent.turn_record()
    assert turn["redone"] == 5 and turn["policy_version"] == 11 and turn["token_ids"] == IDS
    assert agent.usage()["retries"] == 0 and agent.usage()["requests"] == 6
    assert len(server.aborts) == 5


def test_an_abort_url_is_told_the_aborted_streams_id(gate, llm_server):
    told: list = []
    server = llm_server(policy=continuing, token_rate=40, routes={"/v1/abort": lambda body: told.append(body) or {}})
    agent = _agent(server.url, gate, abort_url=server.url + "/abort")
    thread = threading.Thread(target=lambda: agent.act(OBSERVATION), daemon=True)
    thread.start()
    wait_until(lambda: gate.in_flight == 1 and server.tokens_streamed >= 2)
    gate.suspend(abort=True)
    wait_until(lambda: told, timeout=2.0)
    assert told == [{"request_id": "cmpl-0", "rid": "cmpl-0"}]  # "rid": SGLang's /abort_request
    gate.resume(7)
    thread.join(10)
    assert agent.turn_record()["redone"] == 1 and len(told) == 1


def test_an_aborted_request_ends_at_the_gate_only_once_its_abort_url_was_told(gate, llm_server):
    """The POST runs in a thread of its own: a worker stopped as soon as the gate heard the
    request end (a scheduler's close()) killed it unsent, and the server decoded on."""
    told: list = []

    def slow_abort(body):
        time.sleep(0.5)  # the abort server is slow to answer: told only when this returns
        told.append(body)
        return {}

    server = llm_server(policy=continuing, token_rate=40, routes={"/abort_request": slow_abort})
    agent = _agent(server.url, gate, abort_url="/abort_request")
    thread = threading.Thread(target=lambda: agent.act(OBSERVATION), daemon=True)
    thread.start()
    wait_until(lambda: gate.in_flight == 1 and server.tokens_streamed >= 2)
    gate.suspend(abort=True)
    assert gate.wait_aborted(5.0)
    assert told == [{"request_id": "cmpl-0", "rid": "cmpl-0"}]  # delivered before the end was heard
    gate.resume(7)
    thread.join(10)


def test_an_abort_url_path_is_on_each_requests_own_server(gate, llm_server):
    """Several servers, abort_url="/abort_request": each is told of the streams it serves."""
    told: dict = {0: [], 1: []}
    servers = [llm_server(policy=continuing, token_rate=40,
                          routes={"/abort_request": lambda body, k=k: told[k].append(body) or {}}) for k in (0, 1)]
    for server in servers:
        server.models = ["m"]  # the agents' model: a fleet's server is asked its /models first
    agents = [_agent([s.url for s in servers], gate, abort_url="/abort_request") for _ in range(2)]
    threads = [threading.Thread(target=lambda a=a: a.act(OBSERVATION), daemon=True) for a in agents]
    for thread in threads:
        thread.start()
    wait_until(lambda: gate.in_flight == 2 and all(s.tokens_streamed >= 2 for s in servers))
    gate.suspend(abort=True)
    wait_until(lambda: told[0] and told[1], timeout=2.0)
    assert told == {0: [{"request_id": "cmpl-0", "rid": "cmpl-0"}], 1: [{"request_id": "cmpl-0", "rid": "cmpl-0"}]}
    gate.resume(7)
    for thread in threads:
        thread.join(10)


@pytest.mark.parametrize("url", ["localhost:8000/abort_request", "abort_request"])
def test_an_abort_url_that_is_neither_a_url_nor_a_path_is_refused(url):
    with pytest.raises(ConfigError, match="abort_url"):
        RunConfig(mode="gym", agent="openai", abort_url=url)


def test_a_cancel_ends_a_request_waiting_at_a_suspended_gate(gate, llm_server):
    """A member cancelled while its request waits for a weight update (a spare of a group
    that completed meanwhile, a sibling closed) ends at once, not at resume, and sends nothing."""
    server = llm_server(policy=continuing)
    agent = _agent(server.url, gate)
    agent.act(OBSERVATION)  # connected to the gate, one turn done
    gate.suspend()
    raised: list = []

    def act():
        try:
            agent.act(OBSERVATION)
        except AttemptCancelled as exc:
            raised.append(exc)

    thread = threading.Thread(target=act, daemon=True)
    thread.start()
    wait_until(lambda: gate.waiting == 1)  # parked at the gate
    assert thread.is_alive() and len(server.requests) == 1
    started = time.monotonic()
    agent.abort()
    thread.join(5)
    assert raised and time.monotonic() - started < 1.0, "the cancel waited for resume"
    gate.resume(7)
    time.sleep(0.2)
    assert len(server.requests) == 1 and gate.in_flight == 0


def test_a_request_queued_at_the_server_is_aborted_before_its_reply_begins(gate, llm_server):
    """No response yet (the server queues the request): suspend(abort=True) still ends it
    at the server within a second, and the turn is asked again after resume; a cancel too."""
    queued = {"queue_s": 30, **continuing({})}
    server = llm_server(script=[queued, queued], policy=continuing)
    agent = _agent(server.url, gate)
    outcome: list = []

    def act():
        try:
            outcome.append(agent.act(OBSERVATION))
        except AttemptCancelled as exc:
            outcome.append(exc)

    thread = threading.Thread(target=act, daemon=True)
    thread.start()
    wait_until(lambda: len(server.requests) == 1)
    time.sleep(0.2)
    started = time.monotonic()
    gate.suspend(abort=True)
    wait_until(lambda: len(server.aborts) == 1, timeout=1.0)
    assert server.aborts[0]["tokens"] == 0 and gate.wait_aborted(1.0)
    assert time.monotonic() - started < 1.0
    gate.resume(7)
    wait_until(lambda: len(server.requests) == 2)  # asked again, queued again: now the episode is cancelled
    time.sleep(0.2)
    started = time.monotonic()
    agent.abort()
    thread.join(5)
    assert len(outcome) == 1 and isinstance(outcome[0], AttemptCancelled), outcome
    assert time.monotonic() - started < 1.0, "the cancel waited for the server's queue"
    wait_until(lambda: len(server.aborts) == 2, timeout=1.0)
    assert agent.turn_record()["redone"] == 2 and agent.usage()["retries"] == 0


def test_an_abort_url_is_told_of_a_request_aborted_in_the_servers_queue(tmp_path, llm_server, schedulers):
    """suspend(abort=True) while a member's request waits in the server's queue (no chunk yet,
    so no stream's id): the abort_url is told the id the request carries, as it is told a
    streaming one's. Only its connection was closed, and a server that keeps working on a
    request whose client hung up (what abort_url is for) was never told of it."""
    told: list = []
    table = TablePolicy(seed=0)
    held: list = []

    def first_queued(body):
        if not held:  # the first model request: 30 s in the server's queue
            held.append(body)
            return {**table(body), "queue_s": 30}
        return table(body)

    server = llm_server(policy=first_queued, routes={"/abort_request": lambda body: told.append(body) or {}})
    train = schedulers(rl_config(tmp_path, server, num_rollouts=1, envs_per_worker=1, abort_url="/abort_request"),
                       EnvManagerConfig(num_env_groups=1, group_size=1, tags=["tiny"],
                                        task_sets=lake_set(tmp_path, name="tiny", desc=TINY, max_steps=2)))
    batch: list = []
    thread = threading.Thread(target=lambda: batch.extend(train.get_batch(batch_size=1, step=0)), daemon=True)
    thread.start()
    wait_until(lambda: held, timeout=60)
    time.sleep(0.2)
    train.suspend(abort=True)
    wait_until(lambda: server.aborts, timeout=5)  # its connection closed
    wait_until(lambda: told, timeout=5)
    train.resume(policy_version=1)
    thread.join(60)
    assert len(batch) == 1
    assert held[0].get("rid") and told == [{"request_id": held[0]["rid"], "rid": held[0]["rid"]}], told


@pytest.mark.parametrize("blocked", ["streaming", "queued"])
def test_a_cancelled_member_is_aborted_without_killing_its_worker(tmp_path, llm_server, schedulers, blocked):
    """group_size_redundancy=1, the loser blocked 30 s in a model request: streaming slowly,
    or queued at the server before its first byte (no response to close yet)."""
    table = TablePolicy(seed=3)
    answered = [0]
    lock = threading.Lock()

    def first_blocks(body):
        with lock:
            answered[0] += 1
            first = answered[0] == 1
        if first and blocked == "streaming":  # the loser: a reply streamed over 30 s
            return {"reply": "x" * 150, "token_ids": [7] * 150, "logprobs": [-1.0] * 150,
                    "prompt_token_ids": [0], "token_rate": 5}
        if first:  # the loser: 30 s in the server's queue
            return {**table(body), "queue_s": 30}
        return table(body)

    server = llm_server(policy=first_blocks)
    train = schedulers(rl_config(tmp_path, server, num_rollouts=1, envs_per_worker=4, task_timeout=60.0),
                       EnvManagerConfig(num_env_groups=1, group_size=2, group_size_redundancy=1, tags=["tiny"],
                                        task_sets=lake_set(tmp_path, name="tiny", desc=TINY, max_steps=2)))
    started = time.monotonic()
    batch = train.get_batch(batch_size=2, step=0)
    assert time.monotonic() - started < 20
    wait_until(lambda: len(server.aborts) == 1, timeout=5)  # the loser's request ended at the server
    assert server.aborts[0]["request"] == 0
    assert train.stats()["members_cancelled"] == 1
    wait_until(lambda: train._shared.engine.in_flight() == 0, timeout=5)  # the cancelled attempt ended
    records = read_records(Path(train.run_dir) / "results.jsonl")
    assert not [r for r in records if r["status"] == "worker_died"]
    assert {r["attempt"] for r in records} == {0}
    assert len({r["pid"] for r in records}) == 1
    assert sorted(t.record["key"] for t in batch) == sorted(r["key"] for r in records if r["key"] in
                                                            {t.record["key"] for t in batch})


def test_close_aborts_the_model_requests_in_flight(tmp_path, llm_server, schedulers):
    """close() cancels what runs: a sibling's close aborts its members' requests at the server
    (the worker lives on, the other scheduler's requests go on streaming); the owner's close
    ends the rest."""
    server = llm_server(policy=continuing, token_rate=10)  # 58 tokens: about 6 s a reply
    train = schedulers(rl_config(tmp_path, server, num_rollouts=1, envs_per_worker=4),
                       EnvManagerConfig(num_env_groups=1, group_size=2, tags=["tiny"],
                                        task_sets=lake_set(tmp_path, name="tiny", desc=TINY, max_steps=2)))
    val = train.sibling(EnvManagerConfig(num_env_groups=1, group_size=2, tags=["wide"],
                                         task_sets=lake_set(tmp_path, name="wide", desc=["SFFG"], max_steps=3)))
    ended: list = []

    def batch(scheduler):
        try:
            scheduler.get_batch(batch_size=2, step=0)
        except SchedulerClosed as exc:
            ended.append((scheduler.name, exc))

    threads = [threading.Thread(target=batch, args=(s,), daemon=True) for s in (train, val)]
    for thread in threads:
        thread.start()
    wait_until(lambda: len(server.requests) == 4, timeout=120)  # every member is in a model request
    wait_until(lambda: time.monotonic() - server.requests[-1]["time"] > 0.3)
    wide = {k for k, r in enumerate(server.requests) if "PFFG" in json.dumps(r["body"]["messages"])}
    assert len(wide) == 2 and not server.aborts
    started = time.monotonic()
    val.close()
    wait_until(lambda: len(server.aborts) == 2, timeout=1.0)
    assert {a["request"] for a in server.aborts} == wide and max(a["time"] for a in server.aborts) - started < 1.0
    time.sleep(0.5)
    assert len(server.aborts) == 2, "the other scheduler's requests were ended too"
    assert [name for name, _ in ended] == [val.name]
    results = train.run_dir / "results.jsonl"  # cancelled attempts leave no record; a dead worker would
    assert not [r for r in (read_records(results) if results.exists() else []) if r["status"] == "worker_died"]
    started = time.monotonic()
    train.close()
    wait_until(lambda: len(server.aborts) == 4, timeout=2.0)
    assert max(a["time"] for a in server.aborts) - started < 2.0
    for thread in threads:
        thread.join(10)
    assert sorted(name for name, _ in ended) == sorted([train.name, val.name])


@pytest.mark.parametrize("reported", ["echoed", "empty"])
def test_partial_rollout_with_a_tokenizer_continues_from_the_token_ids(gate, llm_server, tmp_path, reported):
    """The continuation is the prompt + the partial ids, one exact sequence; a server that
    reports ``prompt_token_ids: []`` (no report) split it as if it had retokenized the text,
    and segments() then refused the piece's empty prompt (NoTokenIds)."""
    from token_model import write_tokenizer
    from tokenizers import Tokenizer

    folder = write_tokenizer(tmp_path / "tok")
    tokenizer = Tokenizer.from_file(str(folder / "tokenizer.json"))
    ids = tokenizer.encode("<think>go right</think> <answer>Right</answer>" * 3).ids
    ids.append(tokenizer.token_to_id("<|im_end|>"))
    pieces = [tokenizer.decode([i], skip_special_tokens=False) for i in ids]
    state: dict = {}

    def policy(body):
        prompt = body["prompt"]
        base = state.setdefault("base", prompt)
        if prompt[:len(base) + len(ids)] == base + ids:  # the next turn
            return {"reply": "DONE", "token_ids": [ids[0]], "logprobs": [-0.1], "pieces": ["DONE"]}
        done = len(prompt) - len(base)
        assert prompt == base + ids[:done], "a continuation must be the prompt + the partial ids"
        return {"reply": "".join(pieces[done:]), "token_ids": ids[done:], "logprobs": [-0.2] * (len(ids) - done),
                "pieces": pieces[done:], "prompt_token_ids": prompt if reported == "echoed" else []}

    server = llm_server(policy=policy, token_rate=len(ids) / 1.0)  # a reply takes about a second
    agent = _agent(server.url, gate, partial_rollout=True, tokenizer=str(folder), max_tokens=200)
    results: list = []
    thread = threading.Thread(target=lambda: results.append(agent.act(OBSERVATION)), daemon=True)
    thread.start()
    wait_until(lambda: gate.in_flight == 1 and server.tokens_streamed >= 3)
    gate.suspend(abort=True)
    wait_until(lambda: len(server.aborts) == 1, timeout=1.0)
    gate.resume(7)
    thread.join(10)
    turn = agent.turn_record()
    second = server.requests[1]["body"]
    done = len(second["prompt"]) - len(state["base"])  # what the client had when it hung up
    assert 1 <= done <= server.aborts[0]["tokens"]
    assert turn["token_ids"] == ids and turn["prompt_token_ids"] == state["base"] and turn["partial"] is True
    assert turn["versions"][:done] == [6] * done and set(turn["versions"][done:]) == {7}
    assert turn["reply"] == "".join(pieces) and "earlier_calls" not in turn and "retokenized" not in turn
    (segment,) = build_segments([turn])
    assert segment.input_ids == state["base"] + ids and sum(segment.loss_mask) == len(ids)
    assert second["prompt"] == state["base"] + ids[:done] and second["max_tokens"] == 200 - done
    agent.act(OBSERVATION)  # the next turn's prompt extends the whole reply's ids
    assert server.requests[2]["body"]["prompt"][:len(state["base"]) + len(ids)] == state["base"] + ids

