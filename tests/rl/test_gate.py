"""The policy gate: suspend waits for requests in flight, nothing starts while suspended,
resume hands out the new policy version, abort makes the agent redo the turn, and a killed
process never holds the gate shut. Then the openai agent through the gate against the local
test server's table policy: each turn records its policy version, token ids and logprobs."""

from __future__ import annotations

import multiprocessing
import os
import signal
import threading
import time

import numpy
import pytest

from llm_server import llm_server  # noqa: F401 - fixture
from parallel_rollout.agents.openai_agent import OpenAIAgent
from parallel_rollout.config import RunConfig
from parallel_rollout.errors import ConfigError
from parallel_rollout.gate_client import GateClient
from parallel_rollout.policy_gate import PolicyGate
from parallel_rollout.rl import EnvManagerConfig
from parallel_rollout.tasks import Task
from rl_support import TINY, lake_set, rl_config
from table_policy import TablePolicy


@pytest.fixture
def gate():
    gate = PolicyGate(version=3)
    yield gate
    gate.close()


def test_suspend_waits_for_the_request_in_flight(gate):
    client = GateClient(gate.path, gate.key)
    assert client.begin()[0] == 3
    done = threading.Event()
    threading.Thread(target=lambda: (gate.suspend(), done.set()), daemon=True).start()
    assert not done.wait(0.3), "suspend returned while a request was in flight"
    assert client.end() is False
    assert done.wait(2)
    client.close()


def test_nothing_starts_while_suspended_and_resume_gives_the_new_version(gate):
    gate.suspend()
    client = GateClient(gate.path, gate.key)
    got: list[tuple[int, float]] = []
    thread = threading.Thread(target=lambda: got.append(client.begin()), daemon=True)
    thread.start()
    time.sleep(0.3)
    assert not got and gate.in_flight == 0
    gate.resume(version=4)
    thread.join(2)
    assert got[0][0] == 4 and got[0][1] >= 0.25
    client.end()
    client.close()


def test_abort_returns_at_once_and_the_reply_is_redone(gate):
    client = GateClient(gate.path, gate.key)
    client.begin()
    started = time.monotonic()
    gate.suspend(abort=True)
    assert time.monotonic() - started < 0.5
    assert client.end() is True
    assert gate.aborted == 1
    gate.resume(5)
    assert client.begin()[0] == 5 and client.end() is False
    # each scheduler's requests and aborts, by its samples' keys: one whose group was dropped
    # (the gate forgot its key) while its request was in flight is still its scheduler's
    other = GateClient(gate.path, gate.key)
    client.begin("val:lakes/g0/e0/m0")
    other.begin("train@s1:lakes/g3/e3/m1")
    gate.forget("train@s1:lakes/g3/e3/m1")
    gate.suspend(abort=True)
    assert client.end() is True and other.end() is True
    assert gate.requests_of("val") == (1, 1) and gate.requests_of("train@s1") == (1, 1)
    assert gate.requests == 4 and gate.aborted == 3
    client.close()
    other.close()


def test_a_hang_up_mid_request_leaves_the_next_request_its_own_answers(gate):
    """A cancel hangs up on the gate between begin and end (ModelClient.abort): the next
    begin connects again, and the answer its end gets is its own, not the dead connection's."""
    client = GateClient(gate.path, gate.key)
    client.begin("a")
    client.close()  # from the cancel; the request's reader thread sees its connection end
    time.sleep(0.1)
    assert gate.in_flight == 0  # the hang-up counts as the request's end
    assert client.begin("b")[0] == 3
    gate.suspend(abort=True)
    assert client.end() is True  # "redo", not the hung-up connection's empty line
    gate.resume(4)
    assert client.begin("c")[0] == 4 and client.end() is False
    client.close()


def test_a_hang_up_ends_a_begin_waiting_at_a_suspended_gate(gate):
    client = GateClient(gate.path, gate.key)
    client.begin()
    client.end()
    gate.suspend()
    raised: list = []

    def begin():
        try:
            client.begin()
        except ConnectionError as exc:
            raised.append(exc)

    thread = threading.Thread(target=begin, daemon=True)
    thread.start()
    time.sleep(0.2)
    assert thread.is_alive()  # waiting for resume
    client.close()
    thread.join(2)
    assert raised and not thread.is_alive()
    gate.resume(4)
    time.sleep(0.1)
    assert gate.in_flight == 0
    assert gate.requests == 1  # the first; the one cancelled while it waited never started


