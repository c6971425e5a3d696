"""The frozen dataclasses that cross process boundaries, one per role.

runner → worker: ``Assignment`` (one attempt of one sample) or ``STOP``.
worker → runner: ``Started`` (the worker acknowledges an attempt before running it, so the
runner always knows what a dying worker held) and ``Finished`` (the attempt's record).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .tasks import Task, sample_key


@dataclass(frozen=True)
class Stop:
    """Tells a worker to finish its current attempts and exit."""


#: the one sentinel; exactly one is sent to each live worker at shutdown
STOP = Stop()


@dataclass(frozen=True)
class Assignment:
    """One attempt of one sample, sent to a worker."""

    task: Task
    sample_idx: int
    attempt: int

    @property
    def key(self) -> str:
        """The sample this attempt belongs to."""
        return sample_key(self.task.id, self.sample_idx)


@dataclass(frozen=True)
class Started:
    """A worker's acknowledgement that it began an attempt."""

    key: str
    attempt: int
    worker_id: str
    pid: int
    slot: int
    time: float


@dataclass(frozen=True)
class Finished:
    """An attempt's result record, JSON-serializable, as written to results.jsonl."""

    key: str
    attempt: int
    record: dict[str, Any]
