"""Resets, their verification, warm spares and a fresh sandbox per task, per provider.

    python benchmarks/perf/resets.py                          # process, docker, qemu desktops
    python benchmarks/perf/resets.py --sections resets --providers process,docker
    python benchmarks/perf/resets.py --smoke --out DIR        # seconds; checks the report

Three sections; each row is written to ``<out>/<date>-resets.json`` as soon as it is done (a
QEMU desktop under TCG takes minutes per boot: run it in the background):

* **resets** — one VM, ``--resets`` times: a task writes a file and starts a daemon, the VM
  idles ``--gap`` s (its use), then ``reset`` and ``verify`` are timed apart, for
  ``--verify-reset`` off, fast and full. A verification that finds anything is counted (it
  must find nothing: the resets are real). The process provider also without its standby
  sandbox (``PARALLEL_ROLLOUT_PROCESS_STANDBY=0``), with where a cold reset's time goes.
* **spares** — design (a) of ``pool.py`` (N = 4·M rollouts share M VMs, vm_scope "call")
  with ``--spare-vms`` 0, 1 and 2: makespan against the bound Σ(VM time + reset time) / M
  and against Σ VM time / M (the bound when no reset is ever on a VM's clock). What the
  spares cost is counted with them: VMs booted, the PSS of every VM process (spares
  included) sampled half-way, and the CPU of the whole run (workers, the pool, and VMs
  whose processes are the pool's children: process and qemu; docker's run under dockerd).
* **fresh** — design (c), a brand-new VM per task (reset = stop + start, on the worker's
  path, one VM per worker), against design (a) on the same provider and tasks.

QEMU VMs here are desktops (the osworld mode's; a plain qemu guest is ``benchmarks/
providers.py``'s), docker and process VMs plain unless ``--desktop``.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import psutil  # noqa: E402

import pool as perf_pool  # noqa: E402
from pool_report import fmt_value  # noqa: E402
from parallel_rollout.errors import ConfigError, ProviderUnavailable  # noqa: E402
from parallel_rollout.guest.client import GuestClient  # noqa: E402
from parallel_rollout.pool.providers import ProviderOptions, get_provider  # noqa: E402
from parallel_rollout.pool.providers import process as process_provider  # noqa: E402
from parallel_rollout.pool.providers import sandbox_launch  # noqa: E402

#: provider label -> (provider, desktop)
TARGETS = {"process": ("process", False), "docker": ("docker", False),
           "qemu-desktop": ("qemu", True), "process-desktop": ("process", True),
           "docker-desktop": ("docker", True)}
#: design (c) providers: each the provider whose reset is a stop and a start (workload.py)
FRESH = {"process": "workload:FreshSandboxProvider", "docker": "workload:FreshDockerProvider",
         "qemu": "workload:FreshQemuProvider"}
PROFILES = {
    "full": {"resets": 30, "gap_s": 1.0, "tasks": {"process": 120, "docker": 80, "qemu": 8},
             "vms": {"process": 2, "docker": 2, "qemu": 1}, "think_s": 0.2, "vm_s": 0.05},
    "smoke": {"resets": 3, "gap_s": 0.05, "tasks": {"process": 6, "docker": 6, "qemu": 3},
              "vms": {"process": 1, "docker": 1, "qemu": 1}, "think_s": 0.02, "vm_s": 0.01},
}
BOOT_TIMEOUT_S = {"process": 60.0, "docker": 120.0, "qemu": 900.0}
TASK = ("echo work > ~/work.txt; mkdir -p ~/.cache && date > ~/.cache/t; "
        "setsid sleep 600 > /dev/null 2>&1 < /dev/null &")


def quantiles(values: list[float]) -> dict[str, float | None]:
    """p50 and p95 in ms (nearest rank)."""
    if not values:
        return {"p50_ms": None, "p95_ms": None, "n": 0}
    ordered = sorted(values)
    pick = lambda q: ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]  # noqa: E731
    return {"p50_ms": round(pick(0.5) * 1000, 1), "p95_ms": round(pick(0.95) * 1000, 1),
            "n": len(values)}


# -- resets -----------------------------------------------------------------------------------

def bench_resets(name: str, desktop: bool, mode: str, spec: dict, standby: bool = True) -> dict:
    """One VM reset ``spec['resets']`` times with verification ``mode``."""
    os.environ[process_provider.standby.STANDBY_ENV] = "1" if standby else "0"
    cls = get_provider(name)
    cls.check_available()
    options = ProviderOptions(boot_timeout_s=BOOT_TIMEOUT_S[name], verify_reset=mode,
                              desktop=desktop, screen_width=1024, screen_height=768)
    run_id = f"rb{os.getpid()}{name[:2]}{mode[:2]}{int(standby)}"
    provider = cls(run_id, options)
    resets, verifies, found = [], [], 0
    try:
        info = provider.start("vm0")
        try:
            for _ in range(spec["resets"] if name != "qemu" else max(3, spec["resets"] // 3)):
                GuestClient(info.address, timeout_s=60).execute(TASK, shell=True, timeout=60)
                time.sleep(spec["gap_s"])
                started = time.perf_counter()
                info = provider.reset(info)
                middle = time.perf_counter()
                differences = provider.verify(info)
                verifies.append(time.perf_counter() - middle)
                resets.append(middle - started)
                found += bool(differences)
        finally:
            provider.stop(info)
    finally:
        cls.sweep(run_id)
        os.environ.pop(process_provider.standby.STANDBY_ENV, None)
    return {"reset": quantiles(resets), "verify": quantiles(verifies),
            "reset_and_verify": quantiles([a + b for a, b in zip(resets, verifies)]),
            "quarantined": found}


def cold_reset_breakdown(spec: dict) -> dict:
    """Where a process reset without a standby spends its time: kill, bwrap's set-up (to
    the init's pid on --info-fd), the agent's start-up to its ready line."""
    marks: dict[bytes, float] = {}
    real = sandbox_launch.read_until  # a boot's reads (bwrap's info, the agent's ready line)

    def timed(fd, separator, deadline, budget_s, *bwrap_pidfd):
        out = real(fd, separator, deadline, budget_s, *bwrap_pidfd)
        marks[separator] = time.perf_counter()
        return out

    base = Path(tempfile.mkdtemp(prefix="prb-", dir="/tmp"))
    provider = process_provider.ProcessProvider(f"cold{os.getpid()}", ProviderOptions(), base_dir=base)
    info = provider.start("vm0")
    rows = []
    sandbox_launch.read_until = timed
    try:
        for _ in range(spec["resets"]):
            time.sleep(spec["gap_s"])
            t0 = time.perf_counter()
            process_provider.kill_sandbox(info.private)
            t1 = time.perf_counter()
            info = provider._boot_in("vm0", Path(info.private["vm_dir"]))  # noqa: SLF001
            rows.append((t1 - t0, marks[b"}"] - t1, marks[b"\n"] - marks[b"}"],
                         time.perf_counter() - t0))
    finally:
        sandbox_launch.read_until = real
        provider.stop(info)
    names = ("kill and wait", "folder + bwrap set-up", "agent start-up to ready", "total")
    return {name: quantiles(list(col)) for name, col in zip(names, zip(*rows))}


def section_resets(labels: list[str], spec: dict, emit) -> None:
    for label in labels:
        name, desktop = TARGETS[label]
        for mode in ("off", "fast", "full"):
            try:
                row = bench_resets(name, desktop, mode, spec)
            except (ProviderUnavailable, ConfigError) as exc:
                emit("resets", {"target": label, "unavailable": str(exc)})
                break
            emit("resets", {"target": label, "mode": mode, **row})
        if name == "process":
            emit("resets", {"target": f"{label} (no standby)", "mode": "fast",
                            **bench_resets(name, desktop, "fast", spec, standby=False)})
    if "process" in labels:
        emit("cold_process_reset", cold_reset_breakdown(spec))


# -- spares and fresh sandboxes -------------------------------------------------------------------

class VMMemory(threading.Thread):
    """Samples, once half the tasks are final, the PSS of every process below the pool's
    Manager (its VMs, spares included) — docker's containers run under dockerd instead."""

    def __init__(self, runner, total: int) -> None:
        super().__init__(daemon=True)
        self.runner, self.total, self.pss_mb = runner, total, None
        self.done = threading.Event()

    def run(self) -> None:
        while not self.done.wait(0.25):
            if len(self.runner._finished_keys) >= self.total / 2:  # noqa: SLF001
                pid = getattr(getattr(self.runner, "engine", None), "manager_pid", None)
                if pid:
                    self.pss_mb = round(_tree_pss(pid), 1)
                    return


