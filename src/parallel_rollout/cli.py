"""The command line: parse, validate, hand off to ``Runner`` / providers. No logic here.

``parallel-rollout run --mode shell --data tasks.jsonl …`` runs a benchmark (``run`` may be
left out, as in ``run_parallel_rollout.py --mode …``); ``parallel-rollout vms sweep``
removes VMs that killed runs left behind.
"""

from __future__ import annotations

import atexit
import os
import signal
import sys
import threading

from .errors import STOP_SIGNALS, handled_stop_signals, importing_the_parents_main


def _early_exit(signum: int, frame: object) -> None:
    """Until a command sets its own handlers: a signal while the command loads (its imports
    take ~0.1-0.4 s) ends it as one before a run's folder opens does: 130, said."""
    os.write(2, f"interrupted by signal {signum} before the run started: nothing ran\n".encode())
    os._exit(130)


# set before the imports below, which are most of the time the program takes to load; only
# in the command's own process (its console script, run_parallel_rollout.py, -m), not in a
# program that imports this module, nor in the run's Manager or workers' server importing it
_ARGV0 = sys.argv[0] if sys.argv else ""
_PROGRAM = (os.path.basename(_ARGV0) in ("parallel-rollout", "run_parallel_rollout.py")
            # python -m parallel_rollout, not another package's __main__ (python -m pytest)
            or _ARGV0.endswith(os.path.join("parallel_rollout", "__main__.py"))) and not importing_the_parents_main()
_EARLY = ({sig: signal.getsignal(sig) for sig in STOP_SIGNALS}
          if _PROGRAM and threading.current_thread() is threading.main_thread() else {})
for _sig, _was in _EARLY.items():
    if _was in (signal.SIG_DFL, signal.default_int_handler):
        signal.signal(_sig, _early_exit)


#: the exit code ``run`` decided, once it has one (``_exit_as_decided``)
_DECIDED: list[int] = []


def _end_with_the_decided_code(signum: int, frame: object) -> None:
    """A stop signal once ``run`` has its exit code: the command ends at once with that code."""
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError, AttributeError):  # lost or closed: the code is the answer
            stream.flush()
    os._exit(_DECIDED[0])


def _exit_as_decided(code: int) -> None:
    """Once ``run`` has its exit code (its summary, report and gates written and said), a stop
    signal as the process ends (its exit handlers, multiprocessing's finalizers, Python's own
    end: tens of milliseconds) ends it with that code: not the signal's default (143 for a run
    that ended 0) nor the early handler's "nothing ran". Only in the command's own process."""
    _DECIDED[:] = [code]
    for sig in _EARLY:
        if signal.getsignal(sig) is not signal.SIG_IGN:
            signal.signal(sig, _end_with_the_decided_code)


def _ignore_stops_as_python_ends() -> None:
    """The last exit handler: past it Python puts the defaults back of the signals it handles
    (before it collects its modules), and no handler of its own runs any more; an ignored
    signal it leaves so, and the process ends with the code ``run`` decided."""
    for sig in _EARLY:
        if signal.getsignal(sig) is _end_with_the_decided_code:
            signal.signal(sig, signal.SIG_IGN)


def _reap_resource_tracker(owner: int = os.getpid()) -> None:
    """Stop multiprocessing's resource tracker, the command's child, and reap it. Left to end
    on its own as the command exits, it ends an orphan: a zombie under a pid 1 that reaps
    nothing (a container's ``sh``, ``docker run`` without --init). Newer Pythons do this
    themselves (CPython gh-88887)."""
    tracker = sys.modules.get("multiprocessing.resource_tracker")
    if tracker is not None and os.getpid() == owner:  # a forked child's is its parent's
        try:
            tracker._resource_tracker._stop()  # noqa: SLF001 - the stdlib tracker's own stop
        except (ChildProcessError, OSError, AttributeError):
            pass  # not started here, or already gone


