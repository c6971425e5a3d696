"""EnvManagerConfig (ROLL's env manager settings) and the task sets its tags name.

``EnvManagerConfig(num_env_groups, group_size, group_size_redundancy, tags,
num_groups_partition, max_env_num_per_worker)``: ``num_env_groups`` groups' worth of env
slots (× members) run at once, split over the tags by ``num_groups_partition`` (an even split
when left out); each group is ``group_size`` members of one task and seed, plus
``group_size_redundancy`` spares of which the slowest are cancelled. A member that is done
frees its slot for the next group while its group's stragglers run. Every bad value is a ConfigError that names the field.

A tag names a task set: a ``TaskSet(mode, data, tags=…, limit=…)`` given in ``task_sets``
(Python, or ``[task_sets.NAME]`` tables of a TOML file read by ``load_task_sets``), else a
built-in set (``FrozenLake``: the shipped lakes, non-slippery 4x4; ``SimpleSokoban``,
``LargerSokoban``, ``SokobanDifferentGridVocab``: ROLL's Sokoban settings, a new room per
group), else a mode's name, which stands for that mode with the run config's ``--data``.

The RunConfig a scheduler is given was made in Python, so nothing checked it the way ``run()``
checks its settings: ``check_run_config`` does (each field's type, the ranges and combinations
of ``config_checks.validate_ranges``, an agent that imports and can be made), and
``check_agent_runs`` what run() checks of its agent, for each tag's mode, and ``check_tags_use``
the settings no tag's mode and agent uses, and each tag's guest; their errors say the
RunConfig's fields, not the CLI's flags (``said_of``).
"""

from __future__ import annotations

import dataclasses
import difflib
import math
import numbers
import operator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

from ..config import RunConfig
from ..config_checks import check_vm_sharing, validate_ranges
from ..errors import ConfigError
from ..setting_names import check_no_stray_fields
from ..setting_types import CheckedKeywords, check_fields


@dataclass(frozen=True)
class TaskSet(CheckedKeywords):
    """Where a tag's tasks come from: a mode, its data, and optionally only the tasks that
    carry every one of ``tags``, at most ``limit`` of them."""

    mode: str
    data: str | None = None
    tags: tuple[str, ...] = ()
    limit: int | None = None


#: task sets every scheduler knows by name
BUILTIN_TASK_SETS = {
    "FrozenLake": TaskSet("gym", "frozenlake", tags=("4x4", "non-slippery")),
    "FrozenLakeSlippery": TaskSet("gym", "frozenlake", tags=("4x4", "slippery")),
    "FrozenLake8x8": TaskSet("gym", "frozenlake", tags=("8x8",)),
    # One unseeded task each: every group draws a new seed, so a new room (see the scheduler).
    "SimpleSokoban": TaskSet("gym", "sokoban-endless", tags=("SimpleSokoban",)),
    "LargerSokoban": TaskSet("gym", "sokoban-endless", tags=("LargerSokoban",)),
    "SokobanDifferentGridVocab": TaskSet("gym", "sokoban-endless", tags=("SokobanDifferentGridVocab",)),
}


