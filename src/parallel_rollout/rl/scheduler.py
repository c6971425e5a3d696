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
batches. A group created at step s is dropped (counted) once the step exceeds s + r; the
batch of step s + r waits for it rather than take a newer group that finished first.
``max_version_lag=k`` also bounds the policy versions that sampled a group's tokens
(``staleness``); ``suspend(abort=True)`` ends the model requests in flight at the server.

Seeds, as ROLL's env managers give them (episode seed = group seed + episode id): a group's
members share one seed; a task that pins a seed keeps it, and an unseeded task (the Sokoban
tags' source, a generated lake) gets ``seed + generation.TAG_SEED_STRIDE × the tag's index + the group's
episode id`` (its number within the tag), so each new group of a tag plays a new room and a
scheduler's seed replays the same sequence.

Siblings (``sibling(config)``) share the engine, its gate and its limit: a validation
scheduler runs ``get_batch(-1)`` (every task of its tags once) while training generation
goes on (``shared``: what they share). ``close()`` of the scheduler that made the engine
stops everything. ``sampling=`` (a sibling inherits its maker's unless given its own) travels
with each attempt to the agent and overrides the run config's temperature, max_tokens and
``sampling`` table: validation at temperature 0 beside training at 1, on one engine.

The scheduler that starts the engine is made under ``if __name__ == "__main__":`` (refused
otherwise: ``main_guard``): the engine's helper processes import the trainer's script again.
"""

from __future__ import annotations

import itertools
import logging
import threading
from collections import Counter, deque
from pathlib import Path
from typing import Any

from ..config import RunConfig
from ..config_checks import check_sampling
from ..errors import ConfigError, RolloutError
from ..main_guard import check_guarded
from ..policy_gate import whole_number_from
from ..setting_types import CheckedKeywords, check_keywords
from .batches import ReadyBatches
from .budget import BatchBudget, check_timeout
from .callers import TakingTurns
from .checkpoint import Checkpoints
from .chosen import ChosenBatches
from .config import (EnvManagerConfig, check_count, check_run_config, load_tags, resolve_task_set, whole_number,
                     whole_ratio)
from .endpoint_check import EndpointCheck, endpoints
from .generation import COUNTERS, GroupGeneration
from .groups import Group, GroupFilter, Trajectory, check_group_filter
from .metrics import batch_metrics
from .run_folder import check_scheduler_name
from .staleness import VersionLag, check_lag_options
from .sources import ShuffledTasks, TaskSource, check_batch_partition
from .shared import SharedEngine

log = logging.getLogger("parallel_rollout")

#: how often a blocked get_batch looks at the engine's health (seconds)
_POLL_S = 0.2
#: how long resume() waits for the agents of aborted requests to say what they keep (seconds;
#: milliseconds in practice: an aborted stream ends as soon as its socket is shut)
_ABORTED_END_S = 2.0


class SchedulerClosed(RolloutError):
    """get_batch on a closed scheduler, or the scheduler closed while it waited."""

    kind = "scheduler_closed"


class SchedulerSuspended(RolloutError):
    """get_batch from the thread that suspended the policy gate, before its resume(): no
    model request would go out, and the call would wait for ever."""

    kind = "scheduler_suspended"


class ClusterLost(RolloutError):
    """get_batch on ``backend="ray"`` once the cluster's head node is lost: Ray ends the
    trainer's process soon; the message says what to save meanwhile and how to go on."""

    kind = "cluster_lost"


#: what a trainer does once the head is lost, in the time Ray leaves its process
_AFTER_HEAD_LOST = ("; save what you need now (state_dict(), your model's weights): Ray ends this process once "
                    "its gcs_rpc_server_reconnect_timeout_s (60 s unless set) has passed since the head went; "
                    "then, on a cluster again (or backend=\"local\"), make the scheduler with the same run_id and "
                    "RunConfig(resume=True), and load_state_dict() what you saved")


class RolloutScheduler(CheckedKeywords, Checkpoints, ChosenBatches, GroupGeneration, ReadyBatches, TakingTurns):
    """Hands out batches of whole groups; see the module docstring (the generation side is
    ``generation.GroupGeneration``, batches of named tasks ``chosen.ChosenBatches``, which
    ready groups make a batch ``batches.ReadyBatches``, calls from several threads
    ``callers.TakingTurns``, the trainer's checkpoint ``checkpoint.Checkpoints``)."""

    def __init__(self, run_config: RunConfig, env_config: EnvManagerConfig | None = None, *,
                 async_generation_ratio: float = 0, max_concurrent_rollouts: int | None = None,
                 group_filter: GroupFilter | None = None, failed_member: str = "drop", cut_reward: str = "zero",
                 name: str = "train", seed: int = 0, max_failed_groups: int = 10,
                 max_filtered_groups: int | None = None, filter_fallback: str = "raise",
                 max_version_lag: int | None = None, stale_versions: str = "drop",
                 task_source: TaskSource | None = None, batch_partition: list[float] | None = None,
                 sampling: dict[str, Any] | None = None, check_endpoint: bool = True,
                 _shared: SharedEngine | None = None) -> None:
        # Every argument is checked before anything starts or joins an engine: a ConfigError
        # must leave no engine running and no half-made scheduler among its siblings.
        if _shared is None:  # it starts the engine, whose helper processes import the script again
            check_guarded("RolloutScheduler()")
        run_config = check_run_config(run_config)  # as run() checks them: types, ranges, the agent
        self.env_config = env_config or EnvManagerConfig()
        self.env_config.check()
        self.ratio = whole_ratio(async_generation_ratio)
        if failed_member not in ("drop", "placeholder"):
            raise ConfigError(f"failed_member must be 'drop' or 'placeholder', got {failed_member!r}")
        if cut_reward not in ("zero", "so_far"):
            raise ConfigError(f"cut_reward must be 'zero' or 'so_far', got {cut_reward!r}")
        max_concurrent_rollouts = check_count("max_concurrent_rollouts", max_concurrent_rollouts, 1, optional=True)
        if _shared is not None and max_concurrent_rollouts is not None:
            raise ConfigError("a sibling shares its engine's max_concurrent_rollouts; give it to the first scheduler")
        max_version_lag = check_lag_options(max_version_lag, stale_versions)
        check_group_filter(group_filter, self.env_config.group_size)
        self.failed_member = failed_member
        #: a cut member's reward (trajectory.cut): 0, or the env's reward of its episode so far
        self.cut_reward = cut_reward
        self.group_filter = group_filter
        #: bounds on a get_batch: its timeout, groups failed in a row, groups filtered (budget)
        self._budget = BatchBudget(max_failed_groups, max_filtered_groups, filter_fallback,
                                   endpoint=endpoints(run_config.base_url))
        self.name = check_scheduler_name(name)
        self.seed = whole_number_from("seed", seed, 0, "")
        #: this scheduler's sampling overrides (validation at temperature 0 …), sent with
        #: every attempt and merged over the run config's in each request
        self.sampling = check_sampling(sampling)
        self.run_config = run_config
        self.tags = list(self.env_config.tags or [run_config.mode])
        self.batch_partition = check_batch_partition(batch_partition, self.tags)
        if _shared is not None and _shared.closed:
            raise SchedulerClosed("the engine of this scheduler's maker is closed: make a new RolloutScheduler")
        self._tasks = load_tags(self.tags, self.env_config, run_config, own_engine=_shared is None)
        #: which task each new group runs (``sources``): the built-in order, or the trainer's
        self._source: TaskSource = task_source or ShuffledTasks(self._tasks, seed)
        #: what the task source raised (or returned) when it last gave no task: a get_batch
        #: that needs a new group raises it
        self._source_error: Exception | None = None
        #: what the group filter raised on a complete group (the engine's thread calls it):
        #: the next get_batch raises it, and no group starts till then (``generation``)
        self._filter_error: RolloutError | None = None
        self._owner = _shared is None
        if self._owner and run_config.tokenizer:
            from ..agents.tokens import ChatTokenizer

            ChatTokenizer(run_config.tokenizer)  # a bad folder: a ConfigError now, not every episode's error
        self.modes = sorted({task.mode for tasks in self._tasks.values() for task in tasks})
        task_files = [resolve_task_set(tag, self.env_config, run_config.mode, run_config.data).data for tag in self.tags]
        if _shared is not None:
            _shared.check_sibling(name, self.modes, self._tasks, task_files)
            _shared.withhold(task_files)  # from a command agent's program, as the first scheduler's
        self._shared = _shared or SharedEngine.start(
            run_config, self.modes, max_concurrent_rollouts=max_concurrent_rollouts,
            envs_per_worker=self.env_config.max_env_num_per_worker, tasks=self._tasks, task_files=task_files)
        try:
            self._shared.endpoint_check = self._shared.endpoint_check or EndpointCheck(
                run_config, check_endpoint, self._shared.engine)
            if not check_endpoint:  # the engine's endpoint, whichever scheduler says so
                self._shared.endpoint_check.skip()
            self._init_state(max_version_lag, stale_versions)
        except BaseException:
            if self._owner:
                self._shared.stop_or_leave()
            raise
        self._shared.join(self)  # last: a sibling is only listed once it is whole

    def _init_state(self, max_version_lag: int | None, stale_versions: str) -> None:
        """The state of a scheduler on its engine (arguments checked, the engine started)."""
        #: what its samples' names start with (``run_folder``: a later session's are apart)
        self._sample_prefix = self._shared.folder.sample_prefix(self.name)
        # did the model answer? (a failure budget's error; a silent endpoint across the env loops)
        self._budget.watch(self._shared.gate, self._shared.engine.concurrency, self._shared.suspension,
                           partial=bool(self.run_config.partial_rollout))
        #: staleness by the policy versions that sampled a group's tokens (``staleness``)
        self._lag = VersionLag(self._shared.gate, max_version_lag, stale_versions)
        engine = self._shared.engine
        self.concurrency = engine.concurrency
        groups = self.env_config.num_env_groups or max(1, self.concurrency // self.env_config.members)
        self.partition = self.env_config.partition(self.tags, groups)
        self._cond = threading.Condition()
        self._groups: dict[int, Group] = {}      # running (not complete, not dropped)
        self._ready: list[Group] = []            # complete, waiting for get_batch
        self._by_key: dict[str, tuple[Group, int, float]] = {}
        #: groups to start again before drawing (load_state_dict): (tag, task, episode, seed)
        self._replay: deque[tuple[str, Any, int, int | None]] = deque()
        #: get_batch(tasks=[…]) under way: position in the given list -> its group
        self._given: dict[int, Group] | None = None
        self._group_ids = itertools.count()
        self._episodes = Counter()
        self._step = 0
        self._need = 0
        self._waiting = False
        self._closed = False
        self._closed_unreturned: list[Group] = []  # batch groups close() stopped (state_dict)
        self._close_done = False                 # close() ran to its end (a Ctrl-C can cut it short)
        self._all: deque | None = None           # get_batch(-1): (tag, task, episode id) still to start
        self._warned_generated = False           # get_batch(-1) said its tags generate rooms
        self._warned_no_logprob = False          # a batch said the server sent no logprobs
        self._all_done: list[Group] = []
        self._stats = Counter(dict.fromkeys(COUNTERS, 0))
        #: the last batch returned, with the counters then and at the batch before (metrics())
        self._last_batch: tuple[list[Trajectory], int, int, dict[str, Any], dict[str, Any]] | None = None
        self._stats_at_batch: dict[str, Any] = {}
        # Engine calls queued under the lock and made after it is released: the engine calls
        # back (_on_final) from its own thread, so calling it under our lock could deadlock.
        self._outbox: list[tuple[str, Any]] = []

    # -- construction ---------------------------------------------------------------------

    def sibling(self, env_config: EnvManagerConfig, *, async_generation_ratio: float | None = None,
                group_filter: GroupFilter | None = None, failed_member: str | None = None,
                cut_reward: str | None = None, name: str | None = None, sampling: dict[str, Any] | None = None,
                **options: Any) -> "RolloutScheduler":
        """Another scheduler on the same engine, gate and concurrency limit (validation, a
        baseline evaluation). ``sampling``: its own overrides (e.g. ``{"temperature": 0}``);
        without it, this scheduler's. SchedulerClosed once this scheduler is closed."""
        self._check_open()
        check_keywords(type(self), options, "sibling()")  # the call made, not the RolloutScheduler() it makes
        if (env_config.max_env_num_per_worker is not None
                and env_config.max_env_num_per_worker != self._shared.engine.config.envs_per_worker):
            raise ConfigError(f"a sibling's max_env_num_per_worker ({env_config.max_env_num_per_worker}) must be "
                              f"its engine's ({self._shared.engine.config.envs_per_worker}): they share the workers")
        return RolloutScheduler(
            self.run_config, env_config,
            async_generation_ratio=self.ratio if async_generation_ratio is None else async_generation_ratio,
            group_filter=group_filter, failed_member=failed_member or self.failed_member,
            cut_reward=cut_reward or self.cut_reward,
            name=name or self._shared.free_name(self.name),
            sampling=self.sampling if sampling is None else sampling, _shared=self._shared, **options)

    # -- the trainer's calls --------------------------------------------------------------

    def get_batch(self, batch_size: int, step: int, timeout: float | None = None,
                  tasks: list[Any] | None = None) -> list[Trajectory]:
        """Block until ``batch_size`` trajectories of whole groups are ready; return them,
        oldest group first. ``batch_size=-1``: every task of the tags once (validation; not
        with ``tasks``). ``tasks``: run exactly these (``Task`` objects or ids of the tags' tasks), one group
        each, returned in their order; with ``batch_partition`` every batch holds the tags in
        those proportions. Never waits without end (``budget``): ``BatchTimeout`` after
        ``timeout`` seconds, ``RolloutError`` after ``max_failed_groups`` failed groups in a
        row (whether the model endpoint answered meanwhile, the last failure) or
        ``max_filtered_groups`` filtered ones. A call that raised leaves nothing counted: the
        next starts afresh. ``step``: a whole number >= 0, never below the last call's
        (ConfigError, and nothing changes); SchedulerSuspended when this thread suspended the
        gate and did not resume it (the call could never end). Calls from several threads
        take turns (``callers``). The engine's first asks the model endpoint first (``endpoint_check``)."""
        self._check_call(step)  # what fails at once fails before waiting for a turn
        with self._turn(timeout):
            self._shared.endpoint_check.check(timeout, self._shared.gate.replies)
            return self._get_batch(batch_size, step, timeout, tasks)

    def _get_batch(self, batch_size: Any, step: Any, timeout: float | None, tasks: list[Any] | None) -> list[Trajectory]:
        step = self._check_call(step)
        if whole_number(batch_size) == -1:
            if tasks is not None:
                raise ConfigError("get_batch: batch_size=-1 runs every task of the tags once, not with tasks=; "
                                  "to run given tasks pass batch_size=len(tasks) x group_size")
            return self._run_all(step, timeout)
        if tasks is not None:  # its batch_size is len(tasks) x group_size, 0 for no task: said of the tasks
            return self._run_given(batch_size, step, tasks, timeout)
        size = self.env_config.group_size
        whole = whole_number(batch_size)
        if whole is None or whole < 1 or whole % size:
            raise ConfigError(f"batch_size must be a positive multiple of group_size ({size}) or -1, got {batch_size!r}")
        batch_size = whole
        need = batch_size // size
        with self._cond:
            self._check_open()
            self._begin_call(need, timeout)
            self._step, self._need, self._waiting = step, need, True
            self._drop_stale()
            self._fill()
        batch = None
        try:
            try:
                with self._afresh_after_raise():
                    while True:
                        self._flush()
                        with self._cond:
                            self._budget.check_failures()
                            self._raise_filter_error()
                            partial = self._budget.filter_spent() and self._budget.filter_fallback == "partial"
                            batch = self._take_ready(need, partial) or None  # partial: never an empty batch
                            if batch is not None:
                                self._waiting = False
                                self._budget.batch_taken()
                                self._stats["groups_returned"] += len(batch)
                                if len(batch) < need:
                                    self._stats["partial_batches"] += 1
                                    log.warning("get_batch(step=%d): the group filter dropped too many groups; "
                                                "returning %d of %d", step, len(batch), need)
                                self._fill()
                                break
                            self._budget.check(len(self._ready), len(self._groups))
                            if self._source_error is not None and self._outstanding() < need:
                                error, self._source_error = self._source_error, None
                                raise error  # the batch needs a group the task source did not give
                            self._wait()
            finally:
                with self._cond:
                    self._waiting = False
                self._flush()
        except BaseException:
            if batch is not None:  # taken, never handed out (a Ctrl-C as the next groups start): out next time
                self._put_back(batch, [])
            raise
        return self._hand_out(batch, step)

    def _check_call(self, step: Any) -> int:
        """``step`` as an int, checked with the rest of what a get_batch needs before it
        changes anything (see ``get_batch``)."""
        self._check_open()
        if self._shared.suspension.by is threading.current_thread() and not self._shared.gate.is_open:
            raise SchedulerSuspended(
                f"get_batch on scheduler {self.name!r}: this thread suspended the policy gate and did not resume "
                "it, so no model request goes out and no batch could come: call resume(policy_version) first")
        with self._cond:
            return whole_number_from("step", step, self._step, "steps date the groups (async_generation_ratio "
                                     "drops a group made at step s once the step passes s + r)")

    def _raise_filter_error(self) -> None:
        """Raise what the group filter raised, once: the trainer's own code failed, and
        generation stays stopped until this call ends (the next starts afresh)."""
        if self._filter_error is not None:
            error, self._filter_error = self._filter_error, None
            raise error

    def suspend(self, abort: bool = False, timeout: float | None = None) -> None:
        """Stop new model requests (every scheduler of this engine) for a weight update; wait
        for those in flight, or with ``abort`` have them redone after ``resume``. Task clocks
        stop until ``resume``: waiting for the update is not an episode's time. ``timeout``
        (seconds, or None): TimeoutError when requests outlast it, the gate left shut.
        ``abort`` is True or False (0, 1, numpy's bools): a ConfigError otherwise, the gate open."""
        self._check_open()
        check_timeout(timeout, "suspend")  # a ConfigError changes nothing: the gate stays open
        if abort not in (True, False):  # "no" from a config file's text would abort every request
            raise ConfigError(f"suspend abort must be True or False, got {abort!r}")
        self._shared.engine.hold_clocks(True)
        self._shared.suspension.suspended()  # a get_batch of this thread could never end
        self._shared.gate.suspend(abort=abort, timeout=timeout)

    def resume(self, policy_version: int) -> None:
        """Let model requests go on, recorded as ``policy_version`` from now on: a whole number
        >= 0, not below the current version (ConfigError, and nothing changes: the gate stays
        suspended; ``PolicyGate.check_version``). Without ``suspend()`` before, it only moves the
        version on (requests under way keep theirs). Of every scheduler of the engine with
        ``max_version_lag`` (the update is the engine's, whichever scheduler resumes it),
        running groups already holding tokens older than it allows are dropped first (their
        members cancelled, requests in flight aborted), and a get_batch(-1)'s groups an older
        version began start over (``_restart_validation``): the requests ``suspend(abort=True)``
        ended are awaited first (their agents say which tokens they keep), so a partial reply
        counts even when the trainer resumes at once."""
        self._check_open()
        policy_version = self._shared.gate.check_version(policy_version)
        judged = [s for s in self._shared.schedulers if s is self or s.judges_versions()]
        if any(s.judges_versions() for s in judged):
            self._shared.gate.wait_aborted(_ABORTED_END_S)
        before = self._shared.gate.advance(policy_version)  # what begins from here is sampled by it
        for scheduler in judged:
            scheduler.judge_versions(policy_version, before)
        self._shared.gate.resume()
        self._shared.suspension.resumed()
        self._shared.engine.hold_clocks(False)

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
        placeholders, what is running and ready, and this scheduler's model requests (its
        samples', not its siblings' on the engine) and how many of them were aborted; whether
        the engine's gate is suspended, since when and by which thread (``suspension``); on
        ``--backend ray`` the nodes used, lost with why, and left out (``ray``)."""
        requests, aborted = self._shared.gate.requests_of(self._sample_prefix)
        states = {**self._shared.suspension.state(self._shared.gate.is_open), **self._shared.cluster()}
        with self._cond:
            stats = dict(self._stats)
            stats.update(groups_running=len(self._groups), groups_ready=len(self._ready), step=self._step,
                         policy_version=self._shared.gate.version, model_requests=requests,
                         model_requests_aborted=aborted, concurrency=self.concurrency,
                         partition=dict(self.partition), **states)
            stats["groups_dropped"] = sum(v for k, v in self._stats.items() if k.startswith("dropped_"))
        return stats

    def metrics(self, prefix: str = "") -> dict[str, float]:
        """One flat dict of numbers for the last batch ``get_batch`` returned (per-tag counts
        and rewards, success rate, staleness by version lag, model vs env time, drops and
        failures since the batch before, tokens); see ``rl.metrics``. Empty before the first.
        ``prefix`` goes before each key (``"val/"``: a sibling's beside training's in one log);
        one that is no str is a ConfigError, before a batch too."""
        if not isinstance(prefix, str):
            raise ConfigError(f"metrics prefix must be a str, got {prefix!r}")
        with self._cond:
            last = self._last_batch
        return {prefix + key: value for key, value in batch_metrics(*last).items()} if last is not None else {}

    def close(self) -> None:
        """Stop this scheduler's generation; the scheduler that started the engine also
        stops the engine (workers, pool, VMs) and the gate. Idempotent; one that a Ctrl-C
        cut short is finished by the next call (``finally: close()``)."""
        with self._cond:
            if self._close_done:
                return
            self._stop_generation()
        if not self._owner:
            self._flush()  # the engine goes on for the others: cancel what was ours
            self._shared.leave(self)  # and lets this one go (a trainer's per-evaluation sibling)
        else:
            self._shared.close()
        self._close_done = True

    def __enter__(self) -> "RolloutScheduler":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def mark_closed(self) -> None:
        """The engine is stopping (its owner calls this on close): no more generation, its
        running groups stopped (``_stop_generation``), and a waiting get_batch ends."""
        with self._cond:
            self._stop_generation()

    def _wait(self) -> None:
        self._check_open()
        error = getattr(self._shared.engine, "error", None)
        if error:
            if getattr(self._shared.engine.backend, "head_lost", False):
                raise ClusterLost(f"the rollout engine stopped: {error}{_AFTER_HEAD_LOST}")
            raise RolloutError(f"the rollout engine stopped: {error}")
        self._shared.suspension.warn_if_orphaned(self._shared.gate.is_open, self.name)
        self._cond.wait(_POLL_S)
        self._check_open()

    def _check_open(self) -> None:
        """SchedulerClosed once this scheduler, or its engine, is closed: every call that
        would start, wait for or steer generation raises it (the readers, ``stats()``,
        ``metrics()``, ``state_dict()``, still answer)."""
        if self._closed or self._shared.closed:
            raise SchedulerClosed(f"scheduler {self.name!r} is closed" if self._closed else
                                  f"scheduler {self.name!r}: its engine is closed (its first scheduler's close())")
