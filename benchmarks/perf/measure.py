"""What a finished benchmark run measured, from its own files (results.jsonl, events.jsonl):
the definitions ``pool.py``'s docstring and ``README.md`` give (makespan, bound, busy, lease
waits, resets), and where the VMs stood idle inside the makespan.
"""

from __future__ import annotations

import heapq
import json
import os
import resource
import statistics
from pathlib import Path
from typing import Any, Callable


def measure(run_dir: Path, pool_size: int, run_started: float, *, loops: int | None = None,
            think_s: float | None = None) -> dict[str, Any]:
    """Makespan, bound, busy fraction, lease waits and resets of a finished run; with
    ``loops`` and ``think_s`` (design a's runs: a VM leased around each command), also what
    a pool with no costs of its own would take (``ideal_makespan``)."""
    records = [json.loads(line) for line in (run_dir / "results.jsonl").read_text().splitlines() if line]
    events = [json.loads(line) for line in (run_dir / "events.jsonl").read_text().splitlines() if line]
    vm_events = [e for e in events if e.get("event") == "vm" and e.get("to")]
    first_start = min(r["started_at"] for r in records)
    end = max(r["ended_at"] for r in records)
    booted = [e["time"] for e in vm_events if e["reason"] == "booted"]
    start = max(first_start, min(booted)) if booted else first_start
    makespan = end - start

    # Time per VM state from the transitions, clipped to [start, end].
    in_state = {"leased": 0.0, "resetting": 0.0}
    resets: list[float] = []
    last: dict[str, tuple[str, float]] = {}
    for e in vm_events:
        previous = last.get(e["vm"])
        if previous is not None:
            state, since = previous
            if state in in_state:
                in_state[state] += max(0.0, min(e["time"], end) - max(since, start))
            if state == "resetting" and e["to"] == "idle":
                resets.append(e["time"] - since)
        last[e["vm"]] = (e["to"], e["time"])
    leases = sum(1 for e in vm_events if e["to"] == "leased")
    idle = _idle(vm_events, start, end)
    vm_time = sum((r.get("eval") or {}).get("vm_s", 0.0) for r in records)
    reset_time = leases * statistics.fmean(resets) if resets else 0.0
    bound = (vm_time + reset_time) / pool_size if pool_size else None
    waits = [r["lease_wait_s"] for r in records if r.get("lease_wait_s") is not None]
    ideal = None
    if loops and pool_size and think_s is not None:
        in_order = sorted(records, key=lambda r: r["started_at"])
        ideal = ideal_makespan([(r.get("eval") or {}).get("vm_s", 0.0) for r in in_order], loops, pool_size,
                               think_s, statistics.fmean(resets) if resets else 0.0)
    return {
        "tasks": len(records),
        "failures": sum(1 for r in records if r.get("status") != "success"),
        "startup_s": round(first_start - run_started, 3),
        "makespan_s": round(makespan, 3),
        "tasks_per_s": round(len(records) / makespan, 2) if makespan > 0 else None,
        "ms_per_task": round(1000 * makespan / len(records), 3),
        "vm_time_s": round(vm_time, 3),
        "reset_time_s": round(reset_time, 3),
        "bound_s": round(bound, 3) if bound else None,
        "makespan_over_bound": round(makespan / bound, 4) if bound else None,
        "ideal_s": round(ideal, 3) if ideal else None,
        "makespan_over_ideal": round(makespan / ideal, 4) if ideal else None,
        "busy_fraction": (round((in_state["leased"] + in_state["resetting"]) / (pool_size * makespan), 4)
                          if pool_size and makespan > 0 else None),
        "leased_fraction": (round(in_state["leased"] / (pool_size * makespan), 4)
                            if pool_size and makespan > 0 else None),
        "lease_wait_p50_s": _quantile(waits, 0.5),
        "lease_wait_p95_s": _quantile(waits, 0.95),
        "reset_p50_s": _quantile(resets, 0.5),
        "reset_p95_s": _quantile(resets, 0.95),
        "resets": len(resets),
        "peak_concurrency": _peak_overlap(records),
        # VM-seconds with no lease or reset inside the makespan, and where: before each VM's
        # first lease (the workers' start and first think), between a VM going IDLE and its
        # next lease (the hand-off), after its last reset; and each lease's time beyond the
        # command (the lease and release round trips, the guest client)
        **idle,
        "handoff_ms": round(1000 * idle["idle_between_s"] / max(leases - len(last), 1), 3),
        "lease_beyond_command_ms": (round(1000 * (in_state["leased"] - vm_time) / leases, 3)
                                    if leases else None),
        **lease_split(records, vm_events),
    }


