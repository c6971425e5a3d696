"""What a worker leaves when it does not reap it itself, under a pid 1 that reaps nothing (a
container's ``sh`` as init, ``docker run`` without --init): the workers' server, the process
they are forked from (``backends/worker_start.py``), is their child subreaper and reaps every
orphan they leave, so none goes to the container's pid 1 as a zombie."""

from __future__ import annotations

import sys

from test_cli_exit_reap import run_under_a_pid_1_that_reaps_nothing

from conftest import shell_task

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

