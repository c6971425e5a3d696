"""The pool's own process: a ``multiprocessing`` Manager whose server owns the VMPoolManager.

Workers (and the engine) hold proxies to the pool; the Manager serves each proxy connection
in its own thread, which is why every pool method takes the pool's lock. The server ignores
Ctrl-C (the runner decides the shutdown order) and follows the runner: when the runner dies,
even by SIGKILL, the server stops every VM of its pools and exits, so nothing leaks.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from multiprocessing.managers import BaseManager
from typing import Any

from ..errors import follow_the_runner_on_sigterm
from ..logs import ChildLogging
from .manager import VMPoolManager
from .providers import get_provider, orphans
from .providers.sandbox_processes import kill_all

_POOL_METHODS = ("lease", "release", "mark_dead", "death_cause", "reclaim", "stats", "shutdown",
                 "__repr__")
_live_pools: list[VMPoolManager] = []


def _make_pool(*args: Any, **kwargs: Any) -> VMPoolManager:
    pool = VMPoolManager(*args, **kwargs)
    _live_pools.append(pool)
    return pool


class PoolServer(BaseManager):
    """The Manager whose server process owns the pool (and so every VM process)."""

    #: this process is a child subreaper while the Manager lives (``start_pool``)
    adopting = False

    def swept(self) -> None:
        """The Manager's VMs are swept after its end, the processes it left reaped: this
        process adopts no more (``orphans.release``)."""
        if self.adopting:
            self.adopting = False
            orphans.release()


PoolServer.register("VMPoolManager", _make_pool, exposed=_POOL_METHODS)


def _serve_init(parent_pid: int, log_to: ChildLogging | None) -> None:
    """Runs first in the Manager process: forward its logs, ignore Ctrl-C, follow the
    runner's death."""
    if log_to is not None:
        log_to.install(process_name="vm-pool")
    # Ctrl-C (and a closed terminal's SIGHUP) reaches the whole process group; the runner
    # decides the shutdown order.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    follow_the_runner_on_sigterm()  # so does a SIGTERM sent to the whole job

    def follow_parent() -> None:
        while os.getppid() == parent_pid:
            time.sleep(0.2)
        # The runner is gone (even SIGKILLed): stop every VM so nothing leaks, then go.
        for pool in list(_live_pools):
            try:
                pool.shutdown()
            except Exception:  # noqa: BLE001
                pass
        kill_all()  # boots still under way; os._exit runs no atexit hook
        os._exit(3)

    threading.Thread(target=follow_parent, name="follow-runner", daemon=True).start()


def start_pool(ctx, provider_name: str, *args: Any, log_to: ChildLogging | None = None,
               **kwargs: Any) -> tuple[PoolServer, Any]:
    """Start the Manager process and the pool inside it; return (manager, pool proxy).
    ``log_to``: where the Manager forwards its log records (``logs``). In the command's process
    (``orphans.adopts_for_the_pool``: its run, which sweeps the Manager's VMs after its end and
    then calls its ``swept``), where the provider's sandboxes outlive a SIGKILLed Manager as
    zombies, this process is their child subreaper until then (the sweep reaps them)."""
    server = PoolServer(ctx=ctx)
    if orphans.adopts_for_the_pool() and get_provider(provider_name).adopted_by_runner:
        server.adopting = True
        orphans.hold()
    try:
        server.start(initializer=_serve_init, initargs=(os.getpid(), log_to))
    except BaseException:
        server.swept()  # no Manager: nothing of it to adopt
        raise
    try:
        pool = server.VMPoolManager(provider_name, *args, **kwargs)
    except BaseException:
        server.shutdown()
        server.swept()
        raise
    return server, pool