def lease_split(records: list[dict[str, Any]], vm_events: list[dict[str, Any]]) -> dict[str, Any]:
    """Where a lease's time beyond its command goes, from the marks the workload's CallEnv
    writes (``workload.py``) against the pool's events, both ``time.time()``: the grant
    (the pool's LEASED → the env holds its client: the answer's trip to the worker), the
    release (the command answered → the pool's RESETTING: the release's trip to the pool),
    and the worker's wait for the release's answer (not the VM's time). Medians and means
    in ms; empty when the records have no marks (one lease per attempt is matched)."""
    leased: dict[str, float] = {}
    resetting: dict[str, float] = {}
    for e in vm_events:
        if e["to"] == "leased":
            leased[e["task"]] = e["time"]
        elif e["from"] == "leased" and e["to"] == "resetting":
            resetting[e["task"]] = e["time"]
    parts: dict[str, list[float]] = {"grant": [], "release": [], "release_answer": []}
    for r in records:
        marks = (r.get("eval") or {}).get("marks")
        if not marks or r["key"] not in leased or r["key"] not in resetting:
            continue
        parts["grant"].append(marks["leased"] - leased[r["key"]])
        parts["release"].append(resetting[r["key"]] - marks["ran"])
        parts["release_answer"].append(marks["released"] - resetting[r["key"]])
    if not parts["grant"]:
        return {}
    return {f"{name}_ms": {"p50": round(1000 * statistics.median(values), 3),
                           "mean": round(1000 * statistics.fmean(values), 3)}
            for name, values in parts.items()}


def ideal_makespan(vm_times: list[float], loops: int, pool_size: int, think_s: float,
                   reset_s: float) -> float:
    """What a pool with no costs of its own takes for the same work (design a: a VM leased
    around each command): ``loops`` rollouts that all start at once, each taking the next
    task, thinking ``think_s``, then holding the VM that is ready first for the task's
    measured VM time (``vm_times``, in the order the tasks ran); a released VM is ready again
    ``reset_s`` later (the run's mean reset). From the first think's start to the last
    command's end, as the makespan is measured: makespan ÷ this is what the pool, the
    workers and the runner add; the bound ÷ this, what the workload's own shape costs (the
    first think, rollouts that queue for a VM or leave it waiting), which no pool removes."""
    ready = [0.0] * pool_size  # when each VM is free again
    wants = [(think_s, loop) for loop in range(min(loops, len(vm_times)))]  # (time, rollout)
    heapq.heapify(wants)
    end, given = 0.0, len(wants)
    for vm_s in vm_times:
        at, loop = heapq.heappop(wants)
        vm = min(range(pool_size), key=ready.__getitem__)
        done = max(at, ready[vm]) + vm_s
        ready[vm], end = done + reset_s, max(end, done)
        if given < len(vm_times):
            heapq.heappush(wants, (done + think_s, loop))
            given += 1
    return end


