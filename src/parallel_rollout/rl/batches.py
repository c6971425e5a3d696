"""Which ready groups make the next batch, and how a batch is handed out.

A batch is whole groups, oldest first: the ``need`` oldest ready groups, or with
``batch_partition`` each tag's quota of them (``sources.BatchShares``). It waits while one of
the oldest groups it would hold is still running and this step is the last it may be handed
out in (``async_generation_ratio``), or it was started again from a checkpoint: a newer
group that finished first must not take its place, leaving it to be dropped as stale. Handing a batch out marks each trajectory's
staleness (``staleness``), reads its turns (in the trainer's thread, not the engine's) and
keeps the batch for ``metrics()``. The state is the scheduler's (``self``), as for ``generation.GroupGeneration``.
"""

from __future__ import annotations

import logging

from .groups import Group, Trajectory, with_turns
from .segments import tokens_without_logprob

log = logging.getLogger("parallel_rollout")


class ReadyBatches:
    """The next batch of ready groups, and its hand-out; the state is the scheduler's (``self``)."""

    def _take_ready(self, need: int, partial: bool) -> list[Group] | None:
        """The ready groups of the next batch, taken off ``_ready`` (oldest first; with
        ``batch_partition`` each tag's quota); None while they are not all there (with
        ``partial``: what is there)."""
        if self.batch_partition is None:
            if (len(self._ready) < need or self._last_chance_running(need)) and not partial:
                return None
            batch, self._ready = self._ready[:need], self._ready[need:]
            return batch
        wanted = self.batch_partition.next(need)
        chosen: list[Group] = []
        for tag, count in wanted.items():
            mine = [g for g in self._ready if g.tag == tag][:count]
            if (len(mine) < count or self._last_chance_running(count, tag)) and not partial:
                return None
            chosen += mine
        if partial:  # the filter's fallback: the groups that passed, of any tag (none starts for a short one)
            chosen += [g for g in self._ready if g not in chosen][:need - len(chosen)]
        if not chosen:
            return None  # no batch: nothing counted toward the shares
        taken = {g.group_id for g in chosen}
        self._ready = [g for g in self._ready if g.group_id not in taken]
        given = {tag: sum(1 for g in chosen if g.tag == tag) for tag in wanted}
        self.batch_partition.take(need, given)  # its rounding, and a partial batch's shortfall, carried on
        return sorted(chosen, key=lambda g: g.group_id)

    def _last_chance_running(self, need: int, tag: str | None = None) -> bool:
        """Whether one of the ``need`` oldest batch groups (of ``tag``) is still running and
        this step is the last it may be handed out in (``async_generation_ratio``), or it was
        started again (``Group.replayed``: drawn before the checkpoint, older than any drawn
        since). The batch waits for it: a newer group that finished first (it started on the
        slots of finished members) can go in the next batch, where this one would be dropped
        as stale, its tokens wasted and the batches biased toward short episodes."""
        outstanding = sorted([g for g in [*self._groups.values(), *self._ready]
                              if g.purpose == "batch" and (tag is None or g.tag == tag)],
                             key=lambda g: g.group_id)[:need]
        return any(g.completed_at is None and (g.replayed or g.created_step + self.ratio <= self._step)
                   for g in outstanding)

    def _hand_out(self, batch: list[Group], step: int) -> list[Trajectory]:
        """The trajectories of ``batch``, noted for ``metrics()``. A Ctrl-C while their turns
        are read puts the batch's groups back among the ready ones: never handed out, they
        stay in ``state_dict()`` (a checkpoint saved then skipped their tasks) and go out next.
        A group whose turns cannot be read (its file deleted, its disk unmounted) is started
        again and the error raised; the others go back among the ready ones (``_put_back``):
        the batch's groups were in neither the trainer's hands nor a checkpoint."""
        for group in batch:
            # only a "keep" scheduler hands out stale ones; staleness is not a chosen task's
            # (get_batch(tasks=…)) nor a validation's: the trainer asked for those as they came
            stale = group.purpose == "batch" and self._lag.stale(group.keys.values())
            for trajectory in group.trajectories():
                trajectory.version_stale = stale
        readable, unreadable, error = [], [], None
        try:
            for group in batch:
                try:
                    with_turns(group.trajectories())
                except Exception as exc:  # a file deleted, its disk unmounted, another attempt's
                    unreadable.append(group)
                    error = error or exc
                else:
                    readable.append(group)
        except KeyboardInterrupt:
            self._put_back(batch, [])
            raise
        if error is not None:
            self._put_back(readable, unreadable)
            raise error
        trajectories = [t for group in batch for t in group.trajectories()]
        self._warn_without_logprobs(trajectories)
        for group in batch:
            self._lag.forget(group.keys.values())
        with self._cond:
            now = dict(self._stats)
            self._last_batch = (trajectories, self._shared.gate.version, step, now, self._stats_at_batch)
            self._stats_at_batch = now
        return trajectories

    def _warn_without_logprobs(self, trajectories: list[Trajectory]) -> None:
        """Say once per scheduler that the server sent no logprob for sampled tokens: their
        NaN in ``segments()`` makes an importance ratio or a KL term NaN, and with it the loss."""
        if self._warned_no_logprob:
            return
        counts = [(t, *tokens_without_logprob(t.turns)) for t in trajectories if not t.placeholder]
        missing = sum(m for _, _, m in counts)
        if missing:
            self._warned_no_logprob = True
            first = next(t for t, _, m in counts if m)
            log.warning("get_batch on scheduler %r: %d of %d sampled tokens of this batch have no logprob (the "
                        "first in %s): the model server sent none, so segments() hold NaN there and an importance "
                        "ratio or KL of them is NaN; serve the policy so that it returns logprobs (the agent asks "
                        "for them), or mask those tokens; metrics()['tokens/no_logprob'] counts them per batch",
                        self.name, missing, sum(n for _, n, _ in counts), first.trajectory_id)

    def _put_back(self, ready: list[Group], rerun: list[Group]) -> None:
        """A batch that was not handed out (``_hand_out``): its groups of ``ready`` go back
        among the ready ones, those of ``rerun``, whose turns could not be read, are started
        again (same task, seed and episode; ``dropped_unreadable``), so that neither is lost
        from ``state_dict()``. Groups of a get_batch(tasks=…) or (-1) are that call's: dropped."""
        with self._cond:
            self._ready = sorted([*self._ready, *(g for g in ready if g.purpose == "batch")], key=lambda g: g.group_id)
            self._replay.extendleft(reversed([(g.tag, g.task, g.episode_id, g.seed) for g in rerun
                                              if g.purpose == "batch"]))
            self._stats["dropped_unreadable"] += len(rerun)
            self._stats["dropped_abandoned"] += sum(1 for g in ready if g.purpose != "batch")  # the call's own
            self._stats["groups_returned"] -= len(ready) + len(rerun)
            if self.batch_partition is not None and all(g.purpose == "batch" for g in [*ready, *rerun]):
                self.batch_partition.put_back()  # nothing went out: no tag's share was given
            for group in [*rerun, *(g for g in ready if g.purpose != "batch")]:
                self._lag.forget(group.keys.values())
