"""Mode name → Env class: the built-in modes, ``parallel_rollout.modes`` entry points and
``module:Class`` paths (one lookup for every plugin kind: see ``plugins``)."""

from __future__ import annotations

import dataclasses
import difflib
import functools
import re
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Mapping

from ..errors import ConfigError, TaskFileError
from ..plugins import Registry
from ..setting_names import RESUME_READS, said_if_given
from ..tasks import CORE_FIELDS
from ..tasks_osworld import DEFAULT_INDEX
from .base import Env

if TYPE_CHECKING:
    from ..config import RunConfig

_BUILT_IN = {
    "shell": "parallel_rollout.envs.shell:ShellEnv",
    "py": "parallel_rollout.envs.py:PyEnv",
    "math": "parallel_rollout.envs.math:MathEnv",
    "osworld": "parallel_rollout.envs.osworld:OSWorldEnv",
    "gym": "parallel_rollout.envs.gym:GymEnv",
    "web": "parallel_rollout.envs.web:WebEnv",
    "rag": "parallel_rollout.envs.rag:RagEnv",
}
MODES: Registry[Env] = Registry("mode", _BUILT_IN, Env, made_with=("config",))


def mode_names() -> list[str]:
    """Every mode this installation knows (built-in and installed plugins)."""
    return MODES.names()


#: what ``Env.vm_scope`` may be: a VM for the whole episode, around each call, or none
VM_SCOPES = ("episode", "call", None)


def get_env(mode: str, said: str | None = None) -> type[Env]:
    """The Env class of ``mode``; ConfigError for an unknown mode (naming the setting that gave
    it as ``said``: ``--mode``, ``mode in run.toml``), or one whose ``vm_scope`` and
    ``needs_vm()`` disagree."""
    env = MODES.load(mode, said)
    check_vm_scope(mode, env)
    return env


def check_vm_scope(mode: str, env: type[Env]) -> None:
    """ConfigError naming the class unless its ``vm_scope`` is one of VM_SCOPES and its
    ``needs_vm()`` (which a plugin may override) agrees with it: the runner starts a pool by
    needs_vm(), the worker leases by vm_scope, so a class that overrides one alone failed
    every sample on a lease from no pool (or started a pool nothing leased from)."""
    name = env.__name__
    if env.vm_scope not in VM_SCOPES:
        raise ConfigError(f"mode {mode!r}: {name}.vm_scope is {env.vm_scope!r}; it must be "
                          "'episode' (a VM for the episode), 'call' (leased around each VM call) or None (no VM)")
    needs = env.needs_vm()
    if needs != (env.vm_scope is not None):
        raise ConfigError(f"mode {mode!r}: {name}.needs_vm() says {needs} but its vm_scope is {env.vm_scope!r}; "
                          "vm_scope decides whether the env gets a VM: set vm_scope = "
                          + ("'episode' or 'call'" if needs else "None") + " and leave needs_vm() as it is")


class _Validators(Mapping):
    """mode -> payload validator, importing a mode's module only when a task uses it;
    ``also``: the fields the run's agent reads besides the mode's (``Agent.task_fields``)."""

    def __init__(self, also: frozenset[str] = frozenset()) -> None:
        self.also = frozenset(also)

    def __getitem__(self, mode: str) -> Callable[[Mapping[str, Any]], None]:
        if mode not in MODES:
            raise KeyError(mode)
        env = get_env(mode)
        fields = self.fields(mode)
        return env.validate_task if fields is None else functools.partial(_known_fields, env, fields)

    def fields(self, mode: str) -> frozenset[str] | None:
        """The fields a task of ``mode`` is read by: the mode's and the agent's; None for a
        mode that declares none (``task_fields`` None: osworld, a plugin's)."""
        env = get_env(mode)
        return None if env.task_fields is None else env.task_fields | self.also

    def nested(self, mode: str) -> Mapping[str, frozenset[str]]:
        """The object fields of a task of ``mode`` and their optional fields (``nested_fields``)."""
        return get_env(mode).nested_fields

    def __contains__(self, mode: object) -> bool:
        return mode in MODES

    def look_alikes(self, mode: str, payload: Mapping[str, Any]) -> list[tuple[str, str, list[str]]]:
        """``(name, field, fields)`` for each payload field that is none of the mode's (nor the
        agent's) but is one of them, or of the core fields, in another case or with other
        separators (``TIMEOUT``, ``timeLimitS``, ``time-limit-s``, ``SEED``), which the task
        lacks: a typo's refusal (``_known_fields``) does not see those, and the task would
        run without the field. Kept as the task's own data all the same (a load warns)."""
        fields = self.fields(mode)
        if fields is None:
            return []
        known = [*CORE_FIELDS, *sorted(fields)]
        by_form = {_form(name): name for name in known}
        found = []
        for name in payload:
            field = by_form.get(_form(name))
            if field is not None and field != name and field not in payload and name not in fields:
                found.append((name, field, known))
        return found

    def __iter__(self):
        return iter(mode_names())

    def __len__(self) -> int:
        return len(mode_names())


