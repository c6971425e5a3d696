"""web mode, bad input through the CLI. A task's ``time_limit_s`` as the page's timer takes it:
one the timer cannot count is refused at load naming the file, line and field; one under a
millisecond is the task's limit, not the page's own 10 s. An address-space limit Chromium
cannot start under (--vm-memory-mb without a memory cgroup) stops the run at its first
episode, naming the flag, where VM after VM was marked dead. A page that never loads is
named in the attempt's failure."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys

import pytest

from conftest import write_tasks
from test_web import web_task

pytestmark = pytest.mark.skipif(shutil.which("chromium") is None, reason="Debian's chromium is not installed")


def cli_run(tmp_path, tasks, run_id, *flags, env=None):
    data = write_tasks(tmp_path / f"{run_id}.jsonl", tasks)
    proc = subprocess.run([sys.executable, "-m", "parallel_rollout.cli", "run", "--mode", "web", "--data",
                           str(data), "--agent", "oracle", "--output-dir", str(tmp_path / "out"),
                           "--run-id", run_id, "--no-progress", *flags],
                          capture_output=True, text=True, timeout=300, stdin=subprocess.DEVNULL, env=env)
    return proc, data


@pytest.mark.parametrize("limit", [2147484, 3e6, 1e300])
def test_a_time_limit_longer_than_the_pages_timer_counts_is_refused_at_load(tmp_path, limit):
    """setTimeout takes a delay past 2**31-1 ms as 0: such a task timed out at once with reward 0."""
    proc, data = cli_run(tmp_path, [web_task("click-button", time_limit_s=60),
                                    web_task("click-button", seed=1, time_limit_s=limit)], "long")
    assert proc.returncode == 2, proc.stdout + proc.stderr[-2000:]
    assert f"{data}:2: task 'click-button-1': field 'time_limit_s' is {limit!r}: at most 2147483 seconds" \
        in proc.stderr, proc.stderr
    assert not (tmp_path / "out" / "long").exists()


def test_a_time_limit_of_zero_or_less_is_refused_naming_the_value(tmp_path):
    proc, data = cli_run(tmp_path, [web_task("click-button", time_limit_s=-5)], "neg")
    assert proc.returncode == 2
    assert f"{data}:1: task 'click-button-0': field 'time_limit_s' must be a positive number of seconds, " \
           "not -5" in proc.stderr, proc.stderr


def test_the_longest_time_limit_and_one_under_a_millisecond_are_the_tasks(tmp_path):
    """2147483 s leaves the oracle its time (it solves the page); 0.0001 s ends the episode
    at the page's timer, where it was the page's own 10 s (and the oracle solved it)."""
    proc, _ = cli_run(tmp_path, [web_task("click-button", time_limit_s=2147483),
                                 web_task("click-button", seed=1, time_limit_s=0.0001)], "edges")
    assert proc.returncode == 0, proc.stdout + proc.stderr[-2000:]
    records = {r["task_id"]: r for r in map(json.loads, (tmp_path / "out" / "edges" / "results.jsonl")
                                            .read_text().splitlines())}
    assert records["click-button-0"]["status"] == "success" and records["click-button-0"]["reward"] == 1.0
    short = records["click-button-1"]
    assert short["reward"] == 0.0 and short["eval"]["reason"] == "timed out", short


#: a host without a memory cgroup, for every process of the run (its pool's manager too)
NO_MEMORY_CGROUP = """from parallel_rollout.pool.providers import cgroups
_available = cgroups.available
cgroups.available = lambda *a, **k: frozenset(c for c in _available(*a, **k) if c != "memory")
"""


def test_vm_memory_mb_as_rlimit_as_stops_the_run_at_its_first_episode_naming_the_flag(tmp_path):
    """Without a memory cgroup --vm-memory-mb bounds each process (RLIMIT_AS), under which
    Chromium crashes as it starts: each attempt waited 40 s for it and marked its VM dead."""
    (tmp_path / "site").mkdir()
    (tmp_path / "site" / "sitecustomize.py").write_text(NO_MEMORY_CGROUP)
    path = os.pathsep.join(filter(None, [str(tmp_path / "site"), os.environ.get("PYTHONPATH")]))
    proc, _ = cli_run(tmp_path, [web_task("click-button"), web_task("enter-text")], "rlimit",
                      "--vm-memory-mb", "2048", "--max-retries", "1", env={**os.environ, "PYTHONPATH": path})
    assert "falls back to RLIMIT_AS" in proc.stderr, proc.stderr[-2000:]  # the host is one without
    assert proc.returncode == 1, proc.stdout + proc.stderr[-2000:]
    assert ("run stopped: web: start failed in the VM: BrowserMissing: Chromium cannot start in the VM: its "
            "address space is limited to 2048 MB (RLIMIT_AS") in proc.stderr, proc.stderr[-2000:]
    # a resume keeps --vm-memory-mb (another value is refused): every attempt failed at its start
    assert "leave --vm-memory-mb unset: in a new --run-id, as a resume keeps the run's settings" in proc.stderr
    folder = tmp_path / "out" / "rlimit"
    records = [json.loads(line) for line in (folder / "results.jsonl").read_text().splitlines()]
    assert [r["status"] for r in records] == ["guest_prerequisite_missing"] and not records[0]["final"]
    summary = json.loads((folder / "summary.json").read_text())
    assert summary["vm"]["marked_dead"] == 0 and summary["vm"]["replacements"] == 0


@pytest.mark.slow  # 30 s: the page's 20 s load wait and Chromium's start, for a message's words
def test_a_page_that_never_loads_is_named_in_the_failure(tmp_path):
    """A miniwob package whose page is no MiniWoB page (no core.js): each attempt fails as the
    VM's, and its failure names the page, where it said only "the MiniWoB page did not load"."""
    package = tmp_path / "site" / "miniwob"
    (package / "html" / "miniwob").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "html" / "miniwob" / "click-button.html").write_text("<html><body>no core</body></html>")
    path = os.pathsep.join(filter(None, [str(tmp_path / "site"), os.environ.get("PYTHONPATH")]))
    proc, _ = cli_run(tmp_path, [web_task("click-button")], "noload", "--max-retries", "0",
                      env={**os.environ, "PYTHONPATH": path})
    records = [json.loads(line) for line in (tmp_path / "out" / "noload" / "results.jsonl").read_text().splitlines()]
    assert [r["status"] for r in records] == ["vm_error"], proc.stderr[-2000:]
    assert re.search(r"web: start failed in the VM: RuntimeError: the MiniWoB page "
                     r"http://127\.0\.0\.1:\d+/miniwob/click-button\.html did not load", records[0]["failure"]["message"]), \
        records[0]["failure"]