def _tree_pss(pid: int) -> float:
    total = 0
    try:
        procs = psutil.Process(pid).children(recursive=True)
    except psutil.Error:
        return 0.0
    for proc in procs:
        try:
            full = proc.memory_full_info()
            total += getattr(full, "pss", full.rss)
        except psutil.Error:
            pass
    return total / 2**20


def run_measured(workdir: Path, label: str, spec: dict, kind: str, *, desktop: bool,
                 design: str, spares: int | None = None) -> dict[str, Any]:
    """One pool.py run of provider ``kind``: design a (its pool, with ``spares``) or c (its
    fresh-VM-per-task variant); the VMs' memory and the run's CPU."""
    name = kind if design == "a" else FRESH[kind]
    m, tasks = spec["vms"][kind], spec["tasks"][kind]
    mode = ("perf_call" if design == "a" else "perf_episode") + ("_desktop" if desktop else "")
    extra: dict[str, Any] = {"boot_timeout_s": BOOT_TIMEOUT_S[kind],
                             "lease_timeout_s": 4 * BOOT_TIMEOUT_S[kind],
                             "task_timeout": 4 * BOOT_TIMEOUT_S[kind]}
    if spares is not None:
        extra["spare_vms"] = spares
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    sampler: list[VMMemory] = []

    def watch(runner):
        sampler.append(VMMemory(runner, tasks))
        sampler[0].start()

    row = perf_pool.run_one(workdir, label, mode=mode, tasks=tasks, think_s=spec["think_s"],
                            vm_s=spec["vm_s"], workers=4 * m if design == "a" else m,
                            vms=m if design == "a" else None, shared=design == "a",
                            provider=name, extra_flags=extra, on_runner=watch)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if sampler:
        sampler[0].done.set()
    cpu_s = (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)
    row.update(spares=spares, design=design, desktop=desktop,
               vm_pss_mb=sampler[0].pss_mb if sampler else None,
               children_cpu_s=round(cpu_s, 2),
               bound_without_resets_s=round(row["vm_time_s"] / m, 3))
    return row


