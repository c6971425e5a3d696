"""The Env interface: what a mode must provide to the worker's episode loop."""

from __future__ import annotations

import abc
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, Mapping

if TYPE_CHECKING:
    from ..config import RunConfig
    from ..guest.client import GuestClient
    from ..tasks import Task


@dataclass
class StepResult:
    """What one agent action did: the next observation and whether the episode ended."""

    observation: dict[str, Any]
    done: bool = False
    info: dict[str, Any] = field(default_factory=dict)


class Env(abc.ABC):
    """One mode. The worker calls reset → step … → evaluate on one thread."""

    name: ClassVar[str] = ""
    #: whether an episode needs a leased VM
    needs_vm: ClassVar[bool] = True
    #: the situational RunConfig fields this mode honours (screen size, action space …)
    options: ClassVar[frozenset[str]] = frozenset()

    def __init__(self, config: "RunConfig") -> None:
        self.config = config

    @staticmethod
    def validate_task(payload: Mapping[str, Any]) -> None:
        """Raise ValueError naming the bad field when a task's payload is unusable."""

    @abc.abstractmethod
    def reset(self, task: "Task", vm: "GuestClient | None") -> dict[str, Any]:
        """Set up the task (in the VM) and return the first observation."""

    @abc.abstractmethod
    def step(self, action: Any) -> StepResult:
        """Carry out one agent action."""

    @abc.abstractmethod
    def evaluate(self) -> tuple[float, dict[str, Any]]:
        """Score the episode: (reward in [0, 1], details for the record)."""


def require(payload: Mapping[str, Any], name: str, kind: type | tuple[type, ...], *, optional: bool = False) -> None:
    """Raise ValueError unless ``payload[name]`` exists (or is optional) and has type ``kind``."""
    if name not in payload:
        if optional:
            return
        raise ValueError(f"missing field {name!r}")
    if not isinstance(payload[name], kind):
        names = kind.__name__ if isinstance(kind, type) else " or ".join(k.__name__ for k in kind)
        raise ValueError(f"field {name!r} must be {names}, got {type(payload[name]).__name__}")


def require_str_list(payload: Mapping[str, Any], name: str, *, optional: bool = True) -> None:
    """Raise ValueError unless ``payload[name]`` is a list of strings."""
    require(payload, name, list, optional=optional)
    if not all(isinstance(item, str) for item in payload.get(name, [])):
        raise ValueError(f"field {name!r} must be a list of strings")
