"""Groups and trajectories: what a scheduler hands the trainer, and how a group fills up.

A group is ``group_size`` members (+ redundant spares) of one task with one seed. Each member
is one engine sample; its final record (after the engine's retries) becomes a Trajectory,
whose turns are read back from the attempt's trajectory file when first asked for
(``get_batch`` does it in the trainer's thread, never the engine's: the engine calls back on
its dispatch thread, where a parse of a big multimodal file would hold up every dispatch). The group is complete when
``group_size`` members succeeded in producing an episode (the first to finish win; the
spares still running are cancelled). A member whose final record is a failure (an
infrastructure failure past its retries, an agent error) is replaced by a spare if one is
left; otherwise the group is dropped, or completed with a placeholder member (reward 0,
``placeholder=True``) so the trainer can mask it. An episode the model could not finish
(``context_overflow``, ``truncated``) is an outcome, not a failure: reward 0 (or with
``cut_reward="so_far"`` the env's reward of the episode as it stood), kept in its group.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from ..agents.calls import calls_of
from ..errors import ConfigError, RolloutError
from ..trajectories import read_turns
from .segments import Segment, build_segments

#: final statuses that are not an episode's outcome: the member failed to produce one
FAILED_STATUSES = frozenset({"error", "vm_error", "guest_unreachable", "worker_died", "agent_killed",
                             "lease_timeout", "model_unavailable", "pool_exhausted", "pool_closed", "storage_error",
                             "task_timeout", "unstorable_result", "setup_failed"})
#: final statuses of an episode the model could not finish (its context ran out; a reply cut
#: at the token limit under on_length="end"): outcomes at reward 0, kept in their group
CUT_STATUSES = frozenset({"context_overflow", "truncated"})


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
    #: some of its group's tokens were sampled by a policy older than ``max_version_lag``
    #: allows (kept under ``stale_versions="keep"``; rl/staleness.py)
    version_stale: bool = False
    #: queued_at, started_at, ended_at, duration_s (epoch seconds)
    timings: dict[str, float | None] = field(default_factory=dict)
    #: the engine's final record of the member
    record: dict[str, Any] = field(default_factory=dict)
    #: the attempt's trajectory file, read when ``turns`` is first asked for
    turns_file: Path | None = field(default=None, repr=False)
    _turns: list[dict[str, Any]] | None = field(default=None, repr=False)
    _segments: list[Segment] | None = field(default=None, repr=False, compare=False)

    @property
    def turns(self) -> list[dict[str, Any]]:
        """Per turn: observation, action, request, reply, stop_reason, token_ids,
        prompt_token_ids, logprobs, policy_version (what the agent and the model server
        produced: the turn's last model call's; the calls before it in ``earlier_calls``). RolloutError when the record has turns and its file is not on this host."""
        if self._turns is None:
            self._turns = self._read_turns()
        return self._turns

    def _read_turns(self) -> list[dict[str, Any]]:
        if self.turns_file is None:
            return []
        try:
            turns = read_turns(self.turns_file)
        except FileNotFoundError:
            if not self.record.get("turns"):
                return []  # the attempt ended before its first turn
            where = f" (it ran on node {self.record['node']})" if self.record.get("node") else ""
            raise RolloutError(f"{self.trajectory_id}: its {self.record['turns']} turns are in {self.turns_file}, "
                               f"which is not on this host{where}: give every node the output folder "
                               "(a shared filesystem), or use a backend that returns the turns") from None
        self._check_own(turns)
        return turns

    def _check_own(self, turns: list[dict[str, Any]]) -> None:
        """RolloutError unless the file holds the turns the record counted: a file another
        attempt wrote over is never handed out as this one's. A failed attempt's file may
        hold one turn more or less than its record says: killed mid-turn (``task_timeout``,
        ``worker_died``), its last was written and not yet reported; failing to write it
        (``storage_error``), the record counted it first."""
        counted = self.record.get("turns")
        if not isinstance(counted, int) or isinstance(counted, bool):
            counted = 0  # the attempt ended before its first turn
        lines = [turn.get("turn") for turn in turns]
        slack = 1 if self.status in FAILED_STATUSES else 0
        if abs(len(lines) - counted) <= slack and lines == list(range(1, len(lines) + 1)):
            return
        raise RolloutError(f"{self.trajectory_id}: its record counts {counted} turn(s), but {self.turns_file} "
                           f"holds {len(lines)} (turns {lines[:20]}): the file is not this attempt's (another "
                           "run wrote into the run folder?); refusing to hand out turns that may not be its own")

    def segments(self) -> list[Segment]:
        """The trajectory as training data: exact token sequences with ``loss_mask``,
        ``logprobs`` and ``versions`` (``rl/segments.py``); more than one only where the
        server's prompt did not extend the sequence so far (counted in ``drift``)."""
        if self._segments is None:
            self._segments = build_segments(self.turns, self.trajectory_id)
        return self._segments

    @property
    def drift(self) -> int:
        """Segment breaks: model calls whose prompt did not extend the previous prompt + reply."""
        return max(0, len(self.segments()) - 1)

    @property
    def policy_versions(self) -> list[int | None]:
        """The policy version of each turn: the oldest of its model calls' (``earlier_calls``
        too: a plan sampled before a weight update, the act after it) and of their tokens'
        (``versions``, a partial reply's), None for a turn that called no model."""
        out: list[int | None] = []
        for turn in self.turns:
            versions = [v for call in calls_of(turn)
                        for v in [call.get("policy_version"), *(call.get("versions") or [])]
                        if isinstance(v, int) and not isinstance(v, bool)]
            out.append(min(versions) if versions else None)
        return out

    @property
    def cut(self) -> bool:
        """Whether the model could not finish the episode (``CUT_STATUSES``): the trainer
        masks it or keeps its reward (0, or its reward so far: ``cut_reward``) as a penalty."""
        return self.status in CUT_STATUSES

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
    #: what its trajectory ids start with: the run id and the scheduler's sample prefix
    #: (``grpo/train``, ``grpo/val@s1``), so ids are unique across schedulers and sessions
    id_prefix: str = ""
    #: started again from a checkpoint (``load_state_dict``) or a batch not handed out: drawn
    #: before any group drawn since, so the next batches hand it out first (``batches``)
    replayed: bool = False

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
                          self.trajectory_id(index), self.task.id,
                          self.seed, self.created_step, reward=0.0, status="placeholder", placeholder=True,
                          record=member.record if member else {}, timings=member.timings if member else {},
                          _turns=[])

    def trajectory_id(self, member: int) -> str:
        """``<run id>/<sample's key>``: ``grpo/train:FrozenLake/g0/e0/m0``, and in a later
        session of the run folder ``grpo/train@s1:…`` (the key is the member's in results.jsonl)."""
        return f"{self.id_prefix}:{sample_name(self.tag, self.group_id, self.episode_id, member)}"