def section_spares(labels: list[str], spec: dict, workdir: Path, emit) -> None:
    for label in labels:
        name, desktop = TARGETS[label]
        for spares in (0, 1, 2):
            try:
                row = run_measured(workdir, f"sp-{label}-{spares}", spec, name, desktop=desktop,
                                   design="a", spares=spares)
            except (ProviderUnavailable, ConfigError) as exc:
                emit("spares", {"target": label, "unavailable": str(exc)})
                break
            emit("spares", {"target": label, **row})


def section_fresh(labels: list[str], spec: dict, workdir: Path, emit) -> None:
    for label in labels:
        name, desktop = TARGETS[label]
        try:
            a = run_measured(workdir, f"fr-a-{label}", spec, name, desktop=desktop, design="a",
                             spares=0)
            c = run_measured(workdir, f"fr-c-{label}", spec, name, desktop=desktop,
                             design="c", spares=0)
        except (ProviderUnavailable, ConfigError) as exc:
            emit("fresh", {"target": label, "unavailable": str(exc)})
            continue
        emit("fresh", {"target": label, "a": a, "c": c,
                       "c_over_a": round(c["makespan_s"] / a["makespan_s"], 3)})


# -- output ---------------------------------------------------------------------------------

def _ms(q: dict) -> str:
    return "-" if q["p50_ms"] is None else f"{q['p50_ms']:7.1f} {q['p95_ms']:7.1f}"


def _rows(lines: list[str], rows: list[dict], width: int, render) -> None:
    """One line per row: ``render(row)``, or why its VMs could not run here."""
    for row in rows:
        if "unavailable" in row:
            lines.append(f"  {row['target']:<{width}}unavailable: {row['unavailable'][:90]}")
        else:
            lines.append(render(row))


def _reset_line(row: dict) -> str:
    return (f"  {row['target']:<26}{row['mode']:<7}{_ms(row['reset']):>16}"
            f"{_ms(row['verify']):>16}{_ms(row['reset_and_verify']):>16}{row['quarantined']:>13}")


def _spares_line(row: dict) -> str:
    fmt = fmt_value
    vm_only = row["makespan_s"] / row["bound_without_resets_s"] if row["bound_without_resets_s"] else None
    return (f"  {row['target']:<16}{row['spares']:>2}{row['m']:>3}{row['tasks']:>6}{row['makespan_s']:>9.2f}s"
            f"{fmt(row['bound_s'], '.2f'):>7}s{fmt(row['makespan_over_bound'], '.3f'):>8}"
            f"{fmt(vm_only, '.3f'):>9}{fmt(row['lease_wait_p95_s'], '.3f'):>9}"
            f"{fmt(row['reset_p50_s'], '.3f'):>10}{row['m'] + row['spares']:>7}"
            f"{fmt(row['vm_pss_mb'], '.0f'):>7}MB{row['children_cpu_s']:>7.1f}s")


