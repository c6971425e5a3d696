"""A fleet's server that passed the run's start check and is restarted mid-run on the same URL
serving another model (SGLang answers a request for any model name, so no reply tells): the
request its restart failed (a hang-up, a proxy's 502) makes it unheard again, and it is asked
its GET /models before it takes another request, then left out, named once. The failure
table runs one body per way a restart shows; a fleet whose every server came back so stops
with the error, not a hang."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from conftest import read_results
from restarting_server import RESTART_FAILURES, echo, restarting  # noqa: F401 - fixture


def _run(tmp_path, run_id: str, *urls: str, limit: int = 8, workers: int = 1) -> subprocess.CompletedProcess:
    """The CLI's run of the fleet ``urls``, as a user starts it (``workers`` one-loop worker
    processes, no cool-down)."""
    env = {name: value for name, value in os.environ.items() if name != "OPENAI_API_KEY"}
    return subprocess.run([
        sys.executable, "-m", "parallel_rollout.cli", "run", "--mode", "gym", "--data", "frozenlake", "--limit",
        str(limit), "--agent", "openai", "--model", "test-model", "--max-turns", "1",
        *[f"--base-url={url}" for url in urls], "--num-rollouts", str(workers), "--server-cooldown", "0", "--no-progress",
        "--output-dir", str(tmp_path), "--run-id", run_id], capture_output=True, text=True, env=env, timeout=300)


@pytest.mark.parametrize("failure", sorted(RESTART_FAILURES))
def test_cli_a_server_restarted_with_another_model_mid_run_gets_no_more_trajectories(tmp_path, llm_servers,
                                                                                     restarting, failure):
    """The restarted server (it passed the start check) is asked its /models before its next
    request and left out: no completion request reaches it, every task's record is there and
    final (the one its restart failed went on at the other), and one line names the URL, the
    model it serves and the run's. Before, its cool-down over, it took trajectories the other
    model answered."""
    wrong = restarting(RESTART_FAILURES[failure])
    (good,) = llm_servers(wrong.holding(echo))
    proc = _run(tmp_path, "restart", wrong.url, good.url)
    assert proc.returncode == 0, proc.stderr
    assert wrong.restarted.is_set() and wrong.sampled() == [], proc.stderr
    assert wrong.new.model_listings >= 1
    records = read_results(tmp_path / "restart")
    assert len(records) == 8 and all(r["final"] and not r["infrastructure"] for r in records), records
    before = [r for r in records if r["usage"]["server"] == wrong.url]
    assert len(before) == 1 and not before[0]["usage"].get("server_moves"), records  # answered before the restart
    said = [line for line in proc.stderr.splitlines() if wrong.url in line and "other-model" in line]
    assert len(said) == 1 and "does not list the model 'test-model' (--model): it lists other-model" in said[0], \
        proc.stderr


def test_cli_a_fleet_whose_every_server_restarted_with_another_model_stops_with_the_error(tmp_path, restarting):
    """Both servers restart serving another model: the run stops (exit 2, as a refused model
    does) naming it, instead of recording trajectories the other model answered; the records
    done before are kept for a resume. Each came back with a model of its own: both are named
    (the error named the last server's only)."""
    first = restarting(RESTART_FAILURES["hang-up"], models=("other-model",))
    second = restarting(RESTART_FAILURES["hang-up"], models=("third-model",))
    proc = _run(tmp_path, "all-restart", first.url, second.url)
    assert proc.returncode == 2, proc.stderr
    assert first.restarted.is_set() and second.restarted.is_set(), proc.stderr
    assert first.sampled() == [] and second.sampled() == [], proc.stderr
    said = " ".join(proc.stderr.split())
    assert "every server of the fleet refuses" in said, said
    for server, model in ((first, "other-model"), (second, "third-model")):
        assert f"{server.url} does not list the model 'test-model' (--model): it lists {model}" in said, said
    kept = [r for r in read_results(tmp_path / "all-restart") if r["final"]]
    assert len(kept) == 2 and {r["usage"]["server"] for r in kept} == {first.url, second.url}, kept


def test_cli_a_restart_that_takes_its_time_is_caught_by_every_worker_process(tmp_path, llm_servers, restarting):
    """Two worker processes; the server restarts as a real one does, nothing listening there
    for longer than RECHECK_IDLE_S while the new one loads its model, then serving another.
    Each process met the restart failing or had no answer from it meanwhile, so each asks its
    GET /models before sending it another request: no completion request reaches the new
    server, and every task's record is there. The other server holds its answers while the
    restarted one is down, so the run outlasts the restart."""
    from parallel_rollout.agents.servers import RECHECK_IDLE_S

    wrong = restarting(RESTART_FAILURES["hang-up"], at=3, down_s=RECHECK_IDLE_S + 0.5)
    (good,) = llm_servers(wrong.holding(echo))
    proc = _run(tmp_path, "slow-restart", wrong.url, good.url, workers=2, limit=12)
    assert proc.returncode == 0, proc.stderr
    assert wrong.restarted.is_set() and wrong.sampled() == [] and wrong.new.model_listings >= 1, proc.stderr
    records = read_results(tmp_path / "slow-restart")
    assert len(records) == 12 and all(r["final"] and not r["infrastructure"] for r in records), records
    said = [line for line in proc.stderr.splitlines() if wrong.url in line and "it lists other-model" in line]
    assert len(said) == 1 and "does not list the model 'test-model' (--model)" in said[0], proc.stderr
