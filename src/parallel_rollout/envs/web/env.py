"""``web`` mode: MiniWoB++ tasks in Chromium inside the leased VM, scored by MiniWoB's own
JavaScript.

A task names a MiniWoB++ environment and a seed::

    {"id": "click-button-0", "mode": "web", "env": "click-button", "seed": 0}
    {"id": "slow-reader", "mode": "web", "env": "read-table", "seed": 7, "time_limit_s": 60,
     "screenshot": true}

One episode, all of it inside the VM (``browser.py`` runs there through ``/run_python``)::

    reset  bundle(env) ─► unpack in ~/.cache/web-agents/<agent>, a page server on 127.0.0.1
           (ports: the OS's), chromium --headless --no-sandbox (profile there) ─► open the page,
           Math.seedrandom(seed), core.startEpisodeReal() ─► observation
    step   action (JSON or click("12")) ─► checked here ─► CDP: core.elementClick(ref) | mouse
           and key events | wheel ─► observation: utterance, DOM list, WOB_* reward globals
    end    when MiniWoB's page says done (a graded action, or its time limit ran out), the
           agent says done, or --max-turns; once graded, the browser and page server are
           ended (by pid: only the ones the driver started), as is an earlier episode's at start

The reward is MiniWoB's raw reward (``WOB_RAW_REWARD_GLOBAL``: 1 for success, -1 for failure,
partial credit in between for a few tasks) clipped to [0, 1]; the time-discounted
``WOB_REWARD_GLOBAL`` and the page's reason are in the details. The time limit is the page's
own (``core.EPISODE_MAX_TIME``, 10 s for most) unless the task sets ``time_limit_s``: a
model that thinks longer than that needs it. The VM reset after the episode takes the
browser, its profile (cookies, local storage) and the files with it.

Observations: ``utterance`` (the task in words), ``dom`` (MiniWoB's ``core.getDOMInfo`` as
a flat list: ref, parent, tag, text, value, id, classes, left/top/width/height, focused),
``error`` (why the last action did nothing), ``done``, ``reward``, and ``screenshot_path``
(a PNG in the trajectory folder) when the task asks for ``screenshot``.
"""

from __future__ import annotations

import base64
import json
import math
import tempfile
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Any, Mapping

from ...errors import GuestPrerequisiteMissing, ProviderUnavailable, VMError
from ...pool.providers.images import GUEST_PATH
from ..base import Env, StepResult, reject_none, require
from . import catalog
from .actions import ActionError, parse_action

#: seconds the guest may take to start the browser and open the page
START_TIMEOUT_S = 90.0
#: seconds one action and the observation after it may take
STEP_TIMEOUT_S = 30.0
#: browser window size; MiniWoB's task area is the top-left 160 x 210 pixels
WINDOW = (500, 400)
#: the longest time limit the page's timer takes: setTimeout's delay is a signed 32-bit count
MAX_TIME_LIMIT_MS = 2**31 - 1


def time_limit_ms(limit_s: float) -> int:
    """A task's ``time_limit_s`` as the page's ``core.EPISODE_MAX_TIME``: whole milliseconds,
    at least 1: a limit under a millisecond rounded down to 0 meant the page's own 10 s."""
    return max(1, math.ceil(limit_s * 1000))


@lru_cache(maxsize=1)
def driver_source() -> str:
    """``browser.py``, the guest-side driver, as text: after ``cdp.py``'s, the DevTools client
    it uses (OSWorld's Chrome steps send the same, ``envs/osworld/chrome.py``), and ``page.py``'s,
    its reading of the page and its actions."""
    return "\n".join((resources.files(__package__) / name).read_text(encoding="utf-8")
                     for name in ("cdp.py", "page.py", "browser.py"))


def driver_program(request: dict[str, Any]) -> str:
    """The program ``/run_python`` runs for one request of the driver."""
    return f"{driver_source()}\nmain(json.loads({json.dumps(json.dumps(request))}))\n"


