"""A batch run with ONE server (``--base-url`` once, no fleet) whose server is restarted mid-run
on the same URL serving another model (SGLang and llama.cpp answer any model name, so no reply
tells): its worker process asks its GET /models before the next request, as a fleet's does,
and the run stops there (exit 2, as a server refusing the model does), one line naming the URL,
the model it lists and --model; no trajectory of the other model is recorded, the records done
before are kept for a resume. A server that only answers 429 a while is not asked so."""

from __future__ import annotations

import itertools
import os
import subprocess
import sys

import pytest

from conftest import read_results
from restarting_server import RESTART_FAILURES, echo, restarting  # noqa: F401 - fixture


def _run(tmp_path, run_id: str, url: str, *more: str, limit: int = 6) -> subprocess.CompletedProcess:
    """The CLI's run against the one server ``url``, as a user starts it."""
    env = {name: value for name, value in os.environ.items() if name != "OPENAI_API_KEY"}
    return subprocess.run([
        sys.executable, "-m", "parallel_rollout.cli", "run", "--mode", "gym", "--data", "frozenlake", "--limit",
        str(limit), "--agent", "openai", "--model", "test-model", "--max-turns", "1", "--base-url", url,
        "--no-progress", "--output-dir", str(tmp_path), "--run-id", run_id, *more],
        capture_output=True, text=True, env=env, timeout=300)


@pytest.mark.parametrize("failure", sorted(RESTART_FAILURES))
def test_cli_the_one_server_restarted_with_another_model_stops_the_run(tmp_path, restarting, failure):
    """The request the restart failed is retried only after the server's /models answered: it
    lists another model, so the run stops (exit 2) with one line naming the URL, the model it
    lists and the run's; the restarted server got no completion request, the record answered
    before is kept final, and no record holds a trajectory of the other model. Before, the
    retry and every later task went to the other model, the run ending 0."""
    # past every env loop's first request (5 loops); down a while, as a real restart is
    wrong = restarting(RESTART_FAILURES[failure], at=7, down_s=0.5)
    proc = _run(tmp_path, "one-restart", wrong.url, limit=10)
    assert proc.returncode == 2, proc.stderr
    assert wrong.restarted.is_set() and wrong.sampled() == [] and wrong.new.model_listings >= 1, proc.stderr
    said = [line for line in proc.stderr.splitlines() if wrong.url in line and "it lists other-model" in line]
    assert said and "does not list the model 'test-model' (--model)" in said[0], proc.stderr
    records = read_results(tmp_path / "one-restart")
    final = [r for r in records if r["final"]]
    # those test-model answered before the restart, none after
    assert 1 <= len(final) < 10 and not any(r["infrastructure"] for r in final), records
    assert all(r["status"] == "endpoint_refused" for r in records if not r["final"]), records
    assert "--resume" in proc.stderr or "--resume" in proc.stdout, proc.stderr


def test_cli_the_one_server_answering_429_a_while_is_not_asked_its_models_again(tmp_path, llm_servers):
    """429s are no restart: the run retries them and ends 0, the server's GET /models asked once
    per worker process (its first request), not after a 429."""
    asked = itertools.count()

    def busy(body):
        return {"status": 429, "retry_after": 0} if next(asked) in (1, 2) else echo(body)

    (server,) = llm_servers(busy)
    proc = _run(tmp_path, "busy", server.url, limit=3)
    assert proc.returncode == 0, proc.stderr
    records = read_results(tmp_path / "busy")
    assert len(records) == 3 and all(r["final"] and not r["infrastructure"] for r in records), records
    assert len([r for r in server.requests if r["path"].endswith("completions")]) == 5  # 2 answered 429
    assert server.model_listings <= 3  # the worker processes that took one of the 3 tasks
