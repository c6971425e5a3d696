"""The batch front end: one run folder, every task of --data run once over an Engine.

::

    tasks ─► Runner ── submit(Assignment, on_final) ──► Engine (engine.py: pool, workers,
      │        ▲                                         dispatch, deaths, timeouts, retries)
      │        └── record_sink: every attempt ─► results.jsonl
      └─► run folder (lock, config.json, run.log, events.jsonl) · progress · summary.json

The Runner owns what makes a batch a run: the folder and its lock (one writer at a time),
``config.json`` (what ``--resume`` reads back and checks: run_folder.py), logging to ``run.log``, the
progress bar or lines, the results store (one line per attempt, resume skips samples that
have a final one) and the summary. Ctrl-C / SIGTERM close the engine with the grace period;
the exit code says how the run ended (0 done, 1 stopped, 130 interrupted: run_end.py) and the message
how to resume. Everything about processes and VMs is the engine's.
"""

from __future__ import annotations

import logging
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Any, Callable


from .agents import get_agent
from .agents.base import refused_by_agent
from .agents.episode import EndpointRefused, ModelUnavailable
from .agents.model_checks import check_agent, fleet_verdict
from .config import RunConfig, data_required, default_run_id
from .config_checks import check_vm_sharing
from .engine import Engine
from .envs import get_env, run_task_set, with_mode_defaults
from .envs.base import guest_check
from .envs.registry import answer_like_warnings
from .errors import (ConfigError, ProviderUnavailable, TaskFileError, VMSettingsMismatch, handled_stop_signals,
                     raise_interrupted)
from .honoured import check_honoured, setting_users
from .logs import PipeSafeStream
from .run_log import close_run_log, run_log_handler
from .messages import Assignment
from .output_checks import check_free_disk, check_writable_folder
from .plugins import plugin_call
from .pool.providers import run_provider
from .pool.providers.common import check_name
from .pool_sizing import counted, ignored_vm_settings, sized_for_samples
from .records import unsupported_record
from .results import ResultStore, ServerNotes, StorageError
from .run_end import RunOutcome, finish_run, resume_command, signal_after_the_end
from .run_folder import RunFolder
from .setting_names import key_as_given, said_if_given
from .tasks import Sample, expand, unsupported_message

log = logging.getLogger("parallel_rollout")


def _unsaid(*args: Any) -> None:
    """A sizing's cut not said: the other sizing of the same pool says it."""


#: how long the main thread waits for the engine between checks of signals and progress
_TICK_S = 0.2
#: seconds between progress lines in the log when there is no progress bar
_PROGRESS_LOG_S = 30.0


def _skipped_line(why: str, named: list[str]) -> str:
    """The warning of the tasks --skip-unsupported skips for ``why``: each one's final record is
    'unsupported', counted in the summary's statuses, so each is named (the first five)."""
    many = len(named) != 1
    return (f"--skip-unsupported: {len(named)} task{'s' * many} {why} {'get' if many else 'gets'} an 'unsupported' "
            f"record: {', '.join(named[:5])}" + (f" and {len(named) - 5} more" if len(named) > 5 else ""))


