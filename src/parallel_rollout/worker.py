"""RolloutWorker: a process running K env loops; each loop turns an Assignment into a record.

The engine talks to each worker over its own duplex pipe (see ``engine``). The worker's main
thread reads the pipe and hands Assignments to K loop threads; a loop sends ``Started``
before it runs an attempt (so the engine knows what this process holds if it dies) and
``Finished`` with the record after. A loop makes one Env per mode (on first use) and one
Agent; the tasks of one worker may mix modes. A ``Cancel`` makes the attempt stop at its
next turn (status ``cancelled``; the engine drops that record). One attempt::

    Started → lease a VM (if the mode needs one) → env.reset → agent/env turns
            → env.evaluate → release (always; a VM failure marks the VM dead) → Finished

Failures become records, never exceptions that escape: infrastructure errors (VM, guest,
lease) are flagged ``infrastructure`` so the engine retries them on another VM; agent and
task errors (a constructor that raises, a ``SystemExit`` included) are graded outcomes, and
so is a VM that breaks once the task's own actions ran (``sandbox_violation``: the task's
doing, and its VM restarts from its snapshot without spending the pool's budget). A
lease wait is announced (``LeaseWait``) so that the engine stops the task clock meanwhile:
the task clock measures the attempt, not the queue for a VM. A loop that fails outside an
attempt (it cannot happen by design; a bug would) reports the attempt it held as an error
and goes on.
"""

from __future__ import annotations

import json
import os
import queue
import signal
import sys
import threading
import time
import traceback
from contextlib import contextmanager
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any, Iterator

from .agents import Agent, get_agent
from .config import RunConfig
from .envs import Env, get_env
from .errors import AttemptCancelled, RolloutError, SandboxViolation, VMError
from .messages import Assignment, Cancel, Finished, LeaseWait, Started, Stop
from .pool.leasing import AttemptLeaser
from .results import StorageError, storable_record
from .tasks import safe_name

#: characters of a traceback kept in a record
TRACEBACK_TAIL = 4000


