"""Workers forked from the run's preloaded server (src/parallel_rollout/backends/worker_start.py):
the main module runs once per run, not once per worker; each run gets a server of its own,
with its environment; a server killed from outside costs the run its workers, never a
result."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import psutil
import pytest

from conftest import ROOT, SHELL_TASKS, assert_exactly_once, read_results, shell_task, write_tasks
from parallel_rollout.agents.oracle import OracleAgent
from parallel_rollout.config import build_config
from parallel_rollout.runner import Runner
from process_tree import fork_servers, worker_processes

#: a trainer's script: it logs each time it runs, and defines the agent the run names
SCRIPT = '''
import os, sys
with open(os.environ["PR_IMPORT_LOG"], "a") as log:
    log.write(f"{__name__} {os.getpid()}\\n")
from parallel_rollout.agents.oracle import OracleAgent

class ScriptAgent(OracleAgent):
    """The oracle, defined in the main script: workers find it through __main__."""

if __name__ == "__main__":
    from parallel_rollout.cli import main
    main()
'''


class MarkAgent(OracleAgent):
    """The oracle, which also writes the worker's PR_RUN_MARK into a file named by its pid."""

    def begin_attempt(self, info) -> None:
        super().begin_attempt(info)
        folder = Path(os.environ["PR_MARK_DIR"])
        (folder / f"{os.getpid()}.mark").write_text(os.environ.get("PR_RUN_MARK", "-"))


def test_the_main_module_runs_in_the_server_not_in_each_worker(tmp_path):
    script = tmp_path / "trainer.py"
    script.write_text(SCRIPT)
    log = tmp_path / "imports.log"
    tasks = [json.loads(line) for line in SHELL_TASKS.read_text().splitlines()[:8]]
    data = write_tasks(tmp_path / "tasks.jsonl", tasks)
    env = {**os.environ, "PR_IMPORT_LOG": str(log),
           "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run(
        [sys.executable, str(script), "--mode", "shell", "--data", str(data), "--agent", "__main__:ScriptAgent",
         "--num-rollouts", "4", "--num-vms", "2", "--use-vm-pool", "--output-dir", str(tmp_path / "out"),
         "--run-id", "script", "--no-progress"],
        env=env, capture_output=True, text=True, timeout=300, stdin=subprocess.DEVNULL)
    assert done.returncode == 0, done.stderr[-3000:]
    finals = assert_exactly_once(tmp_path / "out" / "script", {f"{t['id']}#0" for t in tasks})
    assert {r["status"] for r in finals.values()} == {"success"}
    worker_pids = {r["pid"] for r in read_results(tmp_path / "out" / "script")}
    assert len(worker_pids) >= 2  # the 8 tasks went to several workers
    runs = [line.split() for line in log.read_text().splitlines()]
    assert [name for name, _ in runs].count("__main__") == 1
    # the server ran it once (and the pool's Manager, which is spawned); no worker did
    assert [name for name, _ in runs].count("__mp_main__") == 2, runs
    assert not worker_pids & {int(pid) for _, pid in runs}, (worker_pids, runs)


def _run(tmp_path: Path, run_id: str, tasks: list[dict], **flags) -> Runner:
    data = write_tasks(tmp_path / f"{run_id}.jsonl", tasks)
    return Runner(build_config(dict(mode="shell", data=str(data), num_rollouts=3, num_vms=2, use_vm_pool=True,
                                    output_dir=str(tmp_path / "out"), run_id=run_id, progress=False, **flags)))


def test_each_run_gets_a_server_with_its_own_environment(tmp_path, monkeypatch):
    marks = tmp_path / "marks"
    marks.mkdir()
    monkeypatch.setenv("PR_MARK_DIR", str(marks))
    agent = f"{__name__}:MarkAgent"
    seen = []
    for mark in ("first", "second"):
        monkeypatch.setenv("PR_RUN_MARK", mark)
        outcome = _run(tmp_path, mark, [shell_task(f"{mark}{i}") for i in range(4)], agent=agent).run()
        assert outcome.exit_code == 0, outcome.message
        seen.append({p.read_text() for p in marks.glob("*.mark")})
        for p in marks.glob("*.mark"):
            p.unlink()
        assert fork_servers() == []  # stopped with its run
    assert seen == [{"first"}, {"second"}]


def test_a_killed_server_costs_the_run_its_workers_not_a_result(tmp_path):
    tasks = [shell_task(f"k{i:02d}", reference=["sleep 0.3", f"touch ~/k{i:02d}.done"]) for i in range(16)]
    runner = _run(tmp_path, "killed", tasks, max_retries=3)
    killed: dict[str, object] = {}

    def kill_server():
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            servers, workers = fork_servers(), worker_processes()
            if servers and len(workers) == 3 and runner.engine is not None and runner._finished_keys:
                killed["server"], killed["workers"] = servers[0].pid, [w.pid for w in workers]
                os.kill(servers[0].pid, signal.SIGKILL)
                return
            time.sleep(0.02)

    killer = threading.Thread(target=kill_server)
    killer.start()
    outcome = runner.run()
    killer.join()
    assert killed, "the server was never seen with its workers"
    assert outcome.exit_code == 0, outcome.message
    finals = assert_exactly_once(outcome.run_dir, {f"{t['id']}#0" for t in tasks})
    assert {r["status"] for r in finals.values()} == {"success"}
    events = [json.loads(line) for line in (outcome.run_dir / "events.jsonl").read_text().splitlines()]
    deaths = [e["reason"] for e in events if e["event"] == "worker_died"]
    # each worker still ran when its server died: the backend killed it before it took its VMs
    assert len(deaths) == 3 and all("the server it was forked from died; killed" in r for r in deaths), deaths
    for pid in killed["workers"]:
        assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    # the workers that finished the run came from a new server
    assert {r["pid"] for r in finals.values()} - set(killed["workers"])


@pytest.mark.parametrize("alive", [True, False])
def test_still_running_tells_a_live_worker_from_a_reused_pid(alive):
    from parallel_rollout.backends import worker_start

    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    handle = worker_start.handle_of(child.pid)
    try:
        if not alive:
            child.kill()
            child.wait()
        assert worker_start.still_running(handle) is alive
    finally:
        child.kill()
        child.wait()
    assert worker_start.still_running(None) is False
