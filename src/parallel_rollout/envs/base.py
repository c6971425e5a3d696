"""The Env interface: what a mode must provide to the worker's episode loop."""

from __future__ import annotations

import abc
import math
import numbers
import reprlib
import threading
from dataclasses import dataclass, field, replace
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Callable, ClassVar, ContextManager, Mapping, Protocol

from ..task_json import kinds_said, not_strings, value_said
from ..tasks import MissingField

if TYPE_CHECKING:
    from ..config import RunConfig
    from ..guest.client import GuestClient
    from ..tasks import Task


class VMLeaser(Protocol):
    """What a ``vm_scope == "call"`` env gets: ``with vm.lease() as client:`` holds a VM
    (reset after the block) only while the env needs one (``attempt_vms.AttemptLeaser``)."""

    def lease(self) -> ContextManager["GuestClient"]:
        """Lease a VM for the block."""


@dataclass
class StepResult:
    """What one agent action did: the next observation and whether the episode ended."""

    observation: dict[str, Any]
    done: bool = False
    info: dict[str, Any] = field(default_factory=dict)


class Env(abc.ABC):
    """One mode. The worker calls reset → step … → evaluate on one thread."""

    name: ClassVar[str] = ""
    #: how the mode uses VMs: ``"episode"`` — one lease held for the whole episode (state
    #: carries over between turns); ``"call"`` — the env leases a VM only around each VM
    #: call through ``vm.lease()``, so no VM waits while the agent thinks; None — no VM
    vm_scope: ClassVar[str | None] = "episode"
    #: the situational RunConfig fields this mode honours (screen size, action space …)
    options: ClassVar[frozenset[str]] = frozenset()
    #: the status of an episode that used every turn without success: "max_turns" when the
    #: agent never finished, "failure" for modes where every turn is a graded try
    turn_limit_status: ClassVar[str] = "max_turns"
    #: the payload fields a task of this mode may have (besides id, mode, seed, tags and
    #: task_id): the loader refuses any other, naming the closest; None accepts any (OSWorld's
    #: tasks carry many fields of their own, and so may a plugin's)
    task_fields: ClassVar[frozenset[str] | None] = None
    #: object fields of the payload and their optional fields: one given as null reads as not
    #: given, as a top-level field's null does (the loader drops it; rag's ``reference.answer``)
    nested_fields: ClassVar[Mapping[str, frozenset[str]]] = MappingProxyType({})
    #: the payload fields that grade a task or solve it (its answer key: HumanEval's tests
    #: and canonical solution, a shell task's check and reference): no agent sees them but
    #: one trusted with them (``Agent.sees_answer_key``: the oracle), see ``agent_view``
    answer_fields: ClassVar[frozenset[str]] = frozenset()
    #: whether the task's seed is part of the answer key: True when it drives randomness the
    #: agent must not foresee (FrozenLake's slips, a MiniWoB page's hidden values), so an
    #: agent that replays it plays a known future. Such an agent gets the task with no seed
    #: (``agent_view``); a mode whose seed drives nothing hidden says False
    seed_is_secret: ClassVar[bool] = True
    #: turns per episode when --max-turns is not given (None: the flag's default)
    default_max_turns: ClassVar[int | None] = None
    #: per-VM limits (ProviderOptions fields) applied where the provider supports them,
    #: unless the user sets them
    default_limits: ClassVar[dict[str, int]] = {}
    #: the folder where an env may write extra files of the attempt (screenshots, its own
    #: trajectory), set by the worker before reset; None outside a worker
    trajectory_dir: Path | None = None
    #: what the agent's ``act`` of the turn being stepped exchanged with a model
    #: (``Agent.turn_record``: its ``reply`` text …), set by the worker before each ``step``;
    #: empty when it called none. An env that keeps the reply (osworld's traj.jsonl) reads it
    turn_record: Mapping[str, Any] = MappingProxyType({})

    def __init__(self, config: "RunConfig") -> None:
        self.config = config

    @classmethod
    def turn_limit(cls, config: "RunConfig") -> int:
        """Turns per episode: --max-turns when given, else this mode's default (else the
        flag's). What a run records in config.json and what its workers use."""
        if "max_turns" not in config.explicit and cls.default_max_turns:
            return cls.default_max_turns
        return config.max_turns

    @classmethod
    def needs_vm(cls) -> bool:
        """Whether a run of this mode needs a VM pool: ``vm_scope`` decides. An override must
        agree with it (``registry.get_env`` refuses a class whose two disagree)."""
        return cls.vm_scope is not None

    @classmethod
    def agent_view(cls, task: "Task") -> "Task":
        """``task`` as an agent not trusted with its answer key gets it: without the
        ``answer_fields``, and without its seed when ``seed_is_secret`` (the same task when
        it has none of them)."""
        hide_seed = cls.seed_is_secret and task.seed is not None
        if not hide_seed and not cls.answer_fields.intersection(task.payload):
            return task
        kept = {name: value for name, value in task.payload.items() if name not in cls.answer_fields}
        return replace(task, payload=kept, seed=None if cls.seed_is_secret else task.seed)

    @staticmethod
    def validate_task(payload: Mapping[str, Any]) -> None:
        """Raise ValueError naming the bad field when a task's payload is unusable."""

    @classmethod
    def prepare_run(cls, tasks: "list[Task]") -> None:
        """Once per run, in the main process before any worker starts: check what the tasks
        need beyond their own fields and build shared read-only state (rag's search index);
        raise TaskFileError naming the task's file and line."""

    @staticmethod
    def census_notes(tasks: "list[Task]", config: "RunConfig") -> list[str]:
        """What ``--dry-run`` adds to its census of the runnable ``tasks``: information (what
        will end setup_failed on this run's VMs …), never a problem that stops it."""
        return []

    @staticmethod
    def check_guest(provider_name: str) -> str | None:
        """What can be known of this mode's guest on ``provider_name``'s VMs before one boots
        (preflight and the run's start: web's Chromium on this host for the process provider):
        a note of what was found, or ProviderUnavailable. None: nothing is known before a boot
        (its first episode finds out). Asked through ``guest_check``."""
        return None

    @staticmethod
    def cut_cleanup() -> str | None:
        """A Python program ending what an episode of this mode starts in the VM apart from
        its guest calls (the web mode's page server and Chromium), which a provider whose
        reset does not restore the machine (remote) runs through ``/run_python`` at each
        reset and stop: an episode cut before its end (its worker killed at --task-timeout,
        the run stopped) ends nothing itself. None: nothing to end."""
        return None

    @staticmethod
    def reference_actions(task: "Task") -> list[Any]:
        """The actions that solve ``task`` (what the oracle agent replays); ValueError when
        the task has no reference."""
        raise ValueError(f"mode {task.mode!r} has no reference actions")

    #: whether ``answer_files`` may name any file (an agent that hides them loads the tasks
    #: only for a mode that says so)
    has_answer_files: ClassVar[bool] = False

    @staticmethod
    def answer_files(task: "Task") -> list[str]:
        """The local files that hold ``task``'s answer key (an expected file its check compares
        against), by absolute path: a command agent's program never sees them, as it is never
        handed ``answer_fields``. Set ``has_answer_files`` where this names any."""
        return []

    @abc.abstractmethod
    def reset(self, task: "Task", vm: "GuestClient | VMLeaser | None") -> dict[str, Any]:
        """Set up the task and return the first observation. ``vm`` is a GuestClient for
        ``vm_scope == "episode"``, a VMLeaser for ``"call"``, None for no VM."""

    @abc.abstractmethod
    def step(self, action: Any) -> StepResult:
        """Carry out one agent action."""

    @abc.abstractmethod
    def evaluate(self) -> tuple[float, dict[str, Any]]:
        """Score the episode: (reward, details for the record). The reward is a finite real
        number (a bool counts as 0 or 1), in [0, 1] with success at 1, unless
        ``details["success"]`` says otherwise (an env with its own reward scale, such as
        Sokoban's return; a reward outside [0, 1] without it is warned of once per worker,
        and counts as success when >= 1)."""