class RolloutWorker:
    """One worker process: K env loops sharing the process's pool proxy."""

    def __init__(self, worker_id: str, holder: str, conn: Connection, pool: Any, config: RunConfig,
                 run_dir: str) -> None:
        self.worker_id = worker_id
        #: this spawn's token: what the pool knows this process by (pids get reused)
        self.holder = holder
        self.conn = conn
        self.pool = pool
        self.config = config
        self.run_dir = Path(run_dir)
        self.pid = os.getpid()
        self._inbox: queue.Queue[Assignment | Stop] = queue.Queue()
        self._send_lock = threading.Lock()
        #: (key, attempt) of attempts the engine cancelled
        self._cancelled: set[tuple[str, int]] = set()

    def run(self) -> None:
        """Read assignments until STOP (or the engine is gone), then let the loops finish."""
        loops = [threading.Thread(target=self._loop, args=(slot,), name=f"env-loop-{slot}")
                 for slot in range(self.config.envs_per_worker)]
        for thread in loops:
            thread.start()
        while True:
            try:
                message = self.conn.recv()
            except (EOFError, OSError):
                # The engine (its process) died: nobody will read our results, so stop at once. The pool
                # follows that process too and stops the VMs.
                os._exit(1)
            if isinstance(message, Stop):
                for _ in loops:
                    self._inbox.put(message)
                break
            if isinstance(message, Cancel):
                self._cancelled.add((message.key, message.attempt))
                continue
            self._inbox.put(message)
        for thread in loops:
            thread.join()

    def _send(self, message: Started | LeaseWait | Finished) -> None:
        if self.conn is None:  # a Ray actor: the driver learns of an attempt by its reference
            return
        try:
            with self._send_lock:
                self.conn.send(message)
        except (OSError, ValueError):
            os._exit(1)  # the engine is gone (see run)

    def _loop(self, slot: int) -> None:
        parts = _LoopParts(self.config)
        while True:
            item = self._inbox.get()
            if isinstance(item, Stop):
                return
            try:
                self._send(Started(item.key, item.attempt))
                record = self.run_attempt(item, slot, parts)
            except BaseException as exc:  # noqa: BLE001 - a loop must never die silently
                record = {"key": item.key, "task_id": item.task.id, "sample_idx": item.sample_idx,
                          "attempt": item.attempt, "mode": item.task.mode, "status": "error",
                          "reward": 0.0, "success": False, "infrastructure": False,
                          "failure": _failure(exc, f"the env loop failed: {type(exc).__name__}: {exc}"),
                          "worker": self.worker_id, "pid": self.pid, "slot": slot,
                          "started_at": round(time.time(), 4), "ended_at": round(time.time(), 4)}
                parts = _LoopParts(self.config)  # start the next attempt afresh
            self._cancelled.discard((item.key, item.attempt))
            self._send(Finished(item.key, item.attempt, record))

    def _check_cancelled(self, item: Assignment) -> None:
        if (item.key, item.attempt) in self._cancelled:
            raise AttemptCancelled(f"attempt {item.attempt} of {item.key} was cancelled")

    def run_attempt(self, item: Assignment, slot: int, parts: "_LoopParts") -> dict[str, Any]:
        """Run one attempt to its record; never raises."""
        task = item.task
        started = time.time()
        record: dict[str, Any] = {
            "key": item.key, "task_id": task.id, "sample_idx": item.sample_idx,
            "attempt": item.attempt, "mode": task.mode, "tags": list(task.tags),
            "status": None, "reward": 0.0, "success": False, "infrastructure": False,
            "failure": None, "turns": 0, "worker": self.worker_id, "pid": self.pid,
            "slot": slot, "vm": None, "lease_wait_s": None, "started_at": round(started, 4),
        }
        if item.meta:
            record["meta"] = dict(item.meta)
        trajectory = _Trajectory(self.run_dir, item)
        record["trajectory"] = trajectory.relpath
        agent = None
        try:
            self._check_cancelled(item)
            env, agent = parts.env(task.mode), parts.agent()
            # The hook for envs that write files of their own (osworld: traj.jsonl, step_N.png).
            env.trajectory_dir = trajectory.extra_dir
            leaser = AttemptLeaser(self.pool, self._owner(slot), item, self.config.lease_timeout_s, self.holder,
                             record, self._send)
            if env.vm_scope == "episode":
                with leaser.lease() as vm:
                    self._episode(env, agent, item, vm, record, trajectory)
            else:
                self._episode(env, agent, item, leaser if env.vm_scope else None, record, trajectory)
        except RolloutError as exc:
            record.update(status=exc.kind, infrastructure=exc.infrastructure, reward=0.0, success=False,
                          failure=_failure(exc))
        except (EOFError, ConnectionError, BrokenPipeError) as exc:
            # The pool's Manager process is gone; the engine notices and stops the run.
            record.update(status=VMError.kind, infrastructure=True, failure=_failure(exc, "pool unreachable"))
        except BaseException as exc:  # noqa: BLE001 - an agent or env error (SystemExit too) is this attempt's outcome
            record.update(status="error", failure=_failure(exc))
        finally:
            trajectory.close()
        record["usage"] = _safe_usage(agent) if agent is not None else {}
        record["ended_at"] = round(time.time(), 4)
        record["duration_s"] = round(record["ended_at"] - started, 4)
        return _serializable(record)

    def _owner(self, slot: int) -> str:
        # Private VMs are bound to a worker index, which survives a respawn of the worker.
        return self.worker_id if self.config.envs_per_worker == 1 else f"{self.worker_id}.{slot}"

    def _episode(self, env: Env, agent: Agent, item: Assignment, vm: Any,
                 record: dict[str, Any], trajectory: "_Trajectory") -> None:
        observation = env.reset(item.task, vm)
        agent.reset(item.task)
        done = False
        max_turns = self.config.max_turns
        if "max_turns" not in self.config.explicit and env.default_max_turns:
            max_turns = env.default_max_turns
        for turn in range(1, max_turns + 1):
            self._check_cancelled(item)
            action = agent.act(observation)
            with _task_breaks_vm("action"):
                step = env.step(action)
            record["turns"] = turn
            trajectory.write({"turn": turn, "action": action, "observation": step.observation,
                              "done": step.done, "info": step.info, **agent.turn_record()})
            observation = step.observation
            if step.done:
                done = True
                break
        with _task_breaks_vm("grading"):  # what the answer left running may break it too
            reward, details = env.evaluate()
        record["reward"] = float(reward)
        record["success"] = reward >= 1.0
        record["eval"] = details
        if record["success"]:
            record["status"] = "success"
        else:
            record["status"] = "failure" if done else env.turn_limit_status