class Runner:
    """One run: ``Runner(config).run()`` returns a RunOutcome; it never leaves a VM behind."""

    def __init__(self, config: RunConfig) -> None:
        self.config = config
        self.run_id = config.run_id or default_run_id(config.mode, config.output_dir)
        self.run_dir = Path(config.output_dir) / self.run_id
        self.engine: Engine | None = None
        #: whether the run folder was opened (before it, an error means nothing ran)
        self.started = False
        #: how the resume hint starts: the CLI puts what the user typed (``./dev run``)
        self.program = "parallel-rollout run"
        #: the caller's words for what the engine says of its own (a record's failure, its
        #: thread's warnings): run()'s keywords where the core says the CLI's flags; None: the CLI's
        self.said: Callable[[str], str] | None = None
        self._interrupted: int | None = None
        #: a stop signal that came once the run had ended, as it wrote its summary and report
        self.late_signal: int | None = None
        self._finished_keys: set[str] = set()
        self._successes = 0
        #: model_unavailable attempts in a row (``_model_outage``), and how many stop the
        #: run whatever their retries: every env loop's attempt, twice over
        self._outage = 0
        self._outage_limit = max(4, 2 * (config.max_concurrent_rollouts
                                         or config.num_rollouts * config.envs_per_worker))
        #: the endpoint refused the run's key or model (EndpointRefused), or a VM booted unlike
        #: the run's settings (VMSettingsMismatch): a configuration error (exit 2)
        self.refused = False
        self._store: ResultStore | None = None
        self._progress = None
        self._lock = threading.Lock()
        #: (sample, features) of each unsupported task left out by --skip-unsupported
        self._skipped: list[tuple[Sample, tuple[str, ...]]] = []
        #: names each server of a fleet that a trajectory left (refused or failed), once
        self._servers = ServerNotes(config.server_cooldown, lambda *event: self.engine and self.engine.event(*event))
        #: versions and task-data hashes behind this run (provenance.py), set with the folder
        self._provenance: dict[str, Any] | None = None

    # -- preparation ----------------------------------------------------------------------

    def prepare(self) -> list[Sample]:
        """Check the whole configuration and load every task; raises ConfigError."""
        check_name("run id", self.run_id)  # it names the run folder, and VMs' where there are any
        self.config = cfg = with_mode_defaults(self.config)  # the mode's max_turns, recorded
        self.env_cls = get_env(cfg.mode, said_if_given(cfg, "mode"))
        self.agent_cls = get_agent(cfg.agent, said_if_given(cfg, "agent"))
        self.provider_cls = run_provider(cfg) if self.env_cls.needs_vm() else None
        check_honoured(cfg, setting_users(self.env_cls, self.agent_cls,
                                          None if self.provider_cls is None else self.provider_cls.name))
        for said, why, name in ignored_vm_settings(cfg, self.provider_cls):
            # warned, not refused: one config file for every mode of a nightly job sets them
            log.warning("%s is not used by this run: %s%s; it is ignored", said, why, cfg.where(name))
        check_vm_sharing(cfg.envs_per_worker, cfg.use_vm_pool, self.provider_cls is not None)
        if cfg.junit_xml:
            check_writable_folder("--junit-xml", cfg.junit_xml)
        # as --dry-run does
        check_free_disk(cfg.output_dir, cfg.min_free_disk_mb, key_as_given(cfg, "min_free_disk_mb"))
        if cfg.data is None:
            raise ConfigError(data_required(f" (there is no run {cfg.run_id} in {cfg.output_dir} whose "
                                            "settings --resume would read)" if cfg.resume else ""))
        self._folder().check_settings()  # a resume with another --agent is told that first
        check_agent(cfg, self.agent_cls)  # the model settings if it calls the model, its own
        task_set = run_task_set(cfg, self.agent_cls.task_fields)
        if task_set.unsupported and not cfg.skip_unsupported:
            raise TaskFileError(unsupported_message(task_set))
        tasks = task_set.tasks
        # --skip-unsupported: each skipped sample gets a final 'unsupported' record, so the
        # score's denominator is the whole set (with --limit only the first N tasks count)
        self._skipped = [] if cfg.limit else [
            (sample, item.features) for item in task_set.unsupported
            for sample in expand([item.task], cfg.group_size)]
        if task_set.unsupported and not cfg.limit:  # said as the agent's refused tasks are, below
            log.warning("%s", _skipped_line("this version does not support", [
                f"{item.task.id} ({', '.join(item.features)})" for item in task_set.unsupported]))
        if cfg.limit:  # before the agent's check: a task --limit leaves out needs nothing of it
            tasks = tasks[: cfg.limit]
        refused = refused_by_agent(self.agent_cls, tasks)  # every task the agent cannot run, named at once
        if refused and not cfg.skip_unsupported:
            error = TaskFileError.of_records(str(cfg.data), [why for _, why in refused],
                                             f"tasks --agent {cfg.agent} cannot run")
            error.args = (f"{error}\nadd --skip-unsupported to run the rest; each skipped task then gets an "
                          "'unsupported' record",)
            if "agent" not in cfg.explicit:  # the default, a name the user never gave
                error.args = (f"{error}\n--agent {cfg.agent} is the default (no --agent was given): give the agent "
                              "to run them with: --agent openai with --model, --agent command with --agent-cmd, "
                              "or your own --agent module:Class",)
            raise error
        if refused:  # skipped as a feature the mode lacks is: an 'unsupported' record each
            log.warning("%s", _skipped_line(f"--agent {cfg.agent} cannot run", [task.id for task, _ in refused]))
            skipped = {id(task) for task, _ in refused}
            tasks = [task for task in tasks if id(task) not in skipped]
            self._skipped += [(sample, (why.removeprefix(f"{task.source}: "),))
                              for task, why in refused for sample in expand([task], cfg.group_size)]
        for line in answer_like_warnings(tasks, self.agent_cls):
            log.warning("%s", line)
        plugin_call(f"mode {cfg.mode!r}: prepare_run", self.env_cls.prepare_run, tasks)
        if self.provider_cls is not None:  # web: Chromium where it is known
            guest_check(self.env_cls, self.provider_cls.name or cfg.provider_name)
        samples = expand(tasks, cfg.group_size)
        # The engine checks its provider (available here, options it can honour).
        # sized by the run's samples here (its checks made before the folder opens), by those
        # left to run once it is open (``_size_engine``: a resume's may be fewer, and are said there)
        try:
            self.engine = self._engine(self._vms_used(cfg, len(samples), said=not cfg.resume))
        except ProviderUnavailable as exc:
            # a resume of a run that has ended needs no VM: its summary and gates are had
            # without the daemon or a guest image rebuilt since (a cron job's second try)
            if not (cfg.resume and self.all_final(samples)):
                raise
            log.warning("%s; every sample of the run is final, so it is finished without it", exc)
            self.engine = self._engine(cfg, check_provider=False)
        from .report.gate import baseline_problem, kept_gate

        # a missed night (or a baseline with a corrupted line) must not stop every night after
        # it: said once its checks passed, and judged again at the end
        missing = baseline_problem(cfg)
        if missing:
            log.warning("--compare-to %s: %s; the run goes on; its gate will give no verdict (exit 5)%s",
                        cfg.compare_to, missing, kept_gate(cfg, "compare_to"))
        return samples

    def _engine(self, cfg: RunConfig, check_provider: bool = True) -> Engine:
        return Engine(cfg, self.run_dir, run_id=self.run_id, record_sink=self._store_record,
                      stop_on=self._model_outage, check_provider=check_provider, said=self.said)

    def all_final(self, samples: list[Sample]) -> bool:
        """Whether the run folder holds a final record of every one of ``samples`` (read only;
        False when it cannot be read: opening it says why)."""
        folder = self._folder()
        try:
            folder.describe(self._keys(samples))
        except Exception:  # noqa: BLE001 - the open that follows names the problem
            return False
        finished = finished_keys(folder.finals)
        return all(sample.key in finished for sample in samples)

    def _size_engine(self, to_run: int) -> None:
        """No more VMs and workers than the samples this session runs can use: a resume of a
        run with 1 sample left booted the whole pool (the engine is not started yet). A resume
        says its pool here alone, of the samples it has left (its log said the run's first)."""
        said = self.config.resume
        # a first run's pool was said as it was prepared: sized again unsaid (-v showed it twice)
        sized = self._vms_used(self.config, to_run, said=said)
        if (sized.num_vms, sized.num_rollouts) != (self.engine.config.num_vms, self.engine.config.num_rollouts):
            self.engine = self._engine(sized if said else self._vms_used(self.config, to_run))  # said, this time

    def _vms_used(self, cfg: RunConfig, samples: int, said: bool = True) -> RunConfig:
        """The engine's config: no more workers and VMs than ``samples`` can use at once
        (``pool_sizing.sized_for_samples``: warned; the cut of a setting never given, its
        default, logged only, a first run's as a resume's). ``said`` False: not said at all,
        where the other sizing of the same pool says it (once, even with -v)."""
        if not said:
            return sized_for_samples(cfg, samples, self.provider_cls, _unsaid)
        return sized_for_samples(cfg, samples, self.provider_cls, log.warning, log.debug)

    def _folder(self) -> RunFolder:
        """The run folder, as this run's settings (after ``prepare``) see it."""
        return RunFolder(self.config, self.run_dir, self.run_id, self._endpoints)

    def check_folder(self, samples: list[Sample]) -> str:
        """What ``--dry-run`` says of the run folder (after ``prepare``), reading only: the
        checks the run would make on opening it; ConfigError for what it would refuse. A
        resume's pool is said as the resume says it, sized by the samples it has left."""
        folder = self._folder()
        said = folder.describe(self._keys(samples))
        finished = finished_keys(folder.finals)
        self._vms_used(self.config, sum(s.key not in finished for s in samples), said=self.config.resume)
        return said

    def _keys(self, samples: list[Sample]) -> set[str]:
        """The keys of this run's samples: those it runs and those --skip-unsupported skips."""
        return {s.key for s in samples} | {s.key for s, _ in self._skipped}

    def _endpoints(self) -> list[str] | None:
        """Where the agent's model requests go (--base-url, else OPENAI_BASE_URL, else
        OpenAI's), when it is an agent that takes --base-url; None otherwise."""
        if "base_url" not in self.agent_cls.options:
            return None
        from .agents.openai_request import resolve_base_urls

        return resolve_base_urls(self.config.base_url)

    def _setup_logging(self) -> logging.Handler:
        # every process's records reach this handler (logs.py)
        return run_log_handler(self.run_dir / "run.log")

    # -- the run --------------------------------------------------------------------------

    def run(self) -> RunOutcome:
        """Run every pending sample to a final record, or stop cleanly trying."""
        # Ctrl-C, SIGTERM and SIGHUP stop the run when it runs on the main thread (Python lets only
        # that thread set handlers: a run() from another thread leaves signals to its caller),
        # but for one ignored (nohup's SIGHUP): before the folder opens they end the preparation
        # (InterruptedBeforeStart: nothing ran), after it the run stops itself, writing its summary
        signals = handled_stop_signals() if threading.current_thread() is threading.main_thread() else ()
        previous = {sig: signal.signal(sig, raise_interrupted) for sig in signals}
        try:
            samples = self.prepare()
            total = len(samples) + len(self._skipped)
            folder = self._folder()
            lock, self._store, index = folder.open(self._keys(samples), "model" in self.agent_cls.options)
            self._provenance = folder.provenance
            try:
                handler = self._setup_logging()
            except BaseException as exc:  # nothing ran: the folder is left as it was, unlocked
                self._store.close()
                lock.release()
                if isinstance(exc, OSError):
                    raise ConfigError(f"cannot write in the run folder {self.run_dir}: {exc.strerror or exc} "
                                      f"({exc.filename})") from None
                raise
            for sig in signals:
                signal.signal(sig, self._on_signal)
        except BaseException:
            for sig, handler_ in previous.items():
                signal.signal(sig, handler_)
            raise
        self.started = True
        self._started_at = time.time()
        try:
            pending = self._queue_samples(samples, index)
            log.info("run %s: %s, %d already final, %d to run; output in %s",
                     self.run_id, counted(total, "sample"), len(self._finished_keys), len(pending), self.run_dir)
            for sample, features in self._skipped:
                if sample.key not in index.final:
                    record = {**unsupported_record(sample, features), "final": True, "run_id": self.run_id}
                    self._store_record(record)
                    self._on_final(record)
            if pending and not self._interrupted:
                self._run_engine(pending, total)
        except BaseException:
            failed = True
            raise
        else:
            failed = False
        finally:
            try:
                self.engine.close(grace=self.config.shutdown_grace_s if self._interrupted else None)
            finally:
                self._store.close()
                for sig in previous:  # the run has ended: its summary, report and gates are written whole
                    signal.signal(sig, self._on_late_signal)
                if self._progress is not None:
                    self._progress.close()
                try:
                    outcome = self._finish(total)
                    self.late_signal = self.late_signal or outcome.late_signal
                except StorageError as exc:
                    if not failed:
                        raise
                    # The error already on its way (e.g. the same corrupt line) says it.
                    log.error("no summary: %s", exc)
                finally:
                    close_run_log(handler)
                    lock.release()
                    for sig, handler_ in previous.items():
                        signal.signal(sig, handler_)
        return outcome

    def _queue_samples(self, samples: list[Sample], index) -> list[Assignment]:
        self._finished_keys = finished_keys(index.final)
        self._successes = sum(1 for key in self._finished_keys if index.final[key].get("success"))
        return [Assignment(sample.task, sample.sample_idx, index.attempts.get(sample.key, -1) + 1)
                for sample in samples if sample.key not in self._finished_keys]

    def _run_engine(self, pending: list[Assignment], total: int) -> None:
        self._total = total
        self._size_engine(len(pending))
        # a fleet's, asked now
        self.engine.servers_left_out, self.engine.servers_unheard = fleet_verdict(
            self.config, self.agent_cls, stopped=lambda: self._interrupted is not None)
        self._last_progress_log = time.monotonic()
        self._open_progress(total)
        if self._interrupted:  # a stop signal as the fleet was checked: no pool, no worker starts
            return
        self.engine.start()
        for item in pending:
            # stopped as it started (no worker could start), or a stop signal came meanwhile
            # (the pool's start takes seconds): no attempt starts after it
            if self.engine.error is not None or self._interrupted:
                break
            self.engine.submit(item, self._on_final)
        last_progress = 0.0
        while not self._interrupted and self.engine.error is None:
            if self.engine.wait_idle(timeout=_TICK_S):
                break
            if time.monotonic() - last_progress > 1.0:
                self._update_progress()
                last_progress = time.monotonic()

    def _store_record(self, record: dict[str, Any]) -> None:
        """The engine's record sink: one line per attempt in results.jsonl."""
        if record.get("status") == VMSettingsMismatch.kind:
            self.refused = True  # the engine stopped the run on it: the settings to fix
        self._store.append(record)
        self._servers.note(record)  # a fleet's server its attempt left, named once

    def _model_outage(self, record: dict[str, Any]) -> str | None:
        """The engine's ``stop_on``: a model endpoint that keeps failing stops the run with
        its attempts left to a resume (a server that is down must not turn every sample left
        into a final failure): once it failed every loop's attempt twice over, or a sample's
        last retry, with no answer since the attempt before. A sample that fails its retries
        between answers (a flaky server) is final, as infrastructure (never graded). An
        endpoint that refuses the key or the model stops it at its first answer: no sample
        can go otherwise until the settings are fixed."""
        if record.get("status") == EndpointRefused.kind:
            self.refused = True
            return (f"the model endpoint refused this run's settings: "
                    f"{(record.get('failure') or {}).get('message', '')[:600]}")
        with self._lock:
            self._outage = self._outage + 1 if record.get("status") == ModelUnavailable.kind else 0
            last_retry = record["attempt"] >= self.config.max_retries
            if self._outage < self._outage_limit and not (last_retry and self._outage > 1):
                return None
        return (f"the model endpoint failed {self._outage} attempts in a row, none answered in "
                f"between (last: {(record.get('failure') or {}).get('message', '')[:300]}); "
                "every finished result is kept: resume once it answers")

    def _on_final(self, record: dict[str, Any]) -> None:
        with self._lock:
            self._finished_keys.add(record["key"])
            self._successes += bool(record.get("success"))
        if self._progress is not None:
            self._progress.update(1)

    # -- the end --------------------------------------------------------------------------

    def _finish(self, total: int) -> RunOutcome:
        return finish_run(self.config, self.run_dir, self.run_id, total=total,
                          pool_stats=self.engine.final_pool_stats if self.engine else None,
                          cluster=self.engine.final_cluster if self.engine else None,
                          started_at=self._started_at, interrupted=self._interrupted,
                          stopped=self.engine.error if self.engine is not None else None,
                          refused=self.refused,
                          provenance=self._provenance,
                          resume_cmd=resume_command(self.program, self.config.output_dir, self.run_id))

    # -- helpers --------------------------------------------------------------------------

    def _on_late_signal(self, signum, frame) -> None:
        """A stop signal once the run has ended (``run_end.signal_after_the_end``): kept in
        ``late_signal``, so that ``api.run`` stops its caller too, as after an interrupt."""
        self.late_signal = self.late_signal or signum
        signal_after_the_end(signum, frame)

    def _on_signal(self, signum, frame) -> None:
        """The first stop signal stops the run, with a grace for the attempts under way; the
        second cuts that grace (as pip's, docker's): their workers are killed, the attempts
        left to a resume, and the VMs stopped, the summary written, as after the first."""
        if self._interrupted is None:
            self._interrupted = signum
            if self.engine is not None:  # what its start waits on (a Ray node's sweep) gets the grace too
                self.engine.stop_within(self.config.shutdown_grace_s)
            log.warning("signal %d: stopping (finishing what completes within %.0fs; %s stops at once)", signum,
                        self.config.shutdown_grace_s, "Ctrl-C again" if signum == signal.SIGINT else "a second signal")
        elif self.engine is not None and not self.engine.grace_cut:
            self.engine.cut_grace()
            log.warning("signal %d again: stopping at once; the attempts under way are cut, and run again "
                        "by --resume; the VMs are stopped and the summary written", signum)

    def _open_progress(self, total: int) -> None:
        show = self.config.progress
        if show is None:
            show = sys.stderr is not None and sys.stderr.isatty()
        if not show or sys.stderr is None:  # None: stderr closed (2>&-)
            return
        from tqdm import tqdm

        self._progress = tqdm(total=total, initial=len(self._finished_keys), desc=self.run_id,
                              unit="rollout", dynamic_ncols=True, mininterval=0.5,
                              file=PipeSafeStream(sys.stderr))

    def _update_progress(self) -> None:
        if self._progress is None and time.monotonic() - self._last_progress_log < _PROGRESS_LOG_S:
            return  # no bar, no line due: the pool's stats not read for nothing
        done = len(self._finished_keys)
        rate = f"{self._successes / done:.0%}" if done else "-"
        vms = ""
        if self.engine.provider_cls is not None:
            stats = self.engine.pool_stats()
            if stats is None:
                vms = "pool unreachable"
            else:
                states = stats["states"]
                vms = f"busy {states['leased']} idle {states['idle']} reset {states['resetting']} dead {states['dead']}"
                if stats.get("spare_vms"):
                    vms += f" spares {stats['spares_ready']}/{stats['spare_vms']}"
                for node_id, age in stats.get("late_reports", {}).items():  # a Ray node's: as of its last report
                    vms += f"; node {node_id[:8]}'s pool unreachable (last report {age:.0f}s ago)"
        if self._progress is not None:
            # drawn now (a second apart at most): a bar drawn only as a sample ends showed the
            # rate and VMs of before that end until the next one, minutes on a desktop task
            self._progress.set_postfix_str(f"ok {rate} | VMs {vms}", refresh=True)
        else:  # no terminal (cron, CI): a line now and then instead of a bar
            self._last_progress_log = time.monotonic()
            log.info("progress: %d/%d done, success %s, in flight %d, VMs %s",
                     done, self._total, rate, self.engine.in_flight(), vms or "-")


def finished_keys(finals: dict[str, dict[str, Any]]) -> set[str]:
    """The samples a resume does not run again: a sample final on an infrastructure failure
    was never graded, and a resume runs it again; not one that ended on its task file's own
    error (``task_fault`` "task_file"): the resume's task file is the same (an edited one is
    refused), so it would end the same way, after another episode."""
    return {key for key, r in finals.items() if not r.get("infrastructure") or r.get("task_fault") == "task_file"}

