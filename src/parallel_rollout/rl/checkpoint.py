"""The trainer's checkpoint of a scheduler: ``state_dict()`` and ``load_state_dict()``.

The state says where task drawing stands (the task source's own state, each tag's episode
count, ``batch_partition``'s carried rounding), the policy version, and the groups drawn but
not handed out: running, ready, stopped by ``close()``, or still to be started again. A new
scheduler given it before its first ``get_batch`` starts those groups again (same task, seed
and episode; ``_replay``) before drawing on, so a trainer restarted at step N gets the tasks
one that never stopped would have got. The state is checked whole before anything loads
(``sources.checked_state``). The state is the scheduler's (``self``), as for
``generation.GroupGeneration``.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from ..errors import ConfigError, RolloutError
from .sources import STATE_VERSION, ShuffledTasks, checked_state, task_entry, task_of_entry


class Checkpoints:
    """state_dict / load_state_dict; the state is the scheduler's (``self``)."""

    def state_dict(self) -> dict[str, Any]:
        """Where task drawing stands, for the trainer's checkpoint: the source's state, the
        episode counters, the groups drawn but not yet handed out (started again first by
        ``load_state_dict``), those ``close()`` stopped included, and the policy version."""
        with self._cond:
            # each group once, wherever close() was cut short (noted as stopped and still
            # running, or finished since): a resume would play it twice
            groups = {g.group_id: g for g in [*[g for g in self._groups.values() if g.purpose == "batch"],
                                              *self._ready, *self._closed_unreturned]}
            unreturned = sorted(groups.values(), key=lambda g: g.group_id)
            return {"version": STATE_VERSION, "source": self._source.state_dict(), "episodes": dict(self._episodes),
                    "policy_version": self._shared.gate.version,
                    "unreturned": [self._unreturned(g.tag, g.task, g.episode_id, g.seed) for g in unreturned]
                                  + [self._unreturned(*entry) for entry in self._replay],
                    **({"shares": dict(self.batch_partition.credit)} if self.batch_partition else {})}

    def _unreturned(self, tag: str, task: Any, episode: int, seed: int | None) -> dict[str, Any]:
        """A state's entry of a group drawn and not handed out; a task made in Python (a task
        source's own, in none of the tags' sets) goes with it whole, to be made again."""
        entry = {"tag": tag, "task_id": task.id, "episode": episode, "seed": seed}
        if task not in self._tasks.get(tag, []):
            entry["task"] = task_entry(task)
        return entry

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Continue from ``state_dict()`` of an earlier scheduler with the same tags; call it
        before the first get_batch. A state of another shape (not a dict, a field missing or
        unknown, another version, a task this scheduler lacks) is a ConfigError naming the
        field, and nothing is loaded."""
        with self._cond:
            self._check_open()
            if self._groups or self._ready or self._stats["groups_started"]:
                raise RolloutError("load_state_dict must come before the scheduler's first get_batch")
            state = checked_state(state, list(self._tasks), self._source)
            replay = []
            for entry in state["unreturned"]:
                tag, task_id = entry["tag"], entry["task_id"]
                task = next((t for t in self._tasks.get(tag, []) if t.id == task_id), None)
                if "task" in entry and tag in self._tasks:  # made in Python by the task source: made
                    task = task_of_entry(entry["task"])   # again, checked as it was
                    if task.mode not in self.modes:
                        raise ConfigError(f"the saved state's task {task_id!r} has mode {task.mode!r}; this "
                                          f"scheduler's engine runs {self.modes}")
                    self._shared.check_hidden([task], "load_state_dict")
                if task is None:
                    raise ConfigError(f"the saved state names task {task_id!r} of tag {tag!r}, which this "
                                      "scheduler does not have")
                replay.append((tag, task, entry["episode"], entry.get("seed")))
            self._source.load_state_dict(state["source"])
            if isinstance(self._source, ShuffledTasks):  # its order follows the saved seed: so do the rooms
                self.seed = self._source.seed
            self._episodes = Counter(state["episodes"])
            if self.batch_partition is not None:
                self.batch_partition.load(state.get("shares", {}))
            self._replay.clear()
            self._replay.extend(replay)
            self._shared.gate.move_on(state.get("policy_version", 0))  # tokens dated as if it never stopped
