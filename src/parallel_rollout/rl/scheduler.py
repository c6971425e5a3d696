"""RolloutScheduler: grouped trajectories for an RL trainer, between its training steps.

ROLL's agentic pipeline on this project's engine (one pool, one set of workers, one
dispatch loop, one concurrency limit)::

    trainer ── get_batch(bs, step) ──► scheduler ── submit members ──► Engine ─► workers
               ◄─ whole groups, oldest first ◄── groups fill up ◄── final records ◄┘
    trainer ── suspend() / resume(v) ──► PolicyGate ◄── every model request asks it

Generation runs in the engine's thread through callbacks, so it goes on while the trainer
trains. How far ahead: with ``async_generation_ratio`` r, at most ``need × r`` groups are
outstanding (running or ready) while the trainer trains, ``need × (r + 1)`` while it waits in
``get_batch`` (need = batch_size / group_size); r = 0 is synchronous — nothing starts between
batches. A group created at step s is dropped (counted) once the step exceeds s + r.

Siblings (``sibling(config)``) share the engine, its gate and its limit: a validation
scheduler runs ``get_batch(-1)`` (every task of its tags once) while training generation
goes on (``shared``: what they share). ``close()`` of the scheduler that made the engine
stops everything.
"""

from __future__ import annotations

import dataclasses
import itertools
import logging
import random
import threading
import time
from collections import Counter, deque
from pathlib import Path
from typing import Any

from ..config import RunConfig, check_token_settings
from ..errors import ConfigError, RolloutError
from ..messages import Assignment
from .config import EnvManagerConfig, load_tasks_of, resolve_task_set
from .groups import Group, GroupFilter, Trajectory, from_record, trajectory_id
from .shared import SharedEngine

log = logging.getLogger("parallel_rollout")

#: how often a blocked get_batch looks at the engine's health (seconds)
_POLL_S = 0.2


class SchedulerClosed(RolloutError):
    """get_batch on a closed scheduler, or the scheduler closed while it waited."""

    kind = "scheduler_closed"