# registered before multiprocessing's own exit handler (atexit runs the last first): it runs
# after that one, whose finalizers unregister semaphores with the tracker; and the stop
# signals' last handler after every other one
if _PROGRAM:
    atexit.register(_ignore_stops_as_python_ends)
    atexit.register(_reap_resource_tracker)

import contextlib
import difflib
from typing import Any, Iterator

import click
from click.core import ParameterSource

from .cli_aliases import said_as_typed
from .cli_options import (ENV_PREFIX, RUN_IMPLIED, Gate, LazyHelpOption, RegistryOption, RunCommand, dataset_help,
                          env_var_name, help_sections, invoked_as, name_variables_after_flags, typed_sources)
from .cli_runs import compare_cmd, report_cmd, runs
from .cli_tools import end_command, image, osworld_cache, vms
from .config import RunConfig, build_config
from .errors import ConfigError, InterruptedBeforeStart, ProviderUnavailable, RunLocked, raise_interrupted
from .exit_codes import EXIT_ABORTED, EXIT_INTERRUPTED, EXIT_LOCKED, EXIT_USAGE
from .logs import console_logging, devnull_for_closed_streams, say, shown_on_stderr
from .setting_names import TYPED

_D = RunConfig()
#: --max-turns when not given: each built-in mode's ``Env.default_max_turns`` (a test checks)
MODE_TURNS = "py 1, math 1, web 20, rag 10, osworld 15"


@contextlib.contextmanager
def _shown_on_a_lost_stderr() -> Iterator[None]:
    """A usage error raised within, which click prints as ``main()`` ends, keeps its exit
    status (2) on a stderr that is lost (a reader gone, a full disk): not a traceback's 1."""
    try:
        yield
    except click.ClickException as exc:
        exc.show = shown_on_stderr(exc.show)  # type: ignore[method-assign]
        raise


def _help_asked(group: click.Group, args: list[str]) -> list[str]:
    """``args`` cut to the command's words and ``--help`` when a help flag is among them:
    after a flag that takes a value (``run --max_steps --help``) click read it as that value
    ("'--help' is not a valid integer"), where the user asked for help. Not after ``--``,
    nor for a command that reads its own help (osworld-cache), nor past a word that is no
    command of its group (click names it)."""
    end = args.index("--") if "--" in args else len(args)
    if not any(arg in group.context_settings["help_option_names"] for arg in args[:end]):
        return args
    words: list[str] = []
    command: click.Command = group
    while isinstance(command, click.Group) and len(words) < end and args[len(words)] in command.commands:
        command = command.commands[args[len(words)]]
        words.append(args[len(words)])
    stops_at_a_word = isinstance(command, click.Group) and len(words) < end and not args[len(words)].startswith("-")
    if not words or not command.add_help_option or stops_at_a_word:
        return args
    return [*words, "--help"]


