"""The process provider's own costs, one VM at a time: a guest command's overhead and the
owner's CPU per reset.

    python benchmarks/perf/guest_costs.py            # as root: the sandbox user is root's only
    python benchmarks/perf/guest_costs.py --commands 400 --resets 60

Two figures of ``benchmarks/perf/README.md`` ("The pool's own costs"), measured without the
runner, the workers or the Manager around them, so that each is the provider's alone:

* **guest overhead per command**: ``/execute`` of ``sleep 0`` (a shell and a program that
  does nothing) timed around the client call, p50 and p95, against the same ``sh -c 'sleep
  0'`` started on the host with ``subprocess.run``; the difference is what the guest path
  adds: the HTTP request over the unix socket, the agent's thread, the uid switch, the
  process group, the output capture.
* **CPU per reset**: ``reset`` then ``verify`` (what the pool's reset thread calls) of one
  VM, back to back with ``--gap`` seconds between them (the standby boots in that gap); the
  CPU of this process (every thread: the standby's boot, the launcher's forks) per reset,
  the whole machine's (from /proc/stat: bwrap and the agent's start-up too; run it on a
  quiet machine), and each call's wall time, p50.
* **a reset's first command**: ``sleep 0`` as the first command of a freshly reset VM (what
  a lease around one command runs), the next after the same idle gap, and the next at
  once, p50: the first against the second is the reset's share, the second against the
  third the idle wait's.
* **a new VM's start**: ``start`` of a VM that has no standby to take (the sandbox booted,
  the agent started and ready), p50: what a fresh sandbox per task waits for.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "src"))

from measure import machine_cpu_s  # noqa: E402 - beside this file
from parallel_rollout.guest.client import GuestClient  # noqa: E402
from parallel_rollout.pool.providers.base import ProviderOptions  # noqa: E402
from parallel_rollout.pool.providers.process import ProcessProvider  # noqa: E402


def _p(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return round(ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1000, 3)


def commands(provider: ProcessProvider, count: int) -> dict:
    """``sleep 0`` through the guest and on the host, interleaved; ms."""
    info = provider.start("gc0")
    try:
        client = GuestClient(info.address, timeout_s=30)
        guest, host = [], []
        for _ in range(10):  # warm both paths (the agent's first imports)
            client.execute("sleep 0", shell=True, timeout=30)
            subprocess.run("sleep 0", shell=True, check=True)
        for _ in range(count):
            started = time.perf_counter()
            result = client.execute("sleep 0", shell=True, timeout=30)
            guest.append(time.perf_counter() - started)
            if result.get("returncode") != 0:
                raise SystemExit(f"sleep 0 failed in the guest: {result}")
            started = time.perf_counter()
            subprocess.run("sleep 0", shell=True, check=True)
            host.append(time.perf_counter() - started)
    finally:
        provider.stop(info)
    return {"commands": count, "guest_p50_ms": _p(guest, 0.5), "guest_p95_ms": _p(guest, 0.95),
            "host_p50_ms": _p(host, 0.5),
            "overhead_p50_ms": round(_p(guest, 0.5) - _p(host, 0.5), 3)}


def resets(provider: ProcessProvider, count: int, gap_s: float) -> dict:
    """``reset`` + ``verify`` of one VM ``count`` times; CPU of this process and of the
    machine per reset, ms."""
    info = provider.start("gc1")
    reset_s, verify_s = [], []
    cpu = 0.0
    machine_before = machine_cpu_s()
    try:
        info = provider.reset(info)  # the first reset boots the standby: not counted
        time.sleep(gap_s)
        for _ in range(count):
            before = time.process_time()
            started = time.perf_counter()
            info = provider.reset(info)
            reset_s.append(time.perf_counter() - started)
            started = time.perf_counter()
            differences = provider.verify(info)
            verify_s.append(time.perf_counter() - started)
            if differences:
                raise SystemExit(f"a clean reset failed its check: {differences}")
            time.sleep(gap_s)  # the standby boots meanwhile (its CPU is counted below)
            cpu += time.process_time() - before
        machine = machine_cpu_s() - machine_before
    finally:
        provider.stop(info)
    return {"resets": count, "gap_s": gap_s, "cpu_ms_per_reset": round(1000 * cpu / count, 3),
            "machine_cpu_ms_per_reset": round(1000 * machine / count, 1),
            "reset_p50_ms": _p(reset_s, 0.5), "verify_p50_ms": _p(verify_s, 0.5)}


def first_commands(provider: ProcessProvider, count: int, gap_s: float) -> dict:
    """``sleep 0`` as the first command after each of ``count`` resets, then after the same
    idle gap in the same VM, then at once; ms. The first two differ by what a reset costs
    its first command; the last two by what the wait costs (a process's wake-up on an idle
    machine: on this VM it is most of what the first command pays)."""
    info = provider.start("gc2")
    first, idle, at_once = [], [], []
    try:
        for _ in range(count):
            info = provider.reset(info)
            time.sleep(gap_s)  # the standby boots meanwhile, as while a VM is leased
            client = GuestClient(info.address, timeout_s=30)
            for times in (first, idle, at_once):
                if times is idle:
                    time.sleep(gap_s)
                started = time.perf_counter()
                result = client.execute("sleep 0", shell=True, timeout=30)
                times.append(time.perf_counter() - started)
                if result.get("returncode") != 0:
                    raise SystemExit(f"sleep 0 failed in the guest: {result}")
    finally:
        provider.stop(info)
    return {"first_command_p50_ms": _p(first, 0.5), "idle_command_p50_ms": _p(idle, 0.5),
            "next_command_p50_ms": _p(at_once, 0.5)}


def boots(provider: ProcessProvider, count: int) -> dict:
    """A new VM's ``start`` (a sandbox booted and its agent ready: no standby to take), then
    its ``stop``, ``count`` times; the start's wall time, ms (the first three not counted)."""
    started_s = []
    for number in range(count + 3):
        started = time.perf_counter()
        info = provider.start(f"gc-boot{number}")
        started_s.append(time.perf_counter() - started)
        provider.stop(info)
    return {"boots": count, "boot_p50_ms": _p(started_s[3:], 0.5)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--commands", type=int, default=300)
    parser.add_argument("--resets", type=int, default=40)
    parser.add_argument("--gap", type=float, default=0.3, help="seconds between resets")
    parser.add_argument("--verify-reset", default="fast", choices=("off", "fast", "full"))
    parser.add_argument("--json", type=Path, help="append the figures to this JSON-lines file")
    args = parser.parse_args(argv)
    load = os.getloadavg()[0]
    with tempfile.TemporaryDirectory(prefix="pr-gc-", dir="/tmp") as base:
        provider = ProcessProvider(f"gc{os.getpid()}", ProviderOptions(verify_reset=args.verify_reset),
                                   base_dir=base)
        row = {"load_before": round(load, 2), "root": os.geteuid() == 0,
               "verify_reset": args.verify_reset,
               **commands(provider, args.commands), **resets(provider, args.resets, args.gap),
               **first_commands(provider, args.resets, args.gap), **boots(provider, args.resets),
               "load_after": round(os.getloadavg()[0], 2)}
    print(f"guest overhead per command (sleep 0): p50 {row['guest_p50_ms']:.2f} ms "
          f"(p95 {row['guest_p95_ms']:.2f}) against {row['host_p50_ms']:.2f} ms on the host: "
          f"+{row['overhead_p50_ms']:.2f} ms")
    print(f"a reset's first command (sleep 0): p50 {row['first_command_p50_ms']:.2f} ms; "
          f"the next after the same idle {args.gap:g} s {row['idle_command_p50_ms']:.2f} ms; "
          f"the next at once {row['next_command_p50_ms']:.2f} ms")
    print(f"reset + verify ({args.verify_reset}): CPU {row['cpu_ms_per_reset']:.2f} ms per reset "
          f"(the machine's {row['machine_cpu_ms_per_reset']:.1f} ms), "
          f"reset p50 {row['reset_p50_ms']:.2f} ms, verify p50 {row['verify_p50_ms']:.2f} ms   "
          f"load {row['load_before']} → {row['load_after']}")
    print(f"a new VM's start (a sandbox booted, its agent ready): p50 {row['boot_p50_ms']:.1f} ms")
    if args.json:
        with args.json.open("a") as out:
            out.write(json.dumps(row) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