def test_a_cancel_while_the_connection_is_made_ends_the_begin(gate, monkeypatch):
    """A cancel sets its flag, then hangs up; one that lands while begin is still connecting
    finds no connection to hang up, and begin must not then wait at a suspended gate."""
    import parallel_rollout.gate_client as gate_client

    gate.suspend()
    client = GateClient(gate.path, gate.key)
    cancelled = threading.Event()
    connect = gate_client.connect

    def connect_then_cancel(path):
        sock = connect(path)
        cancelled.set()  # the cancel, in the instant before the connection is held
        client.close()  # nothing to hang up yet
        return sock

    monkeypatch.setattr(gate_client, "connect", connect_then_cancel)
    raised: list = []

    def begin():
        try:
            client.begin(cancelled=cancelled.is_set)
        except ConnectionError as exc:
            raised.append(exc)

    thread = threading.Thread(target=begin, daemon=True)
    thread.start()
    thread.join(3)
    assert raised and not thread.is_alive(), "begin waited for a resume after its caller was cancelled"
    gate.resume(4)
    time.sleep(0.1)
    assert gate.in_flight == 0 and gate.requests == 0


def _hold_the_gate(path: str, key: str) -> None:
    client = GateClient(path, key)
    client.begin()
    time.sleep(60)
    client.end()


def test_a_killed_process_never_holds_the_gate_shut(gate):
    child = multiprocessing.get_context("spawn").Process(target=_hold_the_gate, args=(gate.path, gate.key))
    child.start()
    deadline = time.monotonic() + 20
    while gate.in_flight == 0 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert gate.in_flight == 1
    os.kill(child.pid, signal.SIGKILL)
    child.join(5)
    gate.suspend(timeout=5)  # returns: the dead holder's request counts as ended
    assert gate.in_flight == 0


def test_suspend_timeout_says_how_many_are_in_flight(gate):
    client = GateClient(gate.path, gate.key)
    client.begin()
    with pytest.raises(TimeoutError, match="1 model request"):
        gate.suspend(timeout=0.2)
    client.close()


def _agent(server_url: str, gate: PolicyGate) -> OpenAIAgent:
    config = RunConfig(mode="gym", agent="openai", base_url=server_url, model="table", policy_gate=gate.path,
                       policy_gate_key=gate.key)
    agent = OpenAIAgent(config)
    agent.reset(Task(id="lake", mode="gym", payload={"size": 4}))
    return agent


OBSERVATION = {"grid": "PFFF\nFHFH\nFFFH\nHFFG", "position": [0, 0], "steps": 0, "max_steps": 16}


def test_agent_records_version_tokens_and_logprobs(gate, llm_server):
    policy = TablePolicy(seed=1)
    server = llm_server(policy=policy, routes=policy.routes())
    server.models.append("table")  # it serves the run's model
    agent = _agent(server.url, gate)
    action = agent.act(OBSERVATION)
    turn = agent.turn_record()
    assert turn["reply"] == action and turn["policy_version"] == 3
    assert turn["prompt_token_ids"] == [0] and len(turn["token_ids"]) == 1
    assert turn["logprobs"] == [pytest.approx(-1.3862944, abs=1e-6)]  # log 1/4: uniform table
    assert turn["request"][-1]["role"] == "user" and "row 0, column 0" in turn["request"][-1]["content"]
    body = server.requests[-1]["body"]
    assert body["logprobs"] is True and body["return_token_ids"] is True
    gate.suspend()
    gate.resume(version=4)
    agent.act(OBSERVATION)
    assert agent.turn_record()["policy_version"] == 4


def test_agent_waits_while_suspended_and_redoes_an_aborted_turn(gate, llm_server):
    policy = TablePolicy(seed=1, delay_s=0.4)
    server = llm_server(policy=policy, routes=policy.routes())
    server.models.append("table")  # it serves the run's model
    agent = _agent(server.url, gate)
    result: list = []
    thread = threading.Thread(target=lambda: result.append(agent.act(OBSERVATION)), daemon=True)
    thread.start()
    deadline = time.monotonic() + 5
    while not (gate.in_flight and server.requests) and time.monotonic() < deadline:
        time.sleep(0.01)  # past the gate and in the server (an abort between the two sends nothing)
    gate.suspend(abort=True)  # the request is in the server; its reply will be thrown away
    time.sleep(0.8)
    assert not result and len(server.requests) == 1, "a request started while suspended"
    gate.resume(version=9)
    thread.join(5)
    turn = agent.turn_record()
    assert result and turn["policy_version"] == 9 and turn["redone"] == 1
    assert len(server.requests) == 2


