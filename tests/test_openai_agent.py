"""The openai agent: its prompts, its requests against a local fake server, full runs.

The fake server (``llm_server``) is a real HTTP server on 127.0.0.1 that speaks the chat
completions API and fails on cue: rate limits with Retry-After, 5xx, replies slower than the
client's timeout, malformed bodies. Faults are a table over one test body. End-to-end runs
drive the real Runner over the shipped shell benchmark with a "model" that replays each
task's reference, so 25/25 proves the whole loop: render → request → parse → shell → grade,
with token usage summed into summary.json. Nothing here talks to anything but 127.0.0.1.
The command agent: tests/test_command_agent.py.
"""

from __future__ import annotations

import json
import threading
import time

import pytest

from agent_runs import SHELL_KEYS, SHELL_LINES, make_config, needs_bwrap, run_shell
from conftest import SHELL_TASKS, assert_exactly_once, read_results
from llm_server import completion, llm_server, lookup_solver, shell_solver  # noqa: F401 - fixture
from click.testing import CliRunner

from parallel_rollout.agents import get_agent, prompts
from parallel_rollout.agents.base import AgentError
from parallel_rollout.agents.command import CommandAgent
from parallel_rollout.agents.episode import EndpointRefused, ModelUnavailable
from parallel_rollout.agents.model_checks import check_model_settings
from parallel_rollout.agents.openai_agent import OpenAIAgent
from parallel_rollout.agents.retries import parse_retry_after
from parallel_rollout.agents.wire import reply_of
from parallel_rollout.cli import main
from parallel_rollout.errors import ConfigError
from parallel_rollout.runner import Runner
from parallel_rollout.tasks import Task


MATH_TASK = Task(id="m1", mode="math", payload={"problem": "What is 6 times 7?", "answer": "42"})


def openai_agent(server, **overrides) -> OpenAIAgent:
    """An openai agent on ``server`` with fast backoff, reset on MATH_TASK."""
    values = dict(agent="openai", mode="math", base_url=server.url, max_retries=2, api_timeout_s=5.0)
    values.update(overrides)
    agent = OpenAIAgent(make_config(**values))
    agent.model.backoff_base_s = 0.01
    agent.reset(MATH_TASK)
    return agent


# -- prompts --------------------------------------------------------------------------------


@pytest.mark.parametrize("reply, action", [
    ("```bash\nls -la ~\n```", {"command": "ls -la ~"}),
    ("I'll look first:\n```sh\n$ cat ~/a.txt\n```\nthen decide.", {"command": "cat ~/a.txt"}),
    ("```bash\necho a > f\n```\nand\n```bash\ncat f\n```", {"command": "echo a > f\ncat f"}),
    ("```bash\necho cut off by max_tokens", {"command": "echo cut off by max_tokens"}),
    ("echo bare", {"command": "echo bare"}),
    ("DONE", "DONE"),
    ("`DONE`.", "DONE"),
    ("The file is in place.\n\nDONE", "DONE"),
    ("```\nDONE\n```", "DONE"),
    ("```python\nprint(1)\n```\nDONE", "DONE"),
    ("echo DONE > status.txt", {"command": "echo DONE > status.txt"}),
])
def test_parse_shell(reply, action):
    assert prompts.parse("shell", reply) == action


def test_render_shell_shows_the_task_then_each_command_result():
    first = prompts.render("shell", {"instruction": "make hello.txt", "output": "", "returncode": None})
    assert "make hello.txt" in first and "Exit status" not in first
    later = prompts.render("shell", {"instruction": "make hello.txt", "output": "x" * 10_000 + "END",
                                     "error": "cat: nope", "returncode": 1})
    assert "Exit status: 1" in later and "cat: nope" in later and later.count("x") < 4000
    assert "END" in later and "characters cut" in later


def test_render_py_and_math_and_a_mode_without_prompts():
    prompt = 'def add(a, b):\n    """Sum."""\n'
    first = prompts.render("py", {"prompt": prompt, "entry_point": "add", "feedback": None})
    assert prompt in first and "add" in first
    retry = prompts.render("py", {"prompt": prompt, "entry_point": "add",
                                  "feedback": {"kind": "assertion", "detail": "AssertionError at line 3",
                                               "output_tail": "printed"}})
    assert "assertion" in retry and "AssertionError at line 3" in retry and "printed" in retry
    assert "What is 6 times 7?" in prompts.render("math", {"problem": "What is 6 times 7?"})
    assert "\\boxed" in prompts.system_prompt("math") and "```python" in prompts.system_prompt("py")
    reply = "```python\ndef add(a, b):\n    return a + b\n```"
    assert prompts.parse("py", reply) == reply and prompts.parse("math", "\\boxed{42}") == "\\boxed{42}"
    assert json.loads(prompts.render("unprompted", {"query": "q"})) == {"query": "q"}
    assert prompts.parse("unprompted", " raw ") == " raw "
    assert prompts.system_prompt("unprompted") == prompts.GENERIC_SYSTEM