def sample_name(tag: str, group_id: int, episode_id: int, member: int) -> str:
    """``tag/g<group>/e<episode>/m<member>``: unique within a scheduler (its samples' names
    in the run folder are it after ``<scheduler>:``)."""
    return f"{tag}/g{group_id}/e{episode_id}/m{member}"


def from_record(group: Group, member: int, record: dict[str, Any], run_dir: Path,
                queued_at: float | None) -> Trajectory:
    """The Trajectory of a member's final record; its turns are read from its file later."""
    relpath = record.get("trajectory")
    return Trajectory(
        tag=group.tag, group_id=group.group_id, episode_id=group.episode_id, member=member,
        trajectory_id=group.trajectory_id(member),
        task_id=group.task.id, seed=group.seed, created_step=group.created_step,
        reward=float(record.get("reward") or 0.0), status=str(record.get("status")),
        success=bool(record.get("success")), turns_file=run_dir / relpath if relpath else None,
        timings={"queued_at": queued_at, "started_at": record.get("started_at"),
                 "ended_at": record.get("ended_at"), "duration_s": record.get("duration_s")},
        record=record)


def with_turns(trajectories: list[Trajectory]) -> list[Trajectory]:
    """The trajectories with their turns read, here in the trainer's thread (the engine's
    callbacks only note the record: a parse there would hold up its dispatch)."""
    for trajectory in trajectories:
        trajectory.turns  # noqa: B018 - reads the file now; RolloutError if it is not here
    return trajectories



GroupFilter = Callable[[list[Trajectory]], bool]


def drop_equal_rewards(group: list[Trajectory]) -> bool:
    """A group_filter: drop a group whose rewards are all equal (no GRPO signal). A
    placeholder's reward 0 is no outcome (the trainer masks it): only the real members'
    rewards count, so [1, 1, placeholder] has no signal either."""
    return len({t.reward for t in group if not t.placeholder}) <= 1


def check_group_filter(group_filter: Any, group_size: int) -> None:
    """ConfigError for a ``group_filter`` that is no function, or ``drop_equal_rewards`` on
    groups of one member, whose rewards are always all equal: it would drop every group, and
    get_batch raise once ``max_filtered_groups`` were generated and thrown away."""
    if group_filter is not None and not callable(group_filter):
        raise ConfigError(f"group_filter must be a function of a group's trajectories (True drops it), "
                          f"got {group_filter!r}")
    if group_filter is drop_equal_rewards and group_size < 2:
        raise ConfigError(f"group_filter=drop_equal_rewards drops every group of group_size={group_size}: one "
                          "member's rewards are always all equal; give group_size >= 2, or no filter")