@dataclass
class EnvManagerConfig(CheckedKeywords):
    """ROLL's env manager settings for one scheduler (train, validation, baseline …)."""

    #: groups' worth of env slots (× members) running at once; None: as many as the engine's
    #: concurrency fits
    num_env_groups: int | None = None
    group_size: int = 1
    #: extra members started per group; the first ``group_size`` to finish make the group
    group_size_redundancy: int = 0
    #: task set names; None: the run config's mode (with its --data)
    tags: list[str] | None = None
    #: groups per tag, in the order of ``tags``; None: an even split
    num_groups_partition: list[int] | None = None
    #: env loops per worker process (the engine's --envs-per-worker)
    max_env_num_per_worker: int | None = None
    #: tag name -> TaskSet, for tags that are neither built in nor a mode's name
    task_sets: dict[str, TaskSet] = field(default_factory=dict)

    @property
    def members(self) -> int:
        """Members started per group."""
        return self.group_size + self.group_size_redundancy

    def check(self) -> None:
        """ConfigError naming the field when a value cannot work; the counts become ints
        (numpy's integers are taken, as step and seed are: stats() and state_dict() stay JSON)."""
        check_no_stray_fields(self, "EnvManagerConfig")
        for name in ("num_env_groups", "max_env_num_per_worker", "group_size"):
            value = getattr(self, name)
            if value is None and name != "group_size":
                continue
            if (whole := whole_number(value)) is None or whole < 1:
                raise ConfigError(f"EnvManagerConfig.{name} must be a whole number of at least 1, got {value!r}")
            setattr(self, name, whole)
        redundancy = whole_number(self.group_size_redundancy)
        if redundancy is None or redundancy < 0:
            raise ConfigError(f"EnvManagerConfig.group_size_redundancy must be 0 or more, got "
                              f"{self.group_size_redundancy!r}")
        self.group_size_redundancy = redundancy
        if not isinstance(self.task_sets, dict):
            raise ConfigError(f"EnvManagerConfig.task_sets must be a dict of tag -> TaskSet, "
                              f"got {self.task_sets!r:.100}")
        for tag, task_set in self.task_sets.items():  # a path or parallel_rollout.tasks' TaskSet failed on .mode
            if not isinstance(task_set, TaskSet):
                raise ConfigError(f"EnvManagerConfig.task_sets[{tag!r}] must be a parallel_rollout.rl.TaskSet(mode, "
                                  f"data), got {type(task_set).__name__} {task_set!r:.80}")
        if self.tags is not None:
            if isinstance(self.tags, str) or not self.tags or not all(isinstance(t, str) and t for t in self.tags):
                raise ConfigError(f"EnvManagerConfig.tags must be a non-empty list of names, got {self.tags!r}")
            doubled = sorted({t for t in self.tags if self.tags.count(t) > 1})
            if doubled:
                raise ConfigError(f"EnvManagerConfig.tags names {', '.join(doubled)} twice")
        partition = self.num_groups_partition
        if partition is not None:
            tags = self.tags or ["<the run's mode>"]
            counts = [whole_number(n) for n in partition] if isinstance(partition, (list, tuple)) else [None]
            if not all(n is not None and n >= 1 for n in counts):
                # a tag with no group at once never runs a task: a batch that needs one (its
                # batch_partition share, get_batch(-1)) would wait for ever
                raise ConfigError(f"EnvManagerConfig.num_groups_partition must be a list of counts >= 1 (one "
                                  f"per tag: groups of that tag at once), got {partition!r}")
            self.num_groups_partition = partition = counts
            if len(partition) != len(tags):
                raise ConfigError(f"EnvManagerConfig.num_groups_partition has {len(partition)} entries for "
                                  f"{len(tags)} tags ({', '.join(tags)}); give one count per tag")
            if self.num_env_groups is not None and sum(partition) != self.num_env_groups:
                raise ConfigError(f"EnvManagerConfig.num_groups_partition {list(partition)} sums to {sum(partition)}, "
                                  f"not num_env_groups={self.num_env_groups}")

    def partition(self, tags: list[str], num_env_groups: int) -> dict[str, int]:
        """Groups at once per tag: the given partition, or ``num_env_groups`` split evenly
        (the first tags get one more when it does not divide), at least one per tag."""
        if self.num_groups_partition is not None:
            return dict(zip(tags, self.num_groups_partition))
        base, extra = divmod(max(num_env_groups, len(tags)), len(tags))
        return {tag: base + (index < extra) for index, tag in enumerate(tags)}


