"""pass@k of a run stopped early says which tasks it covers (through the CLI).

pass@k has an unbiased estimate only over tasks with at least k finished samples: in a run
interrupted mid-group, pass@1 covers every task with a final record and pass@k fewer, so
"pass@2 0.58 < pass@1 0.62" read as an error. The console, summary.json and the report say,
for each pass@k, how many of the finished tasks it covers.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time

from conftest import ROOT, shell_task, write_tasks
from parallel_rollout import exit_codes
from test_runner import stop_signals_ignoring


def test_an_interrupted_run_says_the_tasks_each_pass_at_k_covers(tmp_path):
    # one sample at a time: a's three (fast) end, b's first ends, the run stops during b's second
    # (or third: an interrupt lets the sample in flight end)
    data = write_tasks(tmp_path / "tasks.jsonl", [
        shell_task("a"), shell_task("b", reference=["sleep 1.5", "touch ~/b.done"]), shell_task("c")])
    out = tmp_path / "out"
    proc = subprocess.Popen([sys.executable, str(ROOT / "run_parallel_rollout.py"), "--mode", "shell", "--data",
                             str(data), "--group-size", "3", "--num-rollouts", "1", "--envs-per-worker", "1",
                             "--output-dir", str(out), "--run-id", "r", "--no-progress"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=stop_signals_ignoring())
    results = out / "r" / "results.jsonl"
    deadline = time.monotonic() + 120
    while not (results.exists() and results.read_text().count("\n") >= 4):
        assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
        time.sleep(0.05)
    proc.send_signal(signal.SIGINT)
    stdout, stderr = proc.communicate(timeout=60)
    assert proc.returncode == exit_codes.EXIT_INTERRUPTED, stderr
    finals = [r for r in map(json.loads, results.read_text().splitlines()) if r.get("final")]
    per_task = {task: sum(1 for r in finals if r["task_id"] == task) for task in {r["task_id"] for r in finals}}
    assert per_task["a"] == 3 and 1 <= per_task["b"] < 3 and "c" not in per_task, per_task  # b cut short

    summary = json.loads((out / "r" / "summary.json").read_text())
    assert summary["pass@1"] == 1.0 and summary["pass@3"] == 1.0
    assert summary["tasks_finished"] == 2
    assert summary["pass_at_k_tasks"] == {"pass@1": 2, "pass@3": 1}
    assert "pass@1 1 (2 tasks), pass@3 1 (1 of 2 tasks: those with 3 finished samples)" in stdout
    page = (out / "r" / "report.html").read_text()
    assert "unbiased estimator over 1 of 2 tasks: those with 3 finished samples" in page
    assert "unbiased estimator over 2 tasks" in page
    assert "(1 of 2 tasks: those with 3 finished samples)</span>" in page  # the per-mode table's cell
