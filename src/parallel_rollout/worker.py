"""RolloutWorker: a process running K env loops; each loop turns an Assignment into a record.

The engine talks to each worker over its own duplex pipe (see ``engine``). The worker's main
thread reads the pipe and hands Assignments to K loop threads; a loop sends ``Started``
before it runs an attempt (so the engine knows what this process holds if it dies) and
``Finished`` with the record after. A loop makes one Env per mode (on first use) and one
Agent; the tasks of one worker may mix modes. A ``Cancel`` (read by the pipe's thread) calls
the attempt's ``Agent.abort()``, which ends its model request at once, and stops it at its
next turn otherwise (status ``cancelled``; the engine drops that record). One attempt::

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

import dataclasses
import json
import logging
import os
import queue
import signal
import threading
import time
from multiprocessing.connection import Connection
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

from . import records
from .attempt_vms import AttemptLeaser, task_breaks_vm
from .agents import Agent, AttemptInfo, EpisodeCut, get_agent
from .agents.base import run_maybe_async
from .agents.calls import OUTLIVED_ACT, calls_of
from .config import RunConfig
from .envs import Env, answer_files_of, get_env
from .envs.base import checked_evaluation, checked_step
from .errors import AgentNotMade, AttemptCancelled, RolloutError, VMError
from .logs import flush_stdout
from .messages import (Assignment, Cancel, Finished, LeaseWait, Progress, Started, Stop, receive_message,
                       send_message)
from .process_group import die_with_group, lead_group
from .tasks import safe_name
from .trajectories import TrajectoryFile

if TYPE_CHECKING:
    import asyncio


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
        #: SimpleQueue: put and get in C (a short attempt passes through here once)
        self._inbox: queue.SimpleQueue[Assignment | Stop] = queue.SimpleQueue()
        self._send_lock = threading.Lock()
        #: (key, attempt) of attempts the engine cancelled
        self._cancelled: set[tuple[str, int]] = set()
        #: (key, attempt) -> the agent running it: a cancel aborts its model request
        self._agents: dict[tuple[str, int], Agent] = {}
        self._agents_lock = threading.Lock()
        #: the last Progress of each attempt: a Ray actor's driver asks for it at a timeout (a
        #: process worker sends each one down its pipe too)
        self._last_progress: dict[tuple[str, int], Progress] = {}
        #: the lease by which each attempt holds a VM now, and that VM (``AttemptLeaser``)
        self._leases: dict[tuple[str, int], tuple[int, str | None]] = {}

    def run(self) -> None:
        """Read assignments until STOP (or the engine is gone), then let the loops finish."""
        loops = [threading.Thread(target=self._loop, args=(slot,), name=f"env-loop-{slot}")
                 for slot in range(self.config.envs_per_worker)]
        for thread in loops:
            thread.start()
        while True:
            try:
                message = receive_message(self.conn)
            except (EOFError, OSError):
                # The engine (its process) died: nobody will read our results, so stop at once,
                # with what the agent started (nobody else will kill it). The pool follows that
                # process too and stops the VMs.
                die_with_group()
            if isinstance(message, Stop):
                _stop_received.set()
                for _ in loops:
                    self._inbox.put(message)
                break
            if isinstance(message, Cancel):
                self.cancel(message.key, message.attempt)
                continue
            self._inbox.put(message)
        for thread in loops:
            thread.join()

    def _send(self, message: Started | LeaseWait | Progress | Finished) -> None:
        if isinstance(message, Progress):
            self._last_progress[(message.key, message.attempt)] = message
        if self.conn is None:  # a Ray actor: the driver learns of an attempt by its reference
            return
        try:
            with self._send_lock:
                send_message(self.conn, message)
        except OSError:
            die_with_group()  # the engine is gone (see run)
        except ValueError:
            os._exit(1)  # a message its pipe cannot carry: the engine reports the worker's exit

    def _loop(self, slot: int) -> None:
        parts = LoopParts(self.config)
        while True:
            item = self._inbox.get()
            if isinstance(item, Stop):
                return
            started = time.time()
            try:
                self._send(Started(item.key, item.attempt))
                record = self.run_attempt(item, slot, parts)
            except BaseException as exc:  # noqa: BLE001 - a loop must never die silently
                record = records.failed_record(
                    item, exc, worker=self.worker_id, pid=self.pid, slot=slot, started_at=started,
                    status="error", infrastructure=False, with_traceback=True,
                    message=f"the env loop failed: {type(exc).__name__}: {exc}")
                parts = LoopParts(self.config)  # start the next attempt afresh
            self.forget(item.key, item.attempt)
            self._send(Finished(item.key, item.attempt, record))

    def cancel(self, key: str, attempt: int) -> None:
        """Stop an attempt: its agent's model request is aborted and the episode ends at once
        (or at its next turn); its record is ``cancelled``, which the engine drops. The
        worker's other loops never notice. Safe from any thread."""
        self._cancelled.add((key, attempt))
        with self._agents_lock:
            agent = self._agents.get((key, attempt))
            if agent is not None:
                agent.abort()

    def forget(self, key: str, attempt: int) -> None:
        """Drop what is known of a settled attempt (its cancel, its progress)."""
        self._cancelled.discard((key, attempt))
        self._last_progress.pop((key, attempt), None)
        self._leases.pop((key, attempt), None)

    def progress_of(self, key: str, attempt: int) -> Progress | None:
        """A Ray actor's last Progress of an attempt under way, with the VM and lease it holds
        now (None once it is settled)."""
        last = self._last_progress.get((key, attempt))
        held = self._leases.get((key, attempt))
        if last is None or held is None:
            return last
        return dataclasses.replace(last, lease=held[0], vm=held[1])

    def _check_cancelled(self, item: Assignment) -> None:
        if (item.key, item.attempt) in self._cancelled:
            raise AttemptCancelled(f"attempt {item.attempt} of {item.key} was cancelled")

    def run_attempt(self, item: Assignment, slot: int, parts: "LoopParts") -> dict[str, Any]:
        """Run one attempt to its record; never raises."""
        task = item.task
        record = records.new_record(item, worker=self.worker_id, pid=self.pid, slot=slot,
                                    started_at=time.time())
        trajectory = _trajectory_file(self.run_dir, item)
        record["trajectory"] = trajectory.relpath
        agent = None
        try:
            trajectory.begin()
            self._check_cancelled(item)
            env, agent = parts.env(task.mode), parts.agent()
            agent.begin_attempt(AttemptInfo(
                item.key, item.attempt, dict(item.sampling), loop=self._loop_index(slot),
                servers_left_out=item.servers_left_out, servers_unheard=item.servers_unheard,  # and the gold files:
                withheld=(*item.withheld, *answer_files_of([task], quiet=True)),  # the task's, wherever it came from
                on_model_retry=lambda failing: self._progress(item, record, "model_retry" if failing else "agent")))
            with self._agents_lock:
                self._agents[(item.key, item.attempt)] = agent
            self._check_cancelled(item)  # a cancel that came before the agent was known
            # The hook for envs that write files of their own (osworld: traj.jsonl, step_N.png).
            env.trajectory_dir = trajectory.extra_dir
            leaser = AttemptLeaser(self.pool, self._owner(slot), item, self.config.lease_timeout_s,
                                   self.holder, record, self._send, lambda lease: self._held(item, record, lease))
            if env.vm_scope == "episode":
                with leaser.lease() as vm:
                    self._episode(env, agent, parts, item, vm, record, trajectory)
            else:
                self._episode(env, agent, parts, item, leaser if env.vm_scope else None, record, trajectory)
        except RolloutError as exc:  # an EpisodeCut graded as it stood keeps its reward
            record.update(status=exc.kind, infrastructure=exc.infrastructure, success=False,
                          reward=exc.reward if isinstance(exc, EpisodeCut) else 0.0, failure=records.failure(exc))
            if exc.task_fault:  # the task's own error: the engine does not retry it
                record["task_fault"] = exc.task_fault
        except (EOFError, ConnectionError, BrokenPipeError) as exc:
            # The pool's Manager process is gone; the engine notices and stops the run.
            record.update(status=VMError.kind, infrastructure=True,
                          failure=records.failure(exc, "pool unreachable"))
        except BaseException as exc:  # noqa: BLE001 - an agent or env error (SystemExit too) is this attempt's outcome
            record.update(status="error", reward=0.0, success=False, failure=records.failure(exc))
        finally:
            with self._agents_lock:
                self._agents.pop((item.key, item.attempt), None)
            trajectory.close()
        caught = _caught_endpoint_failure(agent, record)
        if caught is not None:  # not the policy's outcome: the model did not answer a turn
            record.pop("task_fault", None)
            record.update(status=caught.kind, infrastructure=True, reward=0.0, success=False,
                          failure=records.failure(caught, f"{caught} (the agent caught this and went on; "
                                                          f"its episode ended {record['status']})"))
        record["usage"] = _safe_usage(agent) if agent is not None else {}
        return _serializable(records.finish(record))

    def _loop_index(self, slot: int) -> int:
        """The env loop's index in the run: worker index × envs_per_worker + slot (both
        backends name a worker ``w<index>``; another name counts as worker 0)."""
        digits = self.worker_id[1:]
        index = int(digits) if digits.isdigit() else 0
        return index * self.config.envs_per_worker + slot

    def _owner(self, slot: int) -> str:
        # Private VMs are bound to a worker index, which survives a respawn of the worker.
        return self.worker_id if self.config.envs_per_worker == 1 else f"{self.worker_id}.{slot}"

    def _episode(self, env: Env, agent: Agent, parts: "LoopParts", item: Assignment, vm: Any,
                 record: dict[str, Any], trajectory: TrajectoryFile) -> None:
        record["env_s"] = 0.0  # the env's own time: its reset, steps and grading (metrics)
        self._progress(item, record, "setup")
        observation = _env_call(record, env.reset, item.task, vm)
        self._progress(item, record, "agent")
        # an agent not trusted with the answer key (the command agent's program, a model)
        # never sees the fields that grade the task
        task = item.task if agent.sees_answer_key else env.agent_view(item.task)
        run_maybe_async(agent.reset(task), parts.event_loop)  # an async agent's on its loop
        done = False
        max_turns = env.turn_limit(self.config)  # a scheduler's config may serve several modes
        for turn in range(1, max_turns + 1):
            self._check_cancelled(item)
            agent.begin_turn()  # the turn's record holds this act's model calls only
            try:
                action = run_maybe_async(agent.act(observation), parts.event_loop)
            except EpisodeCut as cut:
                cut.turn = agent.cut_turn(cut)  # with the turn's calls that outlived the act
                if cut.turn:  # the reply's sampled tokens are part of the episode
                    record["turns"] = turn
                    trajectory.write({"turn": turn, "action": None, "done": True, **cut.turn})
                if item.grade_cut:  # its reward as it stands (Sokoban: the step rewards so far)
                    self._progress(item, record, "grading")
                    with task_breaks_vm("grading"):
                        cut.reward, record["eval"] = checked_evaluation(env, _env_call(record, env.evaluate))
                raise
            except AttemptCancelled:
                raise  # its calls are aborted, and its record is dropped
            except BaseException:
                _failed_turn(agent, turn, record, trajectory)  # the calls it made, sampled all the same
                raise
            turn_record = agent.turn_record()
            env.turn_record = turn_record  # the env may keep the model's reply with the step
            with task_breaks_vm("action"):
                step = checked_step(env, _env_call(record, env.step, action))
            record["turns"] = turn
            trajectory.write({"turn": turn, "action": action, "observation": step.observation,
                              "done": step.done, "info": step.info, **turn_record})
            self._progress(item, record, "agent")
            observation = step.observation
            if step.done:
                done = True
                break
        self._progress(item, record, "grading")
        with task_breaks_vm("grading"):  # what the answer left running may break it too
            reward, details = checked_evaluation(env, _env_call(record, env.evaluate))
        record["eval"] = details
        if type(agent).end_episode is not Agent.end_episode:
            # its code runs again: a worker it ends meanwhile is its doing (backends.base.death_failure)
            self._progress(item, record, "agent")
        # the agent's own check of the episode (a command agent's stray line fails it)
        run_maybe_async(agent.end_episode(), parts.event_loop)
        # An env whose reward is not a 0-1 score (Sokoban's return) says success itself.
        if "success" in details:
            success = bool(details["success"])
        else:
            success = reward >= 1.0
            if not 0.0 <= reward <= 1.0:
                _warn_of_scale(env, reward)
        record.update(reward=reward, success=success, eval=details)
        if record["success"]:
            record["status"] = "success"
        else:
            record["status"] = "failure" if done else env.turn_limit_status


    def _progress(self, item: Assignment, record: dict[str, Any], phase: str) -> None:
        """Tell the engine where the attempt is: a timeout's record keeps it (its VM, turns,
        trajectory, and the phase the time ran out in), and the lease it holds its VM by."""
        held = self._leases.get((item.key, item.attempt))
        self._send(Progress(item.key, item.attempt, phase, record.get("turns"), record.get("vm"),
                            record.get("trajectory"), held[0] if held else None))

    def _held(self, item: Assignment, record: dict[str, Any], lease: int | None) -> None:
        """The attempt took a VM by ``lease``, or gave it back (None): the next ``Progress``
        carries it. A local worker's engine learnt of it already, from the ``LeaseWait`` that
        ended the wait; a Ray actor's driver asks ``progress_of``, which merges it."""
        ident = (item.key, item.attempt)
        if lease is None:
            self._leases.pop(ident, None)
        else:
            self._leases[ident] = (lease, record.get("vm"))


