"""The Ray cluster as the ray backend sees it: connecting (once its head node takes a TCP
connection; the caller's stop-signal handlers kept over ray.init), its nodes, pinning an
actor (or a task) to a node, the pools' stats summed over nodes, and a sweep of every node
(the head node's watch: ``ray_head``; the pools' reports, events and stats: ``ray_pools``).

Nothing here imports Ray at load: ``--backend local`` never needs it.
"""

from __future__ import annotations

import logging
import os
import re
import signal
import socket
import threading
import time
from multiprocessing.connection import wait as mp_wait
from typing import Any, Callable

from ..errors import STOP_SIGNALS, ClusterUnreachable, InterruptedBeforeStart, ProviderUnavailable, VMError
from .ray_actors import sweep_here
from .ray_head import HeadWatch, disconnect_lost
from .ray_logs import forget_marks, marked, run_lines_key
from .ray_probe import answers_as_grpc

log = logging.getLogger("parallel_rollout")

_LOOPBACK = ("127.0.0.1", "localhost")
#: the object store of a Ray instance the run starts itself
LOCAL_OBJECT_STORE_BYTES = 200 * 1024 * 1024
#: seconds the head node's GCS port has to take a TCP connection before the cluster counts
#: as unreachable (a firewall that drops packets never refuses)
REACH_TIMEOUT_S = 5.0
#: how often wait_ready() looks at its pipes while waiting on Ray
_SLICE_S = 0.05
#: seconds a node has for a sweep of leftovers (``Sweeps``, ``sweep_cluster``), from the
#: sweep's start on the node (its ``sweep_here`` marks it): Ray's start of a worker process and
#: its import of the package are not in it (under load they left nodes out)
SWEEP_S = 120.0
#: seconds Ray has to start a node's sweep, from its dispatch: the backstop for a node that
#: never starts it (its raylet, or its workers' start, hangs)
SWEEP_START_S = 300.0


def _loopback_first(address: str | None) -> None:
    """Ray takes this host's address from the route to the internet; a local instance (or a
    cluster on loopback) must be reached on 127.0.0.1. Read when Ray is imported: call first.
    ``auto`` is RAY_ADDRESS when that is set, as ray.init reads it."""
    if address == "auto":
        address = os.environ.get("RAY_ADDRESS") or address
    if not address or address.split(":")[0] in _LOOPBACK:
        os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")


def check_reachable(address: str | None, resume: bool = False) -> str:
    """ClusterUnreachable unless the head node at ``address`` takes a TCP connection (on its
    GCS port) within REACH_TIMEOUT_S and answers there as a GCS (``ray_probe``): ray.init
    would retry "Failed to connect to GCS" for ever. ``auto`` is resolved as ray.init resolves it (RAY_ADDRESS, the last ``ray start``,
    a GCS running here). Returns the host:port checked; "" when there is nothing to reach (no
    address: a local instance; a process already connected to Ray). ``resume``: the address
    is the one the run stored, and the error says how a resume gives another (its cluster
    is often gone by then)."""
    if not address:
        return ""
    _loopback_first(address)
    import ray

    if ray.is_initialized():
        return ""
    from ray._private.services import canonicalize_bootstrap_address

    target = ""
    try:
        # ray://HOST:PORT is the Ray client's server: reached as it is. Another scheme (the
        # dashboard's http://) reached a GCS on that port, and ray.init refused it after the
        # run folder opened, telling of RAY_ADDRESS
        scheme, _, rest = address.rpartition("://")
        if scheme not in ("", "ray"):
            raise ValueError(f"its scheme is {scheme}://, not ray://")
        target = rest if scheme else canonicalize_bootstrap_address(address) or ""
        host, _, port = target.rpartition(":")
        if not port.isdigit():
            raise ValueError(f"its port {port!r} is not a number" if host else "it names no port")
        with socket.create_connection((host.strip("[]"), int(port)), timeout=REACH_TIMEOUT_S) as conn:
            answers_as_grpc(conn, REACH_TIMEOUT_S)
    except ValueError as exc:  # what ray.init would refuse, or retry for ever
        raise ClusterUnreachable(f"--ray-address {address}: not a Ray cluster's address ({exc}): give its head "
                                 "node's HOST:PORT (the port of ray start --head --port), auto or ray://HOST:PORT; "
                                 "nothing ran") from None
    except OSError as exc:  # a ConnectionError: auto found no cluster
        said = f"at {target} (--ray-address {address})" if target and target != address else f"at {address}"
        reason = exc.strerror or why(exc)
        again = ("; the run's cluster may be gone: resume on another with --ray-address HOST:PORT, or on this "
                 "host with --backend local" if resume else "")
        raise ClusterUnreachable(f"cannot reach the Ray cluster {said}: {reason}; start it (ray start --head) or "
                                 f"give its head node's HOST:PORT{again}; nothing ran") from None
    return target


