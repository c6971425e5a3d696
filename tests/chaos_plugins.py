"""Fault injectors used by the crash tests: real parts that break on purpose.

``ChaosAgent`` is the oracle agent, except that on the first attempt of a task whose payload
has ``"chaos": KIND`` it breaks in that way. "First attempt" is tracked with a marker file in
``$PR_CHAOS_DIR``, so a retried attempt behaves. The providers are the real process
provider with one thing broken.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import threading
import time
from pathlib import Path

import psutil

from parallel_rollout.agents.oracle import OracleAgent
from parallel_rollout.envs.osworld.env import OSWorldEnv
from parallel_rollout.errors import VMError
from parallel_rollout.pool.providers.base import Provider
from parallel_rollout.pool.providers.process import ProcessProvider
from parallel_rollout.pool.providers import qemu
from parallel_rollout.pool.providers.qemu import QemuProvider


def first_time(name: str) -> bool:
    """True exactly once per name per test (the marker file is created atomically)."""
    marker = Path(os.environ["PR_CHAOS_DIR"]) / name
    try:
        fd = os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
    except FileExistsError:
        return False
    os.close(fd)
    return True


class ChaosAgent(OracleAgent):
    task_fields = frozenset({"chaos"})
    """The oracle, breaking on a chaos task's first attempt."""

    #: every kind it knows: another is a test's typo, which would pass as no chaos at all
    KINDS = frozenset({"exit", "hang", "kill_sandbox", "nan_result", "raise", "remove_socket", "sigkill",
                       "sigkill_always", "stop_sandbox", "system_exit", "unencodable_result", "unpicklable"})

    def reset(self, task) -> None:
        super().reset(task)
        self.kind = task.get("chaos")
        if self.kind and self.kind not in self.KINDS:
            raise ValueError(f"ChaosAgent: unknown chaos {self.kind!r} (one of {sorted(self.KINDS)})")
        self._unpicklable = False
        self.armed = bool(self.kind) and first_time(f"{task.id}.{self.kind}")

    def act(self, observation):
        if self.kind == "sigkill_always":  # an infrastructure failure on every attempt (as an OOM kill)
            os.kill(os.getpid(), signal.SIGKILL)
        if self.armed:
            self.armed = False
            if self.kind == "exit":
                os._exit(3)
            if self.kind == "sigkill":
                os.kill(os.getpid(), signal.SIGKILL)
            if self.kind == "raise":
                raise RuntimeError("chaos: the agent raised")
            if self.kind == "system_exit":
                raise SystemExit(3)
            if self.kind == "hang":
                time.sleep(3600)
            if self.kind == "unpicklable":
                self._unpicklable = True
            if self.kind == "kill_sandbox":
                # What a host's OOM killer or an operator does: every process of the sandbox
                # this task leased, from the host.
                kill_leased_sandbox(self.config, f"{self._task.id}#0")
                return {"command": "true"}
            if self.kind == "stop_sandbox":
                # What an operator's `kill -STOP` does, from the host, a second into the command
                # this returns (the VM held by its lease): the VM runs on, answering nothing
                key = f"{self._task.id}#0"
                threading.Timer(1.0, kill_leased_sandbox, (self.config, key, signal.SIGSTOP)).start()
                return {"command": "sleep 3; true"}
            if self.kind == "remove_socket":
                # What an operator's `find … -name agent.sock -delete` does, from the host
                remove_leased_socket(self.config, f"{self._task.id}#0")
                return {"command": "true"}
        return super().act(observation)

    def usage(self):
        if self._unpicklable:
            return {"callback": lambda: None}
        # what no JSON line can hold, from an agent: a NaN, a lone surrogate
        if self.kind == "nan_result" and first_time(f"{self._task.id}.usage"):
            return {"cost_usd": float("nan")}
        if self.kind == "unencodable_result" and first_time(f"{self._task.id}.usage"):
            return {"note": "caf\u00e9 \ud800"}
        return {}


class WorkerKillerAgent(OracleAgent):
    """SIGKILLs its own worker process at its first action, every attempt: a worker that
    dies by a signal (as of the OOM killer or an operator), which no agent is blamed for."""

    def act(self, observation):
        os.kill(os.getpid(), signal.SIGKILL)