#: the Env classes whose reward outside [0, 1] this process has warned of
_warned_scales: set[type] = set()


def _warn_of_scale(env: Env, reward: float) -> None:
    """Say once per worker process and Env class that its rewards are outside [0, 1] with no
    ``details["success"]``: success is then counted as reward >= 1, which may not be meant."""
    if type(env) in _warned_scales:
        return
    _warned_scales.add(type(env))
    logging.getLogger("parallel_rollout").warning(
        "%s.evaluate returned the reward %r, outside [0, 1], without details['success']: success "
        "is counted as reward >= 1 (return details['success'] to say it; warned once per worker)",
        type(env).__qualname__, reward)


def _env_call(record: dict[str, Any], call: Callable[..., Any], *args: Any) -> Any:
    """``call(*args)``, its time added to the record's ``env_s`` (failed calls too)."""
    started = time.monotonic()
    try:
        return call(*args)
    finally:
        record["env_s"] = round(record["env_s"] + time.monotonic() - started, 4)


class LoopParts:
    """One env loop's Env per mode and its Agent, each made on first use."""

    def __init__(self, config: RunConfig) -> None:
        self.config = config
        self._envs: dict[str, Env] = {}
        self._agent: Agent | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    def env(self, mode: str) -> Env:
        """This loop's Env of ``mode``."""
        if mode not in self._envs:
            self._envs[mode] = get_env(mode)(self.config)
        return self._envs[mode]

    def agent(self) -> Agent:
        """This loop's Agent."""
        if self._agent is None:
            try:
                self._agent = get_agent(self.config.agent)(self.config)
            except Exception as exc:  # noqa: BLE001 - the agent's own code: every attempt would end so
                where = records.raised_in(records.failure(exc))
                raise AgentNotMade(f"the agent {self.config.agent} could not be made: its constructor raised "
                                   f"{type(exc).__name__}: {str(exc)[:500]}{f' (at {where})' if where else ''}; "
                                   "every attempt would end so") from exc
        return self._agent

    def event_loop(self) -> asyncio.AbstractEventLoop:
        """This loop's asyncio event loop, where an ``async def`` agent's methods run: one for
        the loop's life, so what an async agent keeps (clients, sessions) stays usable."""
        if self._loop is None:
            import asyncio  # ~30 ms of a worker's start-up (ssl, concurrent.futures): async agents only

            self._loop = asyncio.new_event_loop()
        return self._loop