def test_an_answer_the_client_cannot_read_releases_the_request(gate):
    """A "go" the client cannot read (a version that is no int) comes after the gate counted
    the request in flight: begin hangs up, so the request ends there and suspend returns."""
    gate.version = "v2"  # what resume() refuses now; the client must not leak it either
    client = GateClient(gate.path, gate.key)
    with pytest.raises(ConnectionError, match="unexpected answer 'go v2'"):
        client.begin("k")
    deadline = time.monotonic() + 5
    while gate.in_flight and time.monotonic() < deadline:
        time.sleep(0.01)
    assert gate.in_flight == 0
    gate.suspend(timeout=2)
    gate.version = 3
    gate.resume(4)
    assert client.begin("k")[0] == 4 and client.end() is False  # it connects again
    client.close()


@pytest.mark.parametrize("version, message", [
    ("v2", r"policy_version must be a whole number >= 0, got 'v2' \(str\)"),
    (1.5, r"policy_version must be a whole number >= 0, got 1.5 \(float\)"),
    (True, r"policy_version must be a whole number >= 0, got True"),
    (-1, r"policy_version must be a whole number >= 0, got -1"),
    (2, r"policy_version 2 is below the current version 3"),
])
def test_resume_refuses_a_version_that_is_no_whole_number_or_goes_back(gate, version, message):
    gate.suspend()
    with pytest.raises(ConfigError, match=message):
        gate.resume(version)
    assert gate.version == 3 and not gate.is_open  # nothing changed: the update is not done
    gate.resume(numpy.int64(3))  # the same version again (no update), as numpy's integer
    assert gate.version == 3 and type(gate.version) is int and gate.is_open


def test_a_schedulers_resume_checks_the_version_before_anything_changes(tmp_path, table, schedulers):
    """resume("v2") used to set the version: every member then failed at the gate, in flight
    for ever. Now it is refused before the gate opens; resume without suspend moves the
    version on (documented), and the batch after carries it."""
    _, server = table
    train = schedulers(rl_config(tmp_path, server, num_rollouts=1, envs_per_worker=2),
                       EnvManagerConfig(num_env_groups=1, group_size=2, tags=["tiny"],
                                        task_sets=lake_set(tmp_path, name="tiny", desc=TINY, max_steps=2)))
    train.suspend()
    for bad in ("v2", 1.5, None):
        with pytest.raises(ConfigError, match="policy_version"):
            train.resume(bad)
    assert train.policy_version == 0 and not train._shared.gate.is_open
    train.resume(2)
    train.resume(policy_version=3)  # without a suspend: only the version moves on
    with pytest.raises(ConfigError, match="below the current version 3"):
        train.resume(0)
    batch = train.get_batch(batch_size=2, step=0, timeout=60)
    assert {v for t in batch for v in t.policy_versions} == {3}
    assert train._shared.gate.in_flight == 0
    train.suspend(timeout=10)  # returns: nothing is left in flight
    train.resume(3)


@pytest.mark.parametrize("host", [None, "127.0.0.1"], ids=["unix", "tcp"])
def test_a_connection_without_the_gates_key_cannot_hold_it(host, caplog):
    """Whoever reaches the gate's port (an agent's code in a sandbox with a network, another
    user of the host) but lacks its key is refused at its first line and logged: its "begin"
    is never counted in flight, so suspend() returns; the key's holder goes through."""
    from parallel_rollout.gate_client import connect

    gate = PolicyGate(version=5, host=host)
    try:
        for first in (b"begin intruder\n", b"key 0123456789abcdef\nbegin intruder\n", b"key\nbegin\n"):
            sock = connect(gate.path)
            sock.sendall(first)
            reader = sock.makefile("r")
            assert reader.readline().strip() == "refused"
            assert reader.readline() == ""  # and hung up on
            sock.close()
        with pytest.raises(ConnectionError, match="refused the connection: not the gate key"):
            GateClient(gate.path, "f" * 32).begin("k")
        with pytest.raises(ConnectionError, match="refused the connection: no gate key"):
            GateClient(gate.path).begin("k")
        assert gate.requests == 0 and gate.in_flight == 0 and gate.refused == 5
        gate.suspend(timeout=2)  # returns: nobody without the key held it
        gate.resume(6)
        client = GateClient(gate.path, gate.key)
        assert client.begin("k")[0] == 6 and gate.in_flight == 1 and client.end(kept=6) is False
        client.close()
    finally:
        gate.close()
    refusals = [r.getMessage() for r in caplog.records if "refused a connection" in r.getMessage()]
    assert len(refusals) == 5 and not any(gate.key in line for line in refusals)
    assert "'begin intruder\\n'" in refusals[0] and "a key that is not the gate's" in refusals[1]


