"""Agents that leave processes behind (tests/test_run_lifecycle.py, tests/test_ray_backend.py):
each starts ``sleep <its task's instruction>`` (a number only its test uses, which the test
looks for afterwards) and ends its episode, or its worker, or hangs until a timeout kills it.
The marker travels in the task, not in the environment: a Ray actor does not get the
driver's."""

from __future__ import annotations

import os
import subprocess
import time

from parallel_rollout import worker_cgroup
from parallel_rollout.agents.base import Agent


class SpawnsAndReturns(Agent):
    """Starts a process it never waits for, and ends the episode."""

    def reset(self, task):
        self.marker = task.get("instruction")

    def act(self, observation):
        subprocess.Popen(["sleep", self.marker], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        return "DONE"


class ForkAndExit(SpawnsAndReturns):
    """Forks a child that sleeps, then ends its worker process on the spot."""

    def act(self, observation):
        if os.fork() == 0:
            os.execvp("sleep", ["sleep", self.marker])
        os._exit(3)


class Detaches(SpawnsAndReturns):
    """Starts a process through a shell that exits at once (``sleep … &``): the sleep is no
    longer its worker's descendant, only a member of its process group."""

    def act(self, observation):
        subprocess.run(["sh", "-c", f"sleep {self.marker} >/dev/null 2>&1 &"], check=True)
        return "DONE"


class LeavesSession(SpawnsAndReturns):
    """Starts a process in a session of its own (``setsid``): it is neither its worker's
    descendant nor in its process group, only in its worker's cgroup."""

    def act(self, observation):
        subprocess.Popen(["sleep", self.marker], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                         start_new_session=True)
        return "DONE"


class LeavesSessionAndExits(LeavesSession):
    """Starts a process in a session of its own, then ends its worker process on the spot."""

    def act(self, observation):
        super().act(observation)
        os._exit(3)


class DetachesAndHangs(Detaches):
    """Detaches a sleep, then hangs until the run's --task-timeout kills its worker."""

    def act(self, observation):
        super().act(observation)
        time.sleep(3600)


class LeavesBothAndHangs(SpawnsAndReturns):
    """Starts one process in its worker's group and one in a session of its own, and where its
    worker has a cgroup, one of its group moved out of that cgroup; then hangs: its run is
    mid-attempt when its test kills the runner."""

    def act(self, observation):
        for own_session in (False, True):
            subprocess.Popen(["sleep", self.marker], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                             start_new_session=own_session)
        own = worker_cgroup._own_v2()
        if own is not None and os.path.basename(os.path.dirname(own)) == worker_cgroup.WORKERS:
            moved = subprocess.Popen(["sleep", self.marker], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            with open(os.path.join(os.path.dirname(os.path.dirname(own)), "cgroup.procs"), "w") as procs:
                procs.write(str(moved.pid))
        time.sleep(3600)