def resolve_task_set(tag: str, config: EnvManagerConfig, run_mode: str, run_data: str | None) -> TaskSet:
    """The TaskSet a tag stands for; ConfigError saying how to define it when unknown."""
    from ..envs import mode_names

    if tag in config.task_sets:
        return config.task_sets[tag]
    if tag in BUILTIN_TASK_SETS:
        return BUILTIN_TASK_SETS[tag]
    if tag in mode_names():
        if tag == run_mode and run_data is None:
            raise ConfigError(_no_data(tag, config))
        if tag != run_mode:
            raise ConfigError(f"EnvManagerConfig.tags: tag {tag!r} is a mode's name, which stands for that mode with "
                              f"RunConfig.data, but RunConfig.mode is {run_mode!r} (data {run_data!r}); define the "
                              f"tag's tasks in EnvManagerConfig(task_sets={{{tag!r}: TaskSet({tag!r}, 'tasks.jsonl')}})"
                              f"{_builtin_tags(tag)}, or give RunConfig(mode={tag!r}, data=...)")
        return TaskSet(tag, run_data)
    known = sorted(set(config.task_sets) | set(BUILTIN_TASK_SETS) | set(mode_names()))
    meant = {name.lower(): name for name in known}  # FrozenLak, frozenlake: FrozenLake
    close = difflib.get_close_matches(str(tag).lower(), list(meant), n=1, cutoff=0.75)
    raise ConfigError(f"unknown tag {tag!r}{f' (did you mean {meant[close[0]]!r}?)' if close else ''}: define it in "
                      f"EnvManagerConfig.task_sets (or a [task_sets.{tag}] table of a TOML file); known: {', '.join(known)}")


def _builtin_tags(mode: str) -> str:
    """``, or a built-in tag of <mode>: …`` when the mode has any."""
    tags = [name for name, task_set in BUILTIN_TASK_SETS.items() if task_set.mode == mode]
    return f", or a built-in tag of {mode}: {', '.join(tags)}" if tags else ""


def _no_data(mode: str, config: EnvManagerConfig) -> str:
    """The error of a tag that is the run config's mode when the run config has no data: the
    fixes that start, in the API's names (the mode's named datasets, its built-in tags)."""
    from ..config import NAMED_DATASET_MODES

    unset = " (EnvManagerConfig.tags is unset: the mode is the only tag)" if config.tags is None else ""
    datasets = [name for name, of in NAMED_DATASET_MODES.items() if of == mode]
    tags = [name for name, task_set in BUILTIN_TASK_SETS.items() if task_set.mode == mode]
    fixes = ["RunConfig(data=...): a task file" + (f" (or one of the named datasets of {mode}: "
                                                    f"{', '.join(datasets)})" if datasets else "")]
    if tags:
        fixes.append(f"EnvManagerConfig(tags=[...]) (the built-in tags of {mode}: {', '.join(tags)})")
    fixes.append(f"EnvManagerConfig(task_sets={{{mode!r}: TaskSet({mode!r}, 'tasks.jsonl')}})")
    return (f"tag {mode!r} is the run config's mode, {mode}, with its data{unset}, but RunConfig.data is None: "
            f"give {', or '.join(fixes)}")


def _taskset_data(value: Any = None) -> str:
    """A TaskSet's data as the loader's messages say it: ``TaskSet.data``, ``TaskSet.data='humaneval'``."""
    return "TaskSet.data" if value is None else f"TaskSet.data={str(value)!r}"


def load_tasks_of(tag: str, task_set: TaskSet) -> list[Any]:
    """The tasks of one tag's set, validated; ConfigError/TaskFileError saying which tag."""
    from ..envs import task_validators
    from ..tasks import load_tasks

    if task_set.data is None:
        raise ConfigError(f"tag {tag!r}: its task set (mode {task_set.mode}) has no data")
    # as a TOML table's: limit=-1 (an "all" elsewhere) took every task but the last, 0 all of them
    check_count(f"tag {tag!r}: TaskSet.limit", task_set.limit, 1, optional=True)
    if isinstance(task_set.tags, str) or not all(isinstance(t, str) for t in task_set.tags):
        # tags=("8x8") is a string: its letters were the tags, and no task carried them
        raise ConfigError(f"tag {tag!r}: TaskSet.tags must be a tuple of tag names (one tag: ({task_set.tags!r},)), "
                          f"got {task_set.tags!r}")
    # the loader says the mode and the data as the tag's TaskSet sets them, not as the CLI's flags
    tasks = load_tasks(task_set.data, default_mode=task_set.mode, validators=task_validators(),
                       mode_said=f"tag {tag!r} runs mode {task_set.mode!r} (its TaskSet's mode)",
                       data_said=_taskset_data)
    if task_set.tags:
        tasks = [t for t in tasks if set(task_set.tags) <= set(t.tags)]
    if task_set.limit:
        tasks = tasks[: task_set.limit]
    if not tasks:
        raise ConfigError(f"tag {tag!r}: no task of {task_set.data} carries the tags {list(task_set.tags)}")
    return tasks


