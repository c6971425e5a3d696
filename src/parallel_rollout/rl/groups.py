"""Groups and trajectories: what a scheduler hands the trainer, and how a group fills up.

A group is ``group_size`` members (+ redundant spares) of one task with one seed. Each member
is one engine sample; its final record (after the engine's retries) becomes a Trajectory,
with the turns read back from the attempt's trajectory file. The group is complete when
``group_size`` members succeeded in producing an episode (the first to finish win; the
spares still running are cancelled). A member whose final record is a failure (an
infrastructure failure past its retries, an agent error) is replaced by a spare if one is
left; otherwise the group is dropped, or completed with a placeholder member (reward 0,
``placeholder=True``) so the trainer can mask it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

#: final statuses that are not an episode's outcome: the member failed to produce one
FAILED_STATUSES = frozenset({"error", "vm_error", "guest_unreachable", "worker_died", "lease_timeout",
                             "pool_exhausted", "pool_closed", "storage_error", "task_timeout",
                             "unstorable_result"})


@dataclass
class Trajectory:
    """One member's episode, as the trainer gets it."""

    tag: str
    group_id: int
    episode_id: int
    member: int
    trajectory_id: str
    task_id: str
    seed: int | None
    #: the get_batch step current when the group was created
    created_step: int
    reward: float = 0.0
    status: str = "pending"
    success: bool = False
    #: a stand-in for a member that failed (reward 0): the trainer masks it
    placeholder: bool = False
    #: per turn: observation, action, request, reply, token_ids, prompt_token_ids, logprobs,
    #: policy_version (what the agent and the model server produced)
    turns: list[dict[str, Any]] = field(default_factory=list)
    #: queued_at, started_at, ended_at, duration_s (epoch seconds)
    timings: dict[str, float | None] = field(default_factory=dict)
    #: the engine's final record of the member
    record: dict[str, Any] = field(default_factory=dict)

    @property
    def policy_versions(self) -> list[int | None]:
        """The policy version of each turn."""
        return [turn.get("policy_version") for turn in self.turns]

    @property
    def failed(self) -> bool:
        """Whether the member produced no episode (infrastructure or agent failure)."""
        return self.status in FAILED_STATUSES or bool(self.record.get("infrastructure"))


@dataclass
class Group:
    """The members of one task and seed; complete when ``size`` of them are in."""

    group_id: int
    tag: str
    episode_id: int
    task: Any
    seed: int | None
    created_step: int
    size: int
    #: member index -> engine key, for every member started
    keys: dict[int, str] = field(default_factory=dict)
    done: list[Trajectory] = field(default_factory=list)
    failed: list[Trajectory] = field(default_factory=list)
    #: members cancelled (spares past the first ``size``, or the group dropped)
    cancelled: set[int] = field(default_factory=set)
    created_at: float = 0.0
    completed_at: float | None = None
    #: "batch" (get_batch(n)) or "all" (get_batch(-1): failures are returned, not dropped)
    purpose: str = "batch"

    @property
    def complete(self) -> bool:
        return len(self.done) >= self.size

    @property
    def running(self) -> list[int]:
        """Members started and not yet in (nor cancelled)."""
        finished = {t.member for t in self.done} | {t.member for t in self.failed}
        return [m for m in self.keys if m not in finished and m not in self.cancelled]

    def trajectories(self) -> list[Trajectory]:
        """The group's members in member order."""
        return sorted(self.done[: self.size], key=lambda t: t.member)

    def placeholder(self) -> Trajectory:
        """A reward-0 stand-in for a member that failed, marked so the trainer masks it."""
        member = self.failed[len([t for t in self.done if t.placeholder])] if self.failed else None
        index = member.member if member else -1
        return Trajectory(self.tag, self.group_id, self.episode_id, index,
                          trajectory_id(self.tag, self.group_id, self.episode_id, index), self.task.id,
                          self.seed, self.created_step, reward=0.0, status="placeholder", placeholder=True,
                          record=member.record if member else {}, timings=member.timings if member else {})


def trajectory_id(tag: str, group_id: int, episode_id: int, member: int) -> str:
    """``tag/g<group>/e<episode>/m<member>``: unique within a scheduler."""
    return f"{tag}/g{group_id}/e{episode_id}/m{member}"


def from_record(group: Group, member: int, record: dict[str, Any], run_dir: Path,
                queued_at: float | None) -> Trajectory:
    """The Trajectory of a member's final record, with its turns read from its file."""
    turns: list[dict[str, Any]] = []
    relpath = record.get("trajectory")
    if relpath:
        path = run_dir / relpath
        try:
            lines = path.read_text(encoding="utf-8").splitlines()
        except OSError:
            lines = []
        for line in lines:
            try:
                turns.append(json.loads(line))
            except ValueError:
                break  # a torn last line of a killed attempt
    return Trajectory(
        tag=group.tag, group_id=group.group_id, episode_id=group.episode_id, member=member,
        trajectory_id=trajectory_id(group.tag, group.group_id, group.episode_id, member),
        task_id=group.task.id, seed=group.seed, created_step=group.created_step,
        reward=float(record.get("reward") or 0.0), status=str(record.get("status")),
        success=bool(record.get("success")), turns=turns,
        timings={"queued_at": queued_at, "started_at": record.get("started_at"),
                 "ended_at": record.get("ended_at"), "duration_s": record.get("duration_s")},
        record=record)


GroupFilter = Callable[[list[Trajectory]], bool]


def drop_equal_rewards(group: list[Trajectory]) -> bool:
    """A group_filter: drop a group whose rewards are all equal (no GRPO signal)."""
    return len({t.reward for t in group}) <= 1
