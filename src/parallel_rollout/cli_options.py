"""What makes the command line explain itself: help and completion built from the registries,
flags from ``PARALLEL_ROLLOUT_<FLAG>`` environment variables, and OSWorld's spellings.

* ``RegistryOption`` (``--mode``, ``--agent``, ``--provider-name``) lists in its help every
  name the registry knows when the help is shown, built-ins and installed plugins alike, so
  the help cannot go stale as modes are added; the same names complete the flag's value.
  The registries are imported only then: a run pays nothing for it.
* ``RunCommand`` is ``run``: its flags come from the environment too
  (``PARALLEL_ROLLOUT_NUM_VMS=4``; the context's ``auto_envvar_prefix``), a bad value in a
  variable is reported with the variable's name, and OSWorld's ``run.py`` spellings
  (``--path_to_vm`` …) are read as this CLI's flags (``cli_aliases``) before parsing, and
  errors name them as typed (``typed_sources``: click's own, and the run's settings'). Its
  help shows the flags in sections (``HELP_SECTIONS``: what to run, the agent, workers and
  VMs, the desktop, the run folder and gates …), not one list of sixty.
"""

from __future__ import annotations

import dataclasses
import difflib
import logging
import os
from typing import Any, Callable

import click
from click.core import ParameterSource
from click.shell_completion import CompletionItem

from .cli_aliases import ONE_TASK_FLAGS, OSWORLD_ALIASES, OSWORLD_REFUSED, translate_osworld_flags
from .config import NAMED_DATASETS, RunConfig
from .config_checks import check_not_stdout, gate_setting
from .errors import ConfigError
from .logs import NOT_ON_CONSOLE, PROJECT_LOGGER, say
from .run_log import forget_the_kept, keep_until_the_run_log
from .provenance import program
from .setting_names import GATE_SYNONYMS, TYPED

#: the prefix of every flag's environment variable: PARALLEL_ROLLOUT_<FLAG> for run's flags
ENV_PREFIX = "PARALLEL_ROLLOUT"
#: ``ctx.meta`` key the group sets when ``run`` is implied (``parallel-rollout --mode …``): a
#: flag run lacks may then be a misspelt flag of the program's own (``--verison``)
RUN_IMPLIED = "parallel_rollout.run_implied"

#: PARALLEL_ROLLOUT_<NAME> variables that are no flag of run: the settings providers, modes
#: and the guest read (README), and what ./dev and the pool pass their own processes
SETTINGS_VARIABLES = frozenset({
    "ATSPI", "ATSPI_TIMEOUT", "CACHE", "DEVTOOLS_PORTS", "DOCKERD_DIR", "DOCKERD_RUN_DIR", "DOCKERD_WAIT_S", "DOCKER_DIR",
    "FORKSERVER", "FORKSERVER_MAIN", "FORKSERVER_PLUGINS", "GRADED_HOME", "GRADING_SINCE", "GUEST_KEY", "NODE_DIR", "OSWORLD_CACHE", "OSWORLD_CDP_PORTS", "OSWORLD_SETTINGS",
    "PROCESS_DIR", "PROCESS_STANDBY", "PROG", "PYTEST_JUDGED", "QEMU_ACCEL", "QEMU_DIR", "SANDBOX_UID", "VM",
    "VM_HOST", "VM_ID", "VM_PORT", "WORDNET",
})

#: one line on each built-in name; a plugin's line names its module:Class instead
BUILTIN_NOTES = {
    "mode": {
        "shell": "commands graded by a check command",
        "py": "HumanEval-style code run against tests in a VM",
        "math": "answers graded with math-verify; needs the [math] extra",
        "osworld": "OSWorld desktop tasks in a desktop VM, scored by OSWorld's evaluators",
        "web": "MiniWoB++ pages in a browser inside the VM; needs the [web] extra",
        "rag": "questions answered with a search tool over a local corpus; needs the [rag] extra",
        "gym": "gymnasium text envs such as FrozenLake, no VM; needs the [rl] extra",
    },
    "agent": {
        "oracle": "replays each task's reference",
        "openai": "a model behind an OpenAI-compatible API",
        "command": "your executable (--agent-cmd), JSON lines on stdin/stdout",
    },
    "provider": {
        "process": "bubblewrap sandbox, the default",
        "docker": "containers; needs dockerd and `image build`",
        "qemu": "full VMs, KVM when usable; needs `image build`",
        "remote": "guest agents already running at --vm-address",
        "vmware": "vmrun with --path-to-vm and --snapshot-name",
        "virtualbox": "VBoxManage with --path-to-vm and --snapshot-name",
    },
}


