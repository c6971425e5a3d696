"""How the local backend starts its workers: forked from a server that has already imported
what they need.

A spawned worker is a new interpreter. Before its first task it imports the package's
worker modules (~0.15 s of CPU with bytecode) and runs the main module again as
``__mp_main__`` (the console script imports the CLI; a trainer's script may import torch),
and the N workers of a run start at once, on the run's cores. With N = 64 on 2 cores that was
~0.34 s of CPU per worker, ~22 s in all, while the first VMs waited for their leases
(benchmarks/perf/README.md, "Workers forked from a preloaded server").

multiprocessing's ``forkserver`` start method does that work once: a server process imports
the modules, and each ``Process.start()`` asks it for a fork of itself (a few ms, pages
shared copy-on-write). The workers stay what spawn made them, a fresh single-threaded
process (never a fork of the threaded engine process), and the ``Process`` API the backend
uses (pid, sentinel, exit code, join) is the same. What this module adds to the stdlib's:

* **Preloaded**: ``parallel_rollout.worker`` and the main module, run once in the server as
  ``__mp_main__`` (spawn runs it in every worker; so would the stdlib's fork server, which
  lists ``__main__`` but is given no path to it). A forked worker then finds its main module
  there and does not run it again. A main module that fails in the server is left to each
  worker, as with spawn, which then reports what went wrong.
* **The run's plugins**, its mode's and agent's modules when they are not built in, imported
  in the server after the main module: a plugin that takes seconds to import costs them
  once, not once per worker inside its first attempt (and its task clock).
* **One server per run.** It starts with the first backend and stops with the last one
  (backends may run at once: an RL trainer's train and validation schedulers share it), so a
  worker gets the environment, standard streams and modules of its run, not those of an
  earlier run of the same process. A server that someone else started is used as it is and
  left running.
* **Its start-up deadline.** ``process.start()`` waits for the server to fork, so for its
  imports to end: a plugin whose import never ends (a lock the CLI's own import holds)
  would hang the run without a word. The server says when its imports are done (a file
  ``_SERVER_ENV`` names); the caller logs a line every ``_SAY_EVERY_S`` meanwhile, and past
  the deadline kills it and raises ``ServerStartTimeout`` naming the modules.
* **The workers' reaper.** The server is their child subreaper: an orphan a worker leaves
  (the namespace init of a command agent that ended on its own, which its bubblewrap left
  unreaped) comes to it, not to the container's pid 1, which may reap nothing (``docker
  run`` without --init, a pod): the stdlib's server already reaps every child it has
  (``waitpid(-1)`` at each SIGCHLD), and forks nothing but workers.
* **Its death.** The server reports its workers' exit codes; one killed from outside takes
  them along, and multiprocessing then reports every worker as exited (code 255) while it
  still runs. ``still_running`` tells the backend, which kills such a worker before it
  reclaims its VMs (see ``LocalBackend.handle``). The next start starts a new
  server.
"""

from __future__ import annotations

import functools
import importlib
import logging
import multiprocessing
import os
import signal
import tempfile
import threading
import time
import warnings
from multiprocessing import forkserver, spawn
from typing import Any

import psutil

from ..errors import follow_the_runner_on_sigterm
from ..pool.providers import orphans

#: what the server imports before it forks anything: this module (which runs the main
#: module, see ``_preload_main``) and the worker's own modules
PRELOAD = ["parallel_rollout.backends.worker_start", "parallel_rollout.worker"]
#: the main module's path, in the server's environment only while it starts
_MAIN_ENV = "PARALLEL_ROLLOUT_FORKSERVER_MAIN"
#: the run's plugin modules (its mode's and agent's), likewise: imported by the server too
_PLUGINS_ENV = "PARALLEL_ROLLOUT_FORKSERVER_PLUGINS"
#: set in the server's environment only while it starts: tells this module it runs there,
#: and names the file it writes once its imports are done
_SERVER_ENV = "PARALLEL_ROLLOUT_FORKSERVER"
#: how often a slow start of the server is said
_SAY_EVERY_S = 5.0
#: the start-up deadline of a server this module starts (``acquire``'s ``deadline_s``)
_deadline_s = 300.0

log = logging.getLogger("parallel_rollout")


class ServerStartTimeout(Exception):
    """The workers' server did not finish its imports (the run's plugins) within the deadline."""
#: those of the run that started the server, for a restart
_plugins: list[str] = []
#: modules the server imports after them that are no plugin (the model client's ``openai``)
_also: list[str] = []