def _known_fields(env: type[Env], fields: frozenset[str], payload: Mapping[str, Any]) -> None:
    """ValueError for a payload field that reads as a typo of one the mode (or the agent)
    knows and the task lacks (``chekc`` for ``check``, ``setpu`` for ``setup``: ignored, the
    task would run without it), naming it; then the mode's own checks. Other fields a mode
    does not know are kept (a dataset's own columns: difficulty, source …) for the agent."""
    known = sorted(fields)
    core = list(CORE_FIELDS)
    for name in payload:
        if name in fields or name == "task_id":
            continue
        close = difflib.get_close_matches(name, [*known, *core], n=1, cutoff=TYPO_CUTOFF)
        if close and close[0] not in payload and close[0] not in core:
            raise ValueError(f"unknown field {name!r} (did you mean {close[0]!r}?); a {env.name or 'task'} "
                             f"task's fields are {', '.join([*core, *known])} (others are kept for the agent)")
    env.validate_task(payload)


def _form(name: str) -> str:
    """A field's name without case or separators: ``timeLimitS``, ``TIME_LIMIT_S`` and
    ``time-limit-s`` are ``timelimits``."""
    return re.sub(r"[\W_]+", "", name).casefold()


#: how like a known field an unknown one must be to be refused as its typo (difflib's ratio:
#: chekc/check 0.8, setpu/setup 0.8, answr/answer 0.91; difficulty/... far below)
TYPO_CUTOFF = 0.75


#: the words of a field name that say it may hold a task's answer (``gold_answer``,
#: ``Solution``, ``groundTruth``, ``expected_output``, ``test_cases``)
_ANSWER_WORDS = frozenset({"answer", "answers", "solution", "solutions", "gold", "golden", "truth",
                           "groundtruth", "gt", "reference", "references", "expected", "canonical",
                           "test", "tests", "check", "checks", "reward", "target", "targets", "correct"})


def looks_like_answer(name: str) -> bool:
    """Whether a field's name says it may hold the answer: one of its words (split at
    punctuation and case changes) is an answer word, or it contains "answer" or "solution"."""
    words = {w.lower() for w in re.findall(r"[A-Z]?[a-z]+|[A-Z]+(?![a-z])|\d+", name)}
    return bool(words & _ANSWER_WORDS) or any(part in name.lower() for part in ("answer", "solution"))