def kill_leased_sandbox(config, key: str, sig: int = signal.SIGKILL) -> None:
    """Kill the VM leased to ``key`` (found in the run's events.jsonl) from the host, as its
    provider's VMs die of an operator or the host's OOM killer: a process sandbox's every
    process of all its folders (the leased one and its standbys'), a docker VM's running
    containers (``docker kill``: the leased one and its spare), a QEMU VM's process. Another
    ``sig`` (SIGSTOP: an operator's ``kill -STOP``) is sent to the same processes, a docker
    VM's too (each of its containers' processes, found from the host)."""
    from parallel_rollout.pool.providers import standby
    from parallel_rollout.pool.providers.common import run_folders

    events = Path(config.output_dir) / config.run_id / "events.jsonl"
    leases = [json.loads(line) for line in events.read_text().splitlines()]
    vm = [e["vm"] for e in leases if e.get("to") == "leased" and e.get("task") == key][-1]
    if config.provider_name == "docker":
        names = subprocess.run(
            ["docker", "ps", "-q", "--filter", f"label=parallel-rollout.run={config.run_id}",
             "--filter", f"label=parallel-rollout.vm={vm}"],
            capture_output=True, text=True, timeout=60, check=True).stdout.split()
        if sig == signal.SIGKILL:
            subprocess.run(["docker", "kill", *names], capture_output=True, timeout=60, check=True)
            return
        pids = subprocess.run(["docker", "inspect", "--format", "{{.State.Pid}}", *names],
                              capture_output=True, text=True, timeout=60, check=True).stdout.split()
        for pid in pids:
            root = psutil.Process(int(pid))
            for proc in [root, *root.children(recursive=True)]:
                proc.send_signal(sig)
        return
    if config.provider_name == "qemu":
        marker = f"parallel-rollout-{config.run_id}-{vm}"
        for proc in psutil.process_iter(["name", "cmdline"]):
            if proc.info["name"] == qemu.QEMU and marker in (proc.info["cmdline"] or ()):
                proc.send_signal(sig)
        return
    [run_dir] = run_folders(Path(os.environ["PARALLEL_ROLLOUT_PROCESS_DIR"]), config.run_id)  # its pool's
    for folder in standby.folders(run_dir, vm):
        try:
            root = psutil.Process(int(json.loads((folder / "meta.json").read_text())["pid"]))
            procs = [root, *root.children(recursive=True)]
        except (OSError, ValueError, KeyError, psutil.Error):  # a label only: no sandbox yet
            continue
        for proc in procs:
            try:
                proc.send_signal(sig)
            except psutil.NoSuchProcess:
                pass


def remove_leased_socket(config, key: str) -> None:
    """Remove the agent socket of every folder of the process VM leased to ``key`` (found in
    the run's events.jsonl) on the host; its sandbox runs on, unreachable."""
    from parallel_rollout.pool.providers import standby
    from parallel_rollout.pool.providers.common import run_folders

    events = Path(config.output_dir) / config.run_id / "events.jsonl"
    leases = [json.loads(line) for line in events.read_text().splitlines()]
    vm = [e["vm"] for e in leases if e.get("to") == "leased" and e.get("task") == key][-1]
    [run_dir] = run_folders(Path(os.environ["PARALLEL_ROLLOUT_PROCESS_DIR"]), config.run_id)
    for folder in standby.folders(run_dir, vm):
        (folder / "sock" / "agent.sock").unlink(missing_ok=True)


class BrokenConstructorAgent(OracleAgent):
    """An agent whose constructor raises (a missing API key, a bad option) while the file
    ``agent-broken`` is in the run's output folder; an oracle once it is gone (fixed)."""

    def __init__(self, config) -> None:
        if os.path.exists(os.path.join(config.output_dir, "agent-broken")):
            raise RuntimeError("chaos: the agent's constructor raised")
        super().__init__(config)


class FlakyResetProvider(ProcessProvider):
    """A process provider whose first reset in the test fails."""

    def reset(self, info):
        if first_time("reset-fails"):
            self.stop(info)
            raise VMError("chaos: reset failed")
        return super().reset(info)


class HangingResetProvider(ProcessProvider):
    """A process provider whose first reset in the test hangs (ignoring its timeout)."""

    def reset(self, info):
        if first_time("reset-hangs"):
            time.sleep(60)
        return super().reset(info)


class NoResetProvider(ProcessProvider):
    """A process provider that never resets: shows which tasks depend on resets."""

    def reset(self, info):
        return info