def connect(address: str | None) -> bool:
    """Connect to Ray; True when this call connected (and the caller must disconnect).
    ClusterUnreachable when the cluster cannot be reached or refuses this driver. The stop
    signals' handlers are the caller's again after it (see below)."""
    _loopback_first(address)
    import ray

    if ray.is_initialized():
        return False
    check_reachable(address)
    kwargs: dict[str, Any] = dict(log_to_driver=False, logging_level=logging.WARNING)
    # ray.init sets SIGTERM's handler (a sys.exit; the core worker's on a cluster, which aborts
    # the process: no summary, no resume line): the caller's (the run's clean stop, exit 130;
    # an ignored signal ignored) are set again after it
    handlers = ({sig: signal.getsignal(sig) for sig in STOP_SIGNALS}
                if threading.current_thread() is threading.main_thread() else {})
    stopped = False
    try:
        if address:
            ray.init(address=address, **kwargs)
        else:
            # "local": a new instance even when RAY_ADDRESS or /tmp/ray/ray_current_cluster names
            # another (possibly long dead) cluster, which ray.init() would otherwise join
            ray.init(address="local", num_cpus=os.cpu_count() or 1, object_store_memory=LOCAL_OBJECT_STORE_BYTES,
                     include_dashboard=False, **kwargs)
    except SystemExit as exc:
        if exc.code != signal.SIGTERM or not handlers:
            raise
        stopped = True  # Ray's handler took a SIGTERM meant for the caller's
    except Exception as exc:  # noqa: BLE001 - whatever Ray raises: ConnectionError, RuntimeError …
        where = f"the Ray cluster at {address}" if address else "a local Ray instance"
        raise ClusterUnreachable(f"cannot connect to {where}: {why(exc)}{_first_cause(exc)}; nothing ran") from None
    finally:
        for sig, handler in handlers.items():
            if handler is not None:
                signal.signal(sig, handler)
    if stopped:
        ray.shutdown()
        signal.raise_signal(signal.SIGTERM)  # to the caller's handler, which decides
        raise InterruptedBeforeStart(signal.SIGTERM)
    _cluster_errors_logged()
    return True


def _cluster_errors_logged() -> None:
    """The errors of the cluster Ray's driver hears (a node's death: ``Raylet is terminated``
    and its raylet's last 20 log lines, or ``marked dead because the detector has missed too
    many heartbeats``), which Ray printed on stdout, across the progress bar and the run's
    output and not in run.log, are logged at DEBUG (``-v``): the run says each loss in its own
    line. Ray's listener of these errors prints through ``print_to_stdstream`` of its module,
    ``pid`` ``raylet``; the workers' logs (``log_to_driver``, off) do not go through it."""
    from ray._private import worker

    printer = getattr(worker, "print_to_stdstream", None)
    if printer is None or getattr(printer, "logged_instead", False):
        return  # another Ray than the one this was written for: its printing is left as it is

    def to_log(data: dict[str, Any], ignore_prefix: bool) -> None:
        if data.get("pid") != "raylet":
            return printer(data, ignore_prefix)
        for text in data.get("lines", ()):
            log.debug("Ray: %s", text)

    to_log.logged_instead = True  # type: ignore[attr-defined]
    worker.print_to_stdstream = to_log


def _first_cause(exc: BaseException) -> str:
    """What ray.init's error was raised from (an invalid token …), in parentheses: the last
    line of the innermost cause, which may be a traceback's text; "" without a cause."""
    if exc.__cause__ is None:
        return ""
    while exc.__cause__ is not None:
        exc = exc.__cause__
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    return f" ({(lines[-1] if lines else type(exc).__name__)[:500]})"


