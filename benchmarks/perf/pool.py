"""The pool against the physical limit and against other runners' designs, in one run.

    python benchmarks/perf/pool.py            # full: 1,000 tasks per run (long: see README)
    python benchmarks/perf/pool.py --quick    # a subset, under 5 minutes on 2 cores
    python benchmarks/perf/pool.py --smoke --out DIR   # seconds; what the test suite runs
    python benchmarks/perf/pool.py --cell 1,1,200      # one scaling cell (N,M,TASKS), one JSON line

Every run below is a real ``Runner`` run (workers spawned, pool in its Manager process,
bubblewrap sandboxes of the process provider, results.jsonl and events.jsonl written). The
workload (``workload.py``): a task thinks ``think_s`` in the worker (a model call), then runs
``command`` in a VM through the guest agent; each release costs the provider's real reset.

What is measured, and how (all from the run's own files):

* **makespan** — first attempt start (or the first VM up, whichever is later) to the last
  attempt end, from results.jsonl. Spawning workers and booting the first VM is outside it;
  the ramp while the other workers start is inside it.
* **bound** — Σ(VM time + reset time) / M: VM time is each command's time in the guest (the
  env times its ``/execute`` call), reset time is leases × the mean reset measured from
  events.jsonl (RESETTING → IDLE). No schedule can beat it with M VMs.
* **ideal** (design a's runs) — what a pool with no costs of its own would take for the same
  work: the same rollouts, all started at once, each thinking then holding the first free
  VM for its task's measured VM time, a VM ready again a mean reset later
  (``measure.ideal_makespan``, a simulation). makespan ÷ ideal is what the pool, the workers
  and the runner add; ideal ÷ bound is what the workload's shape costs whatever the pool
  does (the first think inside the makespan; N rollouts too few to keep M VMs busy).
* **busy** — (leased + resetting time inside the makespan) / (M × makespan), events.jsonl.
* **lease wait** — p50/p95 of the records' ``lease_wait_s``.
* **overhead** — zero-length tasks (no VM, no think): makespan / tasks, in ms per task.
* **pool CPU** — the pool Manager process's CPU over its life ÷ tasks; **steady**, the same
  between the first and the last sample (0.25 s apart) that saw attempts finishing, so that
  the Manager's start (imports, the first boots, ~80-100 ms here) and shutdown are left out.
* **memory** — RSS and PSS of every worker process, sampled half-way through a run.

Designs, same tasks: (a) ours: N = 4·M rollouts share M VMs, a VM is leased only around
the command, resets run in the pool's threads; (b) one VM per worker (N = M) held for the
episode, reset on the worker's path (private mode: the next lease waits for the reset), as
OSWorld's multi-env runner; (c) a brand-new sandbox per task (N = M), started and stopped on
the worker's path, as harbor, inspect_ai and the SWE-bench harness do.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import platform
import shutil
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))  # workload.py; spawned workers inherit sys.path

import psutil  # noqa: E402

from measure import cpu_probe, disk_probe, mean, measure  # noqa: E402,F401 - measure: ray_nodes.py imports it from here
from pool_report import chart, table  # noqa: E402
from workload import MODES  # noqa: E402
from parallel_rollout.config import build_config, settings, tomllib  # noqa: E402
from parallel_rollout.errors import ConfigError  # noqa: E402
from parallel_rollout.runner import Runner  # noqa: E402

RESULTS_DIR = HERE / "results"
AGENT = "workload:ThinkAgent"
#: run settings every run of this invocation gets (``--run-setting KEY=VALUE``)
RUN_SETTINGS: dict[str, Any] = {}
FRESH_PROVIDER = "workload:FreshSandboxProvider"

#: what each size runs; full follows the issue (1,000 tasks, the whole N × M grid)
PROFILES: dict[str, dict[str, Any]] = {
    "full": {
        "overhead": {"tasks": 2000, "workers": [(1, 1), (4, 1)]},
        "designs": {"tasks": 1000, "vms": 4, "rollouts_per_vm": 4, "think_s": 0.2, "vm_s": 0.05},
        "scaling": {"tasks": 1000, "n": [1, 2, 4, 8, 16, 32, 64], "m": [1, 2, 4, 8],
                    "think_s": 0.1, "vm_s": 0.02},
        "concurrent": {"tasks": 1280, "workers": 8, "envs_per_worker": 8, "vms": 8,
                       "think_s": 1.0, "vm_s": 0.02},
    },
    "quick": {
        "overhead": {"tasks": 500, "workers": [(1, 1), (4, 1)]},
        "designs": {"tasks": 160, "vms": 2, "rollouts_per_vm": 4, "think_s": 0.2, "vm_s": 0.05},
        "scaling": {"tasks": 100, "n": [1, 4, 16, 64], "m": [1, 4], "think_s": 0.1, "vm_s": 0.02},
        "concurrent": {"tasks": 320, "workers": 8, "envs_per_worker": 8, "vms": 8,
                       "think_s": 1.0, "vm_s": 0.02},
    },
    "smoke": {
        "overhead": {"tasks": 20, "workers": [(1, 1)]},
        "designs": {"tasks": 6, "vms": 1, "rollouts_per_vm": 2, "think_s": 0.02, "vm_s": 0.01},
        "scaling": {"tasks": 4, "n": [1, 2], "m": [1], "think_s": 0.01, "vm_s": 0.01},
        "concurrent": {"tasks": 8, "workers": 2, "envs_per_worker": 2, "vms": 1,
                       "think_s": 0.01, "vm_s": 0.01},
    },
}


# -- one run ------------------------------------------------------------------------------

def write_tasks(path: Path, count: int, mode: str, think_s: float, vm_s: float | None) -> Path:
    """``count`` identical tasks: think ``think_s``, then ``sleep vm_s`` in the VM."""
    with path.open("w") as fh:
        for i in range(count):
            task: dict[str, Any] = {"id": f"t{i:05d}", "mode": MODES[mode], "think_s": think_s}
            if vm_s is not None:
                task["command"] = f"sleep {vm_s:g}"
            fh.write(json.dumps(task) + "\n")
    return path


class Sampler(threading.Thread):
    """Samples every worker's RSS/PSS when half the run's attempts are final, and the
    pool Manager's CPU time until it exits (the last sample is its total, ±0.25 s), with
    how many attempts were final at each sample (``steady_cpu_ms_per_task``)."""

    def __init__(self, runner: Runner, total: int) -> None:
        super().__init__(daemon=True)
        self.runner, self.total = runner, total
        self.done = threading.Event()
        self.rss_mb: list[float] = []
        self.pss_mb: list[float] = []
        self.manager_cpu_s = 0.0
        #: (attempts final, the Manager's CPU seconds so far) at each sample
        self.manager_samples: list[tuple[int, float]] = []
        #: this thread's own CPU (reading 64 workers' smaps is not the runner's cost)
        self.own_cpu_s = 0.0

    def run(self) -> None:
        try:
            self._sample()
        finally:
            self.own_cpu_s = time.thread_time()

    def _sample(self) -> None:
        half_way = False
        # Memory is sampled when the first attempt is final and again half-way (that one
        # counts): a run too short to be seen half-way (the smoke runs) still gets a figure,
        # and reading every worker's smaps only twice keeps the sampler off the CPU.
        while not self.done.wait(0.25 if self.rss_mb else 0.05):
            engine = self._engine()
            manager_pid = engine.manager_pid if engine is not None else None
            finished = len(self.runner._finished_keys)  # noqa: SLF001
            if manager_pid is not None:
                try:
                    times = psutil.Process(manager_pid).cpu_times()
                    self.manager_cpu_s = times.user + times.system
                    self.manager_samples.append((finished, self.manager_cpu_s))
                except (psutil.Error, ValueError, TypeError):
                    pass
            if (not self.rss_mb and finished) or (not half_way and finished >= self.total / 2):
                self._memory()
                half_way = finished >= self.total / 2

    def steady_cpu_ms_per_task(self) -> float | None:
        """The Manager's CPU per attempt while attempts were being finished: from the first
        sample that saw one final to the last that saw some still to come, so that its
        start (imports, the first boots) and its shutdown are left out; None when fewer
        than a fifth of the attempts fell in between (a run too short to be sampled)."""
        inside = [(done, cpu) for done, cpu in self.manager_samples if 0 < done < self.total]
        if len(inside) < 2 or inside[-1][0] - inside[0][0] < self.total / 5:
            return None
        (done0, cpu0), (done1, cpu1) = inside[0], inside[-1]
        return round(1000 * (cpu1 - cpu0) / (done1 - done0), 3)

    def _engine(self):
        """The runner's engine, once it has made one."""
        return getattr(self.runner, "engine", None)

    def _memory(self) -> None:
        rss, pss = [], []
        engine = self._engine()
        pids = list(engine.worker_pids().values()) if engine is not None else []
        for pid in pids:
            try:
                full = psutil.Process(pid).memory_full_info()
            except (psutil.Error, ValueError, TypeError):
                continue
            rss.append(full.rss / 2**20)
            pss.append(getattr(full, "pss", full.rss) / 2**20)
        if rss:
            self.rss_mb, self.pss_mb = rss, pss