class _DefaultRunGroup(click.Group):
    """A group that treats ``parallel-rollout --mode …`` as ``parallel-rollout run --mode …``."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        with _shown_on_a_lost_stderr():
            return self._parse_args(ctx, args)

    def _parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        if args and args[0] not in self.commands and args[0] not in ("--help", "-h", "--version"):
            # a first bare word close to a command's name is a typo of it (reprot), not run's; of
            # several, the group that has the next word as a command (runz list: runs, not run)
            close = [] if args[0].startswith("-") else difflib.get_close_matches(args[0], list(self.commands))
            after = args[1] if len(args) > 1 else None
            close.sort(key=lambda name: after not in getattr(self.commands[name], "commands", {}))
            if close:
                raise click.UsageError(f"no command {args[0]!r} (did you mean {close[0]!r}?)", ctx)
            if not args[0].startswith("-"):
                # run takes no word of its own: 'results' was run's "unexpected extra argument",
                # and 'results --help' showed run's help as if it were a command
                raise click.UsageError(f"no command {args[0]!r}: the commands are {', '.join(sorted(self.commands))}; "
                                       "run's flags (--mode, --data …) need no command before them", ctx)
            args = ["run", *args]
            ctx.meta[RUN_IMPLIED] = True
        return super().parse_args(ctx, _help_asked(self, args))

    def resolve_command(self, ctx: click.Context, args: list[str]) -> tuple[Any, Any, list[str]]:
        """The command ``args`` name; one other than ``run`` (which sets its own) gets the
        signals' defaults back. Not in ``invoke``: click names the command after it starts
        (``ctx.invoked_subcommand`` is None there), and run lost its early handler too."""
        name, command, rest = super().resolve_command(ctx, args)
        if name != "run":
            for sig, was in _EARLY.items():
                if signal.getsignal(sig) is _early_exit:
                    signal.signal(sig, was)
        return name, command, rest

    def invoke(self, ctx: click.Context) -> Any:
        """Every command: a ConfigError of the core (bad input) is a usage error, exit 2, on
        a lost stderr too."""
        with _shown_on_a_lost_stderr():
            try:
                return super().invoke(ctx)
            except ConfigError as exc:
                raise click.UsageError(str(exc)) from None

    def format_help(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        """The group's help, then every option of ``run``: it is the default command, so
        ``run_parallel_rollout.py --help`` must show the flags it takes."""
        super().format_help(ctx, formatter)
        run_cmd = self.commands["run"]
        with click.Context(run_cmd, info_name="run", parent=ctx) as run_ctx:
            sections = help_sections(run_ctx, run_cmd)
        for heading, records in sections:
            with formatter.section(f"{heading} (run, the default command)"):
                formatter.write_dl(records)

    def shell_complete(self, ctx: click.Context, incomplete: str) -> list[Any]:
        """Commands and the group's options, and run's options too: ``parallel-rollout
        --mo<TAB>`` is run's --mode, since run is the default command."""
        items = super().shell_complete(ctx, incomplete)
        if incomplete.startswith("-"):
            run_cmd = self.commands["run"]
            items += run_cmd.shell_complete(click.Context(run_cmd, info_name="run", parent=ctx), incomplete)
        return items


@click.group(cls=_DefaultRunGroup, context_settings={"help_option_names": ["-h", "--help"],
                                                     "auto_envvar_prefix": ENV_PREFIX})
@click.version_option(package_name="parallel-rollout")
def main() -> None:
    """Run agent rollouts in parallel: N worker processes share a pool of M reset-able VMs.

    Without a command, the options are those of `run`.
    """
    devnull_for_closed_streams()


# run's flags are PARALLEL_ROLLOUT_<FLAG> (not ..._RUN_<FLAG>): run is the default command
@main.command(cls=RunCommand, context_settings={"auto_envvar_prefix": ENV_PREFIX})
@click.option("--mode", default=_D.mode, cls=RegistryOption, registry="mode",
              show_default="the one --data implies: a named dataset's, or the one every task names; else shell",
              help_template="Task family: decides the environment and how a rollout is graded: "
                            "{names}; or module:Class of your own Env.")
@click.option("--data", type=click.Path(), cls=LazyHelpOption, help_builder=dataset_help(
              "Task file: a JSON list or JSONL (optionally .gz), Parquet (the [parquet] extra), an OSWorld folder (or its "
              "evaluation_examples/), or a named dataset: {names}."))
@click.option("--num-rollouts", "--num-workers", type=int, default=_D.num_rollouts, show_default=True,
              help="N: worker processes running rollouts (not samples per task: that is --group-size).")
@click.option("--num-vms", type=int, default=_D.num_vms, show_default=True,
              help="M: VMs in the shared pool (needs --use-vm-pool).")
@click.option("--use-vm-pool", is_flag=True,
              help="Share M pooled VMs among the N workers; without it each worker owns one VM of its own.")
@click.option("--output-dir", default=_D.output_dir, show_default=True,
              help="Folder that holds one sub-folder per run (results/<run-id>/).")
@click.option("--max-turns", type=int, default=_D.max_turns,
              show_default=f"the mode's own ({MODE_TURNS}), else {_D.max_turns}",
              help="Agent actions allowed per rollout before it is stopped and graded.")
