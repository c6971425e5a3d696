"""The crash-loop policy (``backends.base.CrashWindow``) in the local backend, through the CLI:
workers killed on purpose (past --task-timeout) are never crashes, however many; workers that
die on their own more than the limit within the window stop the run. The limit is set to 4
for these runs (10·N + 10, its real value, is test_backend_base's), so that each run takes
seconds of worker respawns, not a minute.

The window is widened to an hour for these runs: on a loaded machine the deaths of a run
spread over more than the real minute, and a window that drops the early ones would let a
policy that counts timeouts pass (tests/test_ray_backend.py does the same for Ray).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from conftest import assert_exactly_once, read_results
from parallel_rollout.backends import base
from parallel_rollout.cli import main

#: the crash limit of these runs (the real one, 10·N + 10, is 20 for one worker)
LIMIT = 4


def run_cli(tmp_path: Path, monkeypatch, tasks: int, *flags: str):
    """``tasks`` math tasks, one worker, the agent of ``flags``, in a one-hour window with a
    limit of ``LIMIT`` crashes."""
    monkeypatch.setattr(base, "CRASH_WINDOW_S", 3600.0)
    monkeypatch.setattr(base.CrashWindow, "resize", lambda window, workers: setattr(window, "limit", LIMIT))
    data = tmp_path / "tasks.jsonl"
    data.write_text("".join(json.dumps({"id": f"t{i}", "mode": "math", "problem": "1+1", "answer": "2"}) + "\n"
                            for i in range(tasks)))
    return CliRunner().invoke(main, [
        "--mode", "math", "--data", str(data), "--output-dir", str(tmp_path), "--run-id", "loop",
        "--num-rollouts", "1", "--max-retries", "0",
        "--no-progress", *flags])


def worker_deaths(run_dir: Path) -> list[dict]:
    """The worker_died events of a run."""
    events = [json.loads(line) for line in (run_dir / "events.jsonl").read_text().splitlines()]
    return [e for e in events if e["event"] == "worker_died"]


@pytest.mark.slow
def test_timeouts_past_the_crash_limit_are_not_a_crash_loop(tmp_path, monkeypatch):
    """8 attempts past --task-timeout with N=1: 8 workers killed on purpose, twice the limit,
    and the run finishes with one task_timeout per task."""
    import socket

    tasks = 2 * LIMIT
    # A model endpoint that takes each connection and never answers: the agent's request
    # hangs until the worker is killed. (A command agent that hangs no longer does: its own
    # wait ends first, recorded task_timeout with its stderr, its worker kept.)
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(128)
        result = run_cli(tmp_path, monkeypatch, tasks, "--agent", "openai", "--model", "silent", "--base-url",
                         f"http://127.0.0.1:{silent.getsockname()[1]}/v1", "--task-timeout", "0.3")
    assert "workers keep dying" not in result.output, result.output[-3000:]
    assert result.exit_code == 0, (result.output[-3000:], result.exception)
    finals = assert_exactly_once(tmp_path / "loop", {f"t{i}#0" for i in range(tasks)})
    assert {r["status"] for r in finals.values()} == {"task_timeout"}
    assert len(worker_deaths(tmp_path / "loop")) == tasks > LIMIT


def test_workers_that_keep_dying_on_their_own_stop_the_run(tmp_path, monkeypatch):
    """Every attempt's worker is SIGKILLed (by its plugin agent, as the OOM killer would: a
    command agent cannot signal it): the death past the limit within the window stops the
    run with 'workers keep dying'."""
    monkeypatch.syspath_prepend(str(Path(__file__).parent))
    result = run_cli(tmp_path, monkeypatch, 30, "--agent", "chaos_plugins:WorkerKillerAgent")
    assert result.exit_code != 0, result.output[-3000:]
    assert f"workers keep dying ({LIMIT + 1} deaths within 3600s)" in result.output, result.output[-3000:]
    deaths = worker_deaths(tmp_path / "loop")
    assert len(deaths) == LIMIT + 1, [d["reason"] for d in deaths]
    # each says how its worker died (not 'code None': read before the exit code was there)
    assert all("worker exited with code -9" in d["reason"] for d in deaths), [d["reason"] for d in deaths]
    died = [r for r in read_results(tmp_path / "loop") if r["status"] == "worker_died"]
    assert len(died) == LIMIT + 1 and all(r["infrastructure"] for r in died)