def run_one(workdir: Path, label: str, *, mode: str, tasks: int, think_s: float, vm_s: float | None,
            workers: int, vms: int | None, envs_per_worker: int = 1, shared: bool = True,
            provider: str = "process", extra_flags: dict[str, Any] | None = None,
            on_runner=None) -> dict[str, Any]:
    """One Runner run of ``tasks`` workload tasks; its measured numbers. ``extra_flags``
    go to the run's config; ``on_runner(runner)`` is called before it runs (resets.py)."""
    data = write_tasks(workdir / f"{label}.jsonl", tasks, mode, think_s, vm_s)
    flags: dict[str, Any] = dict(mode=MODES[mode], data=str(data), agent=AGENT, num_rollouts=workers,
                                 envs_per_worker=envs_per_worker, output_dir=str(workdir / "runs"),
                                 run_id=label, progress=False, max_retries=0)
    if not mode.startswith("perf_none"):
        flags.update(use_vm_pool=shared, provider_name=provider)
        if shared:
            flags["num_vms"] = vms
    flags.update(RUN_SETTINGS)
    flags.update(extra_flags or {})
    runner = Runner(build_config(flags))
    if on_runner is not None:
        on_runner(runner)
    sampler = Sampler(runner, tasks)
    sampler.start()
    started = time.time()
    cpu_before = psutil.Process().cpu_times()
    outcome = runner.run()
    cpu_after = psutil.Process().cpu_times()
    sampler.done.set()
    sampler.join()
    runner_cpu_s = ((cpu_after.user + cpu_after.system) - (cpu_before.user + cpu_before.system)
                    - sampler.own_cpu_s)
    # the VMs booted: a run boots no more than its rollouts (and tasks) can use at once
    booted = min(vms or 0, workers * envs_per_worker, tasks) if shared else min(workers, tasks)
    pool_size = booted if not mode.startswith("perf_none") else 0
    call_scope = mode.startswith("perf_call") and shared
    metrics = measure(outcome.run_dir, pool_size, started, loops=workers * envs_per_worker if call_scope else None,
                      think_s=think_s if call_scope else None)
    asked = ((vms if shared else workers) or 0) if pool_size else 0
    metrics.update(label=label, mode=mode, n=workers, k=envs_per_worker, m=asked, vms_booted=pool_size,
                   shared=shared, provider=provider if pool_size else None,
                   think_s=think_s, vm_cmd_s=vm_s, exit_code=outcome.exit_code,
                   rss_mb_per_worker=mean(sampler.rss_mb), pss_mb_per_worker=mean(sampler.pss_mb),
                   # CPU per task of the main process (runner) and the pool's Manager process:
                   # unlike wall time, it hardly depends on what else the machine runs
                   runner_cpu_ms_per_task=round(1000 * runner_cpu_s / max(metrics["tasks"], 1), 3),
                   manager_cpu_ms_per_task=round(1000 * sampler.manager_cpu_s / max(metrics["tasks"], 1), 3),
                   # the same while attempts were being finished: its start and shutdown left out
                   manager_steady_cpu_ms_per_task=sampler.steady_cpu_ms_per_task())
    return metrics