_lock = threading.Lock()
_users = 0
#: the pid of the server this module started (None: none, or one it did not start)
_started: int | None = None


def acquire(plugins: list[str] | tuple[str, ...] = (), deadline_s: float = 300.0,
            also: list[str] | tuple[str, ...] = ()) -> Any:
    """The context workers are started with; the first caller starts the server, which
    imports ``plugins`` (module names: the run's mode and agent) and ``also`` (what they
    import when first used: the model client's ``openai``) before it forks a worker, so no
    worker imports them in its first attempt (ServerStartTimeout when that takes more than
    ``deadline_s``; its messages name the plugins). A later caller's server is the one
    running: its workers import their plugins as they start (``worker.worker_main``)."""
    global _users, _plugins, _also, _deadline_s
    with _lock:
        if _users == 0:
            # a mode and an agent of one module are one import, named once
            _plugins, _also, _deadline_s = list(dict.fromkeys(plugins)), list(also), deadline_s
            server = forkserver._forkserver  # noqa: SLF001 - the stdlib's one server
            modules = dict.fromkeys([*PRELOAD, *getattr(server, "_preload_modules", [])])
            modules.pop("__main__", None)  # preloaded here, with its path (_preload_main)
            forkserver.set_forkserver_preload(list(modules))  # kept for any restart
            _start()  # a failure leaves no user counted
        _users += 1
        return multiprocessing.get_context("forkserver")


def plugin_modules(config: Any) -> list[str]:
    """The modules of the run's mode and agent that are plugins (``module:Class`` paths and
    entry points, not built-ins): what the workers' server imports before it forks one."""
    from ..agents.base import AGENTS
    from ..envs.registry import MODES

    targets = [MODES.target(config.mode) if config.mode not in MODES.builtin else None,
               AGENTS.target(config.agent) if config.agent not in AGENTS.builtin else None]
    return [target.partition(":")[0] for target in targets if target]


def model_modules(config: Any) -> list[str]:
    """``openai`` when the run's agent may call the model (``self.model`` imports it at its
    first request): the workers' server imports it too, so no worker pays its import (a second
    or more on a busy host) in its first attempt's clock, each on its own."""
    import importlib.util

    from ..agents import get_agent
    from ..agents.model_checks import may_call_model

    try:
        calls = may_call_model(get_agent(config.agent))
    except Exception:  # noqa: BLE001 - an agent that does not load: the worker reports it
        return []
    return ["openai"] if calls and importlib.util.find_spec("openai") is not None else []


def release() -> None:
    """The caller has no worker left; the last one stops the server this module started."""
    global _users, _started
    with _lock:
        _users = max(0, _users - 1)
        if _users or _started is None:
            return
        pid, _started = _started, None
        kill_server(pid)


def kill_server(pid: int | None) -> None:
    """Stop the server ``pid``, unless multiprocessing's server is another one by now."""
    server = forkserver._forkserver  # noqa: SLF001 - the stdlib's one server
    if pid is None or getattr(server, "_forkserver_pid", None) != pid:
        return  # it died and multiprocessing started another: not ours to stop
    try:
        # Killed, not asked: it would wait for every process that holds its "alive" pipe.
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    stop = getattr(server, "_stop", None)  # closes its pipe, reaps it, removes its socket
    if stop is not None:
        stop()


def start(process: Any) -> psutil.Process | None:
    """Start a worker ``process`` (of the context ``acquire`` gave) and return its handle, for
    ``still_running`` and ``kill_tree``. A server that died since (killed from outside) is
    started again first, with the main module preloaded as at first."""
    with _lock:
        _start()
    process.start()
    return handle_of(process.pid)


def still_running(handle: psutil.Process | None) -> bool:
    """Whether a worker that multiprocessing reports exited still runs (its server died).
    ``handle`` was taken when it started: a pid the kernel gave to another process since does
    not match it."""
    if handle is None:
        return False
    try:
        return handle.is_running() and handle.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def exit_code(process: Any) -> int | None:
    """The status a dead worker exited with on its own, or None: killed by a signal, or a
    status nobody could read (multiprocessing says 255 when the server that would report it
    is gone)."""
    code = process.exitcode
    if code is None or code < 0:
        return None
    if code == 255 and not _server_alive():
        return None
    return code


def _server_alive() -> bool:
    pid = getattr(forkserver._forkserver, "_forkserver_pid", None)  # noqa: SLF001 - as in _start
    return pid is not None and still_running(handle_of(pid))


