"""Which task each new group runs: the scheduler's built-in order, or the trainer's.

A scheduler starts a group with ``source.next_task(tag)``. The built-in ``ShuffledTasks``
goes through each tag's tasks in an order reshuffled at every pass, from the scheduler's seed
(the pass and the tag seed each shuffle, so its state is two numbers per tag). A trainer that
wants curriculum, replay or its own dataloader passes a ``TaskSource`` of its own, or gives
each batch's tasks to ``get_batch(..., tasks=[…])``. What a source returns is checked
(``next_task_of``); a source that raises, or returns no task, fails the ``get_batch`` under way.

**Resume.** ``RolloutScheduler.state_dict()`` holds the source's state and the groups that
were drawn but not yet handed to the trainer (running, or ready and waiting); a new
scheduler given it with ``load_state_dict`` starts those groups again first (same task, same
seed, same episode id), then draws on. A trainer that saves it with its checkpoint at step N
and restarts gets the same next tasks as a run that never stopped.

**Proportions.** ``batch_partition=[w1, w2, …]`` (one weight per tag) makes every batch hold
the tags in those proportions (``BatchShares``: a share rounded down or up, the rounding
carried to the next batches), so a fast tag (math) cannot
crowd a slow one (osworld) out of the batches; ``num_groups_partition`` still caps the groups
of each tag running at once.
"""

from __future__ import annotations

import math
import random
from typing import Any, Protocol

from ..errors import ConfigError, RolloutError


#: the layout of ``RolloutScheduler.state_dict()`` (its ``"version"``); a state without one is
#: of the same layout, saved before the field was written
STATE_VERSION = 1


def checked_state(state: Any, tags: list[str], source: Any = None) -> dict[str, Any]:
    """``state`` (a scheduler's ``state_dict()``, as a checkpoint gave it back) checked before
    anything is loaded: a dict of version, source, episodes and unreturned, each of its shape,
    naming the tags of ``tags`` only, and its source's part too when ``source`` can check it
    (``checked_state``: the built-in ``ShuffledTasks``); a ConfigError naming the field otherwise."""
    where = "load_state_dict"
    if not isinstance(state, dict):
        raise ConfigError(f"{where}: the state must be the dict state_dict() returned, got {type(state).__name__}")
    fields = {"version", "source", "episodes", "unreturned", "shares", "policy_version"}
    optional = {"version", "shares", "policy_version"}  # absent in a state saved before them
    unknown, missing = sorted(set(state) - fields, key=str), sorted(fields - optional - set(state))
    if unknown or missing:
        raise ConfigError(f"{where}: the state is no scheduler's state_dict(): "
                          + "; ".join(([f"unknown field(s) {unknown}"] if unknown else [])
                                      + ([f"missing field(s) {missing}"] if missing else [])))
    if state.get("version", STATE_VERSION) != STATE_VERSION:
        raise ConfigError(f"{where}: state version {state['version']!r}, where this scheduler reads version "
                          f"{STATE_VERSION}")
    if not _count(state.get("policy_version", 0)):
        raise ConfigError(f"{where}: policy_version must be a whole number >= 0, got {state['policy_version']!r:.200}")
    episodes, unreturned = state["episodes"], state["unreturned"]
    if not isinstance(episodes, dict) or not all(_count(n) for n in episodes.values()):
        raise ConfigError(f"{where}: episodes must map each tag to a whole number >= 0, got {episodes!r:.200}")
    strange = sorted(set(episodes) - set(tags), key=str)
    if strange:
        raise ConfigError(f"{where}: episodes names tags this scheduler does not have: {strange} (its tags: {tags})")
    if not isinstance(unreturned, list):
        raise ConfigError(f"{where}: unreturned must be a list, got {type(unreturned).__name__}")
    for index, entry in enumerate(unreturned):
        name = f"{where}: unreturned[{index}]"
        if not isinstance(entry, dict) or not {"tag", "task_id", "episode"} <= set(entry):
            raise ConfigError(f"{name} must be a dict of tag, task_id, episode and seed, got {entry!r:.200}")
        if not _count(entry["episode"]):
            raise ConfigError(f"{name}.episode must be a whole number >= 0, got {entry['episode']!r}")
        if entry.get("seed") is not None and (isinstance(entry["seed"], bool) or not isinstance(entry["seed"], int)):
            raise ConfigError(f"{name}.seed must be a whole number or None, got {entry['seed']!r}")
        if "task" in entry:
            _check_task_entry(entry["task"], entry["task_id"], f"{name}.task")
    shares = state.get("shares", {})  # batch_partition's carried rounding (a state without it: none)
    if not isinstance(shares, dict) or not set(shares) <= set(tags) or not all(
            isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) for v in shares.values()):
        raise ConfigError(f"{where}: shares must map tags of this scheduler to numbers, got {shares!r:.200}")
    if callable(getattr(source, "checked_state", None)):
        source.checked_state(state["source"])
    return state