class RolloutScheduler:
    """Hands out batches of whole groups; see the module docstring."""

    def __init__(self, run_config: RunConfig, env_config: EnvManagerConfig | None = None, *,
                 async_generation_ratio: float = 0, max_concurrent_rollouts: int | None = None,
                 group_filter: GroupFilter | None = None, failed_member: str = "drop",
                 name: str = "train", seed: int = 0, _shared: SharedEngine | None = None) -> None:
        self.env_config = env_config or EnvManagerConfig()
        self.env_config.check()
        self.ratio = _whole_ratio(async_generation_ratio)
        if failed_member not in ("drop", "placeholder"):
            raise ConfigError(f"failed_member must be 'drop' or 'placeholder', got {failed_member!r}")
        self.failed_member = failed_member
        self.group_filter = group_filter
        self.name = name
        self._rng = random.Random(seed)
        self.run_config = run_config
        self.tags = list(self.env_config.tags or [run_config.mode])
        self._tasks = _load_tags(self.tags, self.env_config, run_config)
        self._owner = _shared is None
        check_token_settings(run_config)
        if self._owner and run_config.tokenizer:
            from ..agents.tokens import ChatTokenizer

            ChatTokenizer(run_config.tokenizer)  # a bad folder: a ConfigError now, not every episode's error
        self.modes = sorted({task.mode for tasks in self._tasks.values() for task in tasks})
        if _shared is not None:
            _shared.check_sibling(name, self.modes)
        self._shared = _shared or SharedEngine.start(
            run_config, self.modes, max_concurrent_rollouts=max_concurrent_rollouts,
            envs_per_worker=self.env_config.max_env_num_per_worker)
        self._shared.schedulers.append(self)
        engine = self._shared.engine
        self.concurrency = engine.concurrency
        groups = self.env_config.num_env_groups or max(1, self.concurrency // self.env_config.members)
        self.partition = self.env_config.partition(self.tags, groups)
        self._cond = threading.Condition()
        self._groups: dict[int, Group] = {}      # running (not complete, not dropped)
        self._ready: list[Group] = []            # complete, waiting for get_batch
        self._by_key: dict[str, tuple[Group, int, float]] = {}
        self._next_task = {tag: self._task_cycle(tag) for tag in self.tags}
        self._group_ids = itertools.count()
        self._episodes = Counter()
        self._step = 0
        self._need = 0
        self._waiting = False
        self._closed = False
        self._all: deque | None = None           # get_batch(-1): tasks still to start
        self._all_done: list[Group] = []
        self._stats = Counter()
        # Engine calls queued under the lock and made after it is released: the engine calls
        # back (_on_final) from its own thread, so calling it under our lock could deadlock.
        self._outbox: list[tuple[str, Any]] = []

    # -- construction ---------------------------------------------------------------------

    def sibling(self, env_config: EnvManagerConfig, *, async_generation_ratio: float | None = None,
                group_filter: GroupFilter | None = None, failed_member: str | None = None,
                name: str | None = None) -> "RolloutScheduler":
        """Another scheduler on the same engine, gate and concurrency limit (validation, a
        baseline evaluation)."""
        if (env_config.max_env_num_per_worker is not None
                and env_config.max_env_num_per_worker != self._shared.engine.config.envs_per_worker):
            raise ConfigError(f"a sibling's max_env_num_per_worker ({env_config.max_env_num_per_worker}) must be "
                              f"its engine's ({self._shared.engine.config.envs_per_worker}): they share the workers")
        return RolloutScheduler(
            self.run_config, env_config,
            async_generation_ratio=self.ratio if async_generation_ratio is None else async_generation_ratio,
            group_filter=group_filter, failed_member=failed_member or self.failed_member,
            name=name or f"{self.name}-sibling{len(self._shared.schedulers)}", _shared=self._shared)

    def _task_cycle(self, tag: str):
        tasks = list(self._tasks[tag])
        while True:
            self._rng.shuffle(tasks)
            yield from tasks

    # -- the trainer's calls --------------------------------------------------------------

    def get_batch(self, batch_size: int, step: int) -> list[Trajectory]:
        """Block until ``batch_size`` trajectories of whole groups are ready; return them,
        oldest group first. ``batch_size=-1``: every task of the tags once (validation)."""
        if batch_size == -1:
            return self._run_all(step)
        size = self.env_config.group_size
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1 or batch_size % size:
            raise ConfigError(f"batch_size must be a positive multiple of group_size ({size}) or -1, got {batch_size!r}")
        need = batch_size // size
        with self._cond:
            self._check_open()
            self._step, self._need, self._waiting = step, need, True
            self._drop_stale()
            self._fill()
        try:
            while True:
                self._flush()
                with self._cond:
                    if len(self._ready) >= need:
                        batch, self._ready = self._ready[:need], self._ready[need:]
                        self._waiting = False
                        self._stats["groups_returned"] += len(batch)
                        self._fill()
                        break
                    self._wait()
        finally:
            with self._cond:
                self._waiting = False
            self._flush()
        return _with_turns([t for group in batch for t in group.trajectories()])

    def suspend(self, abort: bool = False, timeout: float | None = None) -> None:
        """Stop new model requests (every scheduler of this engine) for a weight update; wait
        for those in flight, or with ``abort`` have them redone after ``resume``."""
        self._shared.gate.suspend(abort=abort, timeout=timeout)

    def resume(self, policy_version: int) -> None:
        """Let model requests go on, recorded as ``policy_version`` from now on."""
        self._shared.gate.resume(policy_version)

    @property
    def run_dir(self) -> Path:
        """The engine's output folder: results.jsonl, trajectories/, events.jsonl."""
        return Path(self._shared.engine.run_dir)

    @property
    def policy_version(self) -> int:
        """The version model requests are recorded with now."""
        return self._shared.gate.version

    def stats(self) -> dict[str, Any]:
        """Counts so far: groups started/returned/dropped (per reason), members cancelled,
        placeholders, what is running and ready, and the gate's requests."""
        with self._cond:
            stats = dict(self._stats)
            stats.update(groups_running=len(self._groups), groups_ready=len(self._ready), step=self._step,
                         policy_version=self._shared.gate.version, model_requests=self._shared.gate.requests,
                         model_requests_aborted=self._shared.gate.aborted, concurrency=self.concurrency,
                         partition=dict(self.partition))
            stats["groups_dropped"] = sum(v for k, v in self._stats.items() if k.startswith("dropped_"))
        return stats

    def close(self) -> None:
        """Stop this scheduler's generation; the scheduler that started the engine also
        stops the engine (workers, pool, VMs) and the gate. Idempotent."""
        with self._cond:
            if self._closed:
                return
            self._closed = True
            for group in list(self._groups.values()):
                self._drop(group, "closed")
            self._cond.notify_all()
        if not self._owner:
            self._flush()  # the engine goes on for the others: cancel what was ours
        else:
            self._shared.close()

    def __enter__(self) -> "RolloutScheduler":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _mark_closed(self) -> None:
        """The engine is stopping: no more generation, and a waiting get_batch ends."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()

    # -- generation (under self._cond) ----------------------------------------------------

    def _fill(self) -> None:
        """Start groups while the ratio and the partition allow."""
        if self._closed:
            return
        if self._all is not None:
            while self._all and self._start_allowed(self._all[0][0]):
                tag, task = self._all.popleft()
                self._start_group(tag, task, purpose="all")
            return
        cap = self._need * (self.ratio + (1 if self._waiting else 0))
        while len(self._groups) + len(self._ready) < cap:
            open_tags = [t for t in self.tags if self._start_allowed(t)]
            if not open_tags:
                return
            tag = min(open_tags, key=lambda t: self._running(t) / self.partition[t])
            self._start_group(tag, next(self._next_task[tag]), purpose="batch")

    def _running(self, tag: str) -> int:
        return sum(1 for g in self._groups.values() if g.tag == tag)

    def _start_allowed(self, tag: str) -> bool:
        return self._running(tag) < self.partition[tag]

    def _start_group(self, tag: str, task: Any, purpose: str) -> None:
        group_id = next(self._group_ids)
        episode_id = self._episodes[tag]
        self._episodes[tag] += 1
        seed = task.seed if task.seed is not None else self._rng.randrange(2 ** 31)
        member_task = dataclasses.replace(task, seed=seed)
        size = self.env_config.group_size
        group = Group(group_id, tag, episode_id, task, seed, self._step, size, created_at=time.time(),
                      purpose=purpose)
        self._groups[group_id] = group
        self._stats["groups_started"] += 1
        now = time.time()
        for member in range(self.env_config.members):
            ident = trajectory_id(tag, group_id, episode_id, member)
            item = Assignment(member_task, member, 0, name=f"{self.name}:{ident}",
                              meta={"scheduler": self.name, "tag": tag, "group": group_id,
                                    "episode": episode_id, "member": member, "step": self._step})
            group.keys[member] = item.key
            self._by_key[item.key] = (group, member, now)
            self._outbox.append(("submit", item))

    def _on_final(self, record: dict[str, Any]) -> None:
        """The engine's callback: a member's final record."""
        try:
            self._take_record(record)
        finally:
            self._flush()

    def _flush(self) -> None:
        """Make the engine calls queued under the lock (never called under it)."""
        with self._cond:
            ops, self._outbox = self._outbox, []
        engine = self._shared.engine
        for op, arg in ops:
            try:
                if op == "submit":
                    if not self._shared.closed:
                        engine.submit(arg, self._on_final)
                else:
                    engine.cancel(arg)
            except RolloutError:
                pass  # the engine stopped: get_batch reports engine.error

    def _take_record(self, record: dict[str, Any]) -> None:
        with self._cond:
            entry = self._by_key.pop(record.get("key"), None)
            if entry is None:
                return  # cancelled or dropped meanwhile
            group, member, queued_at = entry
            if group.group_id not in self._groups:
                return
            # notes the record only: its turns are read by get_batch, in the trainer's thread
            trajectory = from_record(group, member, record, Path(self._shared.engine.run_dir), queued_at)
            all_mode = group.purpose == "all"
            if trajectory.failed and not all_mode:
                self._stats["members_failed"] += 1
                group.failed.append(trajectory)
                if len(group.done) + len(group.running) < group.size:
                    if self.failed_member == "placeholder":
                        while len(group.done) + len(group.running) < group.size:
                            group.done.append(group.placeholder())
                            self._stats["placeholders"] += 1
                    else:
                        self._drop(group, "failed")
                        self._cond.notify_all()
                        self._fill()
                        return
            else:
                group.done.append(trajectory)
            if group.complete:
                self._complete(group)
            self._cond.notify_all()

    def _complete(self, group: Group) -> None:
        for member in group.running:
            self._cancel_member(group, member)
            self._stats["members_cancelled"] += 1
        del self._groups[group.group_id]
        group.completed_at = time.time()
        if group.purpose == "all":
            self._all_done.append(group)
        elif self._stale(group):
            self._stats["dropped_stale"] += 1
        elif self.group_filter is not None and self.group_filter(group.trajectories()):
            self._stats["dropped_filtered"] += 1
        else:
            self._ready.append(group)
            self._ready.sort(key=lambda g: g.group_id)
        self._fill()

    def _drop(self, group: Group, reason: str) -> None:
        for member in group.running:
            self._cancel_member(group, member)
        self._groups.pop(group.group_id, None)
        self._stats[f"dropped_{reason}"] += 1

    def _cancel_member(self, group: Group, member: int) -> None:
        key = group.keys[member]
        group.cancelled.add(member)
        if self._by_key.pop(key, None) is not None:
            self._outbox.append(("cancel", key))

    def _stale(self, group: Group) -> bool:
        return self._step > group.created_step + self.ratio

    def _drop_stale(self) -> None:
        for group in [g for g in self._groups.values() if g.purpose == "batch"]:
            if self._stale(group):
                self._drop(group, "stale")
        kept = [g for g in self._ready if not self._stale(g)]
        self._stats["dropped_stale"] += len(self._ready) - len(kept)
        self._ready = kept

    def _wait(self) -> None:
        self._check_open()
        error = getattr(self._shared.engine, "error", None)
        if error:
            raise RolloutError(f"the rollout engine stopped: {error}")
        self._cond.wait(_POLL_S)
        self._check_open()

    def _check_open(self) -> None:
        if self._closed:
            raise SchedulerClosed(f"scheduler {self.name!r} is closed")

    def _run_all(self, step: int) -> list[Trajectory]:
        with self._cond:
            self._check_open()
            if self._all is not None:
                raise RolloutError(f"scheduler {self.name!r} is already running get_batch(-1)")
            self._step = step
            self._all = deque((tag, task) for tag in self.tags for task in self._tasks[tag])
            self._all_done = []
            self._fill()
        try:
            while True:
                self._flush()
                with self._cond:
                    if not self._all and not any(g.purpose == "all" for g in self._groups.values()):
                        done, self._all_done = self._all_done, []
                        self._stats["validation_runs"] += 1
                        break
                    self._wait()
                    self._fill()
        finally:
            with self._cond:
                self._all = None
        done.sort(key=lambda g: g.group_id)
        return _with_turns([t for group in done for t in group.trajectories()])


def _with_turns(trajectories: list[Trajectory]) -> list[Trajectory]:
    """The trajectories with their turns read, here in the trainer's thread (the engine's
    callbacks only note the record: a parse there would hold up its dispatch)."""
    for trajectory in trajectories:
        trajectory.turns  # noqa: B018 - reads the file now; RolloutError if it is not here
    return trajectories


def _load_tags(tags: list[str], env_config: EnvManagerConfig, run_config: RunConfig) -> dict[str, list[Any]]:
    """Each tag's tasks, checked by its mode's ``prepare_run`` (rag builds its index once
    here, before any worker needs it) as the batch runner does."""
    from ..envs import get_env

    tasks = {}
    for tag in tags:
        task_set = resolve_task_set(tag, env_config, run_config.mode, run_config.data)
        tasks[tag] = load_tasks_of(tag, task_set)
        get_env(task_set.mode).prepare_run(tasks[tag])
    return tasks


def _whole_ratio(ratio: Any) -> int:
    """async_generation_ratio as a whole number; ConfigError for fractions and negatives."""
    if isinstance(ratio, bool) or not isinstance(ratio, (int, float)):
        raise ConfigError(f"async_generation_ratio must be a whole number >= 0, got {ratio!r}")
    if ratio < 0 or ratio != int(ratio):
        raise ConfigError(f"async_generation_ratio={ratio!r}: only whole numbers >= 0 mean something here "
                          "(0 = synchronous, r = generation runs at most r steps ahead)")
    return int(ratio)