@click.option("--max-retries", type=int, default=_D.max_retries, show_default=True,
              help="Retries of an attempt lost to infrastructure (VM died, worker died, lease timeout, model "
                   "endpoint unavailable).")
@click.option("--provider-name", "--provider", default=_D.provider_name, show_default=True, cls=RegistryOption,
              registry="provider", help_template="VM technology: {names}; or module:Class of your own Provider.")
@click.option("--snapshot-name", help="Snapshot VMs are reset to; for process: a folder copied as the home.")
@click.option("--path-to-vm", help="VM image or .vmx file, for providers that boot one.")
@click.option("--vm-address", multiple=True,
              help="Guest agent of one VM for --provider-name remote: HOST[:PORT] (port 5000 by "
                   "default) or http://HOST:PORT; repeat it or give a comma list, one per VM.")
@click.option("--vm-key-file", help="For --provider-name remote: the file holding the key its guest agents were "
                                    "started with (their --key-file); never written to the run's folder.")
@click.option("--reset-command",
              help="For --provider-name remote: shell command run on this host to reset the VM at "
                   "{address} ({host}, {port}, {vm_id}, {run_id}); 'none' never resets (no isolation).")
@click.option("--verify-reset", type=click.Choice(["off", "fast", "full"]),
              help="Check each reset before the VM is leased again (processes, /tmp, the home against "
              "the snapshot: names, sizes, mtimes; full also hashes contents); a VM that differs is "
              "quarantined. Default: fast for process and docker, off elsewhere.")
@click.option("--spare-vms", type=int,
              help="VMs booted ahead beyond the pool (at most --num-vms leased at once): a release hands "
              "out a spare at once and resets the old VM in the background. Default: 1 for qemu, 0 elsewhere.")
@click.option("--headless", is_flag=True,
              help="Run VMs without a window (vmware, virtualbox; the other providers never open one).")
@click.option("--model", default=_D.model, show_default=True, help="Model name for model-backed agents.")
@click.option("--action-space", default=_D.action_space, show_default=True,
              type=click.Choice(["computer_13", "pyautogui"]), help="Desktop action space (osworld modes).")
@click.option("--screen-width", type=int, default=_D.screen_width, show_default=True, help="Desktop width (osworld).")
@click.option("--screen-height", type=int, default=_D.screen_height, show_default=True, help="Desktop height (osworld).")
@click.option("--client-password", default=_D.client_password, show_default=True,
              help="Password of the desktop's user (osworld).")
@click.option("--observation-type", default=_D.observation_type, show_default=True,
              type=click.Choice(["screenshot", "a11y_tree", "screenshot_a11y_tree"]),
              help="What an osworld observation holds.")
@click.option("--sleep-after-execution", type=float, default=_D.sleep_after_execution, show_default=True,
              help="Seconds to wait after each osworld action.")
@click.option("--domain", default=_D.domain, show_default=True,
              help="Domain of an OSWorld folder given as --data (examples/<domain>/), or all.")
@click.option("--osworld-index", default=_D.osworld_index, show_default=True,
              help="Index file of an OSWorld folder given as --data: test_all.json, test_small.json, "
                   "test_nogdrive.json …")
@click.option("--skip-unsupported", is_flag=True,
              help="Run the tasks this version and the agent support (the oracle: those with a reference) and "
                   "give each other task an 'unsupported' record (scored 0); without it, a --data with "
                   "unsupported tasks is refused.")
@click.option("--dry-run", is_flag=True,
              help="A preflight that starts nothing: load and check every task of --data (printing per "
                   "domain the tasks, the runnable ones and the unsupported features), the agent's settings "
                   "(the key), the provider's prerequisites (bwrap; docker's daemon and image; QEMU and its "
                   "image; each remote machine's agent: the key, for osworld its screen), free disk, the run's "
                   "own preparation and its folder (a resume's settings); exit 2 naming each thing missing.")
@click.option("--print-config", is_flag=True,
              help="Print the resolved settings as JSON (defaults, then --config, then PARALLEL_ROLLOUT_* "
                   "variables, then flags; with --resume, the run's stored ones) and exit; nothing runs.")