def driver_ip(address: str | None) -> str:
    """The IP the cluster's nodes reach this process at (for a server of the driver's, like
    the RL policy gate): 127.0.0.1 for a local instance or a cluster on loopback, else this
    host's address on the route to the head node (``auto``: the one Ray picks)."""
    if not address:
        return "127.0.0.1"
    if address == "auto":
        from ray.util import get_node_ip_address

        return get_node_ip_address()
    host, _, port = address.removeprefix("ray://").rpartition(":")
    if host in _LOOPBACK:
        return "127.0.0.1"
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        probe.connect((host, int(port)))  # a UDP "connect" sends nothing: it picks the route
        return probe.getsockname()[0]


def done_refs(refs: list[Any]) -> set[Any]:
    """The references among ``refs`` that are ready now (no wait)."""
    import ray

    if not refs:
        return set()
    done, _ = ray.wait(refs, num_returns=len(refs), timeout=0)
    return set(done)


def wait_ready(watched: Callable[[], list[Any]], extra: list[Any], timeout: float) -> set[Any]:
    """Block until one of the references ``watched()`` returns (asked again every _SLICE_S)
    or one of the ``extra`` pipes is ready, or ``timeout`` passes; what is ready."""
    import ray

    deadline = time.monotonic() + timeout
    while True:
        refs = watched()
        done: list[Any] = []
        if refs:
            done, _ = ray.wait(refs, num_returns=len(refs), timeout=0)
        ready = set(done) | set(mp_wait(extra, timeout=0))
        remaining = deadline - time.monotonic()
        if ready or remaining <= 0:
            return ready
        if refs:
            ray.wait(refs, num_returns=1, timeout=min(_SLICE_S, remaining))
        else:
            mp_wait(extra, timeout=min(_SLICE_S, remaining))


def why(exc: BaseException) -> str:
    """An exception from Ray (an actor's death, a task's error) in one line: its type, first
    line and, when Ray's text goes on (the traceback of an error an actor's creation or method
    raised, the fields of a death), its last line, which says what happened (the first alone
    said only "an error raised in its creation task, ray::PoolActor.__init__() (pid=…)");
    without the terminal's colour codes Ray puts in it."""
    lines = [line.strip() for line in re.sub(r"\x1b\[[0-9;]*m", "", str(exc)).splitlines() if line.strip()]
    text = lines[0][:300] if lines else ""
    if len(lines) > 1:
        text += f" … {lines[-1][:300]}"
    return f"{type(exc).__name__}: {text}"


def pinned(cls: Any, node_id: str, **options: Any) -> Any:
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    # Never rerun behind the driver's back: no actor restarts, no task retries.
    retries = dict(max_restarts=0, max_task_retries=0) if isinstance(cls, type) else dict(max_retries=0)
    return ray.remote(cls).options(
        num_cpus=0, **retries,
        scheduling_strategy=NodeAffinitySchedulingStrategy(node_id=node_id, soft=False), **options)


def merge_stats(per_node: dict[str, dict[str, Any] | None], size: int, provider: str) -> dict[str, Any]:
    """One pool's stats shape summed over nodes; a node without stats counts ``size`` dead VMs.
    Reset and boot percentiles are the worst node's (percentiles do not add up)."""
    from ..pool.manager import VMState

    # every state counted, even when no node answers (the progress bar reads each)
    total: dict[str, Any] = {"provider": provider, "size": 0, "states": {s.value: 0 for s in VMState}, "nodes": {}}
    util_weighted = 0.0
    for node_id, stats in per_node.items():
        if stats is None:
            total["size"] += size
            total["states"]["dead"] = total["states"].get("dead", 0) + size
            total["nodes"][node_id] = {"lost": True, "size": size}
            continue
        total["nodes"][node_id] = stats
        total["size"] += stats.get("size", 0)
        for state, count in stats.get("states", {}).items():
            total["states"][state] = total["states"].get(state, 0) + count
        for name, value in stats.items():
            if name in ("size", "states", "utilization"):
                continue
            if isinstance(value, bool) or value is None:
                total.setdefault(name, value)
            elif isinstance(value, (int, float)):
                total[name] = round(total.get(name, 0) + value, 3)
            elif isinstance(value, dict) and name.endswith("_s"):
                worst = total.get(name)
                if not isinstance(worst, dict):
                    worst = total[name] = {}
                for point, seconds in value.items():
                    if isinstance(seconds, (int, float)):
                        worst[point] = max(worst.get(point, seconds), seconds)
            else:
                total.setdefault(name, value)
        util_weighted += stats.get("utilization", 0.0) * stats.get("size", 0)
    total["utilization"] = round(util_weighted / total["size"], 4) if total["size"] else 0.0
    return total


