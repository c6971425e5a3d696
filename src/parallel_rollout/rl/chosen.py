"""Batches of tasks the trainer names: ``get_batch(tasks=[…])`` (exactly these, one group
each, in their order) and ``get_batch(-1)`` (every task of the tags once: validation).

Neither draws from the task source nor meets the group filter, the ratio or staleness: the
trainer chose the tasks (a validation's episode that an older policy began starts over at a
weight update: ``GroupGeneration._restart_validation``). Their groups run beside the scheduler's own on the same slots
(``purpose`` "given" / "all"): a given group whose members fail is started again in its
place (under ``failed_member="placeholder"`` one whose every member failed: placeholders
only hold nothing of the task), and get_batch(-1) hands back failed members as they are (a validation report counts
them). A call that raised (a timeout …) drops its groups still running and forgets those that
finished: the next call runs its tasks afresh, none counted twice. The state is the scheduler's (``self``), as for ``generation.GroupGeneration``.
"""

from __future__ import annotations

import logging
from collections import Counter, deque
from typing import Any

from ..errors import ConfigError, RolloutError
from .config import BUILTIN_TASK_SETS, whole_number
from .groups import Trajectory
from .sources import ids_like

log = logging.getLogger("parallel_rollout")


class ChosenBatches:
    """get_batch of named tasks; the state is the scheduler's (``self``)."""

    def _run_given(self, batch_size: int, step: int, tasks: list[Any], timeout: float | None) -> list[Trajectory]:
        """get_batch(tasks=[…]): one group per given task, their groups in the given order. A
        group whose members fail (all of them, under "placeholder") is run again (the budget counts it); the group filter, the
        ratio and staleness do not apply: the trainer chose these tasks."""
        if isinstance(tasks, (str, bytes)) or not hasattr(tasks, "__iter__"):  # a str was read as its letters' ids
            raise ConfigError(f"get_batch(tasks=...) takes a list of tasks (Task objects or ids of the tags' tasks), "
                              f"got {type(tasks).__name__} {tasks!r:.80}")
        given = [self._resolve(task) for task in tasks]
        if not given:
            raise ConfigError("get_batch(tasks=[]) names no task to run: give at least one (a Task or the id "
                              "of one of the tags' tasks), or leave tasks out to draw them from the tags")
        if whole_number(batch_size) != len(given) * self.env_config.group_size:
            raise ConfigError(f"batch_size {batch_size!r} must be len(tasks) x group_size "
                              f"({len(given)} x {self.env_config.group_size})")
        with self._cond:
            self._check_open()
            if self._given is not None:
                raise RolloutError(f"scheduler {self.name!r} is already running a get_batch(tasks=...)")
            self._begin_call(len(given), timeout)
            self._step = step
            self._given = {}
            failed: BaseException | None = None
            try:
                for pos, (tag, task) in enumerate(given):
                    self._given[pos] = self._start_group(tag, task, purpose="given")
            except BaseException as exc:  # none of the call's groups may run on without it
                keys = {key for group in self._given.values() for key in group.keys.values()}
                self._abandon("given")
                # their members were never submitted (queued only): neither submit nor cancel them
                self._outbox = [(op, arg) for op, arg in self._outbox
                                if (arg.key if op == "submit" else arg) not in keys]
                self._given = None
                self._budget.call_raised()
                failed = exc
        if failed is not None:
            raise failed
        batch = None
        try:
            with self._afresh_after_raise():
                while True:
                    self._flush()
                    with self._cond:
                        if all(g.completed_at is not None for g in self._given.values()):
                            batch = [self._given[pos] for pos in range(len(given))]
                            self._stats["groups_returned"] += len(batch)
                            break
                        self._budget.check(0, len(self._groups))
                        self._wait()
        finally:
            with self._cond:
                self._abandon("given", [] if batch is not None else
                              [g for g in self._given.values() if g.completed_at is not None])
                self._given = None
            self._flush()
        return self._hand_out(batch, step)

    def _warn_generated(self) -> None:
        """Say once per scheduler that get_batch(-1) plays one generated room of a tag whose
        task is unseeded (the Sokoban tags: a new room per group), naming the fixed rooms."""
        from ..envs.gym import generated_from_seed

        if self._warned_generated:
            return
        generated = [tag for tag in self.tags if any(task.seed is None and task.mode == "gym"
                                                     and generated_from_seed(task.payload) for task in self._tasks[tag])]
        if not generated:
            return
        self._warned_generated = True
        # the built-in tags whose one unseeded task generates a room per group
        sokoban = [tag for tag in generated if tag in BUILTIN_TASK_SETS and BUILTIN_TASK_SETS[tag].data == "sokoban-endless"]
        fixed = (f"; the shipped fixed rooms are EnvManagerConfig(tags={sokoban!r}, task_sets="
                 + "{" + ", ".join(f'{tag!r}: TaskSet("gym", "sokoban", tags=({tag!r},))' for tag in sokoban) + "})"
                 if sokoban else "")
        log.warning("get_batch(-1) on scheduler %r: tag(s) %s generate a new room per group from an unseeded "
                    "task, so validation plays one generated room of each (the same at every call: the "
                    "scheduler's seed picks it); to validate on many fixed rooms give the tag tasks with seeds "
                    "of their own%s", self.name, ", ".join(generated), fixed)

    def _abandon(self, purpose: str, done: list[Any] = ()) -> None:
        """The groups of ``purpose`` ("given", "all") still running when their get_batch
        ended: dropped and their members cancelled (``dropped_abandoned`` when it raised), so
        none is counted in the next call's batch; ``done``: those it finished and, as it
        raised, never handed out, counted so too (every group started is counted somewhere)."""
        for group in [g for g in self._groups.values() if g.purpose == purpose]:
            self._drop(group, "abandoned")
        for group in done:
            self._stats["dropped_abandoned"] += 1
            self._lag.forget(group.keys.values())

    def _resolve(self, task: Any) -> tuple[str, Any]:
        """(tag, Task) of a task given to get_batch: a Task of an engine mode, or the id of a
        task of one of the tags."""
        if isinstance(task, str):
            for tag in self.tags:
                found = next((t for t in self._tasks[tag] if t.id == task), None)
                if found is not None:
                    return tag, found
            raise ConfigError(f"get_batch(tasks=...): no task {task!r} in the tags {self.tags}; "
                              + ids_like(task, [t for tag in self.tags for t in self._tasks[tag]]))
        mode = getattr(task, "mode", None)
        if mode not in self.modes:
            raise ConfigError(f"get_batch(tasks=...): task {getattr(task, 'id', task)!r} has mode {mode!r}; "
                              f"this scheduler's engine runs {self.modes}")
        tag = next((t for t in self.tags if task in self._tasks[t]), (task.tags or (mode,))[0])
        self._shared.check_hidden([task], "get_batch(tasks=...)")  # a Task made in Python: its gold files too
        return tag, task

    def _run_all(self, step: int, timeout: float | None) -> list[Trajectory]:
        """get_batch(-1): every task of the tags once, started as slots free up; failed
        members come back as they are, and only the timeout and a silent endpoint
        (``BatchBudget.check_silence``) bound the wait."""
        with self._cond:
            self._check_open()
            if self._all is not None:
                raise RolloutError(f"scheduler {self.name!r} is already running get_batch(-1)")
            self._begin_call(1, timeout)
            self._step = step
            self._warn_generated()
            # the same episode ids at every call (a task's place in its tag), so an unseeded
            # task gets the same seed, the same room, each validation, as ROLL's val env
            # managers start their episode ids at 0 again; the tag's counter stays training's
            self._all = deque((tag, task, place) for tag in self.tags
                              for place, task in enumerate(self._tasks[tag]))
            self._all_done = []
            self._all_restarts = Counter()  # (tag, place) -> times started over (``_restart_validation``)
            self._fill()
        try:
            while True:
                self._flush()
                with self._cond:
                    if not self._all and not any(g.purpose == "all" for g in self._groups.values()):
                        done, self._all_done = self._all_done, []
                        self._stats["validation_runs"] += 1
                        self._stats["groups_returned"] += len(done)
                        break
                    self._budget.check_silence()  # a stopped server: not only the timeout bounds it
                    self._budget.check_time(len(self._all_done), len(self._groups))
                    self._wait()
                    self._fill()
        finally:
            with self._cond:
                self._abandon("all", self._all_done)  # none once the batch is taken
                self._all, self._all_done = None, []
            self._flush()
        done.sort(key=lambda g: g.group_id)
        return self._hand_out(done, step)