def section_overhead(workdir: Path, spec: dict[str, Any]) -> list[dict[str, Any]]:
    """Zero-length tasks: what the runner itself costs per task."""
    rows = []
    for workers, loops in spec["workers"]:
        rows.append(run_one(workdir, f"ovh-n{workers}k{loops}", mode="perf_none", tasks=spec["tasks"],
                            think_s=0.0, vm_s=None, workers=workers, vms=None, envs_per_worker=loops))
    return rows


def section_designs(workdir: Path, spec: dict[str, Any]) -> dict[str, Any]:
    """(a) ours, (b) one VM per worker with the reset on its path, (c) a sandbox per task."""
    m, common = spec["vms"], dict(tasks=spec["tasks"], think_s=spec["think_s"], vm_s=spec["vm_s"])
    designs = {
        "a": run_one(workdir, "design-a", mode="perf_call", workers=spec["rollouts_per_vm"] * m,
                     vms=m, **common),
        "b": run_one(workdir, "design-b", mode="perf_episode", workers=m, vms=None, shared=False,
                     **common),
        "c": run_one(workdir, "design-c", mode="perf_episode", workers=m, vms=None, shared=False,
                     provider=FRESH_PROVIDER, **common),
    }
    with_bounds(designs["a"], spec["rollouts_per_vm"] * m, spec["think_s"])
    a = designs["a"]["makespan_s"]
    return {"designs": designs,
            "ratios": {"b_over_a": round(designs["b"]["makespan_s"] / a, 3),
                       "c_over_a": round(designs["c"]["makespan_s"] / a, 3)}}


