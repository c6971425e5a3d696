"""``osworld`` mode: an agent acting on a desktop inside a leased VM, scored like OSWorld.

::

    reset(task, vm): [start recording] → config steps (setup.py) → observation
                     (a failing step: setup_failed, no score: the agent has not acted)
    step(action):    WAIT/FAIL/DONE, or the action's pyautogui code via POST /execute
                     → sleep --sleep-after-execution → screenshot (+ a11y tree) → observation
                     (a reply's several actions: each in turn, up to a DONE or FAIL)
    evaluate():      [end recording] → postconfig steps → getters → metrics → conj → score

**Observations** are ``{"instruction", "screenshot_path", "accessibility_tree"}`` plus an
``error`` when the last action was malformed: the screenshot is a PNG on disk (``step_N.png``)
rather than bytes in the observation, so per-turn trajectory lines stay small; agents in the
worker read the file (``agents/openai_agent.py`` sends it as an image).

**Trajectory files** (OSWorld's layout) go to ``self.trajectory_dir``, which the worker sets
to ``trajectories/<task>/<sample>/attempt-<n>/`` before ``reset`` (the hook; without it a
temporary folder is used): ``traj.jsonl`` (step_num, action_timestamp, action, response,
reward, done, info, screenshot_file; ``response`` is the model's reply the action was read
from, ``Env.turn_record``'s), ``step_0.png`` … ``step_N.png``, ``result.txt``, and
``recording.mp4`` with ``--record``.

**Scoring** as OSWorld: ``func`` one or a list with ``conj``; ``infeasible`` is 1 iff the
last action was FAIL; any other task whose last action was FAIL scores 0. Malformed actions
are not executed: the observation says why and the episode goes on.
"""

from __future__ import annotations

import json
import os
import tempfile
import time
from pathlib import Path
from types import MappingProxyType
from typing import Any, ClassVar, Mapping

from ...errors import GuestPrerequisiteMissing, TaskFileFault, TaskFileMissing, TaskSetupFailed, VMError
from ...tasks import UnsupportedTask
from ..base import Env, StepResult, reject_none, require
from . import actions as acts
from . import evaluators as ev
from . import registry
from . import setup as steps
from . import sources
from .rule_keys import RULE_GETTERS, MalformedRule, task_rules

#: the --observation-type values (OSWorld's)
OBSERVATION_TYPES = ("screenshot", "a11y_tree", "screenshot_a11y_tree")
#: seconds one action's code may run in the VM (OSWorld's client waits 90 s)
ACTION_TIMEOUT_S = 90.0
#: seconds WAIT sleeps when --sleep-after-execution is 0
WAIT_S = 1.0
_PREFIX = "import pyautogui; import time; pyautogui.FAILSAFE = False; "


def start_recording(vm) -> None:
    """Start the episode's recording. One an earlier episode left running (cut before its
    grading on a machine no reset clears: a remote one) is ended first, its video dropped:
    the guest (ours, OSWorld's) keeps one recorder and refuses a second start."""
    from ...guest.client import GuestRequestError

    try:
        vm.start_recording()
    except GuestRequestError as exc:
        if exc.status != 400 or "already in progress" not in exc.message:
            raise
        vm.end_recording()
        vm.start_recording()


def check_pyautogui(vm) -> None:
    """GuestPrerequisiteMissing when the VM's ``python`` has no pyautogui, which every action's
    code imports first (``_PREFIX``): each action would fail, and the attempt be graded 0 as
    the agent's own failure; a machine of one's own given to --provider-name remote may lack
    it (OSWorld's images have it, this project's images and sandboxes carry a shim). Asked
    before the task's setup, without the agent's code: only a missing module or command stops
    the run, any other failure is left to the actions to show."""
    probe = vm.execute(["python", "-c", "import pyautogui"], timeout=ACTION_TIMEOUT_S)
    error = f"{probe.get('message') or ''} {probe.get('error') or ''}".strip()
    if probe.get("not_found") or "command not found" in error:
        raise GuestPrerequisiteMissing(
            "osworld: the VM has no `python` command, which runs every action (`python -c \"import pyautogui; "
            "…\"`, as OSWorld runs them): install one there (Debian, Ubuntu: python-is-python3)")
    if "No module named 'pyautogui'" in error:
        raise GuestPrerequisiteMissing(
            "osworld: the VM's python has no pyautogui, which every action runs: install it there "
            "(pip install pyautogui; OSWorld's images have it), or start its guest agent with --desktop, "
            "which puts its own xdotool-backed one on the PYTHONPATH of the commands it runs")