class Sweeps:
    """The sweeps of this run's leftovers (orphans only) that nodes run before they get a pool
    and workers, at the start and when a node joins mid-run: each a task pinned to its node,
    waited for with the others' work going on. A node whose sweep fails (the node died), does
    not end within SWEEP_S of its start on the node (its mark in the cluster's store) or is not
    started within SWEEP_START_S of its dispatch is left out of the run: ``left_out`` says why.
    ``check``: a node where the provider cannot run (``sweep_here``) is left out too, the
    reason its own."""

    def __init__(self, provider_name: str, run_id: str, check: bool = False) -> None:
        self.provider_name, self.run_id, self.check = provider_name, run_id, check
        #: by node: its sweep's reference, its deadline, and whether the sweep started there
        self.pending: dict[str, tuple[Any, float, bool]] = {}
        #: the start marks' keys of these sweeps (then ":" and the node's id), under the driver's
        #: Ray job (``ray_logs.forget_marks``): known once connected, at the first start
        self._marks: str | None = None
        self.left_out: dict[str, str] = {}
        self.removed: list[str] = []  # the VMs the ended sweeps removed

    def start(self, node_id: str) -> None:
        if self._marks is None:  # the marks of drivers killed before they read them go first
            self._marks = run_lines_key()
            forget_marks(self._marks)
        ref = pinned(sweep_here, node_id).remote(self.provider_name, self.run_id, True, self.check,
                                                 f"{self._marks}:{node_id}")
        self.pending[node_id] = (ref, time.monotonic() + SWEEP_START_S, False)

    def known(self, node_id: str) -> bool:
        return node_id in self.pending or node_id in self.left_out

    def refs(self) -> list[Any]:
        return [ref for ref, _, _ in self.pending.values()]

    def _mark_started(self) -> None:
        """The sweeps that started on their node since the last look: their deadline SWEEP_S on."""
        keys = {f"{self._marks}:{node_id}": node_id for node_id, (_, _, began) in self.pending.items() if not began}
        for key in marked(list(keys)) if keys else ():
            ref = self.pending[keys[key]][0]
            self.pending[keys[key]] = (ref, time.monotonic() + SWEEP_S, True)

    def settle(self) -> tuple[list[str], dict[str, str]]:
        """The nodes whose sweep ended (theirs to add, in order) and those left out now, with why."""
        import ray

        swept, failed = [], {}
        self._mark_started()
        for node_id, (ref, deadline, began) in sorted(self.pending.items()):
            if ray.wait([ref], timeout=0)[0]:
                try:
                    self.removed += ray.get(ref)
                    swept.append(node_id)
                except ProviderUnavailable as exc:  # Ray's error is an instance of its cause
                    failed[node_id] = f"the {self.provider_name} provider cannot run there: {exc.cause}"
                except Exception as exc:  # noqa: BLE001 - the node died, the sweep failed
                    failed[node_id] = f"its sweep of the run's leftovers failed: {why(exc)}"
            elif time.monotonic() > deadline:
                self.cancel(node_id)
                failed[node_id] = self._late(began)
            else:
                continue
            del self.pending[node_id]
        self.left_out.update(failed)
        return swept, failed

    @staticmethod
    def _late(began: bool) -> str:
        """Why a node whose sweep is past its time is left out: the sweep hung there, or Ray
        never started it."""
        if began:
            return f"its sweep of the run's leftovers hung: it had not ended {SWEEP_S:.0f}s after it started"
        return ("it never started its sweep of the run's leftovers: Ray had not started it "
                f"{SWEEP_START_S:.0f}s after it was sent")

    def first(self, nodes: list[str], head: HeadWatch,
              stopped: Callable[[], bool] = lambda: False) -> tuple[list[str], dict[str, str]] | None:
        """Sweep ``nodes`` at the run's start and wait for them: the nodes swept and those left
        out, with why; None once the cluster's head has not answered for HEAD_LOST_S (a ``ray.get``
        waited until Ray ended the driver, 60 s, without the run's summary). Once ``stopped()``
        (the run stopped at once: a second Ctrl-C) the sweeps under way are cancelled, their
        nodes left out (``cancel``), and no more waited for."""
        import ray

        swept, failed = [], {}
        for node_id in nodes:
            self.start(node_id)
        while self.pending:
            if stopped():
                self.cancel()
                break
            ray.wait(self.refs(), num_returns=len(self.pending), timeout=1.0)
            done, left_out = self.settle()
            swept, failed = swept + done, {**failed, **left_out}
            if self.pending and head.alive_nodes() is None and head.gone():
                return None
        # a head that stopped answering as the sweeps ended: what follows (the pools and
        # workers made, Ray's disconnect) waited on it for ever
        return None if head.answer() is None else (sorted(swept), failed)

    def cancel(self, node_id: str | None = None) -> None:
        """Stop the sweep under way on ``node_id`` (every node's: None, as the run ends: those
        nodes never served it, and are left out), best effort."""
        import ray

        for node in [node_id] if node_id else list(self.pending):
            try:
                ray.cancel(self.pending[node][0], force=True)
            except Exception:  # noqa: BLE001 - its node is gone
                pass
            if node_id is None:
                del self.pending[node]
                self.left_out[node] = "its sweep of the run's leftovers had not ended when the run ended"
        if node_id is None:
            self.forget()

    def forget(self) -> None:
        """Delete the start marks these sweeps left in the cluster's store (a sweep that ended
        before the driver read its mark, one cut off after it wrote it), best effort."""
        if self._marks is not None:
            forget_marks(self._marks)