@contextmanager
def _task_breaks_vm(phase: str) -> Iterator[None]:
    """A VMError once the task's own actions ran is a ``SandboxViolation``: the task's doing
    (a hostile answer kills its guest agent), not the pool's, unless its provider tells it
    was killed from outside (``leasing.lease_vm``: ``VMKilled``, retried); a failure of
    ``env.reset`` (the task's setup, before any action) stays infrastructure and is retried."""
    try:
        yield
    except SandboxViolation:
        raise
    except VMError as exc:
        raise SandboxViolation(f"the VM broke during the task's {phase}: {exc.kind}: {exc}") from exc


class _LoopParts:
    """One env loop's Env per mode and its Agent, each made on first use."""

    def __init__(self, config: RunConfig) -> None:
        self.config = config
        self._envs: dict[str, Env] = {}
        self._agent: Agent | None = None

    def env(self, mode: str) -> Env:
        """This loop's Env of ``mode``."""
        if mode not in self._envs:
            self._envs[mode] = get_env(mode)(self.config)
        return self._envs[mode]

    def agent(self) -> Agent:
        """This loop's Agent."""
        if self._agent is None:
            self._agent = get_agent(self.config.agent)(self.config)
        return self._agent


class _Trajectory:
    """``trajectories/<task>/<sample>/attempt-<n>.jsonl`` (``trajectories/<name>/…`` for a
    named Assignment): one line per turn."""

    def __init__(self, run_dir: Path, item: Assignment) -> None:
        attempt = item.attempt
        if item.name:
            folder = run_dir / "trajectories" / safe_name(item.name)
        else:
            folder = run_dir / "trajectories" / safe_name(item.task.id) / str(item.sample_idx)
        self.relpath = str(folder.relative_to(run_dir) / f"attempt-{attempt}.jsonl")
        self._path = folder / f"attempt-{attempt}.jsonl"
        #: where the env may write extra files of this attempt (created by the env)
        self.extra_dir = folder / f"attempt-{attempt}"
        self._fh = None

    def write(self, entry: dict[str, Any]) -> None:
        """Append one turn; StorageError when the output folder cannot take it."""
        line = json.dumps(entry, default=repr, ensure_ascii=False) + "\n"
        try:
            if self._fh is None:
                self._path.parent.mkdir(parents=True, exist_ok=True)
                self._fh = open(self._path, "w", encoding="utf-8")
            self._fh.write(line)
            self._fh.flush()
        except OSError as exc:
            # A full disk is not the sample's outcome: the engine stops and a
            # resume runs the attempt again.
            raise StorageError(f"cannot write {self._path}: {exc.strerror or exc}; free space "
                               "(or fix the folder) and rerun with --resume") from exc

    def close(self) -> None:
        """Close the file, if one was opened; never raises (it runs in a ``finally``)."""
        if self._fh is not None:
            fh, self._fh = self._fh, None
            try:
                fh.close()
            except OSError:
                pass  # the unflushed tail of a failed write; write() already raised


def _failure(exc: BaseException, message: str | None = None) -> dict[str, Any]:
    tb = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
    return {"type": type(exc).__name__, "message": message or str(exc)[:2000], "traceback": tb[-TRACEBACK_TAIL:]}


def _safe_usage(agent: Agent) -> Any:
    try:
        return agent.usage()
    except Exception as exc:  # noqa: BLE001
        return {"error": repr(exc)}


def _serializable(record: dict[str, Any]) -> dict[str, Any]:
    """The record itself when it is plain JSON; otherwise an error record saying why.

    Checked here, in the worker, because an object that cannot cross the pipe would
    otherwise fail inside the engine or be lost."""
    try:
        json.dumps(record)
        return storable_record(record)  # NaN or a lone surrogate: its own failure
    except (TypeError, ValueError) as exc:
        keep = {k: record.get(k) for k in ("key", "task_id", "sample_idx", "attempt", "mode", "tags",
                                            "turns", "worker", "pid", "slot", "vm", "lease_wait_s",
                                            "started_at", "ended_at", "duration_s", "trajectory")}
        return {**keep, "status": "error", "reward": 0.0, "success": False, "infrastructure": False,
                "failure": {"type": "UnserializableResult",
                            "message": f"the attempt's record is not JSON-serializable: {exc}",
                            "traceback": ""}}


def worker_main(worker_id: str, holder: str, conn: Connection, pool: Any, config: RunConfig,
                run_dir: str) -> None:
    """Entry point of a worker process (spawn start method)."""
    # Ctrl-C goes to the whole process group; the engine orders the shutdown.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    try:
        RolloutWorker(worker_id, holder, conn, pool, config, run_dir).run()
    finally:
        sys.stdout.flush()
