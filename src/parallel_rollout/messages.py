"""The frozen dataclasses that cross process boundaries, one per role.

engine → worker: ``Assignment`` (one attempt of one sample), ``Cancel`` (drop an attempt) or
``STOP``.
worker → engine: ``Started`` (the worker acknowledges an attempt before running it, so the
engine always knows what a dying worker held), ``LeaseWait`` (a wait for a VM begins or
ends), ``Progress`` (where the attempt is: what the record of a worker killed meanwhile
keeps) and ``Finished`` (the attempt's record).

Both ends of a worker's pipe use ``send_message`` and ``receive_message``: the messages hold
plain data (a record is JSON already), so they skip multiprocessing's ``ForkingPickler``,
which copies its table of reducers for every message (~8 µs of each of a short attempt's
messages).
"""

from __future__ import annotations

import pickle
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from typing import Any, Mapping

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
    #: a front end's own name for the sample, unique within an engine (default task#sample);
    #: it names the record's ``key`` and the trajectory's folder
    name: str | None = None
    #: the front end's metadata, copied into the record as ``meta`` (JSON values)
    meta: Mapping[str, Any] = field(default_factory=dict)
    #: sampling overrides of the attempt (a scheduler's ``sampling=``: temperature, top_p …),
    #: merged over the run config's in each model request
    sampling: Mapping[str, Any] = field(default_factory=dict)
    #: grade an episode the model could not finish (``EpisodeCut``: its context ran out, a
    #: reply cut at max_tokens) as it stands, its reward the env's evaluation so far (an RL
    #: scheduler's ``cut_reward="so_far"``: Sokoban's step rewards so far), not 0
    grade_cut: bool = False
    #: files the attempt's agent withholds from a program of its own (the command agent's)
    #: that no file of the run names: an RL scheduler's task set files
    withheld: tuple[str, ...] = ()
    #: the servers of the fleet the run's start check found not serving its model
    #: (``Engine.servers_left_out``): the attempt's agent never sends them a request
    servers_left_out: tuple[str, ...] = ()
    #: those it did not hear, not up then (``Engine.servers_unheard``): asked at their first visit
    servers_unheard: tuple[str, ...] = ()

    @property
    def key(self) -> str:
        """The sample this attempt belongs to."""
        return self.name or sample_key(self.task.id, self.sample_idx)


@dataclass(frozen=True)
class Cancel:
    """Tells a worker to abandon an attempt (at its next turn); its VM is reset."""

    key: str
    attempt: int


@dataclass(frozen=True)
class Started:
    """A worker's acknowledgement that it began an attempt (the engine knows the rest: which
    worker it sent the attempt to, and when the acknowledgement came)."""

    key: str
    attempt: int


@dataclass(frozen=True)
class LeaseWait:
    """An attempt began (``waiting``) or ended a wait for a VM: the task clock stops
    meanwhile, and the wait has its own deadline (``lease_timeout_s``). A wait that ended
    with a VM says which (``vm``) and by which ``lease``: the backend keeps them with the
    attempt's last ``Progress`` (a lease given back since is harmless there: the pool answers
    only for a lease that still holds its VM)."""

    key: str
    attempt: int
    waiting: bool
    lease: int | None = None
    vm: str | None = None


@dataclass(frozen=True)
class Progress:
    """Where an attempt is: its ``phase`` (``setup``: the env's reset; ``agent``: the
    agent's turns; ``model_retry``: the agent's turns, retrying a model request the endpoint
    failed; ``grading``), the turns taken, its VM and trajectory file, and the lease
    by which it holds that VM now (None while it holds none). What the record of an attempt
    whose worker is killed (a task timeout) or dies keeps of it; with the lease, the backend
    asks the pool whether a late attempt's VM was killed from outside (``backends.base``)."""

    key: str
    attempt: int
    phase: str
    turns: int | None
    vm: str | None
    trajectory: str | None
    lease: int | None = None


@dataclass(frozen=True)
class Finished:
    """An attempt's result record, JSON-serializable, as written to results.jsonl."""

    key: str
    attempt: int
    record: dict[str, Any]


def send_message(conn: Connection, message: Any) -> None:
    """Send one message over a worker's pipe (what ``receive_message`` reads at the other end)."""
    conn.send_bytes(pickle.dumps(message, pickle.HIGHEST_PROTOCOL))


def receive_message(conn: Connection) -> Any:
    """The next message of a worker's pipe; EOFError when the other end closed it."""
    return pickle.loads(conn.recv_bytes())