def _trajectory_file(run_dir: Path, item: Assignment) -> TrajectoryFile:
    """``trajectories/<task>/<sample>/attempt-<n>.jsonl`` (``trajectories/<name>/…`` for a
    named Assignment)."""
    base = os.path.join(run_dir, "trajectories")
    if item.name:
        folder = os.path.join(base, safe_name(item.name))
    else:
        folder = os.path.join(base, safe_name(item.task.id), str(item.sample_idx))
    return TrajectoryFile(folder, run_dir, item.attempt)


def _caught_endpoint_failure(agent: Agent | None, record: dict[str, Any]) -> RolloutError | None:
    """The endpoint's failure (``ModelUnavailable``, ``EndpointRefused``) that the agent's
    ``self.model`` raised in this attempt while the record says none: the agent caught it."""
    if agent is None or record["infrastructure"] or record["status"] == AttemptCancelled.kind:
        return None
    try:
        return agent.model_failure()
    except Exception:  # noqa: BLE001 - a plugin's override: it says nothing then
        return None


def _failed_turn(agent: Agent, turn: int, record: dict[str, Any], trajectory: TrajectoryFile) -> None:
    """The turn whose ``act`` raised (neither a cut nor a cancel), written as the episode's
    last turn once its model calls still under way have ended (an async agent's gathered or
    background call: sampled and spent all the same; the attempt's usage then counts them),
    each such call marked ``outlived_act``; their number is the record's ``outlived_act``."""
    try:
        exchange = agent.turn_record()
    except Exception:  # noqa: BLE001 - a plugin's override: the act's own error is the attempt's
        return
    made = calls_of(exchange) if exchange else []
    if not any("request" in call or "reply" in call or "stop_reason" in call for call in made):
        return  # no model call (or none of the client's): nothing to add
    record["turns"] = turn
    trajectory.write({"turn": turn, "action": None, "done": True, **exchange})
    outlived = sum(1 for call in made if call.get(OUTLIVED_ACT))
    if outlived:
        record[OUTLIVED_ACT] = outlived