def answer_like_warnings(tasks: "list[Any]", agent: Any) -> list[str]:
    """What a run says when fields whose names say they may hold the answer go to an agent not
    trusted with the answer key (``agent.sees_answer_key``): a dataset's own columns that the
    mode neither reads nor holds back (a MATH file's ``Solution``, a ``gold`` column), one line
    per mode. They are passed on, as a task's other columns are: the user decides."""
    if agent.sees_answer_key:
        return []
    found: dict[str, dict[str, int]] = {}
    for task in tasks:
        env = get_env(task.mode)
        known = (env.task_fields or frozenset()) | env.answer_fields | agent.task_fields
        for name in task.payload:
            if name not in known and name != "task_id" and looks_like_answer(name):
                counts = found.setdefault(task.mode, {})
                counts[name] = counts.get(name, 0) + 1
    return [f"{', '.join(f'{n!r} ({c} task(s))' for n, c in sorted(counts.items()))}: field(s) of {mode} tasks "
            f"whose names say they may hold the answer go to the agent (--agent {agent.name or agent.__name__}) "
            f"with the task; {mode} holds back only its answer key ({', '.join(sorted(get_env(mode).answer_fields))}"
            "). If they hold the answer, take them out of the task file"
            for mode, counts in sorted(found.items())]


def task_validators(also: frozenset[str] = frozenset()) -> Mapping[str, Callable[[Mapping[str, Any]], None]]:
    """Payload validator per mode, for ``tasks.load_tasks``; ``also``: the task fields the
    run's agent reads (``Agent.task_fields``), accepted besides the mode's."""
    return _Validators(also)


def run_task_set(cfg: "RunConfig", task_fields: frozenset[str]) -> Any:
    """``tasks.load_task_set`` of the run's --data, as ``cfg`` names it (``task_fields``: the
    agent's); an error of the file as a whole (not found, not JSON, no tasks) says where
    --data was named when not on the command line: a resume's config.json, which a nightly
    resume reads of a file moved or deleted since. An OSWorld flag's default value that a resume
    read from config.json is no flag given: a run an earlier version started with it (where a
    task file took it in silence) still finishes."""
    from ..tasks import load_task_set

    from ..task_files import declared_mode

    given = {name for name in cfg.explicit if RESUME_READS not in cfg.sources.get(name, "")}
    try:
        return load_task_set(cfg.data, default_mode=cfg.mode, validators=task_validators(task_fields),
                             domain=cfg.domain, index=cfg.osworld_index, mode_given="mode" in cfg.explicit,
                             given=given)
    except TaskFileError as exc:
        other = declared_mode(cfg.data) if "data" in given and "mode" not in given else None
        if other and other != cfg.mode and _resumed(cfg, "mode"):  # it said --mode, which the user never gave
            raise TaskFileError(f"{cfg.data}: its tasks are {other} tasks (each names its mode), which --mode "
                                f"{cfg.mode} cannot run{cfg.where('mode')}: {_mode_advice(cfg, other)}") from None
        if "\n" not in str(exc) and cfg.where("data"):  # one line: the file's own error, not a record's
            exc.args = (f"{exc}{cfg.where('data')}", *exc.args[1:])
        raise


def _resumed(cfg: "RunConfig", name: str) -> bool:
    """Whether setting ``name`` is the resumed run's, read from its config.json."""
    return RESUME_READS in cfg.sources.get(name, "")


def _mode_advice(cfg: "RunConfig", implied: str) -> str:
    """What to do about a --data whose tasks the run's --mode cannot run: a resume continues
    the run in its own mode (another --mode is refused as other settings), so its own data."""
    if _resumed(cfg, "mode"):
        return f"--resume continues {cfg.run_id} in its mode: give the run's own --data, or start a new --run-id"
    return f"leave --mode out, or give --mode {implied}"