def load_task_sets(path: str | Path) -> dict[str, TaskSet]:
    """``[task_sets.NAME]`` tables (mode, data, tags, limit) of a TOML file."""
    from ..config import tomllib

    path = Path(path)
    try:
        raw = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise ConfigError(f"{path}: {exc}") from None
    sets: dict[str, TaskSet] = {}
    for name, table in (raw.get("task_sets") or {}).items():
        sets[name] = _task_set(table, f"{path}: [task_sets.{name}]")
    return sets


def _task_set(table: Mapping[str, Any], where: str) -> TaskSet:
    if not isinstance(table, Mapping):
        raise ConfigError(f"{where} must be a table")
    unknown = set(table) - {"mode", "data", "tags", "limit"}
    if unknown:
        raise ConfigError(f"{where}: unknown key(s) {', '.join(sorted(unknown))}; keys are mode, data, tags, limit")
    if not isinstance(table.get("mode"), str):
        raise ConfigError(f"{where}: 'mode' (a string) is required")
    data = table.get("data")
    if data is not None and not isinstance(data, str):
        raise ConfigError(f"{where}: 'data' must be a string")
    tags = table.get("tags", [])
    if not isinstance(tags, list) or not all(isinstance(t, str) for t in tags):
        raise ConfigError(f"{where}: 'tags' must be a list of strings")
    limit = table.get("limit")
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 1):
        raise ConfigError(f"{where}: 'limit' must be a whole number of at least 1")
    return TaskSet(table["mode"], data, tuple(tags), limit)


def check_count(name: str, value: Any, minimum: int, optional: bool = False) -> int | None:
    """``value`` as an int (numpy's integers too); ConfigError naming ``name`` unless it is a
    whole number >= ``minimum`` (or None, when ``optional``): a scheduler's counts and bounds."""
    if optional and value is None:
        return None
    if (whole := whole_number(value)) is None or whole < minimum:
        raise ConfigError(f"{name} must be a whole number >= {minimum}{' or None' if optional else ''}, "
                          f"got {value!r}")
    return whole


def check_run_config(run_config: Any) -> RunConfig:
    """What ``run()`` refuses before anything starts, refused by a scheduler too: a field of
    the wrong type, a value out of range (``num_rollouts=0``, ``task_timeout=-1``), a run_id
    that is no folder name, an output_dir without min_free_disk_mb free, an agent or a mode
    that does not import or is abstract (the mode even when no tag runs it: every worker
    imports it before its first task; the agent's settings, and a tag's mode, are checked as
    the tags are loaded: ``load_tags``). ConfigError naming the field; each would otherwise fail
    every attempt, or start no worker, and no batch would ever come. Returns the RunConfig
    with numpy's numbers as Python's (``check_fields``)."""
    from ..agents import get_agent
    from ..envs import get_env
    from ..output_checks import check_free_disk
    from ..pool.providers.common import check_name

    if not isinstance(run_config, RunConfig):
        raise ConfigError(f"run_config must be a parallel_rollout.config.RunConfig, got {type(run_config).__name__}")
    check_no_stray_fields(run_config, "RunConfig")
    run_config = check_fields(run_config, "RunConfig")
    try:
        validate_ranges(run_config)
        if run_config.run_id:  # it names the run folder: '../x' was made beside output_dir
            check_name("run_id", run_config.run_id)
        check_free_disk(run_config.output_dir, run_config.min_free_disk_mb)  # as run() does
        get_agent(run_config.agent)
        get_env(run_config.mode)
    except ConfigError as exc:
        raise said_of(run_config, exc) from None
    return run_config