def _safe_usage(agent: Agent) -> Any:
    try:
        return agent.usage()
    except Exception as exc:  # noqa: BLE001
        return {"error": repr(exc)}


def _serializable(record: dict[str, Any]) -> dict[str, Any]:
    """The record itself when it is plain JSON; otherwise its sample's ``unstorable_result``,
    naming every value that is not (a NaN, a lone surrogate, an object of no JSON form).

    Checked here, in the worker, because an object that cannot cross the pipe would
    otherwise fail inside the engine or be lost."""
    try:  # one strict encoding on the common path: plain JSON, finite numbers, UTF-8 text
        json.dumps(record, ensure_ascii=False, allow_nan=False).encode("utf-8")
        return record
    except (TypeError, ValueError) as exc:
        return records.replacement_record(record, exc)


#: how long a worker given SIGTERM waits for its runner's STOP before it dies of the signal
SIGTERM_WAIT_S = 5.0
#: set once the engine's STOP has come: the run is stopping this worker in order
_stop_received = threading.Event()


def _sigterm_after_the_runner(signum: int, frame: object) -> None:
    """SIGTERM in a worker. A stop of the whole job (systemd's ``systemctl stop`` signals
    every process of the unit's cgroup at once) reaches the runner with it, which sends its
    STOP at once and stops the run in order: dying of it first recorded the attempts under
    way as ``worker_died``. So it waits ``SIGTERM_WAIT_S`` for that STOP, and dies of the
    signal (as before) when none comes: a SIGTERM sent to this worker alone. A second SIGTERM
    meanwhile kills it at once."""
    signal.signal(signal.SIGTERM, signal.SIG_DFL)

    def die_unless_stopped() -> None:
        if not _stop_received.wait(SIGTERM_WAIT_S):
            os.kill(os.getpid(), signal.SIGTERM)
    threading.Thread(target=die_unless_stopped, name="sigterm", daemon=True).start()