def task_entry(task: Any) -> dict[str, Any]:
    """A task made in Python (a task source's own, in no task file) as JSON values, for a
    state's ``unreturned`` entry: the restarted scheduler makes it again (``task_of_entry``).
    Its ``source`` (``file:line``) too: its relative paths (a rag corpus, an OSWorld gold
    file) are read from that file's folder."""
    return {"id": task.id, "mode": task.mode, "payload": dict(task.payload), "seed": task.seed,
            "tags": list(task.tags), "source": task.source}


def task_of_entry(entry: dict[str, Any]) -> Any:
    """The Task a state's ``unreturned[i].task`` (``task_entry``) holds."""
    from ..tasks import Task

    return Task(id=entry["id"], mode=entry["mode"], payload=dict(entry["payload"]), seed=entry.get("seed"),
                tags=tuple(entry.get("tags") or ()), source=entry.get("source") or "load_state_dict")


def _check_task_entry(task: Any, task_id: Any, name: str) -> None:
    if not isinstance(task, dict) or not isinstance(task.get("mode"), str) or not isinstance(task.get("payload"), dict):
        raise ConfigError(f"{name} must be a dict of id, mode, payload, seed and tags, got {task!r:.200}")
    if task.get("id") != task_id:
        raise ConfigError(f"{name}.id must be the entry's task_id {task_id!r}, got {task.get('id')!r}")
    seed, tags = task.get("seed"), task.get("tags", [])
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int)):
        raise ConfigError(f"{name}.seed must be a whole number or None, got {seed!r}")
    if not isinstance(tags, list) or not all(isinstance(tag, str) for tag in tags):
        raise ConfigError(f"{name}.tags must be a list of names, got {tags!r:.200}")
    if not isinstance(task.get("source", ""), str):
        raise ConfigError(f"{name}.source must be the task's file:line (text), got {task.get('source')!r:.200}")


def _count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