def _fresh_line(row: dict) -> str:
    return (f"  {row['target']:<16}{row['c']['m']:>3}{row['c']['tasks']:>6}"
            f"{row['a']['makespan_s']:>13.2f}s{row['c']['makespan_s']:>13.2f}s{row['c_over_a']:>8.2f}×")


def table(report: dict[str, Any]) -> str:
    """The report as the plain-text tables the command prints."""
    lines = [f"resets, spares, fresh VMs ({report['profile']}) — {report['machine']['cpus']} CPUs, "
             f"load {report['machine']['load_before']} → {report['machine']['load_after']}"]
    if report.get("resets"):
        lines += ["", f"reset and verification, ms (p50 p95; {report['spec']['resets']} resets, "
                  f"{report['spec']['gap_s']} s of use between)",
                  f"  {'VM':<26}{'verify':<7}{'reset':>16}{'verify':>16}{'both':>16}{'quarantined':>13}"]
        _rows(lines, report["resets"], 26, _reset_line)
    if report.get("cold_process_reset"):
        lines += ["", "process reset without a standby: where the time goes, ms (p50 p95)"]
        for name, q in report["cold_process_reset"].items():
            lines.append(f"  {name:<26}{_ms(q):>16}")
    if report.get("spares"):
        lines += ["", "warm spares, design (a): N = 4·M share M VMs",
                  f"  {'VMs':<16}{'S':>2}{'M':>3}{'tasks':>6}{'makespan':>10}{'bound':>8}{'÷bound':>8}"
                  f"{'÷VM-only':>9}{'wait p95':>9}{'reset p50':>10}{'booted':>7}{'VM PSS':>9}{'CPU':>8}"]
        _rows(lines, report["spares"], 16, _spares_line)
    if report.get("fresh"):
        lines += ["", "design (c), a fresh VM per task (N = M, on the worker's path) vs (a)",
                  f"  {'VMs':<16}{'M':>3}{'tasks':>6}{'(a) makespan':>14}{'(c) makespan':>14}{'(c)/(a)':>9}"]
        _rows(lines, report["fresh"], 16, _fresh_line)
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--smoke", action="store_true", help="seconds; checks the report, not the speed")
    parser.add_argument("--sections", default="resets,spares,fresh")
    parser.add_argument("--providers", default="process,docker,qemu-desktop",
                        help=f"comma list of {', '.join(TARGETS)}")
    parser.add_argument("--out", type=Path, default=perf_pool.RESULTS_DIR)
    parser.add_argument("--gap", type=float, help="seconds of use between resets (default: the profile's)")
    parser.add_argument("--tag", default="", help="added to the report's file name")
    args = parser.parse_args(argv)
    profile = "smoke" if args.smoke else "full"
    spec = dict(PROFILES[profile])
    if args.gap is not None:
        spec["gap_s"] = args.gap
    labels = [label for label in args.providers.split(",") if label]
    unknown = [label for label in labels if label not in TARGETS]
    if unknown:
        parser.error(f"unknown --providers {unknown}; known: {', '.join(TARGETS)}")
    import logging

    logging.getLogger("parallel_rollout").setLevel(logging.WARNING)
    args.out.mkdir(parents=True, exist_ok=True)
    path = args.out / (time.strftime("%Y-%m-%d") + ("-resets" if profile == "full" else "-resets-smoke")
                       + (f"-{args.tag}" if args.tag else "") + ".json")
    report: dict[str, Any] = {"profile": profile, "date": time.strftime("%Y-%m-%d %H:%M:%S"), "spec": spec,
                              "machine": {"cpus": os.cpu_count(),
                                          "load_before": [round(x, 2) for x in os.getloadavg()]}}

    def emit(section: str, row: Any) -> None:
        if isinstance(report.get(section, []), list) and section != "cold_process_reset":
            report.setdefault(section, []).append(row)
        else:
            report[section] = row
        report["machine"]["load_after"] = [round(x, 2) for x in os.getloadavg()]
        path.write_text(json.dumps(report, indent=1) + "\n")
        print(f"[{time.strftime('%H:%M:%S')}] {section}: {json.dumps(row)[:160]}", file=sys.stderr, flush=True)

    workdir = Path(tempfile.mkdtemp(prefix="pr-resets-"))
    sections = args.sections.split(",")
    if "resets" in sections:
        section_resets(labels, spec, emit)
    if "spares" in sections:
        section_spares(labels, spec, workdir, emit)
    if "fresh" in sections:
        section_fresh(labels, spec, workdir, emit)
    report["machine"]["load_after"] = [round(x, 2) for x in os.getloadavg()]
    path.write_text(json.dumps(report, indent=1) + "\n")
    print(table(report))
    print(f"\nwrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