@click.option("--check-endpoint", is_flag=True,
              help="With --dry-run: also ask the model endpoint for its models (GET /models), then the route the "
                   "run's requests take (/chat/completions, or /completions with tokenizer=) with a POST without "
                   "messages, which a server with the route refuses unsampled; 5 s timeout each. A key it refuses, "
                   "a --model it does not list or a route it lacks is a problem (of one server of several, a "
                   "warning: the run goes on at the others).")
@click.option("--record", is_flag=True, help="Keep a recording.mp4 of each osworld attempt.")
@click.option("--rag-metric", type=click.Choice(["f1", "em"]), default=_D.rag_metric, show_default=True,
              help="The rag mode's reward: token F1 or exact match of the answer (both are recorded).")
@click.option("--agent", default=_D.agent, show_default=True, cls=RegistryOption, registry="agent",
              help_template="Who acts: {names}; or module:Class of your own Agent.")
@click.option("--agent-cmd", help="Command of --agent command: an executable reading one JSON observation "
              "per line on stdin and writing one JSON action per line on stdout. Split into words as a shell "
              "would, but not run by one: a pipe, &&, ;, a redirection (2>/dev/null), $(…), cd or a leading "
              "VAR=value is refused, and $VARIABLES and globs stay as written; for those, "
              "--agent-cmd \"sh -c '…'\" or a script of yours.")
@click.option("--base-url", multiple=True,
              help="OpenAI-compatible endpoint for --agent openai (vLLM, SGLang, Ollama …); "
              "default: OPENAI_BASE_URL, else OpenAI's. The key comes from OPENAI_API_KEY (not needed "
              "for a local server). Repeat it for several servers: each trajectory stays on one "
              "(session header), new ones go to the least loaded, a failing one cools down.")
@click.option("--session-header", default=_D.session_header, show_default=True,
              help="The header carrying each attempt's session id in every model request (--agent openai).")
@click.option("--server-cooldown", type=float, default=_D.server_cooldown,
              show_default=True, help="Seconds a failing server (of several --base-url), or one refusing "
              "the run's key or model, is left out; then it is asked again.")
@click.option("--tool-calls", is_flag=True,
              help="--agent openai offers the mode's actions as OpenAI tools and reads the reply's tool_calls.")
@click.option("--temperature", type=float, help="Sampling temperature for --agent openai (default: the server's).")
@click.option("--max-tokens", type=int, help="Completion token limit per reply for --agent openai (sent as "
              "max_completion_tokens where the endpoint wants that).")
@click.option("--sampling", multiple=True, metavar="KEY=VALUE",
              help="A generation parameter of --agent openai added to each request (top_p=0.9, seed=3, "
              'stop=\'["END"]\' …); VALUE is JSON when it parses, else a string. Repeat it.')
@click.option("--vm-memory-mb", type=int,
              help="Memory limit per VM, in MB: its memory cgroup (process provider; without one, "
              "an address-space limit per process), --memory (docker), the guest's RAM (qemu). "
              "Default: min(2048 (4096 with a desktop), 80% of the host's memory / the pool's VMs: "
              "--num-vms with --use-vm-pool, else --num-rollouts, plus --spare-vms), at least 256, "
              "where a cgroup or container bounds the VM (py mode: the same, applied everywhere).")
@click.option("--vm-max-processes", type=int,
              help="Process limit per VM (py mode: 256 unless set, where the machine allows).")
@click.option("--task-timeout", type=float, default=_D.task_timeout, show_default=True,
              help="Seconds one attempt may take; past it the worker is killed and the attempt graded task_timeout.")
@click.option("--boot-timeout-s", type=float, default=_D.boot_timeout_s, show_default=True,
              help="Seconds a VM's boot or reset may take (a remote --reset-command, a vmware revert and "
                   "start, a qemu boot) before it is counted failed.")
