"""The ModelClient every agent has: a team's own ``module:Class`` agent that calls only
``self.model.chat`` (or, async, ``await self.model.achat``) gets what the openai agent gets
under an RL scheduler (policy versions across a weight update, token ids, logprobs, aborts),
and its tool calls come to it as the server sent them; the token-in form ``generate``; the
client's retries, stop reasons and cancel outside any worker."""

from __future__ import annotations

import json
import socket
import threading
import time
from pathlib import Path

import pytest

from held_replies import wait_until
from llm_server import lake_tool_solver, llm_server  # noqa: F401 - fixture
from parallel_rollout.agents import LengthCut, ModelClient
from parallel_rollout.agents.base import Agent
from parallel_rollout.config import RunConfig
from parallel_rollout.errors import AttemptCancelled, RolloutError
from parallel_rollout.policy_gate import PolicyGate
from parallel_rollout.results import read_records
from parallel_rollout.rl import EnvManagerConfig
from rl_support import lake_set, rl_config

#: the sampled ids and logprobs every reply carries, as vLLM sends them with return_token_ids
IDS = [500 + k for k in range(8)]


def tokened_tool_solver(body):
    """lake_tool_solver's call, with token ids, logprobs and prompt ids, as vLLM answers."""
    return {**lake_tool_solver(body), "token_ids": IDS, "logprobs": [-0.25] * len(IDS), "prompt_token_ids": [1, 2, 3]}


@pytest.mark.parametrize("agent", ["client_agents:ToolLakeAgent", "client_agents:AsyncToolLakeAgent"],
                         ids=["sync", "async"])
def test_a_plugin_agent_calling_only_the_model_client_gets_versions_tokens_and_tool_calls(
        tmp_path, llm_server, schedulers, agent):
    resumed = threading.Event()

    def policy(body):  # 8 tokens: 0.2 s a reply; from the sixth until resume(), which suspend() meets mid-stream, 2 s
        slow = len(server.requests) >= 6 and not resumed.is_set()
        return {**tokened_tool_solver(body), **({"token_rate": 4} if slow else {})}

    server = llm_server(policy=policy, token_rate=40)
    train = schedulers(rl_config(tmp_path, server, agent=agent, num_rollouts=1, envs_per_worker=4),
                       EnvManagerConfig(num_env_groups=2, group_size=2, tags=["lakes"],
                                        task_sets=lake_set(tmp_path, count=2, max_steps=8)))
    got: list = []
    thread = threading.Thread(target=lambda: got.append(train.get_batch(batch_size=4, step=0)), daemon=True)
    thread.start()
    deadline = time.monotonic() + 60
    while len(server.requests) < 6:  # first turns done at version 0, later ones under way
        assert time.monotonic() < deadline, "the model requests did not come"
        time.sleep(0.01)
    train.suspend(abort=True)  # the sixth request is mid-stream (2 s): aborted at the server, under load too
    time.sleep(0.3)
    resumed.set()
    train.resume(1)
    thread.join(120)
    (batch,) = got
    assert len(batch) == 4 and all(t.success for t in batch), [(t.status, t.record.get("failure")) for t in batch]
    assert server.aborts, "suspend(abort=True) did not end a request at the server"
    turns = [turn for t in batch for turn in t.turns]
    assert all(turn["token_ids"] == IDS and turn["logprobs"] == [-0.25] * len(IDS) for turn in turns)
    assert all(turn["stop_reason"] == "tool_calls" for turn in turns)
    versions = {turn["policy_version"] for turn in turns}
    assert versions == {0, 1}, versions
    assert any(turn.get("redone") for turn in turns)  # the aborted turn, asked again after the update
    # the agent got the calls as the server sent them (streamed as deltas, assembled), ids and all
    sent: dict = {}
    for request in server.requests:
        sent.setdefault(request["headers"]["x-session-id"], []).append(request["step"]["tool_calls"])
    for t in batch:
        for turn in t.turns:
            assert turn["agent_received"] == turn["tool_calls"]
            assert turn["agent_received"] in sent[f"{t.record['key']}@{t.record['attempt']}"], turn["agent_received"]
            (call,) = turn["agent_received"]
            assert call["id"].startswith("call_") and call["type"] == "function"
            assert json.loads(call["function"]["arguments"])["direction"] in ("Left", "Down", "Right", "Up")
    assert all(r["body"]["tools"][0]["function"]["name"] == "move" and r["body"]["stream"] for r in server.requests)
    # one session id per trajectory, sent with every request of it
    sessions = {r["headers"]["x-session-id"] for r in server.requests}
    assert len(sessions) >= 4
    usage = [t.record["usage"] for t in batch]
    assert all(u["requests"] >= 1 and u["completion_tokens"] > 0 for u in usage)