class Gate(click.ParamType):
    """A gate's value (``inner``: a fraction, a run id), or None for ``none`` (or empty): the
    gate off, also the one a resumed run inherits from its config.json."""

    def __init__(self, inner: click.ParamType, name: str) -> None:
        self.inner, self.name = inner, name

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if param is not None:
            try:
                value = gate_setting(param.name or "", value, said="")
            except ConfigError as exc:  # click names the flag, or the variable that held it
                self.fail(str(exc), param, ctx)
            if value is None:
                return None
        return self.inner.convert(value, param, ctx)


#: run's help, in sections: each flag (its parameter name) under one heading, both in this order
HELP_SECTIONS: dict[str, tuple[str, ...]] = {
    "What to run": ("mode", "data", "limit", "group_size", "max_turns", "task_timeout", "skip_unsupported",
                    "rag_metric", "config_file", "print_config", "dry_run", "check_endpoint"),
    "Agent and model": ("agent", "agent_cmd", "model", "base_url", "temperature", "max_tokens", "sampling",
                        "tool_calls", "session_header", "server_cooldown"),
    "Workers and VMs": ("num_rollouts", "envs_per_worker", "max_concurrent_rollouts", "num_vms", "use_vm_pool",
                        "provider_name", "snapshot_name", "path_to_vm", "vm_address", "vm_key_file", "reset_command",
                        "verify_reset", "spare_vms", "headless", "vm_memory_mb", "vm_max_processes",
                        "boot_timeout_s", "max_retries"),
    "Desktop (osworld)": ("observation_type", "action_space", "screen_width", "screen_height", "client_password",
                          "sleep_after_execution", "domain", "osworld_index", "record"),
    "Run folder, resume and gates": ("output_dir", "run_id", "resume", "fail_under", "compare_to", "junit_xml"),
    "Cluster": ("backend", "ray_address"),
    "Console": ("progress", "verbose", "quiet", "help"),
}


def help_sections(ctx: click.Context, command: click.Command) -> list[tuple[str, list[tuple[str, str]]]]:
    """(heading, help records) of ``command``'s parameters by ``HELP_SECTIONS``; a parameter
    no section names goes under "Other options"."""
    place = {name: (heading, index) for heading, names in HELP_SECTIONS.items() for index, name in enumerate(names)}
    grouped: dict[str, list[tuple[int, tuple[str, str]]]] = {h: [] for h in [*HELP_SECTIONS, "Other options"]}
    help_option = command.get_help_option(ctx)
    for order, param in enumerate(command.get_params(ctx)):
        record = param.get_help_record(ctx)
        if record is not None:
            name = "help" if param is help_option else param.name or ""  # click names it privately
            heading, index = place.get(name, ("Other options", len(place) + order))
            grouped[heading].append((index, record))
    return [(heading, [record for _, record in sorted(items, key=lambda item: item[0])])
            for heading, items in grouped.items() if items]


def _registry(kind: str) -> Any:
    """The registry of ``kind``, imported on demand (help and completion only)."""
    if kind == "mode":
        from .envs.registry import MODES

        return MODES
    if kind == "agent":
        from .agents.base import AGENTS

        return AGENTS
    from .pool.providers import PROVIDERS

    return PROVIDERS


def describe_names(kind: str) -> str:
    """``name (what it is), …`` for every name the registry of ``kind`` knows."""
    registry = _registry(kind)
    notes = BUILTIN_NOTES.get(kind, {})
    parts = []
    for name in registry.names():
        if name in registry.builtin:
            note = notes.get(name)
            parts.append(f"{name} ({note})" if note else name)
        else:
            parts.append(f"{name} (plugin: {registry.target(name)})")
    return ", ".join(parts)


