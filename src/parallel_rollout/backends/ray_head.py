"""The Ray cluster's head node as the driver sees it (``HeadWatch``: its GCS asked in a thread
of its own, waited for ``HEAD_LOST_S`` at most), and the end of a driver that lost it
(``disconnect_lost``, ``exit_if_stranded``): Ray's own disconnect waits on the head for ever.

Nothing here imports Ray at load: ``--backend local`` never needs it.
"""

from __future__ import annotations

import logging
import os
import sys
import threading
import time
from typing import Any, Callable

#: seconds the head node's GCS may leave the driver's questions unanswered before the run
#: counts the cluster lost and stops: Ray itself ends a driver whose GCS is gone 60 s (its
#: gcs_rpc_server_reconnect_timeout_s), at once, with no summary; this leaves the stop its time
HEAD_LOST_S = 15.0
#: Ray's own setting of that time: in the cluster's system config (its head started with
#: ``--system-config``, or ``_system_config`` of ray.init), which Ray puts first, or else in
#: the driver's environment, as Ray reads them
RAY_GCS_TIMEOUT = "gcs_rpc_server_reconnect_timeout_s"
RAY_GCS_TIMEOUT_ENV = f"RAY_{RAY_GCS_TIMEOUT}"


def head_lost_s(cluster_config: dict[str, Any] | None = None) -> float:
    """HEAD_LOST_S, or a quarter of Ray's own time to end the driver (as 15 s is of its 60)
    when that is shorter: the run stopped, naming the head, before Ray ended it. Ray's time
    is the cluster's system config's (``cluster_config``), else the driver's environment's.
    A longer one leaves the run's limit as it is (and a trainer more time after get_batch's
    error)."""
    said = (cluster_config or {}).get(RAY_GCS_TIMEOUT)
    if said is None:
        said = os.environ.get(RAY_GCS_TIMEOUT_ENV, "") or "inf"
    try:
        ray_s = float(said)
    except (TypeError, ValueError):  # Ray's to refuse
        return HEAD_LOST_S
    return min(HEAD_LOST_S, max(ray_s / 4, 0.5))


def cluster_config() -> dict[str, Any]:
    """The system config the cluster's head was started with, as its GCS says it: Ray's
    settings there win over the driver's environment ({} when it cannot be read: a Ray
    client's driver, ray://, has no GCS of its own to ask)."""
    from ray._private.state import state

    try:
        return dict(state.get_system_config())
    except Exception:  # noqa: BLE001
        return {}


class HeadWatch:
    """The cluster's head node as the driver sees it. Its GCS is asked for the alive nodes in
    a thread of its own: ``ray.nodes()`` waits for a GCS that is gone until Ray ends the
    process (60 s, no summary), and for one that is stopped or cut off without a reset, for
    ever; the engine's thread waits for the answer ``ANSWER_S`` at most."""

    #: seconds the engine's thread waits for the GCS's answer
    ANSWER_S = 1.0

    def __init__(self) -> None:
        self.address, self.node_id = "", None  # said once attached
        self._since: float | None = None  # the head has not answered since
        self._asked: dict[str, Any] | None = None  # the call under way: "done", "nodes"
        #: the run counted the head lost (after ``lost_after`` s): no call that waits on it any more
        self.lost = False
        #: seconds unanswered that count the head lost (``head_lost_s``: the driver's
        #: environment's, then the cluster's system config's, read with its first answer)
        self.lost_after = head_lost_s()
        self._config_read = False

    def attach(self) -> list[str] | None:
        """Watch the head of the cluster this process is connected to: its address, then the
        alive nodes (and the head's id) as its GCS says them, waited for HEAD_LOST_S at most;
        None when it did not answer that long (stopped, cut off: the run's start waited on
        ``ray.nodes()`` for ever, saying nothing)."""
        import ray

        try:
            self.address = ray.get_runtime_context().gcs_address or ""
        except Exception:  # noqa: BLE001 - a Ray client (ray://): said without its address
            pass
        return self.answer()

    def answer(self) -> list[str] | None:
        """The alive nodes, waited for HEAD_LOST_S at most (None: the head did not answer)."""
        while (nodes := self.alive_nodes()) is None and not self.gone():
            time.sleep(0.1)  # an error rather than no answer: asked again
        return nodes

    def wait_for(self, call: Callable[[], Any]) -> bool:
        """Make ``call`` (Ray calls that wait on the head: actors made, their classes sent to
        its GCS) in a thread of its own, waited for while the head answers; False once it has
        not answered for HEAD_LOST_S, the call left waiting on it (the run's start waited for
        ever, saying nothing). An error of ``call`` is raised here."""
        done, failed = threading.Event(), []

        def make() -> None:
            try:
                call()
            except BaseException as exc:  # noqa: BLE001 - the caller's to raise
                failed.append(exc)
            finally:
                done.set()

        threading.Thread(target=make, name="ray-head-bounded", daemon=True).start()
        while not done.wait(0.2):
            if self.alive_nodes() is None and self.gone():
                return False
        if failed:
            raise failed[0]
        return True

    def lost_reason(self) -> str:
        """Why the cluster counts as lost, naming the head (the run's stop, ``vms sweep``'s error)."""
        return f"the Ray cluster's head node ({self.address}) has not answered for {self.down_for():.0f}s"

    def alive_nodes(self) -> list[str] | None:
        """The alive nodes, as the GCS says them within ANSWER_S; None when it did not (a call
        that does not return is waited for, never made twice)."""
        if self._asked is None:
            asked: dict[str, Any] = {"done": threading.Event(), "nodes": None}

            def ask() -> None:
                import ray

                try:
                    found = ray.nodes()
                    if not self._config_read:  # once the GCS answers: read once
                        self._config_read, self.lost_after = True, head_lost_s(cluster_config())
                    self.node_id = self.node_id or next((n["NodeID"] for n in found if "node:__internal_head__"
                                                         in n.get("Resources", {})), None)
                    asked["nodes"] = alive_ids(found)
                except Exception:  # noqa: BLE001 - the GCS did not answer this time
                    pass
                asked["done"].set()

            self._asked = asked
            threading.Thread(target=ask, name="ray-head-watch", daemon=True).start()
        if not self._asked["done"].wait(self.ANSWER_S):
            self._since = self._since or time.monotonic()
            return None
        nodes, self._asked = self._asked["nodes"], None
        self._since = None if nodes is not None else self._since or time.monotonic()
        return nodes

    def gone(self) -> bool:
        """The head has not answered for ``lost_after`` s: the cluster counts as lost."""
        return self.down_for() >= self.lost_after

    def down_for(self) -> float:
        """Seconds since the head last answered in time (0.0: it answers)."""
        return 0.0 if self._since is None else max(time.monotonic() - self._since, 1e-3)