def said_of(run_config: RunConfig, error: ConfigError) -> ConfigError:
    """``error`` of a check ``run()`` makes, said of the trainer's RunConfig: its CLI flags as
    the fields it set (``as_called``: ``--tool-calls`` as ``tool_calls=True``, ``--agent
    openai`` as ``agent='openai'``), after ``RunConfig: ``."""
    from ..call_spelling import as_called

    return ConfigError(f"RunConfig: {as_called(str(error), given_settings(run_config))}")


def given_settings(run_config: RunConfig) -> dict[str, Any]:
    """The settings the trainer gave its RunConfig: those its call named (``agent="oracle"``,
    the default's value: ``RunConfig.__new__`` keeps them) and those it holds other than their
    defaults (a RunConfig made in Python has no ``explicit``, which a run's flags and files fill)."""
    from ..call_spelling import SETTING_TYPES

    defaults, named = RunConfig(), getattr(run_config, "_called_with", frozenset())
    return {name: getattr(run_config, name) for name in SETTING_TYPES
            if name in named or getattr(run_config, name) != getattr(defaults, name)}


def in_the_trainers_words(text: str, config: RunConfig, loops_of_env_config: bool = False) -> str:
    """``text`` of the engine's (a warning of its start, a member's failure) with its CLI flags
    said as the trainer set them: the RunConfig's fields and the scheduler's
    max_concurrent_rollouts as keywords (``--max-retries 1`` as ``max_retries=1``), the env
    loops per worker as ``EnvManagerConfig.max_env_num_per_worker`` when that set them; how a
    batch run goes on after the endpoint refused it (a new --run-id, a resume) as a trainer does
    (``agents.retries.GOING_ON``)."""
    from ..agents.retries import GOING_ON
    from ..call_spelling import as_called

    for batch, trainers in GOING_ON.items():
        text = text.replace(batch, trainers)
    said = as_called(text, given_settings(config))
    return said.replace("envs_per_worker=", "EnvManagerConfig.max_env_num_per_worker=") if loops_of_env_config else said


def check_tags_use(run_config: RunConfig, task_sets: list[TaskSet]) -> None:
    """What ``run()`` refuses before it starts, of the modes the tags run on the run's
    provider: a setting the trainer gave that no tag's mode and agent uses (``screen_width``
    with only shell tags, ``agent_cmd`` with the openai agent, ``vm_memory_mb`` with no mode
    in a VM: ``honoured``), a ConfigError in the RunConfig's words; a guest without what its
    mode needs (``Env.check_guest``: web's Chromium for the process provider),
    ProviderUnavailable. Each was ignored, or failed every episode once the workers started."""
    from ..agents import get_agent
    from ..envs import get_env
    from ..envs.base import guest_check
    from ..honoured import check_honoured, setting_users

    agent_cls = get_agent(run_config.agent)
    users: dict[str, tuple[str, frozenset[str]]] = {}
    modes = list(dict.fromkeys(task_set.mode for task_set in task_sets))
    for mode in modes:
        env_cls = get_env(mode)
        provider = _provider_name(run_config) if env_cls.needs_vm() else None
        for name, (needed_by, used) in setting_users(env_cls, agent_cls, provider).items():
            users[name] = (needed_by, users.get(name, (needed_by, frozenset()))[1] | used)
        if provider is not None:  # web: Chromium where it is known
            guest_check(env_cls, provider)
    # a field set to None (or nothing) sets nothing: ``model=None`` for the command agent
    set_to = {name for name, value in given_settings(run_config).items() if value not in (None, "", ())}
    given = dataclasses.replace(run_config, explicit=frozenset(set_to))
    try:
        check_honoured(given, users, run=f"this scheduler's tags (mode {', '.join(modes)})")
    except ConfigError as exc:
        raise said_of(run_config, exc) from None


