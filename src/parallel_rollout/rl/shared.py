"""One engine, many schedulers: what every RolloutScheduler on one engine shares.

The first scheduler starts it: the policy gate (a unix socket for local workers; TCP at the
address the nodes reach this process by on ``--backend ray``), the run folder, locked for
the engine's life (``run_folder``: RunLocked for a second writer, a later session's samples
named apart), the engine with the gate's address in its run config, and the results file. Siblings (validation, a baseline
evaluation) join it: they share the workers, the pool and the one concurrency limit, and must
bring no mode that needs VMs the pool was not made for. ``close()`` (the first scheduler's,
or the interpreter's exit when the trainer never called it) ends every scheduler's
``get_batch``, reopens the gate so nobody stays parked at it, and stops the engine.
"""

from __future__ import annotations

import atexit
import dataclasses
import os
from pathlib import Path
from typing import Any

from ..config import RunConfig
from ..errors import ConfigError, ProviderUnavailable
from ..logs import reworded
from ..policy_gate import PolicyGate
from .config import given_settings, in_the_trainers_words
from .run_folder import RunFolder
from .suspension import Suspension

#: how long close() waits for the agents of the requests it aborted to end them (the stream
#: closed, an abort_url told) before their workers are stopped
_CLOSE_ABORTS_S = 2.0