#: a worker's exit status when it cannot import the run's mode or agent: the backend stops
#: the run with that error instead of starting the next worker into the same failure
EXIT_CANNOT_LOAD = 86


def worker_main(worker_id: str, holder: str, conn: Connection, pool: Any, config: RunConfig,
                run_dir: str, cgroup: str | None = None) -> None:
    """Entry point of a worker process (forked from the run's server, ``backends.worker_start``);
    ``cgroup``: the token of its cgroup, where the host has one (``worker_cgroup``)."""
    lead_group(cgroup)  # a process group (and cgroup) of its own: the backend kills what is left of it
    # Ctrl-C (a closed terminal's SIGHUP) goes to the whole process group; the engine orders the shutdown.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    if signal.getsignal(signal.SIGTERM) is not signal.SIG_IGN:  # ignored by the run's starter: kept
        signal.signal(signal.SIGTERM, _sigterm_after_the_runner)
    try:
        # Before any attempt's clock starts: a plugin's import (preloaded by the server when
        # it could be) never counts against a task's --task-timeout.
        get_env(config.mode), get_agent(config.agent)
    except Exception as exc:  # noqa: BLE001 - what the backend stops the run with
        logging.getLogger("parallel_rollout").error("worker %s cannot load the run's mode or agent: %s",
                                                    worker_id, exc)
        flush_stdout()
        os._exit(EXIT_CANNOT_LOAD)
    try:
        RolloutWorker(worker_id, holder, conn, pool, config, run_dir).run()
    finally:
        flush_stdout()