@click.option("--envs-per-worker", type=int, default=_D.envs_per_worker, show_default=True,
              help="K: env loops (threads) in each worker process.")
@click.option("--max-concurrent-rollouts", type=int,
              help="C: rollouts in flight at once across all workers (default N × K).")
@click.option("--group-size", type=int, default=_D.group_size, show_default=True,
              help="Samples per task, sharing its seed (GRPO groups; pass@k in the summary).")
@click.option("--run-id", help="Name of the run's folder (default: mode and time).")
@click.option("--resume", is_flag=True,
              help="Continue the run --run-id: samples with a final record are never run again.")
@click.option("--limit", type=int, help="Run only the first N tasks of --data.")
@click.option("--config", "config_file", type=click.Path(dir_okay=False), envvar=f"{ENV_PREFIX}_CONFIG",
              help="TOML file whose keys are these flags' names; flags given here win.")
@click.option("--fail-under", type=Gate(click.FLOAT, "fraction|N%|none"),
              help="Exit 3 when the finished run's success rate is below this fraction (0.8) or "
              "percentage (80%). "
              "A resume keeps the run's gates; 'none' turns this one off.")
@click.option("--compare-to", type=Gate(click.STRING, "run-id|none"),
              help="Exit 4 when the run is significantly worse than this earlier run of "
              "--output-dir (McNemar exact, p < 0.05; with --group-size > 1 the Wilcoxon signed-rank test "
              "over tasks); 5 when it cannot judge (no such run: a warning at the start, and the run goes on). "
              "A resume keeps the run's gates; 'none' turns this one off (a deleted baseline).")
@click.option("--junit-xml", type=click.Path(dir_okay=False),
              help="Write JUnit XML to this file ('-', stdout, is refused): one test case per sample, for "
              "CI (a run that stopped early adds an error case for the samples without a result). A path whose "
              "folder it cannot write in is refused at the start, exit 2, nothing run; one that fails when "
              "written at the end makes the run exit 1.")
@click.option("--backend", type=click.Choice(["local", "ray"]), default=_D.backend, show_default=True,
              help="local: worker processes on this host; ray: workers and one VM pool per node as Ray "
              "actors (--num-rollouts and --num-vms count per node; needs parallel-rollout[ray]).")
@click.option("--ray-address", help="--backend ray: 'auto' or HOST:PORT of a running cluster (default: a "
              "local Ray instance started and stopped by the run).")
@click.option("--progress/--no-progress", default=None, help="Progress bar (default: when stderr is a terminal).")
@click.option("-v", "--verbose", count=True,
              help="More log: -v DEBUG of parallel-rollout and INFO of other libraries (console and "
                   "run.log), -vv DEBUG of everything.")
@click.option("-q", "--quiet", count=True,
              help="Less on the console: -q warnings and errors only, -qq errors only (run.log keeps INFO).")
@click.pass_context
def run(ctx: click.Context, config_file: str | None, dry_run: bool, print_config: bool, check_endpoint: bool,
        verbose: int, quiet: int, **flags: Any) -> None:
    """Run every task of --data as rollouts and write results/<run-id>/.

    \b
    Exit codes: 0 finished, 1 aborted (pool exhausted, manager died; --resume continues),
    2 bad usage or a missing prerequisite (nothing ran), or a model endpoint that refused the
    key or does not know the model (fix it, then --resume), 3 below --fail-under,
    4 significant regression against --compare-to, 5 --compare-to cannot judge (no shared
    samples, an unfinished or unreadable baseline, no such run: the run goes on without one),
    75 another run holds the folder's lock (retry later), 130 interrupted.
    """
    # an interrupt from here on ends as one during the run does (130, said), not as
    # click's 'Aborted!' (1: resume) or a SIGTERM's bare 143; the run sets its own later
    previous = {sig: signal.signal(sig, raise_interrupted) for sig in handled_stop_signals()}
    decided: int | None = None  # the command's exit code, once it has one
    try:
        _run(ctx, config_file, dry_run, print_config, check_endpoint, verbose, quiet, flags)
        decided = 0
    except InterruptedBeforeStart as exc:
        say(str(exc), err=True)
        decided = EXIT_INTERRUPTED
        sys.exit(EXIT_INTERRUPTED)
    except SystemExit as exc:
        decided = exc.code if isinstance(exc.code, int) else 0 if exc.code is None else 1  # as Python exits
        raise
    except click.ClickException as exc:
        decided = exc.exit_code
        raise
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        if decided is not None:
            _exit_as_decided(decided)


