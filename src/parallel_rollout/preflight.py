"""``--dry-run``: everything a run needs, checked without starting anything.

::

    preflight(config, check_endpoint)
      ├─ tasks      every task of --data loaded and checked; the census (per domain: tasks,
      │             runnable ones, unsupported features) is printed in any case
      ├─ mode       what the mode needs of the installation (Env.prepare_run with no tasks:
      │             math-verify for math), whatever the tasks' check found
      ├─ agent      its settings (check_config) and, when it calls the model, the model
      │             client's (model_checks: the key where the endpoint needs one);
      │             with --check-endpoint (an agent's own check_endpoint, else its model
      │             client's endpoints), GET {base_url}/models with a short timeout, then a
      │             POST without messages to the route the run's requests take (a 404/405:
      │             no such route there)
      ├─ provider   its prerequisites (check_available: bwrap; the docker CLI and a daemon
      │             that answers; QEMU's binaries), for modes that run in a VM
      ├─ machines   the remote provider's: each agent answers GET /platform with the key,
      │             and has what its first boot checks (the desktop's size, /run_python
      │             for --verify-reset), as it runs now; vmware's and virtualbox's: each
      │             VM has the --snapshot-name (and VirtualBox knows the VM)
      ├─ guest      what the mode needs in the guest, where it is known before a boot
      │             (Env.check_guest: web's Chromium on this host for the process provider)
      ├─ cluster    --backend ray with --ray-address: the head node takes a TCP connection
      │             (``auto`` resolved as Ray resolves it); nothing joins the cluster
      ├─ disk       free space in --output-dir (``min_free_disk_mb``)
      └─ the rest   only when all of the above passed: the run's own preparation
                    (Runner.prepare: flags nobody honours, unsupported tasks, the image a
                    provider boots, each task against the agent), then the run folder as
                    opening it would check it (Runner.check_folder: results there need
                    --resume, a resume its run's settings, task data and a --limit as high);
                    for a resume whose only problems are the VMs' (provider, machines, guest)
                    too: when every sample is final it needs no VM, and they are warnings

Each check runs whatever the others found, so one dry run names every missing thing, not
just the first. ``Preflight.problems`` lists them; the CLI prints the census, then the
problems, and exits 2 (the config-error code) when there is any.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

from .agents import get_agent
from .agents.base import refused_by_agent
from .agents.model_checks import calls_model, check_agent, may_call_model, probe_endpoint
from .config import RunConfig, data_required
from .envs import get_env, run_task_set, with_mode_defaults
from .envs.base import guest_check
from .errors import ConfigError, ProviderUnavailable
from .output_checks import check_free_disk
from .plugins import plugin_call
from .pool.providers import get_provider, run_provider
from .setting_names import key_as_given, said_if_given
from .tasks import census_lines

log = logging.getLogger(__name__)


@dataclass
class Preflight:
    """What a dry run found: the task census and every problem, each naming what is missing."""

    census: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    #: what was checked and passed, for the reader
    passed: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """Whether nothing is missing."""
        return not self.problems

    def problem_report(self) -> str:
        """Every problem, one per line."""
        return "\n".join([f"preflight found {len(self.problems)} problem(s):"]
                         + [f"  - {p}" for p in self.problems])


def preflight(cfg: RunConfig, *, check_endpoint: bool = False) -> Preflight:
    """Check tasks, agent, endpoint (when asked), provider and disk; start nothing."""
    found = Preflight()
    if cfg.data is None:
        raise ConfigError(data_required())
    try:
        cfg = with_mode_defaults(cfg)  # the mode --data implies, its max_turns
        env_cls = get_env(cfg.mode, said_if_given(cfg, "mode"))
        agent_cls = get_agent(cfg.agent, said_if_given(cfg, "agent"))
    except ConfigError as exc:  # an unknown mode or agent leaves nothing else to check
        found.problems.append(str(exc))
        return found
    _check_tasks(cfg, found)
    # what the mode needs whatever its tasks say (math-verify for math): named beside a
    # broken task file, not only after it is fixed
    _check("mode", lambda: (plugin_call(f"mode {cfg.mode!r}: prepare_run", env_cls.prepare_run, []),
                            f"the {cfg.mode} mode's prerequisites")[1], found)
    _check("agent", lambda: _agent_settings(cfg, agent_cls), found)
    if check_endpoint:
        # an agent's own probe, else its model client's (the openai agent's, a plugin's self.model)
        # (the model client's asks /models, then the route the run's requests take: model_routes)
        probe = getattr(agent_cls, "check_endpoint", None) or (
            (lambda c: probe_endpoint(c, agent_cls=agent_cls)) if may_call_model(agent_cls) else None)
        if probe is None:
            found.problems.append(f"--check-endpoint: the {cfg.agent} agent calls no model endpoint")
        else:
            _check("endpoint", lambda: probe(cfg), found)
    vm_from = len(found.problems)
    if env_cls.needs_vm():
        _check("provider", lambda: _provider_ready(cfg), found)
        if cfg.provider_name == "remote" and cfg.vm_address:  # machines already running: do they answer?
            from .pool.providers.remote_preflight import check_machines

            screen = (cfg.screen_width, cfg.screen_height) if getattr(env_cls, "needs_desktop", False) else None
            _check("machines", lambda: check_machines(cfg.vm_address, cfg.vm_key_file, cfg.reset_command, screen,
                                                      cfg.verify_reset), found)
        if cfg.provider_name in ("vmware", "virtualbox") and cfg.path_to_vm:  # their snapshots, asked read-only
            from .pool.providers.base import ProviderOptions
            from .pool.providers.hypervisors import check_vm_files

            _check("machines", lambda: check_vm_files(cfg.provider_name, ProviderOptions(
                path_to_vm=cfg.path_to_vm, snapshot_name=cfg.snapshot_name)), found)
        # web: the Chromium a guest would use; a mode that knows nothing before a boot says nothing
        _check("guest", lambda: _guest_ready(cfg, env_cls), found)
    vm_problems = found.problems[vm_from:]
    if cfg.backend == "ray" and cfg.ray_address:
        _check("cluster", lambda: _cluster_reachable(cfg), found)
    _check("disk", lambda: check_free_disk(cfg.output_dir, cfg.min_free_disk_mb,
                                           key_as_given(cfg, "min_free_disk_mb")), found)
    if found.ok:
        from .runner import Runner

        _check("preparation", lambda: _prepare(Runner(cfg)), found)
    elif cfg.resume and found.problems == vm_problems:
        _finished_without_vms(cfg, found)
    return found


def _finished_without_vms(cfg: RunConfig, found: Preflight) -> None:
    """A resume whose only problems are its VMs' (no Docker daemon, a guest image gone, a
    remote machine down): the run finishes without a VM when every sample is final, as its
    start says in a warning (Runner.prepare); the problems stand otherwise."""
    from .runner import Runner

    runner = Runner(cfg)
    try:
        samples = runner.prepare()  # warns of an unavailable provider when every sample is final
    except ProviderUnavailable:  # a sample is left to run: it needs the provider
        return
    except ConfigError as exc:
        found.problems.append(f"preparation: {exc}")
        return
    if not runner.all_final(samples):
        return
    for problem in found.problems:
        if not problem.startswith("provider: "):  # that one Runner.prepare warned of
            log.warning("%s; every sample of the run is final, so it is finished without it", problem)
    found.problems = []
    _check("preparation", lambda: _prepare(runner, samples), found)


def _check(what: str, run, found: Preflight) -> None:
    """Run one check: its passing note goes to ``passed``, its error to ``problems``."""
    try:
        note = run()
    except (ConfigError, ProviderUnavailable) as exc:
        found.problems.append(f"{what}: {exc}")
    else:
        if note:
            found.passed.append(f"{what}: {note}")


def _check_tasks(cfg: RunConfig, found: Preflight) -> None:
    try:
        found.census = census(cfg).splitlines()
    except ConfigError as exc:
        found.problems.append(f"tasks: {exc}")


def census(cfg: RunConfig) -> str:
    """What --dry-run prints: every task of --data loaded and checked, per domain the tasks,
    the runnable ones and the unsupported features; nothing is started."""
    if cfg.data is None:
        raise ConfigError(data_required())
    agent_cls = get_agent(cfg.agent)
    task_set = run_task_set(cfg, agent_cls.task_fields)
    refused = refused_by_agent(agent_cls, task_set.tasks)  # skipped by --skip-unsupported, as the run does
    lines = census_lines(task_set, refused, cfg.agent)
    taken = task_set.tasks[: cfg.limit] if cfg.limit else task_set.tasks  # what the run takes
    skipped = {task.id for task, _ in refused}
    run = [task for task in taken if task.id not in skipped]
    lines[-1:-1] = get_env(cfg.mode).census_notes(run, cfg)  # the last line stays the count
    if cfg.limit:  # before the last line, which scripts read
        taken_count = min(cfg.limit, len(task_set.tasks))
        lines.insert(-1, f"--limit {cfg.limit}: the run takes the first " + (
            "runnable task" if taken_count == 1 else f"{taken_count} runnable tasks") + (
            f", of which --agent {cfg.agent} cannot run {taken_count - len(run)} (an 'unsupported' record each)"
            if len(run) < taken_count else ""))
    return "\n".join(lines)


def _prepare(runner, samples=None) -> str:
    """The run's own preparation (unless made: its ``samples``), then what opening its folder
    would check (a resume's settings and task data against the run's, its results file, a
    lower --limit)."""
    samples = runner.prepare() if samples is None else samples
    return "the run's own preparation; " + runner.check_folder(samples)


def _agent_settings(cfg: RunConfig, agent_cls) -> str:
    check_agent(cfg, agent_cls)
    return f"the {cfg.agent} agent's settings" + (" and its model's" if calls_model(agent_cls, cfg) else "")


def _cluster_reachable(cfg: RunConfig) -> str:
    from .backends.ray_cluster import check_reachable

    return f"the Ray cluster at {check_reachable(cfg.ray_address)} takes connections"


def _guest_ready(cfg: RunConfig, env_cls) -> str | None:
    """What the mode needs in the guest (``guest_check``) of a provider there is: one that
    --provider names but is none (unknown, a module:Class that does not import) is the provider
    check's problem, which this one said again as its own."""
    try:
        provider_name = get_provider(cfg.provider_name).name or cfg.provider_name
    except ConfigError:
        return None
    return guest_check(env_cls, provider_name)


def _provider_ready(cfg: RunConfig) -> str:
    provider_cls = run_provider(cfg)
    provider_cls.check_available()
    return f"the {provider_cls.name or cfg.provider_name} provider's prerequisites"
