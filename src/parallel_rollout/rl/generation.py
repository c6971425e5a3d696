"""The generation side of a RolloutScheduler: which groups start, and what their members'
records make of them.

Everything here runs under the scheduler's lock (``self._cond``), on the engine's thread (a
member's final record arrives through ``_on_final``) or on the trainer's (``get_batch``
fills). ``RolloutScheduler`` (``scheduler``) is the trainer's side and holds the state;
this class is its half that keeps generation going:

* **Filling** (``_fill``): while fewer groups are outstanding (running or ready) than the
  ratio allows and a whole group fits in a tag's free env slots (its share of
  ``num_groups_partition`` × members; a member that is in frees its slot), start one: groups
  to replay first (``load_state_dict``; each in its tag's slots too), then the tag with the fewest slots busy for its share
  (and, with ``batch_partition``, a tag short of its quota), its next task from the task
  source. Counting slots, not groups, lets the next batch start on the loops a batch's early
  finishers leave while the trainer waits for its stragglers.
* **Members' records** (``_take_record``): a member that produced an episode joins its group;
  one that failed is replaced by a spare, or drops its group (counted in the batch budget,
  which tells such groups from those whose members all failed), or becomes a placeholder. A
  complete group cancels its spares and is ready, unless it is stale or the filter drops it.
* **Engine calls** are queued under the lock and made after it is released (``_flush``): the
  engine calls back from its own thread, so calling it under the lock could deadlock.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import time
import zlib
from pathlib import Path
from typing import Any, Iterator

from ..errors import ConfigError, RolloutError
from ..messages import Assignment
from .groups import Group, from_record, sample_name
from .sources import TaskSourceError, next_task_of

#: how far apart the seeds of two tags start (episodes of one tag before they could meet)
TAG_SEED_STRIDE = 1_000_000
#: how often a validation episode starts over at weight updates (``_restart_validation``)
#: before it runs on across one: updates faster than it lasts would start it over for ever
VALIDATION_RESTARTS = 3
#: the counters stats() names from the start, at 0 until one counts (a trainer that logs
#: ``stats()["dropped_version_lag"]`` every step met a KeyError until the first such drop);
#: ``failed_<status>`` come as statuses do
COUNTERS = ("groups_started", "groups_returned", "members_failed", "members_cancelled", "placeholders",
            "partial_batches", "validation_runs", "validation_versions_mixed", "calls_outlived_failed_act",
            *(f"dropped_{reason}" for reason in ("stale", "version_lag", "version_changed", "failed", "filtered",
                                                 "filter_error", "abandoned", "closed", "unreadable")))

log = logging.getLogger("parallel_rollout")


class GroupGeneration:
    """Starts groups and settles their members; the state is the scheduler's (``self``)."""

    def _fill(self) -> None:
        """Start groups while the ratio and the partition allow."""
        if self._closed:
            return
        if self._all is not None:
            while self._all and self._start_allowed(self._all[0][0]):
                tag, task, place = self._all.popleft()
                self._start_group(tag, task, purpose="all", episode_id=place)
            return
        if self._budget.filter_spent():
            return  # the next batch meets its filter fallback; nothing more to regenerate
        if self._budget.failures_spent():
            return  # groups fail in a row: a new one would too, until a call starts afresh
        if self._filter_error is not None:
            return  # the trainer's filter raised: nothing more to filter till get_batch says so
        cap = self._need * (self.ratio + (1 if self._waiting else 0))
        while self._outstanding() < cap:
            # groups to start again first, each when its tag's slots allow (a tag's in order)
            replay = next((entry for entry in self._replay if self._start_allowed(entry[0])), None)
            if replay is not None:
                self._replay.remove(replay)
                tag, task, episode, seed = replay
                self._start_group(tag, task, purpose="batch", episode_id=episode, seed=seed).replayed = True
                continue
            waiting = {entry[0] for entry in self._replay}  # no new task of a tag before its replays
            open_tags = [t for t in self.tags if self._start_allowed(t) and t not in waiting]
            if self.batch_partition is not None:
                share = self.batch_partition.next(self._need, self.ratio + (1 if self._waiting else 0))
                open_tags = [t for t in open_tags if self._outstanding(t) < share[t]]
            if not open_tags:
                return
            tag = min(open_tags, key=lambda t: self._running(t) / self.partition[t])
            task = self._next_task(tag)
            if task is None:
                return
            self._start_group(tag, task, purpose="batch")

    def _begin_call(self, groups: int, timeout: float | None) -> None:
        """The budget's ``begin`` of a get_batch. After a call that raised it starts afresh,
        and the ready groups made only of placeholders (every member failed, under
        ``failed_member="placeholder"``) are dropped: they are what the failures that
        raised made, which the new count no longer holds back from a batch; so is what the
        group filter raised on a group that settled since (a filter still broken raises
        again on the call's first group)."""
        if not self._budget.begin(groups, timeout, self._called_at):
            return
        self._filter_error = None  # the filter raised on a group that settled after the raise
        failed = [g for g in self._ready if all(t.placeholder for t in g.done)]
        for group in failed:
            self._lag.forget(group.keys.values())
        self._stats["dropped_failed"] += len(failed)
        self._ready = [g for g in self._ready if g not in failed]

    @contextlib.contextmanager
    def _afresh_after_raise(self) -> Iterator[None]:
        """A get_batch's wait for its groups: when it raises (a spent budget, a timeout, the
        task source …), the next call starts afresh (``BatchBudget.call_raised``)."""
        try:
            yield
        except BaseException:
            with self._cond:
                self._budget.call_raised()
            raise

    def _next_task(self, tag: str) -> Any:
        """The task source's next task of ``tag``; None when it failed: the error waits for a
        ``get_batch`` that needs a new group (this may run on the engine's thread, where it
        would only be logged)."""
        try:
            task = next_task_of(self._source, tag, self._tasks, self.modes)
            if not any(task in listed for listed in self._tasks.values()):  # made in Python: its gold files too
                self._shared.check_hidden([task], f"task_source {type(self._source).__name__}.next_task({tag!r})")
        except (TaskSourceError, ConfigError) as exc:
            self._source_error = exc
            self._cond.notify_all()
            return None
        self._source_error = None  # it gives tasks again
        return task

    def _outstanding(self, tag: str | None = None) -> int:
        """Batch groups running or ready (of ``tag``)."""
        groups = [*[g for g in self._groups.values() if g.purpose == "batch"], *self._ready]
        return sum(1 for g in groups if tag is None or g.tag == tag)

    def _running(self, tag: str) -> int:
        """Env slots the tag's groups hold: their members still running. A member that is
        in frees its slot though its group waits on a slower one."""
        return sum(len(g.running) for g in self._groups.values() if g.tag == tag)

    def _start_allowed(self, tag: str) -> bool:
        """Whether a whole group fits in the tag's free slots (its share of
        ``num_env_groups`` × members). Counted in slots, not groups, so the next group
        starts on the slots of a group's finished members while its stragglers run (within
        the ratio's cap), as env managers that each run their next episode would."""
        members = self.env_config.members
        return self._running(tag) + members <= self.partition[tag] * members

    def _start_group(self, tag: str, task: Any, purpose: str, episode_id: int | None = None,
                     seed: int | None = None) -> Group:
        group_id = next(self._group_ids)
        if episode_id is None:
            episode_id = self._episodes[tag]
            self._episodes[tag] += 1
        if seed is None:
            # ROLL's episode seed: the tag's group seed + the episode id, so a restored
            # scheduler (load_state_dict) gives its next groups the seeds an uninterrupted one would
            seed = task.seed if task.seed is not None else \
                self.seed + TAG_SEED_STRIDE * self._tag_index(tag) + episode_id
        member_task = dataclasses.replace(task, seed=seed)
        size = self.env_config.group_size
        group = Group(group_id, tag, episode_id, task, seed, self._step, size, created_at=time.time(),
                      purpose=purpose, id_prefix=f"{self._shared.engine.run_id}/{self._sample_prefix}")
        self._groups[group_id] = group
        self._stats["groups_started"] += 1
        now = time.time()
        for member in range(self.env_config.members):
            item = Assignment(member_task, member, 0,
                              name=f"{self._sample_prefix}:{sample_name(tag, group_id, episode_id, member)}",
                              meta={"scheduler": self.name, "tag": tag, "group": group_id,
                                    "episode": episode_id, "member": member, "step": self._step},
                              sampling=self.sampling, grade_cut=self.cut_reward == "so_far",
                              withheld=self._shared.task_files)
            group.keys[member] = item.key
            self._by_key[item.key] = (group, member, now)
            self._outbox.append(("submit", item))
        return group

    def _tag_index(self, tag: str) -> int:
        """The tag's place among the scheduler's tags; a tag of none of them (a ``Task`` given
        to ``get_batch(tasks=…)`` with a tag of its own) a place after them that its name
        fixes, so its seeds are the same in every run."""
        if tag in self.tags:
            return self.tags.index(tag)
        return len(self.tags) + zlib.crc32(tag.encode()) % 1000

    def _on_final(self, record: dict[str, Any]) -> None:
        """The engine's callback: a member's final record."""
        try:
            self._take_record(record)
        finally:
            self._flush()

    def _flush(self) -> None:
        """Make the engine calls queued under the lock (never called under it). A Ctrl-C that
        lands among them is raised once every one is made: a submit it cut off left its
        member never run, its group running for ever, and every later get_batch waiting on it."""
        with self._cond:
            ops, self._outbox = self._outbox, []
        interrupted: KeyboardInterrupt | None = None
        for op, arg in ops:
            for again in (False, True):
                try:
                    self._engine_call(op, arg, again)
                    break
                except KeyboardInterrupt as exc:  # made again (a submit the engine took: once), then raised
                    interrupted = interrupted or exc
        if interrupted is not None:
            raise interrupted

    def _engine_call(self, op: str, arg: Any, again: bool) -> None:
        """One of ``_flush``'s calls; ``again``: the one a Ctrl-C cut short, made once more
        (a cancel is idempotent; a submit the engine had taken is not repeated)."""
        engine = self._shared.engine
        try:
            if op == "submit":
                if not self._shared.closed:
                    engine.submit(arg, self._on_final)
            else:
                engine.cancel(arg)
        except RolloutError:
            pass  # the engine stopped: get_batch reports engine.error
        except ValueError:
            if not again:
                raise  # (the engine refuses a key it has: the Ctrl-C came once it took it)

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
            if trajectory.failed:  # a validation's too, which it hands back as it is
                self._stats["members_failed"] += 1
                self._stats[f"failed_{trajectory.status}"] += 1  # by reason: error, task_timeout …
                if record.get("outlived_act"):  # calls its failed act left running: sampled, in no batch
                    self._stats["calls_outlived_failed_act"] += record["outlived_act"]
                self._budget.settings_failed(record)  # a tokenizer folder not the served model's
            if trajectory.failed and not all_mode:
                self._budget.member_failed(record)
                group.failed.append(trajectory)
                if len(group.done) + len(group.running) < group.size:
                    if self.failed_member == "placeholder":
                        while len(group.done) + len(group.running) < group.size:
                            group.done.append(group.placeholder())
                            self._stats["placeholders"] += 1
                    else:
                        # every member failed, or it goes at this one while others run
                        self._budget.group_failed(dropped=bool(group.done or group.running))
                        self._drop(group, "failed")
                        self._rerun_given(group)
                        self._cond.notify_all()
                        self._fill()
                        return
            elif trajectory.failed:  # get_batch(-1): handed back as it is, unless a spare takes its place
                group.failed.append(trajectory)
                if len(group.done) + len(group.running) < group.size:  # no spare left to
                    group.done.append(trajectory)
            else:
                group.done.append(trajectory)
            if group.complete:
                self._complete(group)
            else:
                self._fill()  # its slot is free: the next group may fit
            self._cond.notify_all()

    def _complete(self, group: Group) -> None:
        for member in group.running:
            self._cancel_member(group, member)
            self._stats["members_cancelled"] += 1
        del self._groups[group.group_id]
        group.completed_at = time.time()
        if any(not (t.failed or t.placeholder) for t in group.done):
            self._budget.group_done()
        else:
            self._budget.group_failed()
        if group.purpose == "all":
            self._all_done.append(group)
        elif group.purpose == "given":
            if all(t.failed or t.placeholder for t in group.done):  # placeholders only: nothing of the task
                self._stats["dropped_failed"] += 1
                self._lag.forget(group.keys.values())
                self._rerun_given(group)  # run again, as under "drop" (the budget counted it)
            # else get_batch(tasks=…) collects it
        elif self._stale(group):
            self._count_drop("stale")
            self._lag.forget(group.keys.values())
        elif self._lag.drops(group.keys.values()):
            self._count_drop("version_lag")
            self._lag.forget(group.keys.values())
        elif self._filtered_out(group):
            self._lag.forget(group.keys.values())
        else:
            self._ready.append(group)
            self._ready.sort(key=lambda g: g.group_id)
        self._fill()

    def _filtered_out(self, group: Group) -> bool:
        """Whether the group filter drops ``group`` (counted). A filter that raises, or returns
        no bool, drops it too (``dropped_filter_error``), and what it raised waits for get_batch, which raises
        it: here, on the engine's thread, it would only be logged while the group went
        nowhere and the next one was started in its place, without end."""
        if self.group_filter is None:
            return False
        try:
            dropped = self.group_filter(group.trajectories())
        except Exception as exc:  # noqa: BLE001 - the trainer's code: get_batch raises it
            error = RolloutError(f"group_filter raised on group {group.group_id} (tag {group.tag!r}): "
                                 f"{type(exc).__name__}: {exc}")
            error.__cause__ = exc
            return self._filter_failed(error)
        if not _is_bool(dropped):  # 'keep', 1, a list: Python's truthiness would decide, silently
            return self._filter_failed(RolloutError(
                f"group_filter returned {dropped!r:.200} (type {type(dropped).__name__}) on group {group.group_id} "
                f"(tag {group.tag!r}), not a bool: True drops the group, False keeps it"))
        if dropped and all(t.placeholder for t in group.done):
            # every member failed (placeholders only): a failure, which the budget counted
            # as one, not a group the filter judged (drop_equal_rewards always drops it)
            self._stats["dropped_failed"] += 1
        elif dropped:
            self._stats["dropped_filtered"] += 1
            self._budget.group_filtered()
        return bool(dropped)

    def _filter_failed(self, error: RolloutError) -> bool:
        """The group filter failed on a group: the group is dropped (``dropped_filter_error``)
        and ``error`` waits for get_batch, which raises it."""
        self._stats["dropped_filter_error"] += 1
        self._filter_error = error
        self._cond.notify_all()
        return True

    def _rerun_given(self, group: Group) -> None:
        """A dropped group of get_batch(tasks=…): the same task again, in its place."""
        if group.purpose != "given" or self._given is None or self._closed:
            return
        for pos, current in self._given.items():
            if current is group:
                self._given[pos] = self._start_group(group.tag, group.task, purpose="given")
                return

    def _stop_generation(self) -> None:
        """No more generation (the scheduler's close(), or its engine's): its running groups
        are dropped as "closed", so stats() counts none running (those of batches stay listed
        by state_dict(), to start again), and a waiting get_batch ends."""
        self._closed = True
        # drawn and never handed out: a checkpoint taken after close() starts them again
        self._closed_unreturned += [g for g in self._groups.values()
                                    if g.purpose == "batch" and g not in self._closed_unreturned]
        for group in list(self._groups.values()):
            self._drop(group, "closed")
        for group in self._ready:  # still listed by state_dict(); a sibling's engine goes on
            self._lag.forget(group.keys.values())
        self._cond.notify_all()

    def _drop(self, group: Group, reason: str) -> None:
        for member in group.running:
            self._cancel_member(group, member)
        self._groups.pop(group.group_id, None)
        self._count_drop(reason)
        self._lag.forget(group.keys.values())

    def _count_drop(self, reason: str) -> None:
        """A group dropped for ``reason``, in ``stats()``; one that ``max_version_lag``
        dropped spends the budget's bound on such drops too (``BatchBudget.version_lag_dropped``),
        and one dropped as stale is a cause a timeout names (``BatchBudget.stale_dropped``)."""
        self._stats[f"dropped_{reason}"] += 1
        if reason == "version_lag":
            self._budget.version_lag_dropped(self._lag.max_lag)
        elif reason == "stale":
            self._budget.stale_dropped(self.ratio, self._step)

    def _drop_version_stale(self, current: int | None = None) -> None:
        """Drop running and ready groups holding tokens older than ``max_version_lag`` allows
        (``current``: the version about to be current); "keep" marks the ready ones."""
        for group in [g for g in self._groups.values() if g.purpose == "batch"]:
            if self._lag.drops(group.keys.values(), current):
                self._drop(group, "version_lag")
        self._drop_ready(lambda group: self._lag.drops(group.keys.values(), current), "version_lag")

    def judges_versions(self) -> bool:
        """Whether a resume to a new version may drop or restart groups of this scheduler:
        it has ``max_version_lag``, or a get_batch(-1) under way (``_restart_validation``)."""
        return self._lag.max_lag is not None or self._all is not None

    def judge_versions(self, current: int, before: tuple[int, set[str]]) -> None:
        """A resume to version ``current`` (any scheduler's of the engine calls it on each,
        after the gate moved on: what it starts in a dropped group's place samples under
        ``current``): drop the groups behind ``max_version_lag`` and start others in their
        place, and start again a validation's groups that an older policy began. ``before``:
        the version before and the samples with a request under way that began under it
        (``PolicyGate.advance``)."""
        with self._cond:
            if not self._closed:
                self._drop_version_stale(current)
                self._restart_validation(current, *before)
                self._fill()  # in the dropped groups' place
                self._cond.notify_all()
        self._flush()

    def _restart_validation(self, current: int, previous: int, busy: set[str]) -> None:
        """get_batch(-1) validates a policy, not a mix: a running validation group holding
        tokens of a version older than ``current`` (earlier turns, a partial reply that
        ``partial_rollout`` would continue under ``current``, a request under way when the
        version moves on without a ``suspend()``) starts over, the same task and
        room, under ``current`` (counted ``dropped_version_changed``); a finished one keeps
        the version that played it. One started over ``VALIDATION_RESTARTS`` times runs on
        across the update, said in a warning and ``validation_versions_mixed``: a get_batch(-1)
        never waits for ever on updates that come faster than an episode lasts."""
        if self._all is None:
            return
        for group in [g for g in self._groups.values() if g.purpose == "all"]:
            began = [self._lag.oldest(group.keys.values()), previous if busy & set(group.keys.values()) else None]
            oldest = min((v for v in began if v is not None), default=None)
            place = (group.tag, group.episode_id)
            if oldest is None or oldest >= current or self._all_restarts[place] > VALIDATION_RESTARTS:
                continue
            self._all_restarts[place] += 1
            if self._all_restarts[place] > VALIDATION_RESTARTS:
                self._stats["validation_versions_mixed"] += 1
                log.warning("get_batch(-1) on scheduler %r: task %r started over %d times at weight updates and "
                            "spans another: it runs on, its turns sampled by versions %d to %d (their "
                            "policy_version); to validate one policy, call get_batch(-1) between updates",
                            self.name, group.task.id, VALIDATION_RESTARTS, oldest, current)
                continue
            self._drop(group, "version_changed")
            self._all.appendleft((group.tag, group.task, group.episode_id))

    def _drop_ready(self, drops: Any, reason: str) -> None:
        """Drop the ready groups ``drops`` judges, counted under ``reason``; the gate forgets
        their samples (kept, a long run grew it by every group dropped so)."""
        kept = []
        for group in self._ready:
            if drops(group):
                self._count_drop(reason)
                self._lag.forget(group.keys.values())
            else:
                kept.append(group)
        self._ready = kept

    def _cancel_member(self, group: Group, member: int) -> None:
        key = group.keys[member]
        group.cancelled.add(member)
        if self._by_key.pop(key, None) is not None:
            self._outbox.append(("cancel", key))

    def _stale(self, group: Group) -> bool:
        return self._step > group.created_step + self.ratio

    def _drop_stale(self) -> None:
        self._drop_version_stale()
        for group in [g for g in self._groups.values() if g.purpose == "batch"]:
            if self._stale(group):
                self._drop(group, "stale")
        self._drop_ready(self._stale, "stale")


def _is_bool(value: object) -> bool:
    """A group filter's answer: a bool, or numpy's (``np.std(rewards) == 0`` gives one)."""
    kind = type(value)
    return isinstance(value, bool) or (kind.__module__ == "numpy" and kind.__name__ in ("bool_", "bool"))