def test_the_gates_key_is_never_written_to_config_json_nor_shown():
    config = RunConfig(mode="gym", policy_gate="tcp://127.0.0.1:1", policy_gate_key="s3cret")
    assert "policy_gate_key" not in config.to_json() and "s3cret" not in repr(config)


def test_a_request_that_ends_after_its_sample_was_forgotten_is_not_kept(gate):
    """The scheduler settles a sample (its group dropped or handed out: ``PolicyGate.forget``)
    while a request of it is in flight (a member the drop's cancel has yet to reach): the
    request's "end <kept>" must not bring the sample back, or it stayed for the life of the
    engine (a long run grew it by such requests)."""
    client = GateClient(gate.path, gate.key)
    assert client.begin("train:tiny/g0/e0/m1")[0] == 3
    gate.forget("train:tiny/g0/e0/m1")
    assert client.end(kept=3) is False
    assert gate.oldest_version("train:tiny/g0/e0/m1") is None
    # a sample that is not forgotten is kept as before
    assert client.begin("train:tiny/g1/e1/m0")[0] == 3
    client.end(kept=3)
    assert gate.oldest_version("train:tiny/g1/e1/m0") == 3
    client.close()


def test_a_request_that_begins_after_its_sample_was_settled_keeps_nothing(gate):
    """A request of a settled sample that begins only after ``PolicyGate.forget``: one that
    waited at the suspended gate while its group was dropped, one whose agent the drop's
    cancel had yet to reach. Its "end <kept>" must not bring the sample back for the life of
    the gate, nor its "begin" make it a sample in flight that a weight update judges."""
    gate.suspend()
    waiting, late = GateClient(gate.path, gate.key), GateClient(gate.path, gate.key)
    got: list[tuple[int, float]] = []
    thread = threading.Thread(target=lambda: got.append(waiting.begin("train:tiny/g2/e2/m0")), daemon=True)
    thread.start()
    deadline = time.monotonic() + 5
    while not gate._conns:  # its connection is at the gate, its "begin" waiting or on its way
        assert time.monotonic() < deadline
        time.sleep(0.01)
    gate.forget("train:tiny/g2/e2/m0")
    gate.forget("train:tiny/g2/e2/m1")
    gate.resume(4)
    thread.join(5)
    assert got and got[0][0] == 4
    assert late.begin("train:tiny/g2/e2/m1")[0] == 4
    assert gate.advance(5) == (4, set())  # neither is a sample in flight of the old version
    assert waiting.end(kept=4) is False and late.end(kept=4) is False
    assert gate.oldest_version("train:tiny/g2/e2/m0") is None and gate.oldest_version("train:tiny/g2/e2/m1") is None
    assert not gate._oldest
    waiting.close()
    late.close()


def test_the_gate_keeps_the_oldest_version_of_the_tokens_kept(gate):
    client = GateClient(gate.path, gate.key)
    client.begin("k")
    gate.suspend(abort=True)
    assert client.end() is True and gate.oldest_version("k") is None  # aborted, starting over
    gate.resume(7)
    client.begin("k")
    gate.suspend(abort=True)
    client.end(kept=7)  # a partial reply sampled by 7 is kept and continued
    gate.resume(8)
    client.begin("k")
    client.end(kept=7)
    assert gate.oldest_version("k") == 7
    gate.forget("k")
    assert gate.oldest_version("k") is None
    client.close()


def test_wait_aborted_waits_for_the_agents_to_say_what_they_keep(gate):
    client = GateClient(gate.path, gate.key)
    client.begin("k")
    gate.suspend(abort=True)
    slow = threading.Timer(0.3, lambda: client.end(kept=6))  # an agent slow to hang up
    slow.start()
    started = time.monotonic()
    assert gate.oldest_version("k") is None  # not said yet
    assert gate.wait_aborted(5.0) is True
    assert time.monotonic() - started >= 0.25 and gate.oldest_version("k") == 6
    # the agent's end() returns once its reader has the gate's answer: a client is one env
    # loop's, used by one thread at a time (a begin while end() still reads would race it)
    slow.join(5)
    gate.resume(7)
    client.begin("j")
    client.end()
    assert gate.wait_aborted(0.1) is True  # nothing aborted is pending
    other = GateClient(gate.path, gate.key)
    other.begin("i")
    gate.suspend(abort=True)
    assert gate.wait_aborted(0.2) is False  # its agent never answers: bounded
    other.close()  # hanging up counts as its end
    assert gate.wait_aborted(5.0) is True
    client.close()