def reply_text(turn: Mapping[str, Any]) -> str | None:
    """The model's reply the step's action was read from (traj.jsonl's ``response``, as
    OSWorld keeps it): the turn's last call's text, after the pieces a re-tokenized partial
    rollout split off it (``agents/calls.py``); None when the agent called no model."""
    reply = turn.get("reply")
    if not isinstance(reply, str):
        return None
    pieces: list[str] = []
    for call in reversed(turn.get("earlier_calls") or [] if turn.get("retokenized") else []):
        if not (isinstance(call, dict) and call.get("partial") and isinstance(call.get("reply"), str)):
            break
        pieces.insert(0, call["reply"])
    return "".join(pieces) + reply


class OSWorldEnv(Env):
    """OSWorld tasks on a desktop VM."""

    name = "osworld"
    vm_scope = "episode"
    #: the provider must give every VM a desktop (pool.providers.provider_options)
    needs_desktop: ClassVar[bool] = True
    options = frozenset({"action_space", "screen_width", "screen_height", "client_password",
                         "observation_type", "sleep_after_execution", "record"})
    default_max_turns = 15
    #: the evaluator's getters, metrics and expected values, and the reference actions
    answer_fields = frozenset({"evaluator", "reference"})
    nested_fields = MappingProxyType({"evaluator": frozenset({"postconfig", "conj", "options"})})
    seed_is_secret = False  # nothing in an OSWorld episode draws on it

    # ------------------------------------------------------------------ tasks

    @staticmethod
    def validate_task(payload: Mapping[str, Any]) -> None:
        """OSWorld's task JSON: instruction, config steps, evaluator; reference when given.
        UnsupportedTask (listing every step, getter and metric this mode lacks) when it is
        well-formed but not runnable here; a ValueError when such a name reads as a typo of a
        supported one (``exact_mtach``)."""
        require(payload, "instruction", str)
        require(payload, "evaluator", dict)
        mistyped = registry.typos(payload)
        if mistyped:  # refused, not skipped: --skip-unsupported would score a typo 0
            raise ValueError(f"unknown {', '.join(mistyped)}")
        lacking = registry.unsupported(payload)
        if lacking:
            raise UnsupportedTask(lacking)
        steps.check_steps(payload.get("config", []), "config")
        steps.check_steps(payload["evaluator"].get("postconfig", []), "evaluator postconfig")
        ev.check_evaluator(payload["evaluator"])
        reference = payload.get("reference")
        if reference is not None:
            if not isinstance(reference, list):
                raise ValueError("field 'reference' must be a list of computer_13 actions")
            for index, action in enumerate(reference, start=1):
                if acts.special(action):
                    continue
                try:
                    acts.computer13_to_code(action, 100_000, 100_000)
                except acts.ActionError as exc:
                    raise ValueError(f"reference action {index}: {exc}") from None

    @staticmethod
    def census_notes(tasks, config) -> list[str]:
        """The dry run's notes: tasks that fetch files not in the download cache, or launch
        an app this run's VMs lack (see :mod:`.census`)."""
        from .census import census_notes, missing_command

        listing = missing_command(str(config.data), config.osworld_index, config.domain)
        return census_notes(tasks, config.provider_name, listing)

    has_answer_files = True

    @staticmethod
    def answer_files(task) -> list[str]:
        """The local files the evaluator reads on the host, by absolute and by real path: its
        getters' ``cloud_file`` given as a path or a file:// URL (a gold file beside the task
        file), and what its ``postconfig`` steps upload or download from one. Those behind an
        http(s) URL are in the download cache, which a command agent never sees either."""
        from .references import reference_of, references_file
        from .sources import evaluation_sources, local_path

        found = []
        for url in evaluation_sources(task.get("evaluator") or {}):
            path = local_path(task, url)
            if path is not None:
                found += [os.path.abspath(path), os.path.realpath(path)]
        if reference_of(task.id) is not None:
            # the project's reference for the task (``envs/data``, in the runner's code):
            # its actions, and FAIL for an infeasible task, which says FAIL to pass
            found.append(os.path.realpath(references_file()))
        return list(dict.fromkeys(found))

    @staticmethod
    def reference_actions(task) -> list[Any]:
        """The task's reference (its own ``reference``, else the project's for that OSWorld
        task id, see :mod:`.references`), ending with DONE (unless it ends with FAIL)."""
        from .references import reference_of, references_file

        reference = task.get("reference") or reference_of(task.id)
        if reference is None:  # the file where this installation has it (a pip install's site-packages)
            raise ValueError(f"task {task.id!r} has no 'reference' actions (and the project "
                             f"has written none for it: see {references_file()})")
        reference = list(reference)
        if not reference or not acts.special(reference[-1]) in ("DONE", "FAIL"):
            reference.append("DONE")
        return reference

    # ---------------------------------------------------------------- episode

    def reset(self, task, vm) -> dict[str, Any]:
        """Run the task's config steps on the (freshly reset) desktop; first observation."""
        cfg = self.config
        self.task, self.vm = task, vm
        self.action_space = cfg.action_space
        if self.action_space not in acts.ACTION_SPACES:
            raise ValueError(f"--action-space {self.action_space!r}: osworld supports "
                             f"{', '.join(acts.ACTION_SPACES)}")
        self.observation_type = getattr(cfg, "observation_type", "screenshot")
        self.pause_s = float(getattr(cfg, "sleep_after_execution", 0.0) or 0.0)
        self.record = bool(getattr(cfg, "record", False))
        self.width, self.height = cfg.screen_width, cfg.screen_height
        self.placeholders = steps.placeholders(self.width, self.height, cfg.client_password)
        self.open_timeout_s = float(task.get("open_timeout", steps.OPEN_TIMEOUT_S))
        folder = self.trajectory_dir
        self.dir = Path(folder) if folder else Path(tempfile.mkdtemp(prefix="osworld-"))
        self.dir.mkdir(parents=True, exist_ok=True)
        self.cache_dir = self.dir / "cache"
        self.cache_root = steps.cache_root()
        self.step_no = 0
        self.screenshot_file: str | None = None
        self.actions: list[Any] = []
        self._traj = self.dir / "traj.jsonl"
        self._traj.write_text("")
        self.recording = False
        check_pyautogui(vm)
        if self.record:
            start_recording(vm)
            self.recording = True
        try:
            # the files the evaluation fetches (gold files, a postconfig's downloads), had
            # before the agent acts: one that cannot be had ends the attempt setup_failed
            # now, not after an episode (its model calls) whose grading it would fail
            for source in sources.evaluation_sources(task.get("evaluator") or {}):
                steps.local_source(task, source, self.cache_root)
            steps.run_steps(self, task.get("config", []), "config")
        except sources.SourceNotThere as exc:  # the task's own file: no retry would have it
            raise TaskFileMissing(str(exc)) from exc
        except steps.SetupError as exc:
            raise TaskSetupFailed(str(exc)) from exc
        return self._observe()

    def step(self, action: Any) -> StepResult:
        """One turn: an action, or the list of them a reply held (``prompts.parse_osworld``)
        run in order as OSWorld runs a reply's actions, each with its traj.jsonl line (one
        step_num), up to a DONE or FAIL, which ends the episode; the observation (screenshot)
        comes after the turn's last action run, and says what went wrong in any of them."""
        batch = action if isinstance(action, list) and action else [action]
        for one in batch:
            reject_none(one, "an osworld action is pyautogui code, a computer_13 dict, or WAIT, FAIL or DONE")
        self.step_no += 1
        errors: list[str] = []
        for index, one in enumerate(batch):
            started = time.time()
            info, error = self._act(one)
            if error:
                errors.append(error if len(batch) == 1 else f"action {index + 1} of {len(batch)}: {error}")
            done = "done" in info or "fail" in info
            last = done or index == len(batch) - 1
            observation = self._observe() if last else None
            entry = {"step_num": self.step_no, "action_timestamp": time.strftime(
                         "%Y%m%d@%H%M%S", time.localtime(started)),
                     "action": one, "response": reply_text(self.turn_record), "reward": 0, "done": done,
                     "info": info,
                     "screenshot_file": self.screenshot_file if observation else None}
            with self._traj.open("a", encoding="utf-8") as fh:
                fh.write(json.dumps(entry, default=repr) + "\n")
            if last:
                break
        turn_info: dict[str, Any] = dict(info)
        if errors:
            turn_info["error"] = observation["error"] = "\n".join(errors)
        return StepResult(observation, done=done, info=turn_info)

    def _act(self, action: Any) -> tuple[dict[str, Any], str | None]:
        """Run one action: (its info, what went wrong or None)."""
        self.actions.append(action)
        kind = acts.special(action)
        if kind == "WAIT":
            # OSWorld sleeps its pause; with no --sleep-after-execution that would be no wait
            time.sleep(self.pause_s or WAIT_S)
            return {}, None
        if kind in ("DONE", "FAIL"):
            return {kind.lower(): True}, None
        try:
            code = acts.to_code(action, self.action_space, self.width, self.height)
        except acts.ActionError as exc:
            return {"error": f"invalid action: {exc}"}, f"invalid action: {exc}"
        result = self.vm.execute(["python", "-c", _PREFIX + code], timeout=ACTION_TIMEOUT_S)
        time.sleep(self.pause_s)
        if result.get("returncode") != 0:
            error = (result.get("error") or result.get("message") or "")[-1000:]
            return ({"error": error}, error) if error else ({}, None)
        return {}, None

    def evaluate(self) -> tuple[float, dict[str, Any]]:
        """Postconfig, then the evaluator, scored as OSWorld scores it."""
        evaluator = self.task.get("evaluator")
        details: dict[str, Any] = {"steps": self.step_no}
        if self.recording:
            self.recording = False
            video = self.vm.end_recording()
            (self.dir / "recording.mp4").write_bytes(video)
            details["recording"] = "recording.mp4"
        last = acts.special(self.actions[-1]) if self.actions else None
        funcs = evaluator["func"]
        if funcs == "infeasible" or funcs == ["infeasible"]:
            score = 1.0 if last == "FAIL" else 0.0
            details["func"] = "infeasible"
        elif last == "FAIL":
            score = 0.0
            details["reason"] = "the agent gave up (FAIL) on a feasible task"
        else:
            try:
                scores = self._scores(evaluator, details)
            except steps.SourceMissing as exc:  # the task's own file (a gold one): no score
                raise (TaskFileMissing if isinstance(exc, sources.SourceNotThere) else TaskSetupFailed)(str(exc)) \
                    from exc
            score = ev.combine(scores, evaluator.get("conj", "and"))
            details.update(func=funcs, scores=scores)
        (self.dir / "result.txt").write_text(f"{score}\n")
        return score, details

    def _scores(self, evaluator: dict[str, Any], details: dict[str, Any]) -> list[float]:
        """Postconfig, then each metric on its getters' states. A metric failing on the
        agent's output scores 0; a step or getter that cannot run (SetupError) is the
        attempt's error: after the agent's turns it may be the agent's doing. A key that the
        task file's rule or option lacks (``MalformedRule``) is the task's error, no score. A VM that
        broke under a getter (VMError) goes to the lease, which tells a VM killed from
        outside (retried) from one the task broke (sandbox_violation). As OSWorld's
        ``evaluate``, the metrics stop at the first that decides the score (a 0 under "and",
        a 1 under "or"): the getters of the rest are not run."""
        steps.run_steps(self, evaluator.get("postconfig", []), "postconfig")
        decides = 0.0 if evaluator.get("conj", "and") == "and" else 1.0
        scores = []
        for index, (func, result_cfg, expected_cfg, options) in enumerate(ev.normalized(evaluator)):
            options = task_rules(options)  # compare_table's rules: a key one lacks raises as a rule's
            try:
                result = ev.GETTERS[result_cfg["type"]](self, result_cfg)
                if expected_cfg:  # OSWorld passes the expected state only when there is one
                    if expected_cfg["type"] in RULE_GETTERS:  # the task's rule: a key it lacks raises
                        expected_cfg = task_rules(expected_cfg)
                    expected = ev.GETTERS[expected_cfg["type"]](self, expected_cfg)
                    score = ev.METRICS[func](result, expected, **options)
                else:
                    score = ev.METRICS[func](result, **options)
                scores.append(float(score))
            except (steps.SetupError, VMError):  # a VM that broke is the lease's to judge, not a 0
                raise
            except MalformedRule as exc:  # the task file's mistake, as OSWorld's run raises: no score
                raise TaskFileFault(f"{ev.metric_named(evaluator, index)}: {exc}, which the metric reads") from exc
            except Exception as exc:  # a metric failing on the agent's output scores 0
                scores.append(0.0)
                details.setdefault("errors", []).append(f"{func}: {type(exc).__name__}: {exc}")
            if scores[-1] == decides:
                break
        return scores

    # ---------------------------------------------------------------- helpers

    def _observe(self) -> dict[str, Any]:
        """The observation after a turn (or the reset). Its screenshot is saved as
        ``step_N.png`` whatever the observation type, as OSWorld's run.py saves one per step
        (traj.jsonl's ``screenshot_file`` names it, and OSWorld's result viewers show it); with
        ``a11y_tree`` the agent is not shown it (no ``screenshot_path``)."""
        observation: dict[str, Any] = {"instruction": self.task.get("instruction"),
                                       "screenshot_path": None, "accessibility_tree": None}
        path = self.dir / f"step_{self.step_no}.png"
        path.write_bytes(self.vm.screenshot())
        self.screenshot_file = path.name
        if self.observation_type in ("screenshot", "screenshot_a11y_tree"):
            observation["screenshot_path"] = str(path)
        if self.observation_type in ("a11y_tree", "screenshot_a11y_tree"):
            observation["accessibility_tree"] = self.vm.accessibility_tree()
        return observation