def section_scaling(workdir: Path, spec: dict[str, Any]) -> list[dict[str, Any]]:
    """Design (a) over the N × M grid."""
    rows = []
    for m in spec["m"]:
        for n in spec["n"]:
            row = scaling_cell(workdir, spec, n, m, spec["tasks"])
            rows.append(row)
            print(f"  scaling N={n:>2} M={m}: {row['makespan_s']:7.2f} s, "
                  f"{row['makespan_over_bound']:.2f} × bound", file=sys.stderr, flush=True)
    return rows


def scaling_cell(workdir: Path, spec: dict[str, Any], n: int, m: int, tasks: int) -> dict[str, Any]:
    """One cell of the scaling grid: design (a) with ``n`` rollouts on ``m`` VMs, with its bounds."""
    row = run_one(workdir, f"scale-n{n}m{m}", mode="perf_call", tasks=tasks,
                  think_s=spec["think_s"], vm_s=spec["vm_s"], workers=n, vms=m)
    return with_bounds(row, n, spec["think_s"])


def section_concurrent(workdir: Path, spec: dict[str, Any]) -> dict[str, Any]:
    """N × K concurrent I/O-bound rollouts (64 in full and quick) on this machine."""
    n, k = spec["workers"], spec["envs_per_worker"]
    row = run_one(workdir, f"conc-n{n}k{k}", mode="perf_call", tasks=spec["tasks"],
                  think_s=spec["think_s"], vm_s=spec["vm_s"], workers=n, vms=spec["vms"],
                  envs_per_worker=k)
    row["rollouts"] = n * k
    return with_bounds(row, n * k, spec["think_s"])


def with_bounds(row: dict[str, Any], rollouts: int, think_s: float) -> dict[str, Any]:
    """``row`` with the rollouts' bound and the better of the two bounds. The rollout bound
    is what ``rollouts`` could do with unlimited VMs (every task thinks, then runs: tasks ×
    (think + mean VM time) ÷ rollouts); the VM bound, what M VMs could do with unlimited
    rollouts. Both are lower bounds, so their max is one too: below the knee (too few
    rollouts per VM, as design a's N = 4·M is with think 0.2 s and 0.05 s commands) the
    rollouts bind, not the VMs."""
    per_task = think_s + row["vm_time_s"] / max(row["tasks"], 1)
    row["rollout_bound_s"] = round(row["tasks"] * per_task / rollouts, 3)
    row["best_bound_s"] = max(row["rollout_bound_s"], row["bound_s"] or 0.0)
    row["makespan_over_best_bound"] = round(row["makespan_s"] / row["best_bound_s"], 4)
    return row


#: what ``--cell`` prints of its run
CELL_FIELDS = ("makespan_s", "makespan_over_bound", "manager_cpu_ms_per_task", "manager_steady_cpu_ms_per_task",
               "runner_cpu_ms_per_task", "reset_p50_s", "tasks_per_s")


def run_cell(parser: argparse.ArgumentParser, cell: str) -> int:
    """``--cell N,M,TASKS``: one design (a) run with the full run's scaling workload, printed."""
    try:
        n, m, tasks = (int(part) for part in cell.split(","))
        if min(n, m, tasks) < 1:
            raise ValueError
    except ValueError:
        parser.error(f"--cell takes three positive whole numbers N,M,TASKS, got {cell!r}")
    spec = PROFILES["full"]["scaling"]
    logging.getLogger("parallel_rollout").setLevel(logging.WARNING)
    speed = cpu_probe()
    workdir = Path(tempfile.mkdtemp(prefix="pr-perf-cell-"))
    try:
        row = scaling_cell(workdir, spec, n, m, tasks)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    print(json.dumps({"n": n, "m": m, "tasks": tasks, "exit_code": row["exit_code"], "failures": row["failures"],
                      **{name: row.get(name) for name in CELL_FIELDS}, "speed": speed}))
    return 0 if row["exit_code"] == 0 else 1