class WebEnv(Env):
    """A MiniWoB++ page in Chromium inside the VM; one episode per task."""

    name = "web"
    vm_scope = "episode"
    default_max_turns = 20
    turn_limit_status = "max_turns"

    task_fields = frozenset({"env", "screenshot", "time_limit_s"})
    #: the seed seeds the page's ``Math.random`` (``Math.seedrandom``), which draws what a page
    #: keeps from the agent (guess-number's number …): an agent that had it could replay it
    seed_is_secret = True

    @staticmethod
    def validate_task(payload: Mapping[str, Any]) -> None:
        """``env`` is a MiniWoB++ environment of the installed package; the options' types."""
        require(payload, "env", str)
        try:
            catalog.check_env(payload["env"])
        except catalog.MiniwobMissing as exc:
            raise ValueError(str(exc)) from None
        require(payload, "screenshot", bool, optional=True)
        limit = payload.get("time_limit_s")
        if limit is not None and (isinstance(limit, bool) or not isinstance(limit, (int, float)) or limit <= 0):
            raise ValueError(f"field 'time_limit_s' must be a positive number of seconds, not {limit!r}")
        if limit is not None and time_limit_ms(limit) > MAX_TIME_LIMIT_MS:
            # the page's timer (setTimeout) takes a longer delay as 0: the episode ended at once
            raise ValueError(f"field 'time_limit_s' is {limit!r}: at most {MAX_TIME_LIMIT_MS // 1000} seconds "
                             "(24 days), the longest the page's timer counts")

    @staticmethod
    def check_guest(provider_name: str) -> str | None:
        """What can be known of the guest before a VM boots (preflight and the run's start):
        the process provider's sandboxes see this host's /usr, so its Chromium is theirs;
        ProviderUnavailable without one. Other guests are checked by their first episode."""
        if provider_name != "process":
            return None
        from .browser import CHROMIUM, find_chromium

        found = find_chromium(GUEST_PATH)
        if found is None:
            raise ProviderUnavailable(
                f"the web mode needs Chromium, and the process provider's sandboxes use this host's: "
                f"none of {', '.join(CHROMIUM)} is in {GUEST_PATH}; install Debian's chromium package "
                "(./dev run installs it)")
        return f"Chromium for the web mode: {found}"

    @staticmethod
    def cut_cleanup() -> str | None:
        """The driver's stop: the page server and Chromium an episode cut before its grading
        started (their pids are in the guest's home) end at the VM's next reset or stop."""
        return driver_program({"op": "stop"})

    @staticmethod
    def reference_actions(task) -> list[Any]:
        """None are stored: the oracle reads each observation (see ``replan``)."""
        return [{"action": "wait"}]

    @staticmethod
    def replan(task, observation: Mapping[str, Any]) -> Any:
        """The oracle's next action: the scripted solver of the task's environment, or a wait
        (the page's time limit then ends the episode) for one without a solver."""
        from .oracle import next_action

        return next_action(task.get("env"), observation)

    def reset(self, task, vm) -> dict[str, Any]:
        """Start the browser in the VM on the task's page, seeded, and begin the episode."""
        self.task, self.vm = task, vm
        self.env_name = task.get("env")
        self.want_screenshot = bool(task.get("screenshot", False))
        folder = self.trajectory_dir
        self.dir = Path(folder) if folder else Path(tempfile.mkdtemp(prefix="web-"))
        self.steps = 0
        self.actions: list[Any] = []
        self.ended_by: str | None = None
        self.ports: dict[str, int] | None = None  # the episode's loopback ports in the VM (its start says)
        limit = task.get("time_limit_s")
        seed = task.seed if task.seed is not None else 0
        request = {"op": "start", "bundle": catalog.bundle(self.env_name), "page": catalog.page(self.env_name),
                   "seed": seed, "width": WINDOW[0], "height": WINDOW[1],
                   "time_limit_ms": time_limit_ms(limit) if limit else None}
        self.state = self._call(request, START_TIMEOUT_S)
        self.ports = self.state.pop("ports")
        return self._observation(None)

    def step(self, action: Any) -> StepResult:
        """One action in the browser; done when MiniWoB's page says so or the agent does."""
        reject_none(action, 'a web action is a JSON object like {"action": "click", "ref": 3} or DONE')
        self.steps += 1
        self.actions.append(action)
        try:
            parsed = parse_action(action)
        except ActionError as exc:
            return StepResult(self._observation(str(exc)), done=False, info={"invalid": True})
        if parsed["action"] == "done":
            self.ended_by = "agent"
            self.state = self._call({"op": "observe"}, STEP_TIMEOUT_S)
            return StepResult(self._observation(None), done=True, info=self._info())
        self.state = self._call({"op": "act", "action": parsed}, STEP_TIMEOUT_S)
        if self.state["done"]:
            self.ended_by = "page"
        return StepResult(self._observation(self.state.get("error")), done=bool(self.state["done"]),
                          info=self._info())

    def evaluate(self) -> tuple[float, dict[str, Any]]:
        """MiniWoB's raw reward clipped to [0, 1]; 0 when the page never finished."""
        done = bool(self.state.get("done"))
        raw = float(self.state.get("raw_reward") or 0.0) if done else 0.0
        try:  # the page is read: the browser and its page server end here, not at the VM's reset,
            # which a remote machine may not have (--reset-command none) or which may not end them
            self._call({"op": "stop"}, STEP_TIMEOUT_S)
        except VMError:
            pass  # a VM broken now has its grade all the same; the pool's reset finds it out
        return max(0.0, min(1.0, raw)), {
            "env": self.env_name, "done": done, "raw_reward": self.state.get("raw_reward"),
            "env_reward": self.state.get("reward"), "reason": self.state.get("reason"),
            "ended_by": self.ended_by, "steps": self.steps,
        }

    # ---------------------------------------------------------------- helpers

    def _info(self) -> dict[str, Any]:
        return {"raw_reward": self.state.get("raw_reward"), "reason": self.state.get("reason")}

    def _call(self, request: dict[str, Any], timeout: float) -> dict[str, Any]:
        """Run the driver in the guest with one request; its answer. VMError when the guest
        or the browser broke (an infrastructure failure: the attempt is retried)."""
        request = {**request, "screenshot": self.want_screenshot, "ports": self.ports}
        from .browser import MARKER

        result = self.vm.run_python(driver_program(request), timeout=timeout)
        output = result.get("output") or ""
        _, marker, answer = output.rpartition(MARKER)
        if result.get("timeout") or not marker:
            why = "timed out" if result.get("timeout") else f"exit status {result.get('return_code')}"
            raise VMError(f"web: the browser driver in the VM gave no answer ({why}): "
                          f"{(result.get('error') or output)[-500:]}")
        state = json.loads(answer.strip().splitlines()[0])
        if state.get("missing"):  # the guest image lacks Chromium: no VM to replace, the run stops
            raise GuestPrerequisiteMissing(f"web: {request['op']} failed in the VM: {state['fatal']}")
        if "fatal" in state:
            raise VMError(f"web: {request['op']} failed in the VM: {state['fatal']}")
        return state

    def _observation(self, error: str | None) -> dict[str, Any]:
        observation = {"env": self.env_name, "utterance": self.state.get("utterance"),
                       "dom": self.state.get("dom", []), "error": error, "done": bool(self.state.get("done")),
                       "reward": self.state.get("raw_reward") if self.state.get("done") else None,
                       "steps": self.steps}
        if self.state.get("screenshot"):
            path = self.dir / f"step_{self.steps}.png"
            self.dir.mkdir(parents=True, exist_ok=True)
            path.write_bytes(base64.b64decode(self.state.pop("screenshot")))
            observation["screenshot_path"] = str(path)
        return observation