class RegistryOption(click.Option):
    """An option whose value is a registry name: help lists the names, completion offers them."""

    def __init__(self, *args: Any, registry: str, help_template: str = "{names}", **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.registry = registry
        self.help_template = help_template

    def get_help_record(self, ctx: click.Context) -> tuple[str, str] | None:
        """The help with the registry's names as they are now."""
        self.help = self.help_template.format(names=describe_names(self.registry))
        return super().get_help_record(ctx)

    def shell_complete(self, ctx: click.Context, incomplete: str) -> list[CompletionItem]:
        """The registry's names that start with what is typed."""
        return [CompletionItem(name) for name in _registry(self.registry).names()
                if name.startswith(incomplete)]


def dataset_help(template: str) -> Callable[[], str]:
    """--data's help with the named datasets of ``config.NAMED_DATASETS``."""
    def build() -> str:
        return template.format(names=", ".join(sorted(NAMED_DATASETS)))
    return build


class LazyHelpOption(click.Option):
    """An option whose help text is built when shown (``help_builder``)."""

    def __init__(self, *args: Any, help_builder: Callable[[], str], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.help_builder = help_builder

    def get_help_record(self, ctx: click.Context) -> tuple[str, str] | None:
        """The help as built now."""
        self.help = self.help_builder()
        return super().get_help_record(ctx)


def refuse_stdout(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    """The callback of an option naming a file the command writes: ``-`` is refused, exit 2
    (``check_not_stdout``), instead of written as a file named '-'; named as typed (``-o``)
    where the command notes it (``TypedFlagsCommand``)."""
    typed = ctx.meta.get(TYPED, {})
    check_not_stdout(next((typed[opt] for opt in param.opts if opt in typed), param.opts[0]), value)
    return value


def invoked_as(argv0: str | None = None) -> str:
    """The command that reaches ``run`` as the user typed it, for the hints it prints (the
    resume command): :func:`provenance.program`'s, then ``run``."""
    return f"{program(argv0)} run"


def unknown_variables(ctx: click.Context, command: click.Command) -> list[str]:
    """A line for each ``PARALLEL_ROLLOUT_*`` variable of the environment that nothing reads
    (a flag's name misspelt would otherwise leave its default in silence), with the name
    it is closest to."""
    prefix = f"{ENV_PREFIX}_"
    known = read_variables(ctx, command) | {prefix + name for name in SETTINGS_VARIABLES}
    group = ctx.parent.command if ctx.parent is not None else None
    others = tuple(f"{prefix}{name.upper()}_" for name in getattr(group, "commands", {}) if name != ctx.info_name)
    # a flag's other name (--num-workers): its variable's nearest was another flag's (NUM_VMS)
    lines = unread_alias_variables(ctx, command)
    said = {line.split(" ", 1)[0] for line in lines}
    keys = {field.name for field in dataclasses.fields(RunConfig)} - {"explicit", "sources"}
    for name in sorted(os.environ):
        if name.startswith(prefix) and name not in known | said and not name.startswith(others):
            key = name[len(prefix):].lower()
            if key in keys:  # a config-file key with no flag (min-free-disk-mb): its nearest was another variable
                lines.append(f"{name} is set but is not read: {key.replace('_', '-')} has no flag, so no variable; "
                             f"set it in the --config file ({key.replace('_', '-')} = …); ignored")
                continue
            gate = GATE_SYNONYMS.get(key)
            close = [prefix + gate.upper()] if gate else difflib.get_close_matches(name, known, n=1, cutoff=0.75)
            lines.append(f"{name} is set but is no flag of run nor a setting parallel-rollout reads: "
                         "ignored" + (f" (did you mean {close[0]}?)" if close else ""))
    return sorted(lines)


def read_variables(ctx: click.Context, command: click.Command) -> set[str]:
    """Every environment variable an option of ``command`` reads."""
    names = set()
    for param in command.get_params(ctx):
        if isinstance(param, click.Option):
            names |= {param.envvar} if isinstance(param.envvar, str) else set(param.envvar or ())
            names.add(env_var_name(ctx, param))
    return names


def unread_alias_variables(ctx: click.Context, command: click.Command) -> list[str]:
    """A line for each variable named after a flag's other name (``vms sweep --provider``'s,
    which takes the command's prefix as every flag's does) that is set and that no option
    reads, with the variable its flag reads."""
    prefix = f"{ctx.auto_envvar_prefix or ENV_PREFIX}_"
    known = read_variables(ctx, command)
    lines = []
    for alias, own in flag_aliases(command).items():
        name = prefix + alias[2:].upper().replace("-", "_")
        if name in os.environ and name not in known:
            lines.append(f"{name} is set but is not read: {alias} is another name of {own}, whose variable is "
                         f"{prefix}{own[2:].upper().replace('-', '_')}; ignored")
    return lines


def name_variables_after_flags(group: click.Group, prefix: str = ENV_PREFIX) -> None:
    """Every option of the commands other than ``run`` reads PARALLEL_ROLLOUT_<COMMAND>_<FLAG>,
    named after its flag (README), first: click names the variable after the option's Python
    name, which differs where the value has another (``runs list --json``: ``as_json``;
    ``compare --html``: ``html_path``; ``image build --provider``: ``provider_name``). That
    name is still read after it."""
    for name, command in group.commands.items():
        words = f"{prefix}_{name.upper().replace('-', '_')}"
        if isinstance(command, click.Group):
            name_variables_after_flags(command, words)
            continue
        if command.context_settings.get("auto_envvar_prefix"):
            continue  # run: PARALLEL_ROLLOUT_<FLAG>, its own prefix
        for param in command.params:
            flag = next((o for o in param.opts if o.startswith("--")), None)
            if not isinstance(param, click.Option) or param.envvar or flag is None or not param.name:
                continue
            own, by_name = f"{words}_{flag[2:].upper().replace('-', '_')}", f"{words}_{param.name.upper()}"
            if own != by_name:
                param.envvar = [own, by_name]


def flag_aliases(command: click.Command) -> dict[str, str]:
    """Each other name of a setting's flag -> the flag its errors name by default (the
    setting's: ``--num-workers`` -> ``--num-rollouts``, ``--provider`` -> ``--provider-name``)."""
    aliases = {}
    for param in command.params:
        own = "--" + (param.name or "").replace("_", "-")
        if isinstance(param, click.Option) and own in param.opts:
            aliases.update({opt: own for opt in param.opts if opt.startswith("--") and opt != own})
    return aliases


def typed_sources(ctx: click.Context, explicit: dict[str, Any]) -> dict[str, str]:
    """The settings of ``explicit`` typed on the command line in another spelling (OSWorld's,
    or a flag's other name: ``--num-workers``), as ``RunConfig.sources`` holds them
    (``config_checks.TYPED``): how their errors name them."""
    typed = ctx.meta.get(TYPED, {})
    return {param.name: TYPED + typed[flag] for param in ctx.command.params
            if param.name in explicit and ctx.get_parameter_source(param.name) is ParameterSource.COMMANDLINE
            for flag in param.opts if flag in typed}


def env_var_name(ctx: click.Context, param: click.Parameter) -> str:
    """The environment variable a parameter is read from: of several, the first set, the one
    click reads (``image build --provider``: ..._PROVIDER, then ..._PROVIDER_NAME)."""
    if isinstance(param.envvar, str):
        return param.envvar
    if param.envvar:
        return next((name for name in param.envvar if os.environ.get(name)), param.envvar[0])
    return f"{ctx.auto_envvar_prefix}_{(param.name or '').upper()}"


class TypedFlagsCommand(click.Command):
    """A command other than ``run`` whose errors name a flag as the user gave it (``given_as``)."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        """Note each flag typed in another spelling (``--provider``), then parse."""
        aliases = flag_aliases(self)
        typed = {}
        for arg in args:
            if arg == "--":
                break
            flag = arg.partition("=")[0]
            typed[aliases.get(flag, flag)] = flag
        ctx.meta[TYPED] = typed
        rest = super().parse_args(ctx, args)
        for line in unread_alias_variables(ctx, self):
            say(f"Warning: {line}", err=True)
        return rest


def given_as(ctx: click.Context, name: str) -> str | None:
    """How the user gave parameter ``name`` of a ``TypedFlagsCommand``: its flag as typed
    (``--provider``), or the environment variable that held it; None for its default."""
    param = next(param for param in ctx.command.params if param.name == name)
    source = ctx.get_parameter_source(name)
    if source is ParameterSource.ENVIRONMENT:
        return f"the environment variable {env_var_name(ctx, param)}"
    if source is ParameterSource.COMMANDLINE:
        typed = ctx.meta.get(TYPED, {})
        return next((typed[opt] for opt in param.opts if opt in typed), param.opts[0])
    return None


class RunCommand(click.Command):
    """``run``: OSWorld's spellings translated, a bad environment variable named."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        """Translate OSWorld's flags, then parse; an invalid value read from the environment
        says which variable held it, one typed in another spelling (OSWorld's, an alias) the
        flag as typed."""
        keep_until_the_run_log()
        ctx.call_on_close(forget_the_kept)  # at the command's end, a run.log opened or not
        args, typed = translate_osworld_flags(args, flag_aliases(self))
        ctx.meta[TYPED] = typed
        try:
            rest = super().parse_args(ctx, args)
        except click.BadOptionUsage as exc:  # "Option '--screen-width' requires an argument."
            if exc.option_name in typed:
                exc.message = exc.message.replace(repr(exc.option_name), repr(typed[exc.option_name]))
            raise
        except click.NoSuchOption as exc:
            gate = GATE_SYNONYMS.get(exc.option_name.lstrip("-").replace("-", "_"))
            osworld_flags = [*OSWORLD_ALIASES, *OSWORLD_REFUSED, *ONE_TASK_FLAGS]
            # OSWorld's flag with - for its _ (--test-all-meta-path): click found none, or another
            underscored = "--" + exc.option_name[2:].replace("-", "_")
            if gate is not None:  # another tool's name of a gate: click's nearest was another flag
                exc.possibilities = ["--" + gate.replace("_", "-")]
            elif underscored in osworld_flags:
                exc.possibilities = [underscored]
            elif "_" in exc.option_name:  # OSWorld's spelling (--max_step): click's nearest was --max-tokens
                osworld = difflib.get_close_matches(exc.option_name, osworld_flags, n=1)
                exc.possibilities = osworld or exc.possibilities
            elif ctx.meta.get(RUN_IMPLIED) and ctx.parent is not None:  # --verison: click said --verbose
                own = [opt for param in ctx.parent.command.get_params(ctx.parent) for opt in param.opts]
                nearest = difflib.get_close_matches(exc.option_name, [*own, *(exc.possibilities or ())], n=1)
                exc.possibilities = nearest if nearest and nearest[0] in own else exc.possibilities
            raise
        except click.BadParameter as exc:
            param = exc.param
            if param is not None and param.name and \
                    ctx.get_parameter_source(param.name) is ParameterSource.ENVIRONMENT:
                exc.message = f"{exc.message} (from the environment variable {env_var_name(ctx, param)})"
            elif param is not None and typed.keys() & set(param.opts):
                exc.param_hint = repr(typed[next(o for o in param.opts if o in typed)])
            raise
        # -qq (errors only on the console, set_verbosity) is parsed now, its console not set yet
        errors_only = ctx.params.get("verbose", 0) - ctx.params.get("quiet", 0) < -1
        for line in unknown_variables(ctx, self):
            if not errors_only:
                say(f"Warning: {line}", err=True)
            logging.getLogger(PROJECT_LOGGER).warning("%s", line, extra=NOT_ON_CONSOLE)  # for run.log
        return rest

    def format_options(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        """The flags in sections (``HELP_SECTIONS``)."""
        for heading, records in help_sections(ctx, self):
            with formatter.section(heading):
                formatter.write_dl(records)

    def format_help(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        """Click's help, then where flags may come from besides the command line."""
        super().format_help(ctx, formatter)
        with formatter.section("Environment"):
            formatter.write_text(
                f"Every flag can be set as {ENV_PREFIX}_<FLAG> (its first name, upper case, '-' as '_'; "
                f"{ENV_PREFIX}_NUM_ROLLOUTS for --num-rollouts, --num-workers): "
                f"{ENV_PREFIX}_NUM_VMS=4, {ENV_PREFIX}_USE_VM_POOL=1, {ENV_PREFIX}_VM_ADDRESS='h1 h2' "
                "(a list: space-separated). The command line wins over the environment, the "
                "environment over --config. OSWorld's run.py spellings (--path_to_vm, "
                "--observation_type, --max_steps, --test_all_meta_path …) are accepted too.")