@pytest.mark.parametrize("agent, says", [
    ("UnsendableAgent", "messages[0]['content'] holds object <object object at"),
    ("StringMessagesAgent", "messages must be a list of message dicts such as [{'role': 'user', 'content': '…'}], "
                            "got str 'a string'"),
])
def test_a_request_the_agent_cannot_send_is_its_own_error_final_and_not_the_endpoints(
        tmp_path, llm_server, schedulers, agent, says):
    """A message content JSON cannot carry, or messages that are a string (sent as a list of
    its characters), fail before anything is sent: the agent's error (status error, not
    infrastructure), neither retried nor counted as a request, and the scheduler's error
    names it instead of asking whether the endpoint is up (it was read as a broken reply
    stream, retried, and blamed on the server, which saw no request)."""
    server = llm_server(policy=lake_tool_solver)
    train = schedulers(rl_config(tmp_path, server, agent=f"client_agents:{agent}", num_rollouts=1,
                                 envs_per_worker=4, max_retries=1),
                       EnvManagerConfig(group_size=2, tags=["lakes"], task_sets=lake_set(tmp_path, count=2)),
                       max_failed_groups=2)
    with pytest.raises(RolloutError) as caught:
        train.get_batch(batch_size=4, step=0, timeout=60)
    message = str(caught.value)
    assert says in message, message
    assert "up?" not in message and "gave up after" not in message and "stream broke" not in message, message
    assert server.requests == []
    records = read_records(Path(train.run_dir) / "results.jsonl")
    assert records and all((r["status"], r["infrastructure"], r["attempt"], r["usage"]["requests"])
                           == ("error", False, 0, 0) for r in records), records
    assert all(r["failure"]["type"] == "TypeError" and says in r["failure"]["message"] for r in records)


def test_the_same_agent_in_a_batch_run_fails_alike_and_counts_no_request(tmp_path, llm_server):
    """The batch runner agrees with the scheduler: the agent's error, final and graded, not
    infrastructure, and the summary counts no model request (it counted one per attempt,
    though none reached the server)."""
    from parallel_rollout.api import run

    server = llm_server(policy=lake_tool_solver)
    outcome = run(mode="gym", data=lake_set(tmp_path, count=2)["lakes"].data, agent="client_agents:UnsendableAgent",
                  base_url=server.url, model="m", num_rollouts=1, max_retries=1, progress=False,
                  output_dir=str(tmp_path / "batch"))
    records = read_records(Path(outcome.run_dir) / "results.jsonl")
    assert len(records) == 2 and all((r["status"], r["infrastructure"], r["attempt"]) == ("error", False, 0)
                                     for r in records), records
    assert all("messages[0]['content']" in r["failure"]["message"] for r in records)
    assert outcome.summary["usage"]["requests"] == 0 and server.requests == []


def test_a_request_cancelled_while_it_waited_at_a_suspended_gate_is_not_counted(llm_server):
    """usage() counts the requests sent: one that waited at the gate through a weight update
    and was cancelled there never left (it was counted, as was one the client could not build)."""
    gate = PolicyGate(version=0)
    try:
        server = llm_server(script=[{"reply": "never"}])
        client = _client(server, policy_gate=gate.path, policy_gate_key=gate.key)
        gate.suspend()
        thread, raised = _chat_in_thread(client)
        wait_until(lambda: gate.waiting == 1)  # held at the gate
        client.abort()
        thread.join(5)
        assert raised and isinstance(raised[0], AttemptCancelled) and server.requests == []
        assert client.usage()["requests"] == 0 and client.usage()["retries"] == 0
    finally:
        gate.close()


def test_the_test_server_records_no_request_its_client_hung_up_on_while_sending(llm_server):
    """An abort can close a request's socket before its body is sent; the test server (as a
    real one) must not count that as a request, or the assertions on server.requests break."""
    server = llm_server(script=[{"reply": "ok"}])
    host, port = server.url.split("//")[1].split("/")[0].split(":")
    with socket.create_connection((host, int(port))) as sock:
        sock.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                     b"Content-Length: 200\r\n\r\n")
        sock.shutdown(socket.SHUT_WR)
        assert sock.recv(100) == b""  # hung up on, unanswered
    reply = _client(server).chat([{"role": "user", "content": "hi"}])
    assert reply.text == "ok" and len(server.requests) == 1 and "messages" in server.requests[0]["body"]


def test_a_cancel_without_a_gate_ends_the_request_at_the_server(llm_server):
    """abort() with no policy gate (a trainer's cancel outside an RL scheduler's gate, a
    timeout) closes the request under way: the server stops working on it (vLLM aborts a
    request whose client hung up) and the call raises AttemptCancelled at once, not when the
    reply comes, nor retried as a broken connection."""
    server = llm_server(script=[{"reply": "late", "queue_s": 30}])
    client = _client(server)
    thread, raised = _chat_in_thread(client)
    wait_until(lambda: server.requests)  # at the server, its reply queued
    started = time.monotonic()
    client.abort()
    thread.join(5)
    assert raised and isinstance(raised[0], AttemptCancelled), raised
    assert time.monotonic() - started < 2, "the call waited for the reply"
    wait_until(lambda: server.aborts, timeout=2)  # the server's request ended
    assert server.aborts[0]["request"] == 0 and len(server.requests) == 1
    assert client.usage()["requests"] == 1 and client.usage()["retries"] == 0


