"""Agents that leave processes behind (tests/test_run_lifecycle.py): each starts
``sleep $LIFE_SLEEP`` and ends its episode, or its worker."""

from __future__ import annotations

import os
import subprocess

from parallel_rollout.agents.base import Agent


class SpawnsAndReturns(Agent):
    """Starts a process it never waits for, and ends the episode."""

    def reset(self, task):
        pass

    def act(self, observation):
        subprocess.Popen(["sleep", os.environ["LIFE_SLEEP"]], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        return "DONE"


class ForkAndExit(SpawnsAndReturns):
    """Forks a child that sleeps, then ends its worker process on the spot."""

    def act(self, observation):
        if os.fork() == 0:
            os.execvp("sleep", ["sleep", os.environ["LIFE_SLEEP"]])
        os._exit(3)