def guest_check(env_cls: type[Env], provider_name: str | Callable[[], str]) -> str | None:
    """``env_cls.check_guest`` of the provider of the run's VMs, the one way the run's start,
    preflight and an RL scheduler ask it. ``provider_name``: its name, or how to find it, which
    a mode that knows nothing of its guest before a boot (``Env``'s None) never asks: preflight's
    lookup of the provider is a check of its own (an unknown provider, said once)."""
    if env_cls.check_guest is Env.check_guest:
        return None
    return env_cls.check_guest(provider_name if isinstance(provider_name, str) else provider_name())


class EnvContractError(TypeError):
    """An Env method returned what its contract does not allow: the env's bug, which fails
    the attempt as ``error`` (reward 0) with a message naming the env, the method, what it
    returned and what it must return."""


#: what ``Env.step`` must return, said when it does not
STEP_CONTRACT = "it must return a StepResult(observation, done=False, info={}) (parallel_rollout.envs.base)"
#: what ``Env.evaluate`` must return, said when it does not
EVALUATE_CONTRACT = ("it must return (reward, details): the reward a finite real number (in [0, 1], "
                     "success at 1, unless details['success'] says otherwise) and details a dict")


def checked_step(env: Env, result: Any) -> StepResult:
    """``env.step``'s result when it is a StepResult (or has its ``observation``, ``done``
    and ``info``); else EnvContractError."""
    if all(hasattr(result, name) for name in ("observation", "done", "info")):
        return result
    raise EnvContractError(f"{type(env).__qualname__}.step returned {_shown(result)}; {STEP_CONTRACT}")