def _run(ctx: click.Context, config_file: str | None, dry_run: bool, print_config: bool, check_endpoint: bool,
         verbose: int, quiet: int, flags: dict[str, Any]) -> None:
    from .run_end import format_summary
    from .runner import Runner

    explicit = {
        name: value for name, value in flags.items()
        if ctx.get_parameter_source(name) in (ParameterSource.COMMANDLINE, ParameterSource.ENVIRONMENT)
    }
    console_logging(verbose - quiet)
    runner = None
    typed = ctx.meta.get(TYPED, {})
    try:
        from_env = {name: f"from the environment variable {env_var_name(ctx, param)}"
                    for param in ctx.command.params if (name := param.name) in explicit
                    and ctx.get_parameter_source(name) is ParameterSource.ENVIRONMENT}
        config = build_config(explicit, config_file, {**from_env, **typed_sources(ctx, explicit)})
        if check_endpoint and not dry_run:
            raise ConfigError("--check-endpoint is part of the preflight: add --dry-run")
        if not dry_run:  # the mode --data implies, its max_turns: what the run records and uses
            from .envs import with_mode_defaults

            config = with_mode_defaults(config)
        if print_config:
            import json


            say(json.dumps(config.to_json(), indent=2))
            return
        if dry_run:
            from .preflight import preflight

            found = preflight(config, check_endpoint=check_endpoint)
            if found.ok:  # the census stays the last lines, as scripts read it
                say("preflight passed: " + "; ".join(found.passed), err=True)
            if found.census:  # a task file that does not load has none: no line, not an empty one
                say("\n".join(found.census))
            if not found.ok:
                say(said_as_typed(found.problem_report(), typed), err=True)
                sys.exit(EXIT_USAGE)
            return
        from .pool.providers import orphans

        runner = Runner(config)
        runner.program = invoked_as()
        with orphans.the_commands_process():  # it adopts what a SIGKILLed Manager leaves (start_pool)
            outcome = runner.run()
    except ProviderUnavailable as exc:
        # a missing bwrap, daemon or image found before the run folder opened: nothing ran,
        # as a --dry-run would have said (2); later, a run left to --resume (1)
        say(f"Error: {exc}", err=True)
        sys.exit(EXIT_ABORTED if runner is not None and runner.started else EXIT_USAGE)
    except RunLocked as exc:
        # not a usage error: the same command succeeds once the other run is done
        say(f"Error: {exc}", err=True)
        sys.exit(EXIT_LOCKED)
    except ConfigError as exc:  # the core says --data: an OSWorld script typed --test_config_base_dir
        raise ConfigError(said_as_typed(str(exc), typed)) from None
    say(format_summary(outcome.summary, outcome.run_dir))
    if typed.get("--output-dir") == "--result_dir" and config.mode == "osworld":
        # OSWorld's user reads the result folder with show_result.py: how its layout is had
        from .provenance import program
        from .report.osworld_export import layout_hint

        if hint := layout_hint(outcome.run_dir, config.output_dir, program()):
            say(hint)
    if outcome.message:
        say(outcome.message, err=True)
    end_command(outcome.exit_code)


# the commands that build images and clean VMs (cli_tools.py), and those that read runs
# already written (cli_runs.py)
for _command in (image, vms, osworld_cache, report_cmd, compare_cmd, runs):
    main.add_command(_command)
# PARALLEL_ROLLOUT_<COMMAND>_<FLAG> for every flag of them, named after the flag
name_variables_after_flags(main)


if __name__ == "__main__":
    main()