def _chat_in_thread(client: ModelClient) -> tuple[threading.Thread, list]:
    """A thread making one chat call with ``client``, started; the list gets what it raised."""
    raised: list = []

    def ask():
        try:
            client.chat([{"role": "user", "content": "go"}])
        except Exception as exc:  # noqa: BLE001 - what the call raised is the assertion
            raised.append(exc)

    thread = threading.Thread(target=ask, daemon=True)
    thread.start()
    return thread, raised


def _client(server, **changes) -> ModelClient:
    config = RunConfig(mode="gym", agent="openai", base_url=server.url, model="m", max_retries=2, **changes)
    client = ModelClient(config)
    client.backoff_base_s = 0.01
    return client


def test_generate_sends_the_agents_own_token_ids_and_returns_the_sampled_ones(llm_server):
    server = llm_server(script=[{"reply": "ab", "token_ids": [7, 8], "logprobs": [-0.1, -0.2]}])
    client = _client(server, max_model_len=100)
    reply = client.generate([1, 2, 3], max_tokens=50, temperature=0.5)
    (request,) = server.requests
    assert "messages" not in request["body"]  # /v1/completions: a token-id prompt
    assert request["body"]["prompt"] == [1, 2, 3] and request["body"]["temperature"] == 0.5
    assert request["body"]["max_tokens"] == 50
    assert reply.text == "ab" and reply.token_ids == [7, 8] and reply.logprobs == [-0.1, -0.2]
    assert reply.prompt_token_ids == [1, 2, 3] and reply.stop_reason == "stop"
    with pytest.raises(Exception, match="list of int token ids"):
        client.generate(["a"])


def test_the_client_retries_counts_and_ends_an_episode_at_the_token_limit(llm_server):
    server = llm_server(script=[{"status": 500}, {"reply": "hi"},
                                {"reply": "cut", "finish_reason": "length"}])
    client = _client(server, on_length="end")
    reply = client.chat([{"role": "user", "content": "x"}], temperature=0)
    assert reply.text == "hi" and reply.stop_reason == "stop" and reply.tool_calls == []
    assert client.usage()["requests"] == 2 and client.usage()["retries"] == 1
    assert server.requests[1]["body"]["temperature"] == 0
    with pytest.raises(LengthCut) as cut:
        client.chat([{"role": "user", "content": "y"}])
    assert cut.value.turn["reply"] == "cut" and cut.value.turn["stop_reason"] == "length"


class _Plain(Agent):
    """An agent that calls only self.model.chat, with the default abort()."""

    def reset(self, task) -> None:
        """Nothing to keep."""

    def act(self, observation):
        """One chat call."""
        return self.model.chat([{"role": "user", "content": "go"}]).text


def test_a_plugin_agents_default_abort_ends_its_request_at_the_server(llm_server):
    gate = PolicyGate(version=0)
    try:
        server = llm_server(script=[{"reply": "x" * 100, "token_ids": [9] * 100, "logprobs": [-1.0] * 100,
                                     "token_rate": 10}])
        agent = _Plain(RunConfig(mode="gym", agent="openai", base_url=server.url, model="m", policy_gate=gate.path, policy_gate_key=gate.key))
        raised: list = []

        def act():
            try:
                agent.act({})
            except AttemptCancelled as exc:
                raised.append(exc)

        thread = threading.Thread(target=act, daemon=True)
        thread.start()
        deadline = time.monotonic() + 10
        while server.tokens_streamed < 2:
            assert time.monotonic() < deadline
            time.sleep(0.01)
        started = time.monotonic()
        agent.abort()
        thread.join(5)
        assert raised and time.monotonic() - started < 2
        deadline = time.monotonic() + 2
        while not server.aborts:
            assert time.monotonic() < deadline, "the server saw no abort"
            time.sleep(0.01)
    finally:
        gate.close()


def test_a_cancel_without_a_gate_tells_the_abort_url_the_requests_id(llm_server):
    """abort_url with no policy gate (a cancel outside an RL scheduler, a plugin agent's own
    timeout): the request is answered whole, with no stream whose first chunk names it, and
    abort() only closed its connection; a server that keeps decoding after its client hangs
    up (what abort_url is for) was never told. The request carries an id of its own (``rid``,
    SGLang's, and ``request_id``), which the abort POSTs there, as a gated request's does."""
    told: list = []
    server = llm_server(script=[{"reply": "late", "queue_s": 30}],
                        routes={"/v1/abort": lambda body: told.append(body) or {}})
    client = _client(server, abort_url=server.url + "/abort")
    thread, raised = _chat_in_thread(client)
    wait_until(lambda: server.requests)  # at the server, its reply queued
    client.abort()
    thread.join(5)
    wait_until(lambda: told, timeout=5)  # the abort_url was told
    body = server.requests[0]["body"]
    assert raised and isinstance(raised[0], AttemptCancelled), raised
    assert told == [{"request_id": body["rid"], "rid": body["rid"]}] and body["request_id"] == body["rid"], told