def checked_evaluation(env: Env, result: Any) -> tuple[float, Mapping[str, Any]]:
    """``env.evaluate``'s ``(reward, details)``, the reward as a float; EnvContractError for a
    result that is not such a pair, a reward that is not a finite real number, details that
    are not a dict."""
    where = f"{type(env).__qualname__}.evaluate returned"
    if not isinstance(result, (tuple, list)) or len(result) != 2:
        raise EnvContractError(f"{where} {_shown(result)}; {EVALUATE_CONTRACT}")
    reward, details = result
    if not isinstance(reward, numbers.Real):
        raise EnvContractError(f"{where} the reward {_shown(reward)}; {EVALUATE_CONTRACT}")
    try:
        score = float(reward)
    except OverflowError:  # an int past the floats
        score = math.inf
    if not math.isfinite(score):
        raise EnvContractError(f"{where} the reward {reward!r}, not a finite number; {EVALUATE_CONTRACT}")
    if not isinstance(details, Mapping):
        raise EnvContractError(f"{where} the details {_shown(details)}; {EVALUATE_CONTRACT}")
    return score, details


def _shown(value: Any) -> str:
    """A returned value as a message shows it: its type, and a short repr."""
    return "None" if value is None else f"{type(value).__name__} {reprlib.repr(value)}"


def require(payload: Mapping[str, Any], name: str, kind: type | tuple[type, ...], *, optional: bool = False,
            within: str = "") -> None:
    """Raise ValueError unless ``payload[name]`` exists (or is optional) and has type ``kind``,
    said in the task file's words ("field 'evaluator' must be an object, got a list"): JSON's
    true and false are no number, though Python's bool is an int. ``within``: the object field
    ``payload`` is, named in the path ("field 'reference.answer'", not the task's ``answer``)."""
    kinds = kind if isinstance(kind, tuple) else (kind,)
    said = f"{within}.{name}" if within else name
    if name not in payload:
        if optional:
            return
        raise MissingField(said, kinds)
    value = payload[name]
    if not isinstance(value, kinds) or isinstance(value, bool) and bool not in kinds:
        raise ValueError(f"field {said!r} must be {kinds_said(kinds)}, got {value_said(value)}")


#: the longest wait a command's timeout can be: what a thread's wait, and so a subprocess's,
#: takes (about 292 years here); a longer one raised OverflowError as the attempt ran (an error
#: of the task's, at reward 0, where the file said "no limit")
MAX_TIMEOUT_S = int(threading.TIMEOUT_MAX)


def require_seconds(payload: Mapping[str, Any], name: str) -> None:
    """Raise ValueError unless the optional ``payload[name]`` is a number of seconds a wait
    takes: more than 0 and at most :data:`MAX_TIMEOUT_S` (JSON's 1 and 400 zeros too)."""
    require(payload, name, (int, float), optional=True)
    value = payload.get(name, 1)
    if value <= 0:
        raise ValueError(f"field {name!r} must be a positive number of seconds, got {value_said(value)}")
    if value > MAX_TIMEOUT_S:
        raise ValueError(f"field {name!r} is {value_said(value)}: at most {MAX_TIMEOUT_S} seconds "
                         f"(about 292 years, the longest wait a command takes)")


def require_str_list(payload: Mapping[str, Any], name: str, *, optional: bool = True, within: str = "") -> None:
    """Raise ValueError unless ``payload[name]`` is a list of strings, naming the first item
    that is none (a shell task's ``"setup": ["true", 5]`` said only "must be a list of strings")."""
    require(payload, name, list, optional=optional, within=within)
    fault = not_strings(f"{within}.{name}" if within else name, payload.get(name, []))
    if fault:
        raise ValueError(fault)


def reject_none(action: Any, takes: str) -> None:
    """Raise ValueError when ``action`` is None: no built-in mode takes it for an action (it is
    what an ``act`` that forgot its ``return`` gives, or a command agent's ``null``), and
    taken for "done" or an unparsable reply it would end or spend the episode as the
    policy's; ``takes`` says what the mode does take."""
    if action is None:
        raise ValueError(f"{takes}, got NoneType")