# -- the openai agent, one request at a time ------------------------------------------------


def test_rate_limit_waits_for_retry_after(llm_server):
    server = llm_server([{"status": 429, "retry_after": 1},
                         {"reply": "6*7 = \\boxed{42}", "usage": {"prompt_tokens": 7, "completion_tokens": 3}}])
    agent = openai_agent(server)
    started = time.monotonic()
    assert agent.act({"problem": "What is 6 times 7?"}) == "6*7 = \\boxed{42}"
    assert time.monotonic() - started >= 1.0
    assert server.requests[1]["time"] - server.requests[0]["time"] >= 1.0
    assert agent.usage() == {"prompt_tokens": 7, "completion_tokens": 3, "requests": 2, "retries": 1,
                             "model": "gpt-4.1-2025-04-14"}


def test_backoff_without_retry_after_grows_and_never_retries_at_once(llm_server):
    # equal jitter: wait n is at least half of base * 2**n
    server = llm_server([{"status": 500}, {"status": 502}, {"reply": "\\boxed{42}"}])
    agent = openai_agent(server)
    agent.model.backoff_base_s = 0.4
    assert agent.act({"problem": "What is 6 times 7?"}) == "\\boxed{42}"
    times = [r["time"] for r in server.requests]
    assert times[1] - times[0] >= 0.2 and times[2] - times[1] >= 0.4
    assert (agent.usage()["requests"], agent.usage()["retries"]) == (3, 2)


#: fault → what the give-up error must say about it
FAULTS = {
    "500": ({"status": 500}, "HTTP 500"),
    "503 retry-after-ms": ({"status": 503, "retry_after_ms": 20}, "HTTP 503"),
    "429 retry-after 0": ({"status": 429, "retry_after": 0}, "HTTP 429"),
    "slow past the timeout": ({"sleep": 3, "reply": "too late"}, "no response within 0.5 s"),
    "not json": ({"malformed": "not json"}, "the body is not JSON"),
    "no choices": ({"malformed": "no choices"}, "no 'choices'"),
    "null content": ({"malformed": "null content"}, "content is null"),
}


@pytest.mark.parametrize("fault", sorted(FAULTS))
def test_a_fault_is_retried_once(llm_server, fault):
    step, _ = FAULTS[fault]
    server = llm_server([step, {"reply": "\\boxed{42}"}])
    agent = openai_agent(server, api_timeout_s=0.5)
    assert agent.act({"problem": "What is 6 times 7?"}) == "\\boxed{42}"
    usage = agent.usage()
    assert (usage["requests"], usage["retries"]) == (2, 1)
    # Only the reply that arrived counts tokens (the server's default usage is 10 + 5).
    assert (usage["prompt_tokens"], usage["completion_tokens"]) == (10, 5)
    assert server.requests[0]["body"] == server.requests[1]["body"], "a retry must resend the same turn"


@pytest.mark.parametrize("fault", sorted(FAULTS))
def test_a_fault_past_max_retries_is_a_clear_error(llm_server, fault):
    step, says = FAULTS[fault]
    server = llm_server([step] * 3, policy=lambda body: pytest.fail("a 4th request was made"))
    agent = openai_agent(server, api_timeout_s=0.5, max_retries=2)
    with pytest.raises(AgentError) as caught:
        agent.act({"problem": "What is 6 times 7?"})
    message = str(caught.value)
    assert f"{server.url}/chat/completions" in message and says in message and "gave up after 3" in message
    # a server that did not answer is infrastructure (retried, never graded); one that
    # answered nonsense is the attempt's error
    assert isinstance(caught.value, ModelUnavailable) == ("malformed" not in step)
    assert caught.value.infrastructure == ("malformed" not in step)
    assert agent.usage()["requests"] == 3 and agent.usage()["retries"] == 2


