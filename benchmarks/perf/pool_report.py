"""The pool benchmark's report as it is printed (``table``) and drawn (``chart``): the
runner's overhead, the three designs against their bound, the scaling grid and the
concurrent rollouts, from the report ``pool.py`` writes as JSON."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any


def fmt_value(value: Any, spec: str = "") -> str:
    if value is None:
        return "-"
    return format(value, spec) if spec else str(value)


def table(report: dict[str, Any]) -> str:
    """The report as the plain-text tables the command prints."""
    lines = [f"parallel-rollout pool benchmark ({report['profile']}) — {report['machine']['cpus']} CPUs, "
             f"load {report['machine']['load_before']} → {report['machine']['load_after']}"]
    speed = report["machine"].get("speed")
    if speed:
        lines.append(f"(this machine's speed: a bare python3 -I -S starts in {speed['start_cpu_ms_p50']:.1f} ms "
                     "of CPU, p50; compare runs of different days beside it)")
    lines.append("")
    lines.append("runner overhead, zero-length tasks (no VM, no think)")
    disk = report["machine"].get("disk")
    if disk:
        lines.append(f"  (in each: the task's trajectory folders and file, {disk['task_files_ms_p50']:.2f} ms p50 "
                     f"on {disk['mount']} ({disk['filesystem']}); TMPDIR=/dev/shm leaves the disk out)")
    for row in report["overhead"]:
        lines.append(f"  N={row['n']} K={row['k']}  {row['tasks']} tasks  {row['tasks_per_s']:>8} tasks/s  "
                     f"{row['ms_per_task']:.2f} ms/task  (runner CPU {row['runner_cpu_ms_per_task']:.2f} ms/task; "
                     f"startup {row['startup_s']:.2f} s, not counted)")
    lines += ["", "designs, same tasks "
              f"(think {report['profile_spec']['designs']['think_s']} s, "
              f"`sleep {report['profile_spec']['designs']['vm_s']}` in the VM)",
              f"  {'design':<34}{'N':>4}{'VMs':>5}{'makespan':>10}{'bound':>8}{'÷bound':>8}{'busy':>7}"
              f"{'wait p50':>9}{'p95':>7}{'reset':>7}{'tasks/s':>9}"]
    names = {"a": "(a) ours: shared pool, call scope", "b": "(b) VM per worker, reset on path",
             "c": "(c) fresh sandbox per task"}
    for key, row in report["designs"].items():
        lines.append(f"  {names[key]:<34}{row['n']:>4}{row['m']:>5}{row['makespan_s']:>9.2f}s"
                     f"{fmt_value(row['bound_s'], '.2f'):>7}s{fmt_value(row['makespan_over_bound'], '.3f'):>8}"
                     f"{fmt_value(row['busy_fraction'], '.2f'):>7}{fmt_value(row['lease_wait_p50_s'], '.3f'):>9}"
                     f"{fmt_value(row['lease_wait_p95_s'], '.3f'):>7}{fmt_value(row['reset_p50_s'], '.3f'):>7}"
                     f"{fmt_value(row['tasks_per_s']):>9}")
    ratios = report["ratios"]
    lines.append(f"  (b)/(a) = {ratios['b_over_a']:.2f}×   (c)/(a) = {ratios['c_over_a']:.2f}×")
    a = report["designs"]["a"]
    if "handoff_ms" in a:
        lines.append(f"  (a) VMs idle {a['idle_before_first_lease_s']:.2f} VM-s before their first lease, "
                     f"{a['handoff_ms']:.2f} ms a hand-off (IDLE → next lease), {a['idle_after_last_s']:.2f} "
                     f"VM-s after the last; a lease lasts {fmt_value(a['lease_beyond_command_ms'], '.2f')} ms "
                     f"beyond its command; pool CPU {a['manager_cpu_ms_per_task']:.2f} ms/task "
                     f"({fmt_value(a.get('manager_steady_cpu_ms_per_task'), '.2f')} while tasks finish: "
                     f"its start and shutdown left out)")
    if a.get("grant_ms"):
        lines.append("  (a) a lease's trips, p50 / mean: the grant reaching the env "
                     f"{a['grant_ms']['p50']:.2f} / {a['grant_ms']['mean']:.2f} ms, the release reaching the pool "
                     f"{a['release_ms']['p50']:.2f} / {a['release_ms']['mean']:.2f} ms, the worker's wait for its "
                     f"answer {a['release_answer_ms']['p50']:.2f} / {a['release_answer_ms']['mean']:.2f} ms")
    if a.get("ideal_s"):
        lines.append(f"  (a) a pool with no costs of its own (ideal: the same rollouts, VM times and resets, "
                     f"no overhead): {a['ideal_s']:.2f} s = {a['ideal_s'] / a['bound_s']:.3f} × bound; "
                     f"measured ÷ ideal = {a['makespan_over_ideal']:.3f}")
    if a.get("best_bound_s"):
        lines.append(f"  (a) bound of its rollouts (unlimited VMs): {a['rollout_bound_s']:.2f} s; the better bound "
                     f"{a['best_bound_s']:.2f} s → {a['makespan_over_best_bound']:.3f} × best bound")
    lines += ["", "scaling, design (a) "
              f"(think {report['profile_spec']['scaling']['think_s']} s, "
              f"`sleep {report['profile_spec']['scaling']['vm_s']}`)",
              f"  {'N':>3}{'M':>3}{'tasks':>6}{'makespan':>10}{'bound':>8}{'÷bound':>8}{'N-bound':>9}"
              f"{'÷best':>7}{'÷ideal':>8}{'busy':>6}{'wait p95':>9}{'tasks/s':>9}{'reset p50':>10}"
              f"{'RSS/worker':>11}{'PSS/worker':>11}{'pool CPU/task':>14}{'steady':>8}"]
    for row in report["scaling"]:
        lines.append(f"  {row['n']:>3}{row['m']:>3}{row['tasks']:>6}{row['makespan_s']:>9.2f}s"
                     f"{fmt_value(row['bound_s'], '.2f'):>7}s{fmt_value(row['makespan_over_bound'], '.3f'):>8}"
                     f"{row['rollout_bound_s']:>8.2f}s{fmt_value(row.get('makespan_over_best_bound'), '.3f'):>7}"
                     f"{fmt_value(row.get('makespan_over_ideal'), '.3f'):>8}"
                     f"{fmt_value(row['busy_fraction'], '.2f'):>6}"
                     f"{fmt_value(row['lease_wait_p95_s'], '.3f'):>9}{fmt_value(row['tasks_per_s']):>9}"
                     f"{fmt_value(row['reset_p50_s'] and 1000 * row['reset_p50_s'], '.1f'):>7} ms"
                     f"{fmt_value(row['rss_mb_per_worker'], '.1f'):>9}MB{fmt_value(row['pss_mb_per_worker'], '.1f'):>9}MB"
                     f"{row['manager_cpu_ms_per_task']:>11.2f} ms"
                     f"{fmt_value(row.get('manager_steady_cpu_ms_per_task'), '.2f'):>8}")
    c = report["concurrent"]
    lines += ["", f"{c['rollouts']} concurrent rollouts (N={c['n']} × K={c['k']}, {c['m']} VMs, think "
              f"{c['think_s']} s): peak {c['peak_concurrency']} at once, makespan {c['makespan_s']:.2f} s, "
              f"bound {c['best_bound_s']:.2f} s (VMs {fmt_value(c['bound_s'], '.2f')} s, rollouts "
              f"{c['rollout_bound_s']:.2f} s) → {c['makespan_over_best_bound']:.3f} × bound, "
              f"{fmt_value(c.get('makespan_over_ideal'), '.3f')} × ideal, "
              f"PSS/worker {fmt_value(c['pss_mb_per_worker'], '.1f')} MB"]
    return "\n".join(lines)


def chart(report: dict[str, Any], path: Path) -> bool:
    """Designs (makespan vs the bound) and scaling (tasks/s over N per M) as one PNG."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib is not installed (pip install -e '.[bench]'): no chart", file=sys.stderr)
        return False
    fig, (left, right) = plt.subplots(1, 2, figsize=(12, 4.5))
    keys = list(report["designs"])
    rows = [report["designs"][k] for k in keys]
    left.bar([f"({k})" for k in keys], [r["makespan_s"] for r in rows], color=["tab:green", "tab:orange", "tab:red"])
    left.axhline(rows[0]["bound_s"] or 0, color="k", linestyle="--", label="bound of (a): Σ(VM+reset)/M")
    left.set_ylabel("makespan, s")
    left.set_title(f"same {rows[0]['tasks']} tasks, {rows[0]['m']} VMs: (b)/(a) "
                   f"{report['ratios']['b_over_a']:.2f}×, (c)/(a) {report['ratios']['c_over_a']:.2f}×")
    left.legend()
    for m in sorted({r["m"] for r in report["scaling"]}):
        pts = [r for r in report["scaling"] if r["m"] == m]
        right.plot([r["n"] for r in pts], [r["tasks_per_s"] for r in pts], marker="o", label=f"M={m}")
    right.set_xscale("log", base=2)
    right.set_xlabel("N rollouts (workers)")
    right.set_ylabel("tasks/s")
    right.set_title("scaling, design (a)")
    right.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return True