#: the driver's head node was lost: Ray's disconnect and its clean-up at exit wait on it
_STRANDED = threading.Event()


def disconnect_lost() -> None:
    """What ``ray.shutdown()`` is for a driver whose head node is lost: nothing now. It waits on
    the GCS (a stopped one for ever), and so does Ray's own at the process's exit; the command
    ends with ``exit_if_stranded``, a program that ran the engine in its own process (an RL
    trainer) as it chooses, ``_let_go`` at its exit."""
    import atexit

    import ray

    _STRANDED.set()
    atexit.unregister(ray.shutdown)
    atexit.register(_let_go)
    _end_before_ray_s_destructors()


def _end_before_ray_s_destructors() -> None:
    """Have the C library end the process with its status (``_exit``) as soon as the
    interpreter is finalized, before the C++ destructors of Ray's core worker, which ran under
    its threads still waiting on the lost head and killed the program with SIGSEGV, its own
    status lost (a trainer's ``sys.exit(3)`` after get_batch's error, which its scheduler
    then took for a crash). glibc's ``on_exit`` hands the status over, whether the program
    returned, raised or called ``sys.exit``; the handlers registered before this one (Ray's,
    the C++ libraries loaded before) are skipped, Python's own ``atexit`` ones all ran. Not
    glibc: the interpreter's own end, as before."""
    import ctypes

    try:
        libc = ctypes.CDLL(None)
        on_exit, end = libc.on_exit, ctypes.cast(libc._exit, ctypes.c_void_p)
    except (OSError, AttributeError):  # no on_exit (macOS, musl)
        return
    on_exit.argtypes, on_exit.restype = [ctypes.c_void_p, ctypes.c_void_p], ctypes.c_int
    on_exit(end, None)  # called as _exit(status, arg): the arg is ignored


def _let_go() -> None:
    """At the exit of a program whose driver lost the head: tell Ray's core worker that the
    driver ends, waiting 1 s at most (it waits on the head): the interpreter's end otherwise
    tore the core worker down under its threads, and the program died of SIGSEGV, its own
    exit status (a trainer's ``sys.exit(3)`` after get_batch's error) lost."""
    import ray

    core_worker = getattr(ray._private.worker.global_worker, "core_worker", None)
    if core_worker is not None:
        ending = threading.Thread(target=core_worker.shutdown_driver, name="ray-let-go", daemon=True)
        ending.start()
        ending.join(1.0)


def exit_if_stranded(code: int) -> None:
    """End the command now with ``code`` when its driver lost the head node (its summary and
    messages written): the interpreter's own end, Ray's core worker's included, waited on
    the head or crashed (SIGSEGV) in it."""
    if not _STRANDED.is_set():
        return
    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    os._exit(code)


def alive_ids(nodes: list[dict[str, Any]]) -> list[str]:
    return sorted(n["NodeID"] for n in nodes if n.get("Alive"))