@pytest.mark.parametrize("status, error", [(400, AgentError), (401, EndpointRefused), (404, EndpointRefused)])
def test_client_errors_are_not_retried(llm_server, status, error):
    """A 400 is the attempt's error; a refused key or an unknown model (401, 403, 404) is
    EndpointRefused, which stops a batch run (tests/test_endpoint_refusals.py)."""
    server = llm_server([{"status": status}])
    agent = openai_agent(server)
    with pytest.raises(error, match=f"HTTP {status}") as caught:
        agent.act({"problem": "What is 6 times 7?"})
    assert type(caught.value) is error and caught.value.infrastructure == (error is EndpointRefused)
    assert len(server.requests) == 1


def test_an_unreachable_endpoint_is_a_connection_error(llm_server):
    server = llm_server()
    server.stop()  # nothing listens on its port any more
    agent = openai_agent(server, max_retries=1)
    # each try asks its GET /models first (agents/servers.py): refused, so no chat request is sent
    with pytest.raises(ModelUnavailable, match="gave up after 2 requests.*not reachable.*Connection refused"):
        agent.act({"problem": "What is 6 times 7?"})
    assert agent.usage()["requests"] == 0


def test_one_conversation_per_episode(llm_server, monkeypatch):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    server = llm_server([{"reply": "```bash\necho hi > ~/a\n```"}, {"reply": "DONE"}, {"reply": "```bash\nls\n```"}])
    agent = openai_agent(server, mode="shell")
    task = Task(id="s1", mode="shell", payload={"instruction": "make ~/a", "check": "true"})
    agent.reset(task)
    assert agent.act({"instruction": "make ~/a", "output": "", "returncode": None}) == {"command": "echo hi > ~/a"}
    assert agent.act({"instruction": "make ~/a", "output": "", "error": "", "returncode": 0}) == "DONE"
    messages = server.requests[1]["body"]["messages"]
    assert [m["role"] for m in messages] == ["system", "user", "assistant", "user"]
    assert messages[0]["content"] == prompts.SHELL_SYSTEM and "make ~/a" in messages[1]["content"]
    assert messages[2]["content"] == "```bash\necho hi > ~/a\n```" and "Exit status: 0" in messages[3]["content"]
    assert server.requests[1]["body"]["model"] == "gpt-4.1-2025-04-14"
    assert server.requests[0]["authorization"] == "Bearer EMPTY"  # no key set: the placeholder
    assert agent.usage()["requests"] == 2
    agent.reset(task)  # a new episode starts a new conversation and new counts
    assert agent.usage()["requests"] == 0
    agent.act({"instruction": "make ~/a", "output": "", "returncode": None})
    assert [m["role"] for m in server.requests[2]["body"]["messages"]] == ["system", "user"]


