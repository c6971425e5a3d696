"""A team's own inference fleet: several servers with session affinity, balance and
fail-over, and per-attempt sampling — through the CLI as a user types it, against local
test servers (tests/llm_server.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from collections import Counter, defaultdict

import pytest
from click.testing import CliRunner

from conftest import read_results, run_ok
from llm_server import lake_tool_solver
from parallel_rollout.agents import AttemptInfo
from parallel_rollout.agents.openai_agent import OpenAIAgent
from parallel_rollout.agents.openai_request import sampled_fields
from parallel_rollout.agents.servers import ServerPool
from parallel_rollout.cli import main
from parallel_rollout.config import build_config, load_toml
from parallel_rollout.errors import ConfigError
from parallel_rollout.tasks import Task

def test_cli_help_names_the_fleet_flags():
    result = CliRunner().invoke(main, ["run", "--help"], terminal_width=200)
    assert result.exit_code == 0, result.output
    for flag in ("--tool-calls", "--base-url", "--session-header", "--server-cooldown", "--sampling"):
        assert flag in result.output, flag
    assert "Repeat it for several servers" in " ".join(result.output.split())


# -- several servers ----------------------------------------------------------------------------


def test_base_url_one_string_or_a_list_from_flags_and_toml(tmp_path):
    assert build_config({"base_url": "http://a/v1"}).base_url == "http://a/v1"
    assert build_config({"base_url": ("http://a/v1",)}).base_url == "http://a/v1"
    assert build_config({"base_url": ("http://a/v1", "http://b/v1")}).base_url == ["http://a/v1", "http://b/v1"]
    toml = tmp_path / "run.toml"
    toml.write_text('base-url = ["http://a/v1", "http://b/v1"]\nsession-header = "X-Trace"\n')
    assert load_toml(toml)["base_url"] == ["http://a/v1", "http://b/v1"]
    toml.write_text("base-url = 3\n")
    with pytest.raises(ConfigError, match="run.toml: base-url must be a string or a list of strings, got 3"):
        load_toml(toml)
    with pytest.raises(ConfigError, match="--session-header"):
        build_config({"session_header": "bad header"})


def test_a_fleet_that_lists_one_server_twice_is_refused(tmp_path):
    """A server listed twice (a port mistyped as another's) is one server: the run went on with
    one server fewer than its fleet file lists, and not a word of it."""
    toml = tmp_path / "fleet.toml"
    toml.write_text('base-url = ["http://127.0.0.1:8000/v1", "http://127.0.0.1:8000/v1/"]\n')
    with pytest.raises(ConfigError, match=r"--base-url 'http://127.0.0.1:8000/v1/' is listed twice.*fleet.toml"):
        build_config({"agent": "openai", "mode": "gym"}, str(toml))
    result = CliRunner().invoke(main, ["run", "--mode", "gym", "--data", "frozenlake", "--agent", "openai",
                                       "--base-url", "http://127.0.0.1:9/v1", "--base-url", "http://127.0.0.1:9/v1",
                                       "--dry-run", "--output-dir", str(tmp_path)])
    assert result.exit_code == 2 and "'http://127.0.0.1:9/v1' is listed twice" in result.output, result.output
    assert build_config({"base_url": ("http://127.0.0.1:9/v1", "http://127.0.0.1:10/v1")}).base_url


def test_a_fleet_with_an_empty_entry_is_refused(tmp_path):
    """``--base-url "$SERVER2"`` with the variable unset, a fleet file's blank entry: the run
    went on a server short, the entry dropped without a word."""
    toml = tmp_path / "fleet.toml"
    toml.write_text('base-url = ["http://127.0.0.1:8000/v1", ""]\n')
    with pytest.raises(ConfigError, match=r"holds an empty entry: list each server's URL .*fleet.toml"):
        build_config({"agent": "openai", "mode": "gym"}, str(toml))
    toml.write_text("base-url = []\n")
    with pytest.raises(ConfigError, match="an empty list names no server"):
        load_toml(toml)
    result = CliRunner().invoke(main, ["run", "--mode", "gym", "--data", "frozenlake", "--agent", "openai",
                                       "--base-url", "http://127.0.0.1:9/v1", "--base-url", "", "--dry-run",
                                       "--output-dir", str(tmp_path)])
    assert result.exit_code == 2 and "holds an empty entry" in result.output, result.output


def test_a_fleet_run_resumes_with_its_servers_listed_in_another_order(tmp_path, llm_servers, monkeypatch):
    """The same servers in another order (a fleet file rewritten, service discovery) are the
    same endpoints: the resume goes on; it was refused as a changed base_url. Another server
    is still refused."""
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    a, b, c = llm_servers(_echo, 3)

    def run(*urls: str, resume: bool = False):
        flags = [arg for url in urls for arg in ("--base-url", url)] + (["--resume"] if resume else [])
        return CliRunner().invoke(main, ["run", "--mode", "gym", "--data", "frozenlake", "--limit", "2", "--agent",
                                         "openai", "--model", "test-model", "--max-turns", "1", "--num-rollouts", "1",
                                         "--output-dir", str(tmp_path), "--run-id", "fleet", *flags])

    assert run(a.url, b.url).exit_code == 0
    resumed = run(b.url, a.url, resume=True)
    assert resumed.exit_code == 0 and "2 already final, 0 to run" in resumed.output, resumed.output
    other = run(a.url, c.url, resume=True)
    assert other.exit_code == 2 and "cannot resume fleet" in other.output and "base_url" in other.output, other.output


def test_the_pool_takes_the_least_loaded_and_skips_a_cooling_server():
    pool = ServerPool(["a", "b"], cooldown_s=60)
    assert [pool.acquire() for _ in range(4)] == ["a", "b", "a", "b"]
    pool.release("a")
    assert pool.acquire() == "a"
    pool.fail("b")
    assert not pool.available("a") and pool.acquire() == "a"
    assert pool.acquire(avoid="a") == "b"  # every other server cools: the first back is used
    # a tie starts at the loop's own turn in the list: one-loop workers 0..3 alternate
    assert [ServerPool(["a", "b"]).acquire(turn=loop) for loop in range(4)] == ["a", "b", "a", "b"]
    three = ServerPool(["a", "b", "c"])
    assert [three.acquire(turn=2) for _ in range(3)] == ["c", "a", "b"]


def test_a_server_whose_request_failed_while_its_models_answered_is_said_as_that_failure():
    """A server answering every request 500 answers its /models: a trajectory that asked it
    again while another's request failed got no verdict (asked again at its next request) and
    said the server "does not answer", which became the run's last failure in place of the 500."""
    pool = ServerPool(["a"])
    pool.ask_again("a", "a/chat/completions answered 500: first")

    def models_answer_as_another_request_fails(url):
        pool.ask_again(url, "a/chat/completions answered 500: meanwhile")
        return True

    assert pool.first_visit("a", models_answer_as_another_request_fails) is None
    assert pool.said["a"] == "a/chat/completions answered 500: meanwhile"
    assert pool.first_visit("a", lambda url: True) is True  # asked again: it serves


def _echo(body):
    return {"reply": "<answer>Right</answer>"}


def test_every_request_of_an_attempt_goes_to_one_server_with_its_session_id(llm_servers):
    a, b = llm_servers(_echo, 2)
    config = build_config({"agent": "openai", "mode": "gym", "base_url": [a.url, b.url], "model": "test-model"})
    agents = [OpenAIAgent(config) for _ in range(4)]
    for index, agent in enumerate(agents):
        agent.attempt_info = AttemptInfo(f"lake#{index}", 0)
        agent.reset(Task(id="lake", mode="gym", payload={}))
    for _ in range(3):
        for agent in agents:
            agent.act({"grid": "SG"})
    where = defaultdict(set)
    for server in (a, b):
        for request in server.requests:
            where[request["headers"]["x-session-id"]].add(server.url)
    assert sorted(where) == [f"lake#{i}@0" for i in range(4)]
    assert all(len(urls) == 1 for urls in where.values())
    assert len(a.requests) == len(b.requests) == 6  # two attempts each


def test_a_server_whose_retries_run_out_cools_down_and_the_turn_moves_on(llm_servers):
    """5xx until --max-retries is spent on one server: the turn goes on at the other (the move
    recorded with the last error), and the next attempt starts there while it cools down."""
    from parallel_rollout.agents import ModelClient

    (failing,) = llm_servers(lambda body: {"status": 503, "message": "overloaded"})
    (healthy,) = llm_servers(_echo)
    client = ModelClient(build_config({"agent": "openai", "mode": "gym", "base_url": [failing.url, healthy.url],
                                       "model": "test-model", "max_retries": 1, "server_cooldown": 600}))
    client.backoff_base_s = 0.01
    client.start(AttemptInfo("lake#0", 0))
    reply = client.chat([{"role": "user", "content": "go"}])
    assert reply.text == "<answer>Right</answer>"
    assert len(failing.requests) == 2 and len(healthy.requests) == 1  # 1 + --max-retries 1, then moved
    (move,) = client.usage()["server_moves"]
    assert (move["from"], move["to"]) == (failing.url, healthy.url) and "HTTP 503" in move["reason"]
    assert reply.turn["server_moves"] == [move] and client.usage()["server"] == healthy.url
    client.start(AttemptInfo("lake#1", 0))  # the next attempt: the failing server cools down
    client.chat([{"role": "user", "content": "go"}])
    assert len(failing.requests) == 2 and len(healthy.requests) == 2
    assert healthy.requests[-1]["headers"]["x-session-id"] == "lake#1@0"


@pytest.mark.parametrize("failure", ["503", "refused"])
def test_a_turn_every_server_failed_gives_up_though_their_cool_down_is_over(llm_servers, failure):
    """Both servers fail and their cool-down (--server-cooldown 0 here; a hung fleet's 4 x 120 s
    of timeouts against the default 30 s) ends before the turn's retries at the other do: the
    turn moves to each server once, then gives up as one server's turn does, naming both. It
    went back and forth for ever: until the servers answered (503s), or, refused, in a busy
    loop until the task timeout, which graded the sample task_timeout."""
    from parallel_rollout.agents import ModelClient, ModelUnavailable
    from parallel_rollout.agents.servers import pool_for

    answered = Counter()

    def recovers_late(body):  # 503 twenty times, then replies: a turn that never gives up gets one
        answered["requests"] += 1
        return {"status": 503, "message": "overloaded"} if answered["requests"] <= 20 else _echo(body)

    a, b = llm_servers(recovers_late, 2)
    if failure == "refused":
        a.stop()
        b.stop()
    urls = [a.url, b.url]
    client = ModelClient(build_config({"agent": "openai", "mode": "gym", "base_url": urls, "max_retries": 1,
                                       "model": "test-model", "server_cooldown": 0}))
    client.backoff_base_s = 0.01
    client.start(AttemptInfo("lake#0", 0))
    outcome: list = []

    def turn():
        try:
            outcome.append(client.chat([{"role": "user", "content": "go"}]))
        except Exception as exc:  # noqa: BLE001 - the outcome under test
            outcome.append(exc)

    thread = threading.Thread(target=turn, daemon=True)
    thread.start()
    thread.join(20)
    bounced = thread.is_alive()
    if bounced:  # let a turn that went back and forth end: its servers now cool down for long
        pool_for(urls, 0.0).cooldown_s = 600
        thread.join(20)
    assert not bounced, "the turn went back and forth between the failed servers"
    (error,) = outcome
    assert isinstance(error, ModelUnavailable), error
    assert f"the last of 2 servers that failed it ({a.url}, {b.url})" in str(error), error
    assert "gave up after 2 requests for this turn (--max-retries 1)" in str(error), error
    assert [(m["from"], m["to"]) for m in client.usage()["server_moves"]] == [(a.url, b.url)]
    if failure == "503":  # 1 + --max-retries 1 at each
        assert len(a.requests) == len(b.requests) == 2


def test_cli_two_servers_balance_and_one_stopped_mid_run_moves_its_trajectories(tmp_path, llm_servers,
                                                                                monkeypatch):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    stopped = threading.Event()
    answered: Counter = Counter()

    def policy(body):
        return lake_tool_solver(body)

    a, b = llm_servers(policy, 2)

    def b_policy(body):
        # server b dies after its 30th answer, in the middle of the batch
        answered["b"] += 1
        if answered["b"] == 30:
            threading.Thread(target=lambda: (b.stop(), stopped.set())).start()
        return policy(body)

    b.policy = b_policy
    run_ok("--mode", "gym", "--data", "frozenlake", "--agent", "openai", "--model", "test-model",
           "--base-url", a.url, "--base-url", b.url, "--tool-calls", "--num-rollouts", "2", "--envs-per-worker", "2",
            "--session-header", "X-Trajectory", "--server-cooldown", "600",
            "--output-dir", str(tmp_path), "--run-id", "fleet")
    assert stopped.is_set()
    records = read_results(tmp_path / "fleet")
    assert len(records) == 30
    plain = [r for r in records if "slippery" not in r["tags"]]
    assert all(r["reward"] == 1.0 for r in plain), [(r["task_id"], r["status"], r.get("failure")) for r in plain]
    # affinity: one session id per attempt, each on one server until the move
    sessions = defaultdict(set)
    for server in (a, b):
        for request in server.requests:
            sessions[request["headers"]["x-trajectory"]].add(server.url)
    assert len(sessions) == 30
    moves = [m for r in records for m in r["usage"].get("server_moves", [])]
    assert moves and all(m["from"] == b.url and m["to"] == a.url for m in moves)
    moved = {f"{r['key']}@{r['attempt']}" for r in records if r["usage"].get("server_moves")}
    # a moved trajectory ends on a; b's log may lack it: a request b hung up on as it stopped,
    # or one refused by the stopped b (a worker that had not yet seen b fail), is not logged
    assert all(a.url in urls for s, urls in sessions.items() if s in moved)
    assert all(len(urls) == 1 for s, urls in sessions.items() if s not in moved)
    # the moves are in the turn records too
    turns = [json.loads(line) for r in records if r["usage"].get("server_moves")
             for line in (tmp_path / "fleet" / r["trajectory"]).read_text().splitlines()]
    assert any(t.get("server_moves") for t in turns)
    # balance until b died: both servers started trajectories (the moved ones began on b)
    starts = Counter(next(iter(urls)) for s, urls in sessions.items() if s not in moved)
    assert starts[b.url] + len(moved) >= 3 and starts[a.url] >= 3


def test_cli_two_servers_spread_trajectories_evenly(tmp_path, llm_servers, monkeypatch):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    a, b = llm_servers(lake_tool_solver, 2)
    run_ok("--mode", "gym", "--data", "frozenlake", "--agent", "openai", "--model", "test-model",
           "--base-url", a.url, "--base-url", b.url, "--tool-calls", "--num-rollouts", "2", "--envs-per-worker", "2",
            "--output-dir", str(tmp_path), "--run-id", "even")
    sessions = {server.url: {r["headers"]["x-session-id"] for r in server.requests} for server in (a, b)}
    assert not sessions[a.url] & sessions[b.url]
    assert len(sessions[a.url]) + len(sessions[b.url]) == 30
    assert abs(len(sessions[a.url]) - len(sessions[b.url])) <= 10, {u: len(s) for u, s in sessions.items()}


@pytest.mark.parametrize("workers", [2, 4])
def test_cli_two_servers_share_out_workers_of_one_env_loop_each(tmp_path, llm_servers, monkeypatch, workers):
    """The default of one env loop per worker: each worker process balances on its own, so
    without a per-worker tie-break every worker would send every trajectory to the first
    server and leave the second idle."""
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    a, b = llm_servers(lake_tool_solver, 2)
    run_ok("--mode", "gym", "--data", "frozenlake", "--agent", "openai", "--model", "test-model",
           "--base-url", a.url, "--base-url", b.url, "--tool-calls", "--num-rollouts", str(workers),
            "--output-dir", str(tmp_path), "--run-id", "one-loop")
    sessions = {server.url: {r["headers"]["x-session-id"] for r in server.requests} for server in (a, b)}
    assert not sessions[a.url] & sessions[b.url]
    assert len(sessions[a.url]) + len(sessions[b.url]) == 30
    # half the workers on each server, each keeping to its own
    records = read_results(tmp_path / "one-loop")
    used = defaultdict(set)
    for record in records:
        used[record["worker"]].add(record["usage"]["server"])
    assert sorted(len(urls) for urls in used.values()) == [1] * workers, dict(used)
    assert Counter(next(iter(urls)) for urls in used.values()) == {a.url: workers // 2, b.url: workers // 2}
    # the load (trajectories in flight, over time: the sum of their durations) is even;
    # counts of trajectories are not a measure, an 8x8 lake takes many 4x4 ones' time
    load = Counter()
    for record in records:
        load[record["usage"]["server"]] += record["duration_s"]
    assert min(load.values()) >= 0.6 * max(load.values()), dict(load)


# -- sampling per attempt ---------------------------------------------------------------------


def test_an_attempts_sampling_is_merged_over_the_run_configs():
    config = build_config({"temperature": 0.7, "max_tokens": 100, "sampling": ["top_p=0.9", "seed=1"]})
    assert sampled_fields(config) == ({"temperature": 0.7, "max_tokens": 100}, {"top_p": 0.9, "seed": 1})
    assert sampled_fields(config, {"temperature": 0, "top_p": 1.0}) == (
        {"temperature": 0, "max_tokens": 100}, {"top_p": 1.0, "seed": 1})
    table = build_config({"sampling": ["temperature=1.0"]})
    assert sampled_fields(table, {"temperature": 0}) == ({"temperature": 0}, {})


def test_cli_preflight_probes_every_server(tmp_path, llm_servers, monkeypatch):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    a, b = llm_servers(_echo, 2)
    # --model: one the servers list (another is a problem the preflight names)
    args = ["run", "--mode", "gym", "--data", "frozenlake", "--agent", "openai", "--base-url", a.url,
            "--base-url", b.url, "--model", "test-model", "--tool-calls", "--dry-run", "--check-endpoint",
            "--output-dir", str(tmp_path)]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 0, result.output
    assert a.model_listings == 1 and b.model_listings == 1
    # a server that does not answer: the run goes on at the other and asks it again after each
    # cool-down (it may be starting), so the dry run warns of it by name (it exited 2); none
    # answering is the problem the run would stop at
    b.stop()
    result = CliRunner().invoke(main, args)
    warned = [line for line in result.output.splitlines() if "asks this server again as it does a failing one" in line]
    assert result.exit_code == 0 and len(warned) == 1, result.output
    assert f"the model endpoint {b.url} is not reachable" in warned[0], result.output
    a.stop()
    result = CliRunner().invoke(main, args)
    said = " ".join(result.output.split())
    assert result.exit_code == 2 and "no server of the fleet serves the run" in said, said
    assert f"{a.url} is not reachable" in said and f"{b.url} is not reachable" in said, said


def test_cli_preflight_of_a_fleet_with_a_server_of_another_model_says_what_the_run_does(tmp_path, llm_servers,
                                                                                       monkeypatch):
    """One server of the fleet lists another model: the run leaves it out for its whole length
    and goes on at the others, so the dry run passes with a warning naming it (it exited 2 and advised --model,
    which the good servers serve); every server refusing fails it, as the run would stop."""
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    good, other = llm_servers(_echo, 2)
    other.models = ["other-model"]
    args = ["run", "--mode", "gym", "--data", "frozenlake", "--agent", "openai", "--base-url", good.url,
            "--base-url", other.url, "--model", "test-model", "--dry-run", "--check-endpoint",
            "--output-dir", str(tmp_path)]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 0, result.output
    warned = [line for line in result.output.splitlines() if "leaves this server out for the whole run" in line]
    assert len(warned) == 1 and f"{other.url} does not list the model 'test-model'" in warned[0], result.output
    assert "it lists other-model" in warned[0] and "give --model" not in result.output, result.output
    good.models = ["third-model"]
    result = CliRunner().invoke(main, args)
    said = " ".join(result.output.split())
    assert result.exit_code == 2 and "no server of the fleet serves the run" in said, said
    assert f"{good.url} does not list the model 'test-model'" in said and "it lists other-model" in said


# -- a server that refuses the run's settings -------------------------------------------------


def _refuses(body):
    """A server restarted with another model: vLLM's 404 for the run's."""
    return {"status": 404, "message": f"The model `{body.get('model')}` does not exist."}


def test_cli_a_fleet_server_that_refuses_the_model_is_taken_out_and_the_run_goes_on(tmp_path, llm_servers,
                                                                                    monkeypatch):
    """One server of the fleet answers 404 (it serves another model): it is taken out of the
    rotation, named once (console, events.jsonl, summary), and its trajectories go on at the
    others; it stopped the whole run (exit 2) as a refusal on a single endpoint does. A server
    that does not answer at all (a fleet entry with a wrong port) is named too: only
    results.jsonl said so."""
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    (good,) = llm_servers(_echo)
    (wrong,) = llm_servers(_refuses)
    (dead,) = llm_servers(_echo)
    dead.stop()

    # one worker: its first trajectory starts at the first server, refused, then the dead one
    result = CliRunner().invoke(main, [
        "run", "--mode", "gym", "--data", "frozenlake", "--limit", "3", "--agent", "openai", "--model", "test-model",
        "--max-turns", "1", "--num-rollouts", "1", "--base-url", wrong.url, "--base-url", dead.url,
        "--base-url", good.url, "--no-progress", "--output-dir", str(tmp_path), "--run-id", "one-refuses"])
    assert result.exit_code == 0, result.output
    said = " ".join(result.output.split())
    assert said.count(f"server taken out of the rotation, it refused the run's settings: {wrong.url}") == 1, said
    assert said.count(f"server left out for its cool-down, it failed: {dead.url}") == 1, said
    records = read_results(tmp_path / "one-refuses")
    assert len(records) == 3 and all(r["final"] and not r["infrastructure"] for r in records), records
    moves = [m for r in records for m in r["usage"].get("server_moves", [])]
    assert [(m["from"], m["to"], m.get("refused", False)) for m in moves] == [
        (wrong.url, dead.url, True), (dead.url, good.url, False)]
    assert "HTTP 404" in moves[0]["reason"] and "does not exist" in moves[0]["reason"]
    # what the server said; not a single endpoint's fix (a new --run-id, a resume): the run goes on
    assert "--run-id" not in moves[0]["reason"] and "resume" not in moves[0]["reason"]
    events = [json.loads(line) for line in (tmp_path / "one-refuses" / "events.jsonl").read_text().splitlines()]
    assert [(e["event"], e["reason"].split(": ")[0]) for e in events if e["event"].startswith("server_")] == [
        ("server_refused", wrong.url), ("server_failed", dead.url)]
    log_text = (tmp_path / "one-refuses" / "run.log").read_text()
    assert log_text.count(f"model server {wrong.url} refused this run's settings and was taken out") == 1
    assert log_text.count(f"model server {dead.url} failed") == 1
    summary = json.loads((tmp_path / "one-refuses" / "summary.json").read_text())
    assert list(summary["servers_refused"]) == [wrong.url] and list(summary["servers_failed"]) == [dead.url]


def test_cli_a_fleet_server_whose_models_lack_the_runs_model_gets_no_trajectory(tmp_path, llm_servers):
    """A fleet's server whose GET /models lists another model (SGLang answers a POST for any
    model name, so no request tells): the run asks each server at its start and every worker
    leaves that one out for the whole run, whatever the cool-down: no chat POST reaches it
    (it got half the trajectories), each record ran on the other, and the run says so once.
    When no server lists it, the run stops there (exit 2) before any request."""
    good, other = llm_servers(_echo, 2)
    other.models = ["other-model"]
    env = {name: value for name, value in os.environ.items() if name != "OPENAI_API_KEY"}

    def run(run_id: str) -> subprocess.CompletedProcess:
        return subprocess.run([
            sys.executable, "-m", "parallel_rollout.cli", "run", "--mode", "gym", "--data", "frozenlake", "--limit",
            "6", "--agent", "openai", "--model", "test-model", "--max-turns", "1", "--base-url", other.url,
            "--base-url", good.url, "--num-rollouts", "2", "--server-cooldown", "0", "--no-progress",
            "--output-dir", str(tmp_path), "--run-id", run_id], capture_output=True, text=True, env=env, timeout=300)

    proc = run("other-model")
    assert proc.returncode == 0, proc.stderr
    assert other.model_listings == 1 and [r["path"] for r in other.requests] == []
    records = read_results(tmp_path / "other-model")
    assert len(records) == 6 and {r["usage"]["server"] for r in records} == {good.url}, records
    said = [line for line in proc.stderr.splitlines() if other.url in line]
    assert len(said) == 1 and "does not list the model 'test-model'" in said[0], proc.stderr
    assert "the run leaves this server out for the whole run: it is not asked again" in said[0], said
    good.models = ["third-model"]
    proc = run("none-serves")
    assert proc.returncode == 2 and "no server of the fleet serves the run" in proc.stderr, proc.stderr
    assert len(good.requests) == 6 and other.requests == []  # the first run's alone


def test_cli_a_fleet_server_down_at_start_that_comes_up_serving_another_model_gets_no_trajectory(tmp_path, llm_servers):
    """A fleet's server that does not answer the run's start check (not up yet) stays in the
    rotation; when it comes up later serving another model (SGLang answers a POST for any model
    name), the worker that first reaches it asks its /models, once, and leaves it out as the
    start check would: no chat POST reaches it (it got the trajectories sent its way), and one
    warning line names it and what it lists."""
    import socket

    from llm_server import LLMServer

    with socket.socket() as free:  # a port nothing listens on: the late server's, down at the start check
        free.bind(("127.0.0.1", 0))
        port = free.getsockname()[1]
    late: list[LLMServer] = []

    def first_reply_starts_the_late_server(body):
        if not late:  # the run is past its start check: the late server comes up, serving another model
            server = LLMServer(policy=_echo, port=port)
            server.models = ["other-model"]
            late.append(server.start())
        return _echo(body)

    (good,) = llm_servers(first_reply_starts_the_late_server)
    late_url = f"http://127.0.0.1:{port}/v1"
    env = {name: value for name, value in os.environ.items() if name != "OPENAI_API_KEY"}
    try:
        proc = subprocess.run([
            sys.executable, "-m", "parallel_rollout.cli", "run", "--mode", "gym", "--data", "frozenlake", "--limit",
            "4", "--agent", "openai", "--model", "test-model", "--max-turns", "1", "--base-url", late_url,
            "--base-url", good.url, "--num-rollouts", "1", "--server-cooldown", "0", "--no-progress",
            "--output-dir", str(tmp_path), "--run-id", "late"], capture_output=True, text=True, env=env, timeout=300)
    finally:
        for server in late:
            server.stop()
    assert proc.returncode == 0, proc.stderr
    assert late and [r["path"] for r in late[0].requests] == [] and late[0].model_listings == 1, proc.stderr
    records = read_results(tmp_path / "late")
    assert len(records) == 4 and {r["usage"]["server"] for r in records} == {good.url}, records
    said = [line for line in proc.stderr.splitlines() if late_url in line and "other-model" in line]
    assert len(said) == 1 and "does not list the model 'test-model' (--model): it lists other-model" in said[0], \
        proc.stderr


def _listening(handler):
    """An HTTP server of ``handler`` on a free port of 127.0.0.1, serving in a thread."""
    from http.server import ThreadingHTTPServer

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    httpd.daemon_threads = True
    threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
    return httpd


class _Unanswering:
    """A fleet server that is down in the way a hung host is: it takes the connection and hangs
    up without an answer. Its first GET /models waits (up to 4 s) for the other ``parties``
    servers' first ones, and records whether they all came (the start check asked them at once)."""

    def __init__(self, barrier) -> None:
        from http.server import BaseHTTPRequestHandler

        unanswering = self
        self.barrier, self.together = barrier, None

        class HangUp(BaseHTTPRequestHandler):
            def do_GET(self):
                if unanswering.together is None:
                    unanswering.together = False
                    try:
                        unanswering.barrier.wait()
                        unanswering.together = True
                    except threading.BrokenBarrierError:
                        pass
                self.close_connection = True  # no answer: the client sees the connection closed

            do_POST = do_GET

            def log_message(self, *args):
                pass

        self._httpd = _listening(HangUp)
        self.url = f"http://127.0.0.1:{self._httpd.server_address[1]}/v1"

    def stop(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()


def test_cli_the_start_check_asks_every_server_of_the_fleet_at_once_and_names_them_in_order(tmp_path, llm_servers):
    """A batch run of several --base-url asks each server's /models as it starts, 5 s at most
    each: asked one after another, a fleet of 8 servers down waited 40 s before the first task.
    They are asked at once (each of the unanswering servers saw the others' asks arrive while
    it held its own), and the warnings still name them in --base-url order."""
    down = [_Unanswering(threading.Barrier(3, timeout=4)) for _ in range(3)]
    for server in down:
        server.barrier = down[0].barrier
    (good,) = llm_servers(_echo)
    urls = [down[1].url, down[0].url, good.url, down[2].url]
    env = {name: value for name, value in os.environ.items() if name != "OPENAI_API_KEY"}
    try:
        proc = subprocess.run([
            sys.executable, "-m", "parallel_rollout.cli", "run", "--mode", "gym", "--data", "frozenlake", "--limit",
            "1", "--agent", "openai", "--model", "test-model", "--max-turns", "1", *[f"--base-url={u}" for u in urls],
            "--num-rollouts", "1", "--no-progress", "--output-dir", str(tmp_path), "--run-id", "at-once"],
            capture_output=True, text=True, env=env, timeout=300)
    finally:
        for server in down:
            server.stop()
    assert proc.returncode == 0, proc.stderr
    assert [server.together for server in down] == [True, True, True], proc.stderr
    warned = [line for line in proc.stderr.splitlines() if "asks this server again as it does a failing one" in line]
    assert [url for line in warned for url in urls if url in line] == [urls[0], urls[1], urls[3]], proc.stderr
    (record,) = read_results(tmp_path / "at-once")
    assert record["usage"]["server"] == good.url, record


def test_an_unheard_server_that_lists_another_model_where_no_other_serves_stops_the_turn(llm_servers):
    """The start check left one server out and did not hear the other; that one, up since,
    lists another model too: no server serves the run, so the turn is EndpointRefused (which
    stops a run, exit 2) naming both, and no chat POST reached either."""
    from parallel_rollout.agents import EndpointRefused, ModelClient

    left_out, unheard = llm_servers(_echo, 2)
    left_out.models = unheard.models = ["other-model"]
    client = ModelClient(build_config({"agent": "openai", "mode": "gym", "model": "test-model", "max_retries": 1,
                                       "base_url": [left_out.url, unheard.url]}))
    client.start(AttemptInfo("lake#0", 0, servers_left_out=(left_out.url,), servers_unheard=(unheard.url,)))
    with pytest.raises(EndpointRefused, match=f"every server of the fleet refuses .*{unheard.url} does not list "
                                              "the model 'test-model' \\(--model\\): it lists other-model"):
        client.chat([{"role": "user", "content": "go"}])
    assert left_out.requests == [] and unheard.requests == [] and unheard.model_listings == 1


def test_a_server_taken_out_for_a_refusal_is_tried_again_after_its_cool_down(llm_servers):
    """A refused turn moves on, marked so; the server is left out while it cools down and
    asked again after it (a restart with the right model serves). A refusal at one server and
    an outage at the other is the fleet's outage (model_unavailable, retried), not a refusal
    of the run's settings; a refusal at every server is EndpointRefused, which stops a run
    (exit 2, nothing graded, resumable) as a single endpoint's refusal does."""
    from parallel_rollout.agents import EndpointRefused, ModelClient, ModelUnavailable
    from parallel_rollout.agents.servers import pool_for

    (wrong,) = llm_servers(_refuses)
    (good,) = llm_servers(_echo)
    urls = [wrong.url, good.url]
    client = ModelClient(build_config({"agent": "openai", "mode": "gym", "base_url": urls, "max_retries": 1,
                                       "model": "test-model", "server_cooldown": 600}))
    client.backoff_base_s = 0.01
    client.start(AttemptInfo("lake#0", 0))
    assert client.chat([{"role": "user", "content": "go"}]).text == "<answer>Right</answer>"
    (move,) = client.usage()["server_moves"]
    assert (move["from"], move["to"], move["refused"]) == (wrong.url, good.url, True)
    client.start(AttemptInfo("lake#1", 0))  # cooling down: not asked again
    client.chat([{"role": "user", "content": "go"}])
    assert len(wrong.requests) == 1 and client.usage()["server"] == good.url
    pool = pool_for(urls, 600)  # the worker process's pool, which the client's route shares
    pool.cooldown_s = 0  # its cool-down over (restarted with the right model meanwhile)
    pool.refuse(wrong.url)
    wrong.policy = _echo
    client.start(AttemptInfo("lake#2", 0))
    assert client.chat([{"role": "user", "content": "go"}]).text == "<answer>Right</answer>"
    assert client.usage()["server"] == wrong.url and len(wrong.requests) == 2

    wrong.policy = _refuses
    good.policy = lambda body: {"status": 503, "message": "overloaded"}
    client.start(AttemptInfo("lake#3", 0))
    with pytest.raises(ModelUnavailable):
        client.chat([{"role": "user", "content": "go"}])
    good.policy, wrong.policy = _refuses, lambda body: {"status": 503, "message": "overloaded"}
    client.start(AttemptInfo("lake#4", 0))  # the outage first, the refusal last: an outage still
    with pytest.raises(ModelUnavailable, match=f"the other servers failed this turn .{wrong.url}"):
        client.chat([{"role": "user", "content": "go"}])
    wrong.policy = _refuses
    client.start(AttemptInfo("lake#5", 0))
    with pytest.raises(EndpointRefused, match=f"every server of the fleet refuses .{wrong.url}, {good.url}"):
        client.chat([{"role": "user", "content": "go"}])
    # a URL that is no API's (a static web server: 405 to the POST): the path, refused as a 404 is;
    # it was the attempt's error, graded 0
    wrong.policy, good.policy = (lambda body: {"status": 405, "message": "Method Not Allowed"}), _echo
    client.start(AttemptInfo("lake#6", 0))
    assert client.chat([{"role": "user", "content": "go"}]).text == "<answer>Right</answer>"
    assert client.usage()["server_moves"][0]["refused"] and "HTTP 405" in client.usage()["server_moves"][0]["reason"]
    alone = ModelClient(build_config({"agent": "openai", "mode": "gym", "base_url": wrong.url, "max_retries": 1}))
    with pytest.raises(EndpointRefused, match="takes no POST of the API there: it is not an OpenAI-compatible"):
        alone.chat([{"role": "user", "content": "go"}])


def test_an_abort_url_on_one_server_of_a_fleet_is_refused():
    """A full abort_url naming one server of several sent every abort there: the requests at
    the other servers were never told, and decoded on through a weight update. Its path goes to
    each request's own server; a URL elsewhere (a router that fans out) is taken."""
    fleet = ["http://10.0.0.1:30000/v1", "http://10.0.0.2:30000/v1"]
    with pytest.raises(ConfigError, match=r"abort_url 'http://10.0.0.1:30000/abort_request' is on one server of "
                                          r"the fleet \(10.0.0.1:30000\).*give its path, '/abort_request'"):
        build_config({"base_url": fleet, "abort_url": "http://10.0.0.1:30000/abort_request"})
    for taken in ("/abort_request", "http://10.0.0.9:8080/abort_request"):
        assert build_config({"base_url": fleet, "abort_url": taken}).abort_url == taken
    assert build_config({"base_url": fleet[0], "abort_url": "http://10.0.0.1:30000/abort_request"}).abort_url


def test_cli_a_ctrl_c_during_the_fleets_start_check_starts_no_engine(tmp_path, llm_servers):
    """Ctrl-C while the run's start check waits on a fleet's server that holds its GET /models:
    the run stops there (exit 130, its resume line), starting no engine (no pool, no worker)
    and saying nothing of one. Before, it started the engine all the same and said
    "[Concurrency] Set max concurrent rollouts to 1" after "signal 2: stopping". It stops at once,
    not when the held server's probe times out."""
    import signal
    import time
    from http.server import BaseHTTPRequestHandler

    asked, release = threading.Event(), threading.Event()

    class Holds(BaseHTTPRequestHandler):
        def do_GET(self):
            asked.set()
            release.wait(30)
            self.close_connection = True

        def log_message(self, *args):
            pass

    httpd = _listening(Holds)
    (good,) = llm_servers(_echo)
    env = {name: value for name, value in os.environ.items() if name != "OPENAI_API_KEY"}
    proc = subprocess.Popen([
        sys.executable, "-m", "parallel_rollout.cli", "run", "--mode", "gym", "--data", "frozenlake", "--limit", "1",
        "--agent", "openai", "--model", "test-model", "--max-turns", "1", "--base-url",
        f"http://127.0.0.1:{httpd.server_address[1]}/v1", "--base-url", good.url, "--num-rollouts", "1",
        "--no-progress", "--output-dir", str(tmp_path), "--run-id", "held"], stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True, env=env)
    try:
        assert asked.wait(120), "the start check never asked the held server"
        time.sleep(0.5)  # the handler is the run's by now: the check waits on the held server
        proc.send_signal(signal.SIGINT)
        signalled = time.monotonic()
        _, stderr = proc.communicate(timeout=120)
        took = time.monotonic() - signalled
    finally:
        release.set()
        proc.kill()
        proc.wait()
        httpd.shutdown()
        httpd.server_close()
    assert proc.returncode == 130, stderr
    assert "signal 2: stopping" in stderr and "resume with:" in stderr, stderr
    assert "[Concurrency]" not in stderr and good.requests == [], stderr
    assert not (tmp_path / "held" / "events.jsonl").exists()  # the engine's: it never started
    # within the 3 s grace it announces ("finishing what completes within 3s"), not after the
    # held server's probe timed out (5 s: the check's threads were joined, at the check and at exit)
    assert "within 3s" in stderr and took < 3.0, (took, stderr)


class _Proxy:
    """A proxy in front of a model server (nginx, a load balancer): 502 to every request
    until ``forward`` is set (the server behind it is down), then what the server answers."""

    def __init__(self, behind: str) -> None:
        import urllib.error
        import urllib.request
        from http.server import BaseHTTPRequestHandler

        proxy = self
        self.forward, self.models_asked = False, 0

        class Forwards(BaseHTTPRequestHandler):
            def do_GET(self):
                proxy.models_asked += self.path.endswith("/models")
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0)) if self.command == "POST" else None
                status, answer = 502, b"<html><body>502 Bad Gateway</body></html>"
                if proxy.forward:
                    request = urllib.request.Request(behind + self.path, data=body,
                                                     headers=dict(self.headers), method=self.command)
                    try:
                        with urllib.request.urlopen(request, timeout=30) as reply:
                            status, answer = reply.status, reply.read()
                    except urllib.error.HTTPError as exc:
                        status, answer = exc.code, exc.read()
                self.send_response(status)
                self.send_header("Content-Length", str(len(answer)))
                self.end_headers()
                self.wfile.write(answer)

            do_POST = do_GET

            def log_message(self, *args):
                pass

        self._httpd = _listening(Forwards)
        self.url = f"http://127.0.0.1:{self._httpd.server_address[1]}/v1"

    def stop(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()


def test_cli_a_fleet_server_behind_a_proxy_answering_502_is_asked_again_once_it_is_up(tmp_path, llm_servers):
    """A fleet's server behind a proxy that answers 502 while the server is down (at the start
    check, and at the first visit of a trajectory) is taken as not answering: asked its /models
    again at a later visit, and left out once the server behind it is up serving another model
    (SGLang answers a POST for any model name): no chat POST reaches it. Before, the 502 to a
    first visit's GET /models counted as an answer, so it was never asked again and took
    trajectories the other model answered."""
    good, behind = llm_servers(_echo, 2)
    behind.models = ["other-model"]
    proxy = _Proxy(behind.url.removesuffix("/v1"))

    def up_once_the_first_visit_met_the_502(body):
        if proxy.models_asked >= 2:  # the start check's GET, then a trajectory's first visit's
            proxy.forward = True
        return _echo(body)

    good.policy = up_once_the_first_visit_met_the_502
    env = {name: value for name, value in os.environ.items() if name != "OPENAI_API_KEY"}
    try:
        proc = subprocess.run([
            sys.executable, "-m", "parallel_rollout.cli", "run", "--mode", "gym", "--data", "frozenlake", "--limit",
            "6", "--agent", "openai", "--model", "test-model", "--max-turns", "1", "--base-url", proxy.url,
            "--base-url", good.url, "--num-rollouts", "1", "--server-cooldown", "0", "--no-progress",
            "--output-dir", str(tmp_path), "--run-id", "proxied"], capture_output=True, text=True, env=env,
            timeout=300)
    finally:
        proxy.stop()
    assert proc.returncode == 0, proc.stderr
    assert [r["path"] for r in behind.requests] == [] and proxy.forward, proc.stderr
    assert behind.model_listings >= 1, (proxy.models_asked, proc.stderr)
    records = read_results(tmp_path / "proxied")
    assert len(records) == 6 and {r["usage"]["server"] for r in records} == {good.url}, records
    said = [line for line in proc.stderr.splitlines() if proxy.url in line and "other-model" in line]
    assert len(said) == 1 and "does not list the model 'test-model' (--model): it lists other-model" in said[0], \
        proc.stderr