def _run_setting(text: str) -> dict[str, Any]:
    """``KEY=VALUE`` as a line of run.toml (a bare word is a string: verify_reset=off),
    checked as run.toml is (``config.settings``); ConfigError when it is not one."""
    key, sep, value = text.partition("=")
    if not sep or not key.strip():
        raise ConfigError(f"--run-setting {text!r}: give KEY=VALUE")
    try:
        parsed = tomllib.loads(f"v = {value}")["v"]
    except tomllib.TOMLDecodeError:
        parsed = value
    return settings({key.strip(): parsed}, f"--run-setting {text!r}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    size = parser.add_mutually_exclusive_group()
    size.add_argument("--quick", action="store_true", help="a subset: under 5 minutes on 2 cores")
    size.add_argument("--smoke", action="store_true", help="seconds; checks the report, not the speed")
    parser.add_argument("--out", type=Path, default=RESULTS_DIR, help="where the JSON and PNG go")
    parser.add_argument("--keep", action="store_true", help="keep the runs' folders (printed)")
    size.add_argument("--cell", metavar="N,M,TASKS",
                      help="one cell of the full run's scaling grid (N rollouts, M VMs, TASKS tasks), "
                           "printed as one JSON line, nothing written: an A B B A of two trees, each "
                           "run with its own src/ on PYTHONPATH")
    parser.add_argument("--run-setting", action="append", default=[], metavar="KEY=VALUE",
                        help="a run setting for every run, as in run.toml (e.g. verify_reset=off: "
                             "what a feature costs, against the same invocation without it)")
    args = parser.parse_args(argv)
    for setting in args.run_setting:
        try:
            RUN_SETTINGS.update(_run_setting(setting))
        except ConfigError as exc:
            parser.error(str(exc))
    if args.cell:
        return run_cell(parser, args.cell)
    profile = "smoke" if args.smoke else "quick" if args.quick else "full"
    spec = PROFILES[profile]
    logging.getLogger("parallel_rollout").setLevel(logging.WARNING)

    if sys.flags.dont_write_bytecode:
        print("warning: PYTHONDONTWRITEBYTECODE (or -B) is set: workers compile from source whatever "
              "has no bytecode yet, at each start (README: 'Bytecode')", file=sys.stderr, flush=True)
    workdir = Path(tempfile.mkdtemp(prefix="pr-perf-"))
    load_before = [round(x, 2) for x in os.getloadavg()]
    disk = disk_probe(workdir)
    speed = cpu_probe()
    began = time.time()
    try:
        print("overhead …", file=sys.stderr, flush=True)
        overhead = section_overhead(workdir, spec["overhead"])
        print("designs …", file=sys.stderr, flush=True)
        designs = section_designs(workdir, spec["designs"])
        print("scaling …", file=sys.stderr, flush=True)
        scaling = section_scaling(workdir, spec["scaling"])
        print("concurrent rollouts …", file=sys.stderr, flush=True)
        concurrent = section_concurrent(workdir, spec["concurrent"])
    finally:
        if args.keep:
            print(f"runs kept in {workdir}", file=sys.stderr)
        else:
            shutil.rmtree(workdir, ignore_errors=True)
    report = {
        "version": 1,
        "profile": profile,
        "date": time.strftime("%Y-%m-%d %H:%M:%S"),
        "duration_s": round(time.time() - began, 1),
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version(),
                    "platform": platform.platform(), "load_before": load_before,
                    "writes_bytecode": not sys.flags.dont_write_bytecode, "disk": disk, "speed": speed,
                    "load_after": [round(x, 2) for x in os.getloadavg()]},
        "profile_spec": spec,
        "run_settings": RUN_SETTINGS,
        "overhead": overhead,
        **designs,
        "scaling": scaling,
        "concurrent": concurrent,
    }
    text = table(report)
    print(text)
    args.out.mkdir(parents=True, exist_ok=True)
    stem = time.strftime("%Y-%m-%d") + ("" if profile == "full" else f"-{profile}")
    (args.out / f"{stem}.json").write_text(json.dumps(report, indent=1) + "\n")
    drew = chart(report, args.out / f"{stem}.png")
    print(f"\nwrote {args.out / (stem + '.json')}" + (f" and {stem}.png" if drew else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