def test_sampling_settings_are_sent_only_when_set(llm_server, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    server = llm_server([{"reply": "a"}, {"reply": "b"}])
    openai_agent(server).act({"problem": "p"})
    openai_agent(server, temperature=0.2, max_tokens=64, model="local-model").act({"problem": "p"})
    plain, tuned = (r["body"] for r in server.requests)
    assert "temperature" not in plain and "max_tokens" not in plain
    assert (tuned["temperature"], tuned["max_tokens"], tuned["model"]) == (0.2, 64, "local-model")
    assert server.requests[0]["authorization"] == "Bearer sk-test"


def test_check_config_needs_a_key_only_for_openai_itself(monkeypatch):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    with pytest.raises(ConfigError, match="--agent openai needs OPENAI_API_KEY"):
        check_model_settings(make_config(agent="openai", base_url=None))
    # the Python API, without a Runner: the settings' fault, at the first request, not the policy's
    with pytest.raises(EndpointRefused, match="--agent openai needs OPENAI_API_KEY"):
        agent = OpenAIAgent(make_config(agent="openai", base_url=None))
        agent.reset(MATH_TASK)
        agent.act({"problem": "1+1"})
    check_model_settings(make_config(agent="openai", base_url="http://127.0.0.1:9/v1"))
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    check_model_settings(make_config(agent="openai", base_url=None))


def test_retry_after_header_forms():
    assert parse_retry_after({"retry-after": "2"}) == 2.0
    assert parse_retry_after({"retry-after-ms": "1500", "retry-after": "9"}) == 1.5
    assert parse_retry_after({"retry-after": "Wed, 21 Oct 2015 07:28:00 GMT"}) == 0.0  # in the past
    from email.utils import formatdate
    assert 3.0 <= parse_retry_after({"retry-after": formatdate(time.time() + 5, usegmt=True)}) <= 5.0
    assert parse_retry_after({"retry-after": "soon"}) is None and parse_retry_after({}) is None


def test_reply_of_reads_text_and_usage():
    body = json.dumps(completion("hi", "m", {"prompt_tokens": 4, "completion_tokens": 1}))
    assert reply_of(body) == ("hi", {"prompt_tokens": 4, "completion_tokens": 1})
    assert reply_of(json.dumps({"choices": [{"message": {"content": "x"}}]})) == ("x", {})


def test_builtin_agent_names():
    assert get_agent("openai") is OpenAIAgent and get_agent("command") is CommandAgent
    assert OpenAIAgent.options == {"model", "base_url", "temperature", "max_tokens", "sampling", "extra_body",
                                   "tool_calls", "session_header", "server_cooldown", "tokenizer", "max_model_len",
                                   "on_length", "api_timeout_s", "partial_rollout", "abort_url", "policy_gate"}
    assert CommandAgent.options == {"agent_cmd"}


def test_lookup_solver_answers_math_and_py_like_a_model(llm_server):
    prompt = 'def add(a, b):\n    """Sum of a and b."""\n'
    server = llm_server(policy=lookup_solver({"What is 6 times 7?": "So \\boxed{42}.",
                                              prompt: f"```python\n{prompt}    return a + b\n```"}))
    assert openai_agent(server).act({"problem": "What is 6 times 7?"}) == "So \\boxed{42}."
    coder = openai_agent(server, mode="py")
    coder.reset(Task(id="p1", mode="py", payload={"prompt": prompt, "entry_point": "add", "test": ""}))
    answer = coder.act({"prompt": prompt, "entry_point": "add", "feedback": None})
    assert answer.startswith("```python\ndef add(a, b):") and "return a + b" in answer


# -- full runs --------------------------------------------------------------------------------


@needs_bwrap
def test_openai_agent_solves_the_shell_benchmark(tmp_path, llm_server, monkeypatch):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    # A 429 and a 500 first, wherever they land, then a "model" that knows every reference.
    server = llm_server([{"status": 429, "retry_after": 0}, {"status": 500, "retry_after_ms": 10}],
                        policy=shell_solver(SHELL_TASKS))
    outcome = run_shell(tmp_path, agent="openai", base_url=server.url)
    assert outcome.exit_code == 0, outcome.message
    finals = assert_exactly_once(outcome.run_dir, SHELL_KEYS)
    failed = {k: (r["status"], r["failure"]) for k, r in finals.items() if r["status"] != "success"}
    assert not failed
    by_id = {t["id"]: t for t in SHELL_LINES}
    records = read_results(outcome.run_dir)
    for record in records:
        usage = record["usage"]
        assert usage["model"] == "gpt-4.1-2025-04-14"
        assert usage["prompt_tokens"] > 0 and usage["completion_tokens"] > 0
        # One request per reference command plus one for DONE, plus its retries.
        assert usage["requests"] == len(by_id[record["task_id"]]["reference"]) + 1 + usage["retries"]
    replies = [r["step"] for r in server.requests if "reply" in r["step"]]
    summary = json.loads((outcome.run_dir / "summary.json").read_text())
    assert summary["usage"] == {
        "prompt_tokens": sum(s["usage"]["prompt_tokens"] for s in replies),
        "completion_tokens": sum(s["usage"]["completion_tokens"] for s in replies),
        "requests": len(server.requests),
        "retries": 2,
    }
    assert sum(r["usage"]["retries"] for r in records) == 2


MATH_TASKS = SHELL_TASKS.parent / "math_tasks.jsonl"


@pytest.mark.slow
@pytest.mark.skipif(not MATH_TASKS.exists(), reason="no math benchmark")
def test_openai_agent_solves_the_math_benchmark(tmp_path, llm_server, monkeypatch):
    """No VM: the problem must reach the model and the boxed answer must reach the grader."""
    pytest.importorskip("math_verify")
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    tasks = [json.loads(line) for line in MATH_TASKS.read_text().splitlines() if line.strip()]
    server = llm_server(policy=lookup_solver({t["problem"]: f"Working… so \\boxed{{{t['answer']}}}" for t in tasks}))
    outcome = Runner(make_config(mode="math", data=str(MATH_TASKS), agent="openai", base_url=server.url,
                                 num_rollouts=2, output_dir=str(tmp_path / "out"), run_id="math",
                                 progress=False)).run()
    assert outcome.exit_code == 0, outcome.message
    finals = assert_exactly_once(outcome.run_dir, {f"{t['id']}#0" for t in tasks})
    assert {r["status"] for r in finals.values()} == {"success"}
    summary = json.loads((outcome.run_dir / "summary.json").read_text())
    assert summary["usage"]["requests"] == len(tasks) == len(server.requests)


@pytest.mark.parametrize("agent, says", [("openai", "OPENAI_API_KEY"), ("command", "needs --agent-cmd")])
def test_the_runner_checks_the_agent_before_anything_runs(tmp_path, monkeypatch, agent, says):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    with pytest.raises(ConfigError, match=says):
        run_shell(tmp_path, agent=agent)
    assert not (tmp_path / "out").exists()


def test_a_model_endpoint_that_is_down_stops_the_run_and_its_resume_finishes_it(tmp_path, llm_server, monkeypatch):
    """Every sample left must not become a final failure while the server is down: the run
    stops (exit 1) with its model_unavailable attempts not final, and the resume runs them."""
    pytest.importorskip("math_verify")
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    lines = MATH_TASKS.read_text().splitlines()[:3]
    tasks = tmp_path / "math.jsonl"
    tasks.write_text("\n".join(lines) + "\n")
    answers = {json.loads(line)["problem"]: f"\\boxed{{{json.loads(line)['answer']}}}" for line in lines}
    solver, down = lookup_solver(answers), threading.Event()
    down.set()
    server = llm_server(policy=lambda body: {"status": 503, "retry_after_ms": 10} if down.is_set() else solver(body))
    args = ["run", "--mode", "math", "--data", str(tasks), "--agent", "openai", "--base-url", server.url,
            "--max-retries", "1", "--num-rollouts", "1", "--output-dir", str(tmp_path / "out"),
            "--run-id", "down", "--no-progress"]
    first = CliRunner().invoke(main, args)
    assert first.exit_code == 1, (first.output, first.exception)
    said = " ".join(first.output.split())
    assert "the model endpoint failed 2 attempts in a row" in said and "HTTP 503" in said and "--resume" in said
    run_dir = tmp_path / "out" / "down"
    records = read_results(run_dir)
    assert [(r["status"], r["infrastructure"], r["final"]) for r in records] == [("model_unavailable", True, False)] * 2
    down.clear()
    resumed = CliRunner().invoke(main, args + ["--resume"])
    assert resumed.exit_code == 0, (resumed.output, resumed.exception)
    finals = assert_exactly_once(run_dir, {f"{json.loads(line)['id']}#0" for line in lines})
    assert all(r["status"] == "success" for r in finals.values()), finals


def test_an_attempt_whose_time_runs_out_while_a_failed_model_request_is_retried_is_the_endpoints(
        tmp_path, llm_server, monkeypatch):
    """A 429 asking for 60 s, an attempt of 6 s: the time ran out in the retry's wait, and the
    attempt was a final task_timeout graded 0, which --resume never runs again. It is the
    endpoint's failure (model_unavailable: retried, never graded), the run stops for a resume
    as for an endpoint that is down, and the resume finishes it once the server answers (in
    the same 6 s: a resume keeps --task-timeout, and a worker's start with math-verify's
    import took over 2 s on a loaded machine)."""
    pytest.importorskip("math_verify")
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    line = MATH_TASKS.read_text().splitlines()[0]
    tasks = tmp_path / "math.jsonl"
    tasks.write_text(line + "\n")
    task = json.loads(line)
    solver, limited = lookup_solver({task["problem"]: f"\\boxed{{{task['answer']}}}"}), threading.Event()
    limited.set()
    server = llm_server(policy=lambda body: {"status": 429, "retry_after": 60} if limited.is_set() else solver(body))
    args = ["run", "--mode", "math", "--data", str(tasks), "--agent", "openai", "--base-url", server.url,
            "--max-retries", "1", "--task-timeout", "6", "--num-rollouts", "1",
            "--output-dir", str(tmp_path / "out"), "--run-id", "limited", "--no-progress"]
    first = CliRunner().invoke(main, args)
    assert first.exit_code == 1, (first.output, first.exception)
    records = read_results(tmp_path / "out" / "limited")
    assert [(r["status"], r["infrastructure"], r["final"]) for r in records] == [("model_unavailable", True, False)] * 2
    message = records[0]["failure"]["message"]
    assert "--task-timeout 6s" in message and "while the model endpoint failed a request" in message, message
    assert "retrying a model request the endpoint failed" in message  # the phase it ran out in
    assert "--resume" in " ".join(first.output.split())
    limited.clear()
    resumed = CliRunner().invoke(main, args + ["--resume"])
    assert resumed.exit_code == 0, (resumed.output, resumed.exception)
    finals = assert_exactly_once(tmp_path / "out" / "limited", {f"{task['id']}#0"})
    assert finals[f"{task['id']}#0"]["status"] == "success"
