"""The openai agent follows the OpenAI client's conventions, checked through the CLI.

Each test runs ``parallel-rollout run --mode math --agent openai`` as a user types it (a
subprocess, the environment as the user sets it) against the local chat server of
``llm_server.py``, which records every request's body and headers: OPENAI_BASE_URL alone
reaches the server, a local server needs no key, ``--sampling`` and run.toml's tables land in
the request body, and a server that refuses ``max_tokens`` gets ``max_completion_tokens``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from llm_server import llm_server, lookup_solver  # noqa: F401 - fixture

pytest.importorskip("math_verify")

PROBLEMS = {"What is 6 times 7?": "42", "What is 10 minus 3?": "7", "What is 2 plus 2?": "4"}


def write_math_tasks(tmp_path):
    """A three-problem math task file."""
    path = tmp_path / "math.jsonl"
    path.write_text("".join(json.dumps({"id": f"m{i}", "problem": problem, "answer": answer}) + "\n"
                            for i, (problem, answer) in enumerate(PROBLEMS.items())))
    return path


def solver():
    """A policy that boxes each problem's answer."""
    return lookup_solver({problem: f"so \\boxed{{{answer}}}" for problem, answer in PROBLEMS.items()})


def cli(tmp_path, *args, env=None):
    """``parallel-rollout run --mode math --agent openai …`` in a subprocess, with ``env``
    on top of an environment free of OPENAI_* variables."""
    base = {k: v for k, v in os.environ.items() if not k.startswith("OPENAI_")}
    argv = [sys.executable, "-m", "parallel_rollout.cli", "run", "--mode", "math", "--agent", "openai",
            "--data", str(write_math_tasks(tmp_path)), "--output-dir", str(tmp_path / "out"),
            "--num-rollouts", "1", "--no-progress", "--max-retries", "0", *args]
    return subprocess.run(argv, capture_output=True, text=True, env={**base, **(env or {})}, timeout=120)


def test_openai_base_url_alone_reaches_a_local_server_without_a_key(tmp_path, llm_server):
    server = llm_server(policy=solver())
    done = cli(tmp_path, "--sampling", "top_p=0.5", "--sampling", "seed=3", "--sampling", 'stop=["END"]',
               "--sampling", "user=eval-bot", env={"OPENAI_BASE_URL": server.url})
    assert done.returncode == 0, done.stderr
    assert "3 succeeded" in done.stdout
    assert len(server.requests) == 3
    for request in server.requests:
        assert request["authorization"] == "Bearer EMPTY"  # no key set, none needed on 127.0.0.1
        body = request["body"]
        # JSON values are parsed, anything else stays a string
        assert (body["top_p"], body["seed"], body["stop"], body["user"]) == (0.5, 3, ["END"], "eval-bot")


def test_a_key_is_demanded_for_openai_itself_only(tmp_path):
    done = cli(tmp_path, "--dry-run")
    assert done.returncode == 2
    assert "OPENAI_API_KEY" in done.stderr and "https://api.openai.com/v1" in done.stderr
    assert not (tmp_path / "out").exists()


@pytest.mark.slow
def test_run_toml_tables_reach_the_request_body(tmp_path, llm_server):
    server = llm_server(policy=solver())
    config = tmp_path / "run.toml"
    config.write_text(f'base-url = "{server.url}"\ntemperature = 0.3\n'
                      "[sampling]\ntop_p = 0.9\nseed = 7\n"
                      "[extra_body]\ntop_k = 20\nchat_template_kwargs = {enable_thinking = false}\n")
    done = cli(tmp_path, "--config", str(config))
    assert done.returncode == 0, done.stderr
    body = server.requests[0]["body"]
    assert (body["temperature"], body["top_p"], body["seed"], body["top_k"]) == (0.3, 0.9, 7, 20)
    assert body["chat_template_kwargs"] == {"enable_thinking": False}
    stored = json.loads(next((tmp_path / "out").glob("*/config.json")).read_text())["config"]
    assert stored["sampling"] == {"top_p": 0.9, "seed": 7}


@pytest.mark.parametrize("bad, says", [
    (["--sampling", "top_p"], "KEY=VALUE"),
    (["--sampling", "model=x"], "cannot set model"),
    (["--sampling", "max_new_tokens=64"], "--sampling: max_new_tokens is not read by an OpenAI-compatible server"),
    (["--temperature", "0.5", "--sampling", "temperature=0.1"], "--temperature and --sampling"),
])
def test_bad_sampling_is_a_usage_error(tmp_path, bad, says):
    done = cli(tmp_path, "--base-url", "http://127.0.0.1:9/v1", *bad)
    assert done.returncode == 2 and says in done.stderr, done.stderr


@pytest.mark.slow
def test_a_server_that_refuses_max_tokens_gets_max_completion_tokens(tmp_path, llm_server):
    refusal = {"message": "Unsupported parameter: 'max_tokens' is not supported with this model. "
                          "Use 'max_completion_tokens' instead.",
               "type": "invalid_request_error", "param": "max_tokens", "code": "unsupported_parameter"}
    answer = solver()

    def policy(body):
        return {"status": 400, "error": refusal} if "max_tokens" in body else answer(body)

    server = llm_server(policy=policy)
    server.models.append("house-reasoner")  # its /models lists the run's model
    done = cli(tmp_path, "--base-url", server.url, "--model", "house-reasoner", "--max-tokens", "64")
    assert done.returncode == 0, done.stderr
    bodies = [r["body"] for r in server.requests]
    # one refused request, then every request (the retry and later turns) uses the new name
    assert ["max_tokens" in b for b in bodies] == [True, False, False, False]
    assert all(b["max_completion_tokens"] == 64 for b in bodies[1:])


@pytest.mark.slow
def test_reasoning_models_get_max_completion_tokens_at_once(tmp_path, llm_server):
    server = llm_server(policy=solver())
    server.models.append("o3-mini")  # its /models lists the run's model
    done = cli(tmp_path, "--base-url", server.url, "--model", "o3-mini", "--max-tokens", "64")
    assert done.returncode == 0, done.stderr
    assert [b["body"].get("max_completion_tokens") for b in server.requests] == [64, 64, 64]
    assert not any("max_tokens" in r["body"] for r in server.requests)


@pytest.mark.parametrize("url, needs", [
    ("https://api.openai.com/v1", True),
    ("http://localhost:8000/v1", False),
    ("http://127.0.0.5:8000/v1", False),
    ("http://[::1]:8000/v1", False),
    ("http+unix://%2Frun%2Fvllm.sock/v1", False),
    ("https://vllm.internal.example:8000/v1", False),  # another server: a placeholder, as before
])
def test_which_endpoints_need_a_key(url, needs):
    from parallel_rollout.agents.openai_request import needs_key

    assert needs_key(url) is needs