def _idle(vm_events: list[dict[str, Any]], start: float, end: float) -> dict[str, float]:
    """VM-seconds inside [start, end] in no lease and no reset: before each VM's first lease,
    between IDLE and the next lease, and after the VM's last transition to IDLE."""
    before = between = after = 0.0
    first_lease: dict[str, float] = {}
    idle_since: dict[str, float] = {}
    for e in vm_events:
        vm, now = e["vm"], min(max(e["time"], start), end)
        if e["to"] == "leased":
            if vm not in first_lease:
                first_lease[vm] = now
                before += now - start
            elif vm in idle_since:
                between += now - idle_since[vm]
            idle_since.pop(vm, None)
        elif e["to"] == "idle" and vm in first_lease:
            idle_since[vm] = now
        elif e["to"] != "idle":
            idle_since.pop(vm, None)
    after = sum(end - since for since in idle_since.values())
    return {"idle_before_first_lease_s": round(before, 3), "idle_between_s": round(between, 3),
            "idle_after_last_s": round(after, 3)}


def _quantile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return round(ordered[min(len(ordered) - 1, int(q * len(ordered)))], 4)


def mean(values: list[float]) -> float | None:
    return round(statistics.fmean(values), 1) if values else None


def _peak_overlap(records: list[dict[str, Any]]) -> int:
    points = sorted([(r["started_at"], 1) for r in records] + [(r["ended_at"], -1) for r in records])
    level = peak = 0
    for _, delta in points:
        level += delta
        peak = max(peak, level)
    return peak


def machine_cpu_s() -> float:
    """CPU seconds the whole machine has been busy (all but idle and iowait), /proc/stat:
    the kernel's work in its own threads counts too."""
    with open("/proc/stat") as stat:
        ticks = [int(field) for field in stat.readline().split()[1:]]
    return (sum(ticks) - ticks[3] - ticks[4]) / os.sysconf("SC_CLK_TCK")


def child_cpu_ms(start: Callable[[], Any]) -> float:
    """The CPU (user + system) of the children ``start()`` runs and reaps, in ms
    (``RUSAGE_CHILDREN`` before and after: nothing else may reap meanwhile)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start()
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return 1000 * (after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime)


def cpu_probe(count: int = 20) -> dict[str, Any] | None:
    """How fast this machine is right now: the CPU of a bare ``python3 -I -S -c pass``, with
    the interpreter a process VM's agent runs (``sandbox_fs.guest_python``), median of
    ``count`` starts. The same code measured 6.4 ms on a freshly started machine and 16.4 ms
    late in a long day (README: "The same code on a freshly started machine"): runs of
    different days compare only beside it. None without a python3 under /usr."""
    import subprocess

    from parallel_rollout.pool.providers.sandbox_fs import guest_python

    python = guest_python()
    if python is None:
        return None
    cpu = [child_cpu_ms(lambda: subprocess.run([python, "-I", "-S", "-c", "pass"], check=True))
           for _ in range(count)]
    return {"python": python, "start_cpu_ms_p50": round(statistics.median(cpu), 2)}


def disk_probe(folder: Path, count: int = 200) -> dict[str, Any]:
    """What the disk under ``folder`` adds to every task: the time to make a task's
    trajectory folders and file (``trajectories/<task>/<sample>/attempt-0.jsonl``, what each
    zero-length task of the overhead rows writes), p50 in ms, and the folder's filesystem.
    On a disk whose new folders are slow (ext4 here: 0.1-4 ms, varying through a day) the
    overhead rows measure the disk as much as the runner; TMPDIR=/dev/shm leaves it out."""
    import os
    import shutil
    import time

    probe = folder / "disk-probe"
    times = []
    for i in range(count):
        started = time.perf_counter()
        sample = probe / f"task-{i}" / "0"
        sample.mkdir(parents=True)
        (sample / "attempt-0.jsonl").write_text("{}\n")
        times.append(time.perf_counter() - started)
    shutil.rmtree(probe, ignore_errors=True)
    mounts = [line.split()[1:3] for line in Path("/proc/self/mounts").read_text().splitlines()]
    real = os.path.realpath(folder)
    under = [(point, fs) for point, fs in mounts if real == point or real.startswith(point.rstrip("/") + "/")]
    point, fs = max(under, key=lambda m: len(m[0])) if under else ("?", "?")
    return {"folder": str(folder), "filesystem": fs, "mount": point,
            "task_files_ms_p50": round(1000 * statistics.median(times), 3)}


# -- the sections -------------------------------------------------------------------------