def with_mode_defaults(cfg: "RunConfig") -> "RunConfig":
    """``cfg`` with what its data and mode decide when not given: the mode (a named dataset's,
    ``--data humaneval`` is py; an OSWorld folder's, or OSWorld's flags', osworld; else the
    one every task of the file names), then
    ``max_turns`` (web 20, py 1 …: ``Env.turn_limit``). What config.json records,
    --print-config shows and a resume compares is then what the run uses. ConfigError for an
    unknown mode, or a built-in --mode that is not the named dataset's; TaskFileError, without
    --mode, for a task file whose tasks name modes no one run has (``task_files.mixed_modes``)."""
    from ..config import NAMED_DATASET_MODES
    from ..task_files import declared_mode, mixed_modes

    named = NAMED_DATASET_MODES.get((cfg.data or "").lower())
    # with --mode given only an OSWorld folder's mode is compared, so a task file is not read
    # through here (its load reads it)
    asked = cfg.data if cfg.data and ("mode" not in cfg.explicit or Path(cfg.data).is_dir()) else None
    implied = named or (declared_mode(asked) if asked else None)
    # OSWorld's own flags (--osworld-index, --domain; run.py's --test_all_meta_path) name an
    # OSWorld task set whatever --data is
    by_flag = [f"--{name.replace('_', '-')}" for name in ("osworld_index", "domain") if name in cfg.explicit]
    if "mode" not in cfg.explicit:
        implied = implied or ("osworld" if by_flag else None)
        # a mode no Env answers to (a task file's "shel") is left to the load, which names
        # the file and line; taken as the run's, it read as a --mode given
        if implied and implied != cfg.mode and implied in MODES:
            cfg = dataclasses.replace(cfg, mode=implied)
        elif asked and not implied:  # the load would call the run's default mode "--mode"
            mixed = mixed_modes(asked, cfg.mode, MODES)
            if mixed:
                raise TaskFileError(mixed)
    elif cfg.mode in _BUILT_IN and ((named or implied == "osworld") and cfg.mode != implied):
        what = f"{named} tasks" if named else "an OSWorld task set"
        raise ConfigError(f"--data {cfg.data} holds {what}, which --mode {cfg.mode} cannot run"
                          f"{cfg.where('mode')}: {_mode_advice(cfg, implied)}")
    elif cfg.mode in _BUILT_IN and by_flag and cfg.mode != "osworld":
        raise ConfigError(f"{' and '.join(by_flag)} (an OSWorld task set's) and --mode {cfg.mode}"
                          f"{cfg.where('mode')} conflict: leave --mode out, or give --mode osworld")
    turns = get_env(cfg.mode, said_if_given(cfg, "mode")).turn_limit(cfg)
    return cfg if turns == cfg.max_turns else dataclasses.replace(cfg, max_turns=turns)


def run_answer_files(cfg: "RunConfig", env_classes: list[type[Env]]) -> tuple[str, ...]:
    """The answer files of the run's tasks for those of ``env_classes`` that have any
    (:func:`task_answer_files`), which no VM may read (the pool hides them); () when the
    tasks do not load: the run's own load says what is wrong with them."""
    try:
        return tuple(path for cls in env_classes if cls.has_answer_files
                     for path in task_answer_files(cls.name or cfg.mode, cfg.data, cfg.domain, cfg.osworld_index))
    except (ConfigError, TaskFileError, OSError, ValueError):
        return ()


def task_answer_files(mode: str, data: str | None, domain: str = "all", index: str = DEFAULT_INDEX,
                 also: frozenset[str] = frozenset()) -> tuple[str, ...]:
    """The local files that hold the answer keys of the tasks of ``data`` (``Env.answer_files``:
    an OSWorld task's gold file, beside its task file or anywhere its ``cloud_file`` names), by
    absolute and real path, each once; () for a mode that has none. The tasks load as the
    runner loads them (``also``: the fields the run's agent reads); a load that fails raises."""
    from ..tasks import load_task_set

    if not get_env(mode).has_answer_files or not data:
        return ()
    task_set = load_task_set(data, default_mode=mode, domain=domain, validators=task_validators(also), index=index)
    return answer_files_of(task_set.tasks)


def answer_files_of(tasks, quiet: bool = False) -> tuple[str, ...]:
    """The local files that hold the answer keys of ``tasks`` (``Env.answer_files`` of each
    task's mode, for a mode that has any), each once: those of tasks given in Python (an RL
    scheduler's), which no task file names. ``quiet``: () where they cannot be told (a path
    no file can have), which the task's grading then meets and says."""
    try:
        return tuple(dict.fromkeys(path for task in tasks if get_env(task.mode).has_answer_files
                                   for path in get_env(task.mode).answer_files(task)))
    except (ConfigError, TaskFileError, OSError, ValueError):
        if not quiet:
            raise
        return ()