def sweep_cluster(provider_name: str, run_id: str | None, address: str | None,
                  head: HeadWatch | None = None, died: Callable[[str], None] | None = None) -> list[str]:
    """Run the provider's sweep on every alive node (``Sweeps.first``); the removed VMs of all
    of them. VMError (naming each node and what the others removed) when a node's sweep failed
    (the node died), did not end within SWEEP_S of its start (a hung mount, daemon …) or was
    not started within SWEEP_START_S: it waited for
    ever, or Ray's error escaped as a traceback; or naming the head when it has not answered
    for HEAD_LOST_S (asked for the nodes, or while they sweep: the command waited on it for
    ever), the process then left to ``exit_if_stranded``. ``head``: the watch of the run
    whose end sweeps (its own otherwise), marked ``lost`` then: the run's disconnect must
    not wait on the head (it did, for ever). ``died``: told each node whose sweep failed
    because the cluster no longer has it (a run's end: the node died as the run ended, which
    the run says as such; its sweep is no sweep missed), not named in the VMError."""
    owned = connect(address)  # before Ray's import: see connect()
    import ray

    head, sweeps, lost = head or HeadWatch(), Sweeps(provider_name, run_id), False
    try:
        nodes = head.attach()
        swept = None if nodes is None else sweeps.first(nodes, head)
        if swept is None:
            lost = head.lost = True
            sweeps.pending.clear()  # nothing more is asked of the lost head
            raise VMError(f"{head.lost_reason()}: the cluster is lost (removed on the nodes that answered: "
                          f"{', '.join(sweeps.removed) or 'none'})")
        failed = swept[1]
        if died is not None and failed and (alive := head.answer()) is not None:
            for node_id in [n for n in failed if n not in alive]:
                del failed[node_id]
                died(node_id)
        if failed:
            raise VMError("; ".join(f"node {node_id[:8]}: {reason}" for node_id, reason in failed.items())
                          + f" (removed on the other nodes: {', '.join(sweeps.removed) or 'none'})")
        return sweeps.removed
    finally:
        if not lost:
            sweeps.forget()
        if owned:
            disconnect_lost() if lost else ray.shutdown()
