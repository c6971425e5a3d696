"""What a worker or the pool's Manager leaves when it does not reap it itself, under a pid 1
that reaps nothing (a container's ``sh`` as init, ``docker run`` without --init): the workers'
server, the process they are forked from (``backends/worker_start.py``), is their child
subreaper and reaps every orphan they leave; the command's process, which starts the Manager, is
its child subreaper while it lives, and reaps the sandboxes a Manager killed by SIGKILL left
(``pool/providers/orphans.py``). None goes to the container's pid 1 as a zombie. A script's
process (``run()``, a trainer's scheduler) adopts nothing: its own programs' orphans would stay."""

from __future__ import annotations

import sys
import threading

from test_cli_exit_reap import run_under_a_pid_1_that_reaps_nothing

from conftest import shell_task, write_tasks

#: a command agent that answers once and ends on its own: the episode is over before its
#: worker stops it
ONE_REPLY_AGENT = "import sys\nsys.stdin.readline()\nprint('\"DONE\"', flush=True)\n"

def test_a_command_agent_that_ended_on_its_own_leaves_no_zombie(tmp_path):
    """The agent's bubblewrap exits as the agent does, without reaping its namespace's init;
    its worker, which holds no sandbox (the pool's Manager does), is no subreaper then, and the
    init went to pid 1: a zombie per agent that ended before its worker stopped it."""
    (tmp_path / "agent.py").write_text(ONE_REPLY_AGENT)
    said = run_under_a_pid_1_that_reaps_nothing(
        tmp_path, [shell_task(f"t{i}") for i in range(3)], "--provider", "process", "--use-vm-pool",
        "--num-vms", "2", "--num-rollouts", "2",
        "--agent", "command", "--agent-cmd", f"{sys.executable} {tmp_path / 'agent.py'}")
    assert said["zombies"] == 0, said


#: an agent that SIGKILLs the pool's Manager at its first act, as the OOM killer or an operator
#: would: the Manager is the runner's spawned child (the runner is its worker's grandparent)
KILLS_THE_MANAGER = r'''
import os, signal
import psutil
from parallel_rollout.agents.base import Agent


class KillsTheManager(Agent):
    def reset(self, task):
        pass

    def act(self, observation):
        runner = psutil.Process(os.getppid()).parent()
        for child in runner.children():
            if "spawn_main" in " ".join(child.cmdline()):
                open(os.path.join(os.path.dirname(__file__), "killed"), "w").close()
                child.kill()
        return "DONE"
'''


def test_a_pools_manager_killed_leaves_no_zombie_of_its_sandboxes(tmp_path):
    """The Manager, which starts every sandbox, dies by SIGKILL: each sandbox dies with it
    (bwrap's parent-death signal), and each left two zombies to pid 1, bwrap and its init."""
    (tmp_path / "kills_the_manager.py").write_text(KILLS_THE_MANAGER)
    said = run_under_a_pid_1_that_reaps_nothing(
        tmp_path, [shell_task(f"t{i}") for i in range(4)], "--provider", "process", "--use-vm-pool",
        "--num-vms", "2", "--num-rollouts", "1", "--agent", "kills_the_manager:KillsTheManager",
        env={"PYTHONPATH": str(tmp_path)})
    assert (tmp_path / "killed").exists(), "the Manager was not killed"
    assert said["zombies"] == 0, said


def test_a_scripts_process_is_no_subreaper_while_its_runs_pool_lives(tmp_path):
    """run() from Python, as a trainer's scheduler: the process is the script's, whose own
    programs' orphans would stay its zombies (alive to a check by pid) were it a subreaper;
    only the command's process adopts what a SIGKILLed Manager leaves."""
    from parallel_rollout.api import run
    from parallel_rollout.pool.providers import orphans

    seen: list[bool] = []
    stop = threading.Event()

    def watch() -> None:
        while not stop.wait(0.005):
            seen.append(orphans.is_subreaper())

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    try:
        data = write_tasks(tmp_path / "tasks.jsonl", [shell_task("t0"), shell_task("t1")])
        outcome = run(mode="shell", data=str(data), output_dir=str(tmp_path / "out"), provider_name="process",
                      use_vm_pool=True, num_vms=1, num_rollouts=1, progress=False)
    finally:
        stop.set()
        watcher.join()
    assert outcome.exit_code == 0 and len(seen) > 10, (outcome.exit_code, len(seen))
    # the provider's probe of bubblewrap, as the run starts, adopts its init for its end only: one
    # stretch at most, in the run's first half (longer on a loaded machine, never later); a
    # subreaper while the pool lives holds it on to the run's end
    held = [at for at, subreaper in enumerate(seen) if subreaper]
    shown = "".join("1" if subreaper else "." for subreaper in seen)
    assert not held or (held[-1] - held[0] + 1 == len(held) and held[-1] < len(seen) / 2), \
        f"a subreaper in {len(held)} of {len(seen)} samples: {shown}"