def handle_of(pid: int | None) -> psutil.Process | None:
    """A handle on a started worker, for ``still_running`` and for killing it."""
    try:
        return psutil.Process(pid) if pid is not None else None
    except psutil.Error:
        return None


def _start() -> None:
    """Start the server if none runs (the stdlib's ``ensure_running`` reaps a dead one)."""
    global _started
    server = forkserver._forkserver  # noqa: SLF001 - the stdlib's one server
    was = getattr(server, "_forkserver_pid", None)
    main_path = _main_path()
    if main_path:
        os.environ[_MAIN_ENV] = main_path
    if _plugins or _also:
        os.environ[_PLUGINS_ENV] = ",".join([*_plugins, *_also])
    fd, ready = tempfile.mkstemp(prefix="parallel-rollout-server-")
    os.close(fd)
    os.environ[_SERVER_ENV] = ready
    try:
        forkserver.ensure_running()
        now = getattr(server, "_forkserver_pid", None)
        if now != was:
            _started = now  # started here: ours to stop
            _wait_ready(ready, now)
    finally:
        for name in (_MAIN_ENV, _PLUGINS_ENV, _SERVER_ENV):
            os.environ.pop(name, None)
        os.unlink(ready)


def _wait_ready(ready: str, pid: int | None) -> None:
    """Wait for the server ``pid`` to write ``ready`` (its imports done), saying so every
    ``_SAY_EVERY_S``; past ``_deadline_s`` kill it and raise ServerStartTimeout. A server
    that dies meanwhile is left to ``start`` (its workers then report why)."""
    global _started
    began, handle = time.monotonic(), handle_of(pid)
    said = 0.0
    while os.path.getsize(ready) == 0 and still_running(handle):
        waited = time.monotonic() - began
        what = f"the run's plugin modules ({', '.join(_plugins)})" if _plugins else "the main module"
        if waited > _deadline_s:
            _started = None
            kill_server(pid)
            raise ServerStartTimeout(f"the workers' server did not finish importing {what} within "
                                     f"{_deadline_s:g}s (start_timeout_s): an import that waits for "
                                     "something (a lock this process holds, a network share, input) never ends")
        if waited >= said + _SAY_EVERY_S:
            said += _SAY_EVERY_S
            log.warning("workers starting: their server is still importing %s (%.0fs; deadline %gs)",
                        what, waited, _deadline_s)
        time.sleep(0.05)


@functools.lru_cache(maxsize=1)
def _main_path() -> str | None:
    """This process's main module's path, as spawn would pass it (None: ``-m``, ``-c``, a
    REPL): it does not change while the process lives."""
    return spawn.get_preparation_data("worker").get("init_main_from_path")


def _preload_main() -> None:
    """In the server, as it preloads this module: run the main module once, as spawn's
    ``prepare`` would in each worker (``__mp_main__``, so its ``if __name__ == "__main__"``
    block does not run). A forked worker's ``prepare`` finds it done."""
    main_path = os.environ.pop(_MAIN_ENV, None)
    if not main_path:
        return
    process = multiprocessing.current_process()
    process._inheriting = True  # noqa: SLF001 - as the stdlib's preload: a Process started at import fails
    try:
        spawn.import_main_path(main_path)
    except Exception:  # noqa: BLE001 - each worker runs it then, and reports its error
        pass
    finally:
        del process._inheriting  # noqa: SLF001


def _preload_plugins() -> None:
    """In the server, after the main module: import the run's plugin modules. One that fails
    is left to each worker, which reports it and stops the run (``worker.EXIT_CANNOT_LOAD``);
    the stdlib's own preload would die of anything but an ImportError."""
    for name in filter(None, os.environ.pop(_PLUGINS_ENV, "").split(",")):
        try:
            importlib.import_module(name)
        except BaseException:  # noqa: BLE001 - a SystemExit too: the server must go on
            pass


_ready = os.environ.pop(_SERVER_ENV, None)
if _ready:
    # a closed terminal's SIGHUP reaches the whole process group: the run's main process
    # stops the run, and the server must outlive it to report its workers' exits
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
_preload_main()
_preload_plugins()
if _ready:
    follow_the_runner_on_sigterm()  # so does a SIGTERM sent to the whole job (its workers reset it)
    orphans.hold()  # never released: the workers' reaper (see the module doc)
    # an adopted orphan is no worker of its: its reaping is no surprise to be warned of
    warnings.filterwarnings("ignore", message="forkserver: waitpid returned unexpected pid")
    with open(_ready, "w") as _fh:  # the imports are done: _wait_ready's caller goes on
        _fh.write("ready")
