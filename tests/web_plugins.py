"""Agents for the web mode's tests: policies that try to be scored 1 on a page they did not
solve, through the actions the mode accepts."""

from __future__ import annotations

import time

from parallel_rollout.agents.oracle import OracleAgent
from parallel_rollout.envs.web.oracle import quoted


class RestartingAgent(OracleAgent):
    """Fails the task's page, then has MiniWoB start a new episode by clicking its START cover
    (which the page shows once it graded one), and solves that one with the oracle.

    ``web_cheat`` (a task field): ``"double_click"`` double-clicks a button the utterance does
    not name (the first click grades the page -1, the second lands on the cover);
    ``"outwait"`` sleeps past the page's time limit (a slow model) and then clicks the cover."""

    task_fields = frozenset({"web_cheat"})

    def reset(self, task) -> None:
        super().reset(task)
        self.cheat = task.get("web_cheat")
        self.first = True

    def act(self, observation):
        if not self.first:
            return super().act(observation)
        self.first = False
        if self.cheat == "outwait":
            time.sleep(2.5)
            return {"action": "click", "x": 80, "y": 100}
        want = quoted(observation["utterance"])[-1]
        wrong = next(el for el in observation["dom"] if el["tag"] == "button" and el.get("text") != want)
        return {"action": "click", "x": wrong["left"] + wrong["width"] / 2,
                "y": wrong["top"] + wrong["height"] / 2, "clicks": 2}


class StallingAgent(OracleAgent):
    """Sends its first action with a pause the mode never checked (``ms`` on a click: only a
    wait's is bounded), long enough to stall the driver; then the oracle's actions."""

    task_fields = frozenset({"web_stall_ms"})

    def reset(self, task) -> None:
        super().reset(task)
        self.stall = task.get("web_stall_ms")

    def act(self, observation):
        if self.stall is None:
            return super().act(observation)
        stall, self.stall = self.stall, None
        return {"action": "click", "x": 150, "y": 200, "ms": stall}


class FirstReplyAgent(OracleAgent):
    """Answers the task's ``web_first_reply`` (a model's reply, as text) first; then the oracle."""

    task_fields = frozenset({"web_first_reply"})

    def reset(self, task) -> None:
        super().reset(task)
        self.reply = task.get("web_first_reply")

    def act(self, observation):
        reply, self.reply = self.reply, None
        return super().act(observation) if reply is None else reply


class ScriptedAgent(OracleAgent):
    """Plays the task's ``web_script`` (a hostile policy's actions, in order), then says DONE."""

    task_fields = frozenset({"web_script"})

    def reset(self, task) -> None:
        super().reset(task)
        self.script = list(task.get("web_script") or [])

    def act(self, observation):
        return self.script.pop(0) if self.script else "DONE"


class TerminalAgent(OracleAgent):
    """Solves MiniWoB's terminal as a user would (no solver of the oracle's does): ``ls``, then
    ``rm`` the file the utterance asks for."""

    def reset(self, task) -> None:
        super().reset(task)
        self.turn = 0

    def act(self, observation):
        self.turn += 1
        if self.turn == 1:
            return {"action": "wait", "ms": 400}  # the page focuses its terminal after 200 ms
        if self.turn == 2:
            return {"action": "type", "text": "ls\n"}
        if self.turn > 3:
            return "DONE"
        listing = [el["text"] for el in observation["dom"] if "output" in el.get("classes", "") and el.get("text")]
        files = listing[-1].split()
        utterance = observation["utterance"]
        if "no file extension" in utterance:
            name = next(f for f in files if "." not in f)
        else:  # "... with the extension .gif"
            name = next(f for f in files if f.endswith("." + utterance.rsplit(".", 1)[-1].strip()))
        return {"action": "type", "text": f"rm {name}\n"}