def _provider_name(run_config: RunConfig) -> str:
    """The name of the provider of the run's VMs; its own setting's when it names no provider
    (the engine's start says so, with the provider's other checks)."""
    from ..pool.providers import run_provider

    try:
        return run_provider(run_config).name or run_config.provider_name
    except ConfigError:
        return run_config.provider_name


def check_agent_runs(run_config: RunConfig, task_sets: list[TaskSet]) -> None:
    """What ``run()`` checks of its agent before its engine starts (``check_agent``: the model
    client's settings when it calls the model, such as the key OpenAI's endpoint needs; its
    ``model_calls``; its own ``check_config``, such as the openai agent's refusal of
    ``tool_calls=True`` in a mode without tools), for each mode and data the scheduler's tags
    run, as a run of that task set would check them; ConfigError in the RunConfig's words.
    Each would otherwise fail every episode, or be ignored, once the workers started."""
    from ..agents import get_agent
    from ..agents.model_checks import check_agent

    agent_cls = get_agent(run_config.agent)
    try:
        for mode, data in dict.fromkeys((task_set.mode, task_set.data) for task_set in task_sets):
            check_agent(dataclasses.replace(run_config, mode=mode, data=data), agent_cls)
    except ConfigError as exc:
        raise said_of(run_config, exc) from None


def whole_number(value: Any, floats: bool = False) -> int | None:
    """``value`` as an int when it is a whole number (an int, numpy's integers; with
    ``floats`` a float such as 2.0 too); None otherwise (a bool, a fraction, nan, inf, a
    string)."""
    if isinstance(value, bool):
        return None
    try:
        return operator.index(value)
    except TypeError:
        pass
    if floats and isinstance(value, numbers.Real) and math.isfinite(value) and value == int(value):
        return int(value)
    return None


def whole_ratio(ratio: Any) -> int:
    """async_generation_ratio as a whole number; ConfigError for fractions, negatives, nan
    and inf."""
    whole = whole_number(ratio, floats=True)
    if whole is None or whole < 0:
        raise ConfigError(f"async_generation_ratio={ratio!r}: only whole numbers >= 0 mean something here "
                          "(0 = synchronous, r = generation runs at most r steps ahead)")
    return whole


def load_tags(tags: list[str], env_config: EnvManagerConfig, run_config: RunConfig,
              own_engine: bool = True) -> dict[str, list[Any]]:
    """Each tag's tasks, checked by its mode's ``prepare_run`` (rag builds its index once
    here, before any worker needs it) as the batch runner does, after the settings no tag
    uses and the guests (``check_tags_use``), the agent's checks of
    every tag's mode (``check_agent_runs``) and, where one runs in a VM, that the worker's env
    loops do not share one (``check_vm_sharing``; a sibling's, ``own_engine`` False, were its
    maker's: whether that engine has VMs of its modes is ``Shared.check_sibling``'s)."""
    from ..envs import get_env

    task_sets = {tag: resolve_task_set(tag, env_config, run_config.mode, run_config.data) for tag in tags}
    if own_engine:  # a sibling's RunConfig and guests are its maker's, checked as it was made
        check_tags_use(run_config, list(task_sets.values()))
    check_agent_runs(run_config, list(task_sets.values()))
    loops = env_config.max_env_num_per_worker
    try:  # the engine's env loops per worker: EnvManagerConfig's, else the RunConfig's
        check_vm_sharing(loops or run_config.envs_per_worker, run_config.use_vm_pool,
                         own_engine and any(get_env(task_set.mode).needs_vm() for task_set in task_sets.values()),
                         "EnvManagerConfig.max_env_num_per_worker" if loops else "--envs-per-worker")
    except ConfigError as exc:
        raise said_of(run_config, exc) from None
    tasks = {}
    for tag, task_set in task_sets.items():
        tasks[tag] = load_tasks_of(tag, task_set)
        get_env(task_set.mode).prepare_run(tasks[tag])
    return tasks