class LeakyResetProvider(ProcessProvider):
    """A reset with a bug: it copies the snapshot back over the home and nothing else, so
    what a task leaves outside that copy survives (a daemon in a session of its own, a file
    the snapshot does not have, /tmp). Reset verification must catch it."""

    def reset(self, info):
        from parallel_rollout.guest.client import GuestClient

        client = GuestClient(info.address)
        for path in sorted(self.snapshot.rglob("*")) if self.snapshot else ():
            if path.is_file():
                home_path = f"/home/user/{path.relative_to(self.snapshot)}"
                client.write_file(home_path, path.read_bytes())
                stamp = path.stat().st_mtime_ns
                client.execute(["touch", "-m", "-d", f"@{stamp // 10**9}.{stamp % 10**9:09d}", home_path])
        return info


class DirtyBootProvider(ProcessProvider):
    """A restore with a bug from the start: every VM it boots has a file its snapshot does
    not (no task ran on it yet). The pool's check of a fresh VM must catch it and charge
    the replacement budget."""

    def start(self, vm_id):
        from parallel_rollout.guest.client import GuestClient

        info = super().start(vm_id)
        GuestClient(info.address).write_file("/home/user/left-by-boot", b"stale\n")
        return info


class UncheckedProvider(Provider):
    """A plugin provider that cannot verify its resets (it does not implement ``verify``):
    process sandboxes through a ProcessProvider it holds. An explicit --verify-reset fast or
    full must be refused, not ignored."""

    name = "unchecked"

    def __init__(self, run_id, options=None):
        import dataclasses

        super().__init__(run_id, options)
        self._inner = ProcessProvider(run_id, dataclasses.replace(self.options, verify_reset="off"))

    def start(self, vm_id):
        return self._inner.start(vm_id)

    def reset(self, info):
        return self._inner.reset(info)

    def healthy(self, info):
        return self._inner.healthy(info)

    def stop(self, info):
        self._inner.stop(info)

    @classmethod
    def sweep(cls, run_id=None, *, orphans_only=False):
        return ProcessProvider.sweep(run_id, orphans_only=orphans_only)


class LeakyQemuProvider(QemuProvider):
    """QEMU whose reset forgets its loadvm: what a task left stays in the VM. Reset
    verification (through the guest agent) must catch it."""

    def reset(self, info):
        from parallel_rollout.guest.client import GuestClient

        GuestClient(info.address, timeout_s=5.0).health()
        return info


class SlowResetProvider(ProcessProvider):
    """A process provider whose reset takes a second longer: what a spare hides."""

    def reset(self, info):
        time.sleep(1.0)
        return super().reset(info)


class BootFailsProvider(ProcessProvider):
    """Every boot fails."""

    def start(self, vm_id):
        raise VMError(f"chaos: {vm_id} does not boot")


class StopFailsProvider(ProcessProvider):
    """Stops its sandboxes, then says it could not (a Docker daemon that stopped answering)."""

    def stop(self, info):
        super().stop(info)
        raise VMError(f"chaos: no daemon answers to stop {info.vm_id}")


class SlowBootProvider(ProcessProvider):
    """Boots a real sandbox, then takes 30 s more to say so (a slow image, a loaded host)."""

    def start(self, vm_id):
        info = super().start(vm_id)
        time.sleep(30)
        return info


class BootHangsProvider(ProcessProvider):
    """Every boot hangs (until the test's process ends)."""

    def start(self, vm_id):
        time.sleep(3600)
        raise AssertionError("unreachable")


class KillInGradingEnv(OSWorldEnv):
    """The osworld mode, whose VM is killed from the host as grading begins, once per task:
    what an operator or the host's OOM killer does while a getter reads the desktop."""

    def evaluate(self):
        if first_time(f"{self.task.id}.grading-kill"):
            kill_leased_sandbox(self.config, f"{self.task.id}#0")
        return super().evaluate()


class BootsOnceProvider(ProcessProvider):
    """The test's first VM boots; its reset and every later boot fail: a pool that one
    attempt ran on, exhausted before the next got a VM."""

    def start(self, vm_id):
        if not first_time("boots-once"):
            raise VMError(f"chaos: {vm_id} does not boot")
        return super().start(vm_id)

    def reset(self, info):
        self.stop(info)
        raise VMError("chaos: reset failed")