class SharedEngine:
    """The engine, the gate, the results file and the schedulers using them."""

    def __init__(self, engine: Any, gate: PolicyGate, store: Any, folder: RunFolder) -> None:
        self.engine = engine
        self.gate = gate
        self.store = store
        #: the locked run folder, and this session's number in it
        self.folder = folder
        #: every scheduler on this engine not yet closed (each has ``mark_closed()``); a closed
        #: sibling leaves (``leave``), so a trainer's per-evaluation siblings are freed
        self.schedulers: list[Any] = []
        #: the names of every scheduler that ever ran on it: a name's samples are in the run
        #: folder, so no later scheduler may take it
        self.names: set[str] = set()
        self.closed = False
        #: close() ran to its end (``closed`` is set at its start)
        self._stopped = False
        #: the thread whose suspend() shut the gate, and since when, until a resume() (what a
        #: get_batch of that thread refuses to wait for, and one of another warns about once
        #: that thread has ended: ``suspension``)
        self.suspension = Suspension()
        #: the files every scheduler's task sets come from (by absolute and real path), which
        #: each attempt tells its agent to withhold from a program of its own (the command
        #: agent's), as it withholds a run's --data: no file of the run names them
        self.task_files: tuple[str, ...] = ()
        #: the model endpoint's check before the engine's first get_batch (``endpoint_check``),
        #: made by the first scheduler
        self.endpoint_check: Any = None

    def cluster(self) -> dict[str, Any]:
        """``{"ray": section}`` on ``--backend ray``: the nodes used so far, the lost ones with
        why, and those left out, as summary.json's ``ray`` section (the backend's ``cluster()``,
        ``backends.ray_pools.cluster_nodes``; as the run ended once the engine is closed); {}
        on the local backend, or before the run reached the cluster."""
        section = self.engine.final_cluster
        if section is None and not self.closed:
            section = self.engine.backend.cluster()
        return {"ray": section} if section is not None else {}

    def join(self, scheduler: Any) -> None:
        """List a scheduler made whole on this engine; its name is taken from now on."""
        self.schedulers.append(scheduler)
        self.names.add(scheduler.name)

    def free_name(self, maker: str) -> str:
        """A name no scheduler of this engine took, for an unnamed sibling of ``maker``:
        ``<maker>-sibling<k>``, k from the count of names so far, past any a trainer gave."""
        count = len(self.names)
        while f"{maker}-sibling{count}" in self.names:
            count += 1
        return f"{maker}-sibling{count}"

    def leave(self, scheduler: Any) -> None:
        """Forget a closed sibling (its name stays taken)."""
        if scheduler in self.schedulers:
            self.schedulers.remove(scheduler)

    def withhold(self, task_files: list[str | None]) -> None:
        """Add the files of a scheduler's task sets (their ``data``) to ``task_files``."""
        found = [os.path.abspath(path) for path in files_of(task_files)]
        self.task_files = tuple(dict.fromkeys([*self.task_files, *found, *map(os.path.realpath, found)]))

    @classmethod
    def start(cls, run_config: RunConfig, modes: list[str], *, max_concurrent_rollouts: int | None,
              envs_per_worker: int | None, tasks: dict[str, list[Any]] | None = None,
              task_files: list[str | None] = ()) -> "SharedEngine":
        """Start the gate and the engine for ``modes``; nothing is left running if it fails.
        The files the scheduler's task sets come from (``task_files``: their ``data``, a named
        dataset's file too) and the answer files of ``tasks`` (tag → the scheduler's tasks: an
        OSWorld task's gold files, ``envs.answer_files_of``) are hidden from every VM, as a
        run's ``--data`` and its gold files are: ``--data`` never names a scheduler's tasks."""
        from ..config import default_run_id
        from ..engine import Engine
        from ..envs import answer_files_of
        from ..results import ResultStore, ServerNotes

        finish_unfinished()  # an earlier start a second Ctrl-C cut short in its clean-up: its folder too
        gate = PolicyGate(version=0, host=gate_host(run_config))
        store = engine = folder = shared = None
        try:
            run_id = run_config.run_id or default_run_id("rl", run_config.output_dir)
            # A RunConfig made in Python has no ``explicit`` (a run's flags and files fill it): the
            # settings the trainer gave are the engine's, so that its max_turns is the turns of a mode
            # with a default of its own (Env.turn_limit: math's one answer), as --max-turns is a run's.
            # A field set to None (or nothing) sets nothing, as check_tags_use says it.
            given = {name for name, value in given_settings(run_config).items() if value not in (None, "", ())}
            changes: dict[str, Any] = {"policy_gate": gate.path, "policy_gate_key": gate.key, "run_id": run_id,
                                       "explicit": run_config.explicit | given}
            if max_concurrent_rollouts is not None:
                changes["max_concurrent_rollouts"] = max_concurrent_rollouts
            if envs_per_worker is not None:
                changes["envs_per_worker"] = envs_per_worker
            config = dataclasses.replace(run_config, **changes)
            folder = RunFolder.open(Path(config.output_dir) / run_id, resume=config.resume)
            store = ResultStore(folder.run_dir)
            hidden = (*files_of(task_files), *answer_files_of(task for listed in (tasks or {}).values() for task in listed))
            notes = ServerNotes(config.server_cooldown, lambda *event: engine.event(*event))

            def sink(record: dict[str, Any], store=store) -> None:
                store.append(record)
                notes.note(record)  # a fleet's server an attempt left, named once

            def said(text: str) -> str:  # the engine's CLI flags as the trainer set them
                return in_the_trainers_words(text, config, envs_per_worker is not None)

            # its records' failures (results.jsonl, get_batch's errors) and its thread's warnings
            engine = Engine(config, folder.run_dir, run_id=run_id, modes=modes, record_sink=sink, hidden=hidden,
                            said=said)
            shared = cls(engine, gate, store, folder)
            shared.withhold(task_files)
            with reworded(said):
                engine.start()  # its warnings (a cut max_concurrent_rollouts) said as the trainer set them
        except BaseException as exc:
            if isinstance(exc, (ConfigError, ProviderUnavailable)):  # the provider's check of --path-to-vm …
                exc.args = (in_the_trainers_words(str(exc), run_config, envs_per_worker is not None), *exc.args[1:])
            if shared is not None:  # the engine may have started its workers
                shared.stop_or_leave()
                raise
            if engine is not None:
                engine.close(grace=0.0)
            if store is not None:
                store.close()
            if folder is not None:
                folder.close(retract=True)  # no sample ran
            gate.close()
            raise
        # A trainer that dies without close() still leaves nothing behind.
        atexit.register(shared.close)
        return shared

    def check_sibling(self, name: str, modes: list[str], tasks: dict[str, list[Any]] | None = None,
                      task_files: list[str | None] = ()) -> None:
        """ConfigError when a scheduler named ``name`` serving ``modes`` cannot join (its
        ``tasks``' answer files, or its task sets' files (``task_files``: their ``data``), not
        hidden from the VMs among the reasons: ``check_hidden``)."""
        from ..envs import get_env

        if name in self.names:
            raise ConfigError(f"a scheduler named {name!r} already runs (or ran) on this engine: its samples are "
                              "in the run folder under that name; give the sibling another name")
        missing = [mode for mode in modes if mode not in self.engine.modes and get_env(mode).needs_vm()]
        if missing:
            raise ConfigError(f"a sibling's tags need VMs of mode {', '.join(missing)}, but its engine's pool "
                              f"was made for modes {', '.join(self.engine.modes)}: give the first scheduler a "
                              "tag of that mode too")
        self.check_hidden([task for listed in (tasks or {}).values() for task in listed], f"sibling {name!r}",
                          files_of(task_files))

    def check_hidden(self, tasks: list[Any], where: str, task_files: list[str] = ()) -> None:
        """ConfigError naming ``where`` when an answer file of ``tasks`` (``envs.answer_files_of``:
        an OSWorld task's gold file) is one the engine's VMs can read: the pool hides what it is
        told at its start (the first scheduler's tasks), and a gold file it does not hide, where
        a process VM sees the host's files (a system folder), is one an answer could read and
        write out as its own. A gold file no VM sees (a home, a project's folder; any file under
        docker, QEMU or a remote machine) needs no hiding and is not refused. So is a task
        set's file (``task_files``, a sibling's: a py set's tests and canonical solutions)."""
        from ..agents.agent_sandbox import within
        from ..envs import answer_files_of
        from ..pool.providers.sandbox_fs import seen_in_sandboxes

        options = self.engine.provider_options
        if options is None or self.engine.config.provider_name != "process":
            return

        def exposed(paths: Any) -> list[str]:
            return [path for path in paths if seen_in_sandboxes(os.path.realpath(path))
                    and not any(within(os.path.realpath(path), top) for top in options.hidden_files)]

        for what, paths in (("answer files", exposed(answer_files_of(tasks))), ("task set files", exposed(task_files))):
            if paths:
                raise ConfigError(f"{where}: the {what} {', '.join(paths[:3])}{' …' if len(paths) > 3 else ''} "
                                  "are not hidden from this engine's VMs, which hide those of the tasks the first "
                                  "scheduler loaded at its start: give these tasks in a task set of that scheduler "
                                  "(EnvManagerConfig.task_sets), so that no answer can read them")

    def close(self) -> None:
        """End every scheduler's generation and stop the engine, workers, pool and gate.
        Idempotent; safe from ``finally`` after Ctrl-C and at interpreter exit. Also finishes
        the stop of an engine whose scheduler never came to be (``stop_or_leave``)."""
        self._stop()
        finish_unfinished()

    def stop_or_leave(self) -> None:
        """close() an engine whose scheduler failed to start (no trainer holds it to close
        again): one that a Ctrl-C cuts short is left to the next start or close() of any
        scheduler of this interpreter (a notebook's next cell), or to its exit, to finish:
        its workers, their server and its folder's lock stayed for the interpreter's life."""
        try:
            self.close()
        except KeyboardInterrupt:  # listed in _unfinished (``_stop``); its start registered no exit hook
            atexit.register(self.close)
            raise

    def _stop(self) -> None:
        """Stop it (``close``). One a Ctrl-C cuts short is listed in ``_unfinished``: the next
        start or close() of any scheduler of this interpreter finishes it first, as the
        owner's next close() does; the next scheduler's workers forked from its server."""
        if self._stopped:
            return
        try:
            self._stop_now()
        except KeyboardInterrupt:
            if self not in _unfinished:
                _unfinished.append(self)
            raise

    def _stop_now(self) -> None:
        self.closed = True  # a close() a Ctrl-C cut short stays to be finished: by the next call, or at exit
        for scheduler in list(self.schedulers):
            scheduler.mark_closed()
        # the requests in flight end at the server before their workers stop: each agent
        # closes its stream and tells an abort_url (a server that needs telling), which a
        # worker killed mid-request never did (its server decoded on to max_tokens); the gate
        # stays shut, so no request goes out again in the meantime (the workers are stopped
        # wherever they are, parked at the gate too, and the gate closes with the engine)
        self.gate.suspend(abort=True)
        self.gate.wait_aborted(_CLOSE_ABORTS_S)
        try:
            self.engine.close(grace=0.0)
        except KeyboardInterrupt:
            raise  # the engine may run on: its folder stays locked till a close() stops it
        except BaseException:
            self._release()
            raise
        self._release()
        self._stopped = True
        atexit.unregister(self.close)

    def _release(self) -> None:
        """Close the gate and the results file, and unlock the folder (last: the folder is
        another run's to write only once all is stopped)."""
        self.gate.resume()  # shut by close() for its aborts: stats() says no suspend after it
        self.gate.close()
        self.store.close()
        self.folder.close(retract=not self.engine.stats.submitted)  # a session that ran no sample leaves none


#: engines whose stop a Ctrl-C cut short (``_stop``): a start that failed, a close()
_unfinished: list[SharedEngine] = []


def finish_unfinished() -> None:
    """Finish the stops ``stop_or_leave`` left; one a Ctrl-C cuts short again stays listed."""
    while _unfinished:
        _unfinished[0]._stop()
        _unfinished.pop(0)


def files_of(data: list[str | None]) -> list[str]:
    """The files task sets' ``data`` name (a path, or a named dataset's file: HumanEval's), as
    the loader finds them; one that does not resolve, or is no file, is left out."""
    from ..errors import TaskFileError
    from ..task_files import resolve_data

    found = []
    for name in data:
        try:
            path = resolve_data(name) if name else None
        except (ConfigError, TaskFileError, OSError, ValueError):
            continue
        if path is not None and path.exists():  # a built-in set's name ("frozenlake") is no file
            found.append(str(path))
    return found


def gate_host(run_config: RunConfig) -> str | None:
    """Where the gate listens: a unix socket for local workers (None); on the ray backend TCP
    at the address the cluster's nodes reach this process by."""
    if run_config.backend != "ray":
        return None
    from ..backends.ray_cluster import driver_ip

    return driver_ip(run_config.ray_address)
