"""A model endpoint that refuses the run's key or does not know its model is a configuration
error, not a score (through the CLI, against the local chat server).

A wrong OPENAI_API_KEY (HTTP 401, or 403 for a key without access) or a model the endpoint
does not serve (404, as OpenAI, vLLM and Ollama answer it) made every sample a final `error`
at reward 0: `--fail-under` then said "success rate 0.0%" and a resume ran nothing. Now the
run stops at the first such answer (exit 2) saying what the server said and what to fix, its
attempts are not final, and the resume after the fix runs them. `--dry-run --check-endpoint`
refuses a model the endpoint does not list.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading

import pytest
from click.testing import CliRunner

from conftest import assert_exactly_once, read_results
from llm_server import llm_server, lookup_solver  # noqa: F401 - fixture
from parallel_rollout.cli import main
from parallel_rollout.exit_codes import EXIT_USAGE
from test_openai_agent import MATH_TASKS


@pytest.mark.parametrize("status, server_said, fix", [
    (401, "Incorrect API key provided: sk-wrong.", "set OPENAI_API_KEY to a key it accepts"),
    (403, "Project does not have access to model X", "set OPENAI_API_KEY to a key it accepts"),
    (404, "The model `X` does not exist.", "does not know the model 'X' (--model)"),
])
def test_a_refused_key_or_unknown_model_stops_the_run_and_its_resume_runs_every_sample(
        tmp_path, llm_server, monkeypatch, status, server_said, fix):
    pytest.importorskip("math_verify")
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    lines = MATH_TASKS.read_text().splitlines()[:4]
    tasks = tmp_path / "math.jsonl"
    tasks.write_text("\n".join(lines) + "\n")
    solver = lookup_solver({json.loads(line)["problem"]: f"\\boxed{{{json.loads(line)['answer']}}}"
                            for line in lines})
    refusing = threading.Event()
    refusing.set()
    server = llm_server(policy=lambda body: {"status": status, "message": server_said} if refusing.is_set()
                        else solver(body))
    server.models.append("X")  # its /models lists the run's model: the chat request is what refuses
    args = ["run", "--mode", "math", "--data", str(tasks), "--agent", "openai", "--base-url", server.url,
            "--model", "X", "--num-rollouts", "2", "--fail-under", "0.5", "--output-dir", str(tmp_path / "out"),
            "--run-id", "refused", "--no-progress"]
    first = CliRunner().invoke(main, args)
    assert first.exit_code == EXIT_USAGE, (first.output, first.exception)
    said = " ".join(first.output.split())
    assert f"the model endpoint refused this run's settings: {server.url}/chat/completions: HTTP {status}" in said
    assert server_said in said and fix in said and "--resume" in said
    assert "--fail-under" not in said and "success rate 0.0%" not in said  # no score was made
    # the first answer stopped it: no loop asked again, no sample was left to ask
    assert len(server.requests) <= 2
    records = read_results(tmp_path / "out" / "refused")
    assert records and {(r["status"], r["infrastructure"], r["final"]) for r in records} == {
        ("endpoint_refused", True, False)}
    refusing.clear()  # the key or the model fixed on the server's side
    resumed = CliRunner().invoke(main, args + ["--resume"])
    assert resumed.exit_code == 0, (resumed.output, resumed.exception)
    finals = assert_exactly_once(tmp_path / "out" / "refused", {f"{json.loads(line)['id']}#0" for line in lines})
    assert {r["status"] for r in finals.values()} == {"success"}


def test_a_client_error_that_is_not_a_refusal_stays_the_attempts_error(tmp_path, llm_server, monkeypatch):
    """A 400 (a request this server will not take: the agent's doing) is graded as before."""
    pytest.importorskip("math_verify")
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    tasks = tmp_path / "math.jsonl"
    tasks.write_text(MATH_TASKS.read_text().splitlines()[0] + "\n")
    server = llm_server(policy=lambda body: {"status": 400, "message": "bad request"})
    done = CliRunner().invoke(main, ["run", "--mode", "math", "--data", str(tasks), "--agent", "openai",
                                     "--base-url", server.url, "--output-dir", str(tmp_path / "out"),
                                     "--run-id", "bad", "--no-progress"])
    assert done.exit_code == 0, (done.output, done.exception)
    [record] = read_results(tmp_path / "out" / "bad")
    assert (record["status"], record["final"]) == ("error", True)


def test_the_dry_run_refuses_a_model_the_endpoint_does_not_list(tmp_path, llm_server):
    server = llm_server()
    server.models = ["test-model"]
    data = tmp_path / "math.jsonl"
    data.write_text(MATH_TASKS.read_text().splitlines()[0] + "\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("OPENAI_")}

    def dry_run(model):
        return subprocess.run([sys.executable, "-m", "parallel_rollout.cli", "run", "--mode", "math", "--data",
                               str(data), "--agent", "openai", "--base-url", server.url, "--model", model,
                               "--output-dir", str(tmp_path / "out"), "--dry-run", "--check-endpoint"],
                              capture_output=True, text=True, env=env, timeout=120)

    pytest.importorskip("math_verify")
    wrong = dry_run("gpt-4.1-2025-04-14")
    assert wrong.returncode == EXIT_USAGE, wrong.stderr
    said = " ".join(wrong.stderr.split())
    assert f"endpoint: {server.url} does not list the model 'gpt-4.1-2025-04-14' (--model)" in said
    assert "it lists test-model" in said
    right = dry_run("test-model")
    assert right.returncode == 0, right.stderr


def test_the_dry_run_names_the_v1_a_base_url_lacks(tmp_path, llm_server):
    """A base URL without /v1 (its /models a 404, its /v1/models a model list) passed
    --check-endpoint ("answers (GET /models: HTTP 404)"), and the run then stopped at its
    first request's 404 with advice to fix --base-url and resume, which the resume refused."""
    server = llm_server()
    data = tmp_path / "math.jsonl"
    data.write_text(MATH_TASKS.read_text().splitlines()[0] + "\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("OPENAI_")}
    root = server.url.removesuffix("/v1")
    dry = subprocess.run([sys.executable, "-m", "parallel_rollout.cli", "run", "--mode", "math", "--data",
                          str(data), "--agent", "openai", "--base-url", root, "--model", "test-model",
                          "--output-dir", str(tmp_path / "out"), "--dry-run", "--check-endpoint"],
                         capture_output=True, text=True, env=env, timeout=120)
    assert dry.returncode == EXIT_USAGE, dry.stderr
    said = " ".join(dry.stderr.split())
    assert f"{root} has no /models (HTTP 404) but {root}/v1 has" in said and f"--base-url {root}/v1" in said, said
    assert not server.requests  # no completion was asked for


def test_the_dry_run_names_a_server_that_lists_the_model_but_has_no_chat_route(tmp_path, llm_server):
    """A completions-only server (or a proxy that forwards /models only) lists the model:
    --check-endpoint passed ("answers with 1 model(s)") and the run then failed at its first
    request. Now the CLI asks the route the openai agent's requests take, as the RL
    scheduler's check does, and names it in the CLI's words (--base-url, tokenizer=)."""
    pytest.importorskip("math_verify")
    server = llm_server()
    data = tmp_path / "math.jsonl"
    data.write_text(MATH_TASKS.read_text().splitlines()[0] + "\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("OPENAI_")}

    def dry_run():
        return subprocess.run([sys.executable, "-m", "parallel_rollout.cli", "run", "--mode", "math", "--data",
                               str(data), "--agent", "openai", "--base-url", server.url, "--model", "test-model",
                               "--output-dir", str(tmp_path / "out"), "--dry-run", "--check-endpoint"],
                              capture_output=True, text=True, env=env, timeout=120)

    server.missing_routes.add("/v1/chat/completions")
    dry = dry_run()
    assert dry.returncode == EXIT_USAGE, dry.stderr
    said = " ".join(dry.stderr.split())
    assert (f"endpoint: {server.url}/models lists the model 'test-model' but POST {server.url}/chat/completions "
            """answered HTTP 404: '{"detail": "Not Found"}'; """) in said, said
    assert "fix --base-url, or, for a server that serves only /completions, set tokenizer=" in said, said
    assert "RunConfig" not in said and "run config" not in said, said  # the CLI's words, not the scheduler's
    assert server.requests == [] and not (tmp_path / "out").exists()  # nothing sampled, no run folder
    server.missing_routes.clear()  # the route there: the check passes, still sampling nothing
    served = dry_run()
    assert served.returncode == 0, served.stderr
    assert f"{server.url}/chat/completions answers (HTTP 400)" in " ".join(served.stderr.split()), served.stderr
    assert server.bodiless == 1 and server.requests == []  # the one route POST, refused unsampled


def test_a_refused_key_is_a_python_runs_outcome_with_the_clis_exit_code(tmp_path, llm_server, monkeypatch):
    """run() raises where the CLI exits 2 before anything ran; a run the endpoint refused had
    started: it returns its RunOutcome, exit_code 2 as the CLI's, whose message ends with the
    call that resumes it (README, "From Python"). A guard: this held already."""
    pytest.importorskip("math_verify")
    from parallel_rollout.api import run

    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    tasks = tmp_path / "math.jsonl"
    tasks.write_text(MATH_TASKS.read_text().splitlines()[0] + "\n")
    server = llm_server(policy=lambda body: {"status": 401, "message": "Incorrect API key provided"})
    server.models.append("X")  # its /models lists the run's model: only the chat request refuses the key
    outcome = run(mode="math", data=tasks, agent="openai", base_url=server.url, model="X",
                  output_dir=tmp_path / "out", run_id="refused", progress=False)
    assert outcome.exit_code == EXIT_USAGE == 2, outcome
    assert "refuses the API key" in outcome.message, outcome.message
    assert outcome.message.endswith(f"run(output_dir={str(tmp_path / 'out')!r}, run_id='refused', resume=True)"), \
        outcome.message


def test_a_python_runs_records_name_its_keywords(tmp_path, llm_server, monkeypatch):
    """run(max_retries=1) against a server that answers 500: its outcome's message named
    max_retries=1, but results.jsonl's failure and events.jsonl's retry, which the script
    reads, said the member gave up "(--max-retries 1)", a flag it never typed (the CLI's
    records keep the flag: test_openai_agent)."""
    pytest.importorskip("math_verify")
    from parallel_rollout.api import run

    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    tasks = tmp_path / "math.jsonl"
    tasks.write_text(MATH_TASKS.read_text().splitlines()[0] + "\n")
    server = llm_server(policy=lambda body: {"status": 500, "message": "overloaded"})
    outcome = run(mode="math", data=tasks, agent="openai", base_url=server.url, model="test-model",
                  max_retries=1, server_cooldown=0, output_dir=tmp_path / "out", run_id="five-hundred", progress=False)
    records = read_results(outcome.run_dir)
    events = [json.loads(line) for line in (outcome.run_dir / "events.jsonl").read_text().splitlines()]
    said = [r["failure"]["message"] for r in records if r.get("failure")]
    said += [e["reason"] for e in events if e["event"] == "retry"]
    assert said, (records, events)
    for message in said:
        assert "gave up after 2 requests for this turn (max_retries=1)" in message and "--" not in message, message