class TaskSource(Protocol):
    """Decides the task of each new group of a tag; saves and restores its position."""

    def next_task(self, tag: str) -> Any:
        """The task the next group of ``tag`` runs: a ``tasks.Task``, or the id of one of
        the scheduler's tasks."""

    def state_dict(self) -> dict[str, Any]:
        """Where the source stands, as JSON values."""

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Stand where ``state_dict`` said."""


class ShuffledTasks:
    """The built-in source: each tag's tasks in an order reshuffled at every pass."""

    def __init__(self, tasks: dict[str, list[Any]], seed: int = 0) -> None:
        self.tasks = {tag: list(items) for tag, items in tasks.items()}
        self.seed = seed
        #: per tag: the pass under way and how many of its tasks were drawn
        self._pass = {tag: 0 for tag in self.tasks}
        self._drawn = {tag: 0 for tag in self.tasks}
        self._order: dict[str, list[Any]] = {}

    def next_task(self, tag: str) -> Any:
        """The next task of ``tag``'s current pass; a new pass, newly shuffled, after its last."""
        order = self._order.get(tag)
        if order is None:
            order = self._order[tag] = self._shuffled(tag, self._pass[tag])
        if self._drawn[tag] >= len(order):
            self._pass[tag] += 1
            self._drawn[tag] = 0
            order = self._order[tag] = self._shuffled(tag, self._pass[tag])
        task = order[self._drawn[tag]]
        self._drawn[tag] += 1
        return task

    def state_dict(self) -> dict[str, Any]:
        """The pass and the position in it, per tag."""
        return {"seed": self.seed, "pass": dict(self._pass), "drawn": dict(self._drawn)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Continue where ``state`` stood (its tags must be this source's); a ConfigError
        naming the field, and nothing loaded, for a state of another shape."""
        seed, passes, drawn = self.checked_state(state)
        self.seed = seed
        self._pass.update(passes)
        self._drawn.update(drawn)
        self._order.clear()

    def checked_state(self, state: Any) -> tuple[int, dict[str, int], dict[str, int]]:
        """``state`` (a ``state_dict()``) as its seed, passes and draws, every value checked;
        ConfigError naming the field otherwise (the scheduler checks it before it loads anything)."""
        where = "load_state_dict: the state's source"
        if not isinstance(state, dict) or not all(isinstance(state.get(k, {}), dict) for k in ("pass", "drawn")):
            raise ConfigError(f"{where} must be a dict of seed, pass and drawn (the built-in task order's), "
                              f"got {state!r:.200}")
        seed = state.get("seed", self.seed)
        if isinstance(seed, bool) or not isinstance(seed, int):
            raise ConfigError(f"{where}: seed must be a whole number, got {seed!r:.200}")
        counts: list[dict[str, int]] = []
        for name in ("pass", "drawn"):
            part = state.get(name, {})
            unknown = sorted(set(part) - set(self.tasks), key=str)
            if unknown:
                raise ConfigError(f"{where}: {name} names tags this scheduler does not have: {unknown} "
                                  f"(the saved task order's)")
            for tag, n in part.items():
                if not _count(n):
                    raise ConfigError(f"{where}: {name}[{tag!r}] must be a whole number >= 0, got {n!r:.200}")
            counts.append(dict(part))
        return seed, counts[0], counts[1]

    def _shuffled(self, tag: str, number: int) -> list[Any]:
        order = list(self.tasks[tag])
        random.Random(f"{self.seed}/{tag}/{number}").shuffle(order)
        return order


class TaskSourceError(RolloutError):
    """A trainer's task source raised instead of giving the next task (the cause is its
    exception); ``get_batch`` raises it."""

    kind = "task_source_failed"


def ids_like(task_id: str, tasks: list[Any]) -> str:
    """What to tell of a task id none of ``tasks`` has: the ids closest to it, else the
    first few, so a trainer learns how the tags' tasks are named (``frozenlake-4x4-s2``)."""
    import difflib

    ids = list(dict.fromkeys(t.id for t in tasks))
    close = difflib.get_close_matches(task_id, ids, n=3, cutoff=0.6)
    if close:
        return f"the closest: {', '.join(close)}"
    return f"its ids are {', '.join(ids[:5])}" + (f" … ({len(ids)} in all)" if len(ids) > 5 else "")


def next_task_of(source: TaskSource, tag: str, tasks: dict[str, list[Any]], modes: list[str]) -> Any:
    """``source.next_task(tag)``, checked: a Task of a mode the engine runs, or the id of one
    of ``tasks`` (the tag's own first). ``TaskSourceError`` when the source raised,
    ConfigError naming what it returned when that is no such task."""
    name = f"task_source {type(source).__name__}.next_task({tag!r})"
    try:
        task = source.next_task(tag)
    except Exception as exc:  # noqa: BLE001 - the trainer's code: any failure ends get_batch
        raise TaskSourceError(f"{name} failed: {type(exc).__name__}: {exc}") from exc
    if isinstance(task, str):
        for candidates in (tasks.get(tag, []), *tasks.values()):
            found = next((t for t in candidates if t.id == task), None)
            if found is not None:
                return found
        raise ConfigError(f"{name} returned {task!r}: no task of the scheduler's tags has that id; "
                          + ids_like(task, [t for candidates in tasks.values() for t in candidates]))
    if getattr(task, "mode", None) not in modes or not isinstance(getattr(task, "id", None), str):
        raise ConfigError(f"{name} returned {task!r:.200}; it must return a Task or the id of one "
                          f"(of a mode this scheduler's engine runs: {modes})")
    return task


def quotas(weights: dict[str, float], groups: int) -> dict[str, int]:
    """``groups`` split over the tags in proportion to ``weights`` (largest remainders; ties
    go to the tag listed first)."""
    return _rounded(weights, groups, dict.fromkeys(weights, 0.0))


class BatchShares:
    """``batch_partition``'s weights per tag, and the groups per tag of each batch: a tag's
    share rounded down or up, the rounding carried from batch to batch (``credit``: what the
    earlier batches' rounding owes each tag), so that over batches each tag gets its share.
    Each batch rounded alone gave the first tag listed every odd group: with one group a
    batch and ``[1, 1]`` the second tag never ran, with three a batch it got a third."""

    def __init__(self, weights: dict[str, float]) -> None:
        self.weights = weights
        self.credit = dict.fromkeys(weights, 0.0)
        self._before = self.credit  # before the last take()

    def next(self, groups: int, batches: int = 1) -> dict[str, int]:
        """The groups per tag of the next ``batches`` batches of ``groups`` (nothing taken)."""
        credit, total = dict(self.credit), dict.fromkeys(self.weights, 0)
        for _ in range(batches):
            for tag, count in _rounded(self.weights, groups, credit).items():
                total[tag] += count
        return total

    def take(self, groups: int, given: dict[str, int] | None = None) -> None:
        """A batch of ``groups`` was taken: carry its rounding to the next. ``given``: the
        groups per tag it held, when not its shares (a partial batch): what a tag lacked is
        owed to it, what it got past its share owed by it."""
        self._before = dict(self.credit)
        shares = _rounded(self.weights, groups, self.credit)
        for tag, count in (given or shares).items():
            self.credit[tag] += shares[tag] - count

    def put_back(self) -> None:
        """The batch last taken was not handed out (``batches._put_back``): its rounding is
        not carried, or the next batches would skip the shares it never gave."""
        self.credit = self._before

    def load(self, credit: dict[str, float]) -> None:
        """The rounding a saved state carried (``state_dict()["shares"]``): the restarted
        scheduler's batches hold the tags an uninterrupted one's would."""
        self.credit.update({tag: float(value) for tag, value in credit.items() if tag in self.credit})


def _rounded(weights: dict[str, float], groups: int, credit: dict[str, float]) -> dict[str, int]:
    """``groups`` split in proportion to ``weights``, each tag's share rounded down or up: the
    groups left over go to the tags ``credit`` and their remainder owe most (ties: the tag
    listed first); ``credit`` is updated with this batch's rounding."""
    total, tags = sum(weights.values()), list(weights)
    share = {tag: groups * w / total for tag, w in weights.items()}
    out = {tag: math.floor(share[tag] + 1e-9) for tag in tags}
    owed = [tag for tag in tags if share[tag] - out[tag] > 1e-9]
    order = sorted(owed, key=lambda tag: (-(share[tag] - out[tag] + credit[tag]), tags.index(tag)))
    for tag in order[:groups - sum(out.values())]:
        out[tag] += 1
    for tag in tags:
        credit[tag] += share[tag] - out[tag]
    return out


def check_batch_partition(partition: list[float] | None, tags: list[str]) -> BatchShares | None:
    """``batch_partition`` as weights per tag; ConfigError for a wrong length or weight."""
    if partition is None:
        return None
    if not isinstance(partition, (list, tuple)) or len(partition) != len(tags):
        raise ConfigError(f"batch_partition must give one weight per tag ({len(tags)}: {tags}), got {partition!r}")
    # inf passed "> 0" and made every share NaN: the first get_batch failed with a ValueError
    if any(isinstance(w, bool) or not isinstance(w, (int, float)) or not 0 < w < math.inf for w in partition):
        raise ConfigError(f"batch_partition weights must be positive finite numbers, got {partition!r}")
    return BatchShares(dict(zip(tags, partition)))
