"""The performance benchmark in miniature: it runs end to end and writes a well-formed report.

Seconds, not minutes, and no speed is asserted: the machine running the suite may be busy.
The benchmark is run as the command a user types; its modes, agent and provider are
``module:Class`` plugins (see benchmarks/perf/workload.py).
"""

from __future__ import annotations

import json
import numbers
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import ROOT

BENCH = ROOT / "benchmarks" / "perf" / "pool.py"
RUN_FIELDS = ("tasks", "failures", "makespan_s", "tasks_per_s", "ms_per_task", "bound_s",
              "makespan_over_bound", "busy_fraction", "lease_wait_p50_s", "lease_wait_p95_s",
              "reset_p50_s", "peak_concurrency", "rss_mb_per_worker", "pss_mb_per_worker")


def is_number(value) -> bool:
    return isinstance(value, numbers.Real) and not isinstance(value, bool) and value == value


@pytest.mark.slow
def test_smoke_benchmark_writes_a_well_formed_report(tmp_path):
    proc = subprocess.run([sys.executable, str(BENCH), "--smoke", "--out", str(tmp_path),
                           "--run-setting", "verify_reset=off", "--keep"],
                          capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stderr[-3000:]
    kept = Path(re.search(r"runs kept in (\S+)", proc.stderr).group(1))
    try:  # --run-setting reached every run
        configs = [json.loads(p.read_text()) for p in kept.glob("runs/*/config.json")]
        assert configs and {c["config"]["verify_reset"] for c in configs} == {"off"}, configs
    finally:
        shutil.rmtree(kept)
    [report_path] = tmp_path.glob("*-smoke.json")
    report = json.loads(report_path.read_text())
    assert report["profile"] == "smoke"
    assert set(report["ratios"]) == {"b_over_a", "c_over_a"}
    assert all(is_number(v) and v > 0 for v in report["ratios"].values())
    assert set(report["designs"]) == {"a", "b", "c"}
    runs = [*report["overhead"], *report["designs"].values(), *report["scaling"], report["concurrent"]]
    for run in runs:
        assert run["exit_code"] == 0 and run["failures"] == 0, run
        numeric = ("tasks", "makespan_s", "ms_per_task", "peak_concurrency")
        if run["m"]:
            numeric = RUN_FIELDS
        for name in numeric:
            assert is_number(run[name]), (run["label"], name, run[name])
    assert report["designs"]["a"]["m"] == report["designs"]["b"]["m"] == report["designs"]["c"]["m"]
    assert report["designs"]["a"]["n"] > report["designs"]["a"]["m"]
    assert report["designs"]["b"]["n"] == report["designs"]["b"]["m"]
    assert is_number(report["overhead"][0]["ms_per_task"])
    # what the disk adds to each zero-length task, and which disk
    disk = report["machine"]["disk"]
    assert is_number(disk["task_files_ms_p50"]) and disk["task_files_ms_p50"] > 0, disk
    assert disk["filesystem"] not in ("", "?") and Path(disk["folder"]).is_relative_to(disk["mount"]), disk
    assert f"{disk['task_files_ms_p50']:.2f} ms p50 on {disk['mount']}" in proc.stdout
    # how fast the machine was: a bare python3's start, printed beside the load
    speed = report["machine"]["speed"]
    assert is_number(speed["start_cpu_ms_p50"]) and speed["start_cpu_ms_p50"] > 0, speed
    assert f"starts in {speed['start_cpu_ms_p50']:.1f} ms of CPU" in proc.stdout
    for run in runs:  # too short to be sampled while tasks finish: no steady figure
        assert "manager_steady_cpu_ms_per_task" in run, run["label"]
    assert {(r["n"], r["m"]) for r in report["scaling"]} == {(1, 1), (2, 1)}
    assert report["concurrent"]["rollouts"] == 4 and is_number(report["concurrent"]["makespan_over_best_bound"])
    # design (a)'s runs say what a pool with no costs of its own would take; (b), (c) hold
    # the VM for the episode, which the ideal does not model
    for run in [report["designs"]["a"], *report["scaling"], report["concurrent"]]:
        assert is_number(run["ideal_s"]) and is_number(run["makespan_over_ideal"]), run["label"]
    assert report["designs"]["b"]["ideal_s"] is None
    for run in [report["designs"]["a"], *report["scaling"], report["concurrent"]]:
        assert run["best_bound_s"] == max(run["bound_s"], run["rollout_bound_s"]), run["label"]
    for run in [report["designs"]["a"], *report["scaling"], report["concurrent"]]:  # the lease's trips
        for part in ("grant_ms", "release_ms", "release_answer_ms"):
            assert is_number(run[part]["p50"]) and is_number(run[part]["mean"]), (run["label"], part)
    assert "grant_ms" not in report["designs"]["b"]  # an episode's lease has no marks
    assert "measured ÷ ideal" in proc.stdout and "× best bound" in proc.stdout
    assert "a lease's trips" in proc.stdout
    assert "(b)/(a)" in proc.stdout and "ms/task" in proc.stdout
    # each scaling cell's tasks a second and reset p50: a reset grown slower shows in the table,
    # not only in ratios to a bound that grew with it
    assert "tasks/s reset p50" in proc.stdout
    for row in report["scaling"]:
        assert f"{row['tasks_per_s']:>9}{1000 * row['reset_p50_s']:>7.1f} ms" in proc.stdout, (row, proc.stdout)
    assert (tmp_path / report_path.name.replace(".json", ".png")).exists() or "no chart" in proc.stderr


def test_the_managers_steady_cpu_leaves_its_start_and_shutdown_out():
    sys.path.insert(0, str(BENCH.parent))
    import pool
    sampler = pool.Sampler(runner=None, total=100)
    # (attempts final, the Manager's CPU seconds): 0.09 s of start before the first attempt
    # is final, 2 ms an attempt while they finish, 0.05 s of shutdown after the last
    sampler.manager_samples = [(0, 0.05), (0, 0.09), (10, 0.11), (50, 0.19), (90, 0.27), (100, 0.29), (100, 0.34)]
    assert sampler.steady_cpu_ms_per_task() == 2.0
    sampler.manager_samples = [(0, 0.09), (10, 0.11), (20, 0.13), (100, 0.34)]  # 10 attempts apart: too few
    assert sampler.steady_cpu_ms_per_task() is None


def test_the_ideal_schedule_is_a_pool_without_costs():
    """measure.ideal_makespan: rollouts think, then take the VM ready first; a VM is ready
    again a reset after its command."""
    sys.path.insert(0, str(BENCH.parent))
    from measure import ideal_makespan

    # one rollout, one VM: each reset fits in the next think; 3 × (think 1 + command 1)
    assert ideal_makespan([1.0, 1.0, 1.0], loops=1, pool_size=1, think_s=1.0, reset_s=0.5) == 6.0
    # two rollouts want the one VM at 1: the second waits for the first command and its reset
    assert ideal_makespan([1.0, 1.0], loops=2, pool_size=1, think_s=1.0, reset_s=0.5) == 3.5
    # two VMs: no wait; more rollouts than tasks start only as many as there are tasks
    assert ideal_makespan([1.0, 2.0], loops=5, pool_size=2, think_s=1.0, reset_s=0.5) == 3.0
    # each task's own VM time, in the order they ran
    assert ideal_makespan([3.0, 1.0, 1.0], loops=1, pool_size=1, think_s=0.0, reset_s=0.0) == 5.0


def test_the_lease_split_matches_each_attempts_marks_to_its_own_lease():
    """measure.lease_split: the grant is LEASED → the env's client, the release the
    command's answer → RESETTING, each from the attempt's own lease (by its key)."""
    sys.path.insert(0, str(BENCH.parent))
    from measure import lease_split

    def events(key: str, leased: float, resetting: float) -> list[dict]:
        return [{"vm": "vm-0", "from": "idle", "to": "leased", "task": key, "time": leased},
                {"vm": "vm-0", "from": "leased", "to": "resetting", "task": key, "time": resetting}]

    records = [{"key": "a#0", "eval": {"marks": {"leased": 10.001, "ran": 10.030, "released": 10.0315}}},
               {"key": "b#0", "eval": {"marks": {"leased": 20.003, "ran": 20.040, "released": 20.0410}}},
               {"key": "c#0", "eval": {"vm_s": 0.01}}]  # no marks: left out
    split = lease_split(records, events("b#0", 20.0, 20.0405) + events("a#0", 10.0, 10.0305)
                        + events("c#0", 30.0, 30.02))
    assert split["grant_ms"] == {"p50": 2.0, "mean": 2.0}  # 1 ms and 3 ms
    assert split["release_ms"] == {"p50": 0.5, "mean": 0.5}
    assert split["release_answer_ms"] == {"p50": 0.75, "mean": 0.75}  # 1 ms and 0.5 ms
    assert lease_split(records[2:], events("c#0", 30.0, 30.02)) == {}


@pytest.mark.parametrize("setting", ["verify_reset", "no_such_setting=1"])
def test_a_bad_run_setting_is_refused(setting):
    proc = subprocess.run([sys.executable, str(BENCH), "--smoke", "--run-setting", setting],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and "--run-setting" in proc.stderr, proc.stderr


def test_resets_benchmark_smoke(tmp_path):
    """benchmarks/perf/resets.py's reset section on the process provider: every verification
    mode timed, none finds anything (the resets are real), the cold reset's parts add up."""
    bench = ROOT / "benchmarks" / "perf" / "resets.py"
    proc = subprocess.run([sys.executable, str(bench), "--smoke", "--sections", "resets",
                           "--providers", "process", "--out", str(tmp_path)],
                          capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stderr[-3000:]
    [report_path] = tmp_path.glob("*-resets-smoke.json")
    report = json.loads(report_path.read_text())
    rows = {(r["target"], r["mode"]): r for r in report["resets"]}
    assert set(rows) == {("process", "off"), ("process", "fast"), ("process", "full"),
                         ("process (no standby)", "fast")}
    for row in rows.values():
        assert row["quarantined"] == 0 and row["reset"]["n"] == 3, row
        assert is_number(row["reset"]["p50_ms"]) and is_number(row["verify"]["p95_ms"])
    assert rows[("process", "off")]["verify"]["p95_ms"] < 1.0  # off checks nothing
    cold = report["cold_process_reset"]
    parts = sum(cold[name]["p50_ms"] for name in ("kill and wait", "folder + bwrap set-up",
                                                  "agent start-up to ready"))
    assert 0 < parts <= 1.5 * cold["total"]["p50_ms"] + 5
    assert "reset and verification, ms" in proc.stdout


def test_the_better_bound_is_the_rollouts_below_the_knee_and_the_vms_above():
    """pool.with_bounds: 8 rollouts thinking 0.2 s before 0.06 s commands cannot keep 2 VMs
    busy (their bound binds); 32 rollouts can (the VMs' bound binds)."""
    sys.path.insert(0, str(BENCH.parent))
    from pool import with_bounds

    row = {"tasks": 160, "vm_time_s": 160 * 0.06, "bound_s": 160 * 0.06 / 2, "makespan_s": 5.3}
    below = with_bounds(dict(row), rollouts=8, think_s=0.2)
    assert below["rollout_bound_s"] == 5.2 and below["best_bound_s"] == 5.2
    assert below["makespan_over_best_bound"] == round(5.3 / 5.2, 4)
    above = with_bounds(dict(row), rollouts=32, think_s=0.2)
    assert above["rollout_bound_s"] == 1.3 and above["best_bound_s"] == row["bound_s"]


def test_agent_start_and_guest_costs_benchmarks_run(tmp_path):
    """benchmarks/perf/agent_start.py (against this checkout's own HEAD, taken out with git
    archive) and guest_costs.py, in miniature: both run as a user types them and print
    every figure they promise."""
    if subprocess.run(["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True).returncode:
        pytest.skip("not a git checkout: agent_start.py compares against a commit")
    perf = ROOT / "benchmarks" / "perf"
    proc = subprocess.run([sys.executable, str(perf / "agent_start.py"), "--against", "HEAD",
                           "--rounds", "2"], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    for row in ("this tree", "HEAD", "bare python3"):
        assert re.search(rf"{row}\s+median\s+[\d.]+ ms\s+mean\s+[\d.]+ ms", proc.stdout), proc.stdout
    assert re.search(r"this tree ÷ HEAD: [\d.]+ \(medians\)", proc.stdout), proc.stdout
    out = tmp_path / "costs.jsonl"
    proc = subprocess.run([sys.executable, str(perf / "guest_costs.py"), "--commands", "5",
                           "--resets", "3", "--gap", "0.05", "--json", str(out)],
                          capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stderr[-3000:]
    row = json.loads(out.read_text())
    for name in ("overhead_p50_ms", "machine_cpu_ms_per_reset", "first_command_p50_ms",
                 "idle_command_p50_ms", "next_command_p50_ms", "boot_p50_ms"):
        assert is_number(row[name]), (name, row)
    assert row["boots"] == 3 and "a new VM's start" in proc.stdout
    assert "the next after the same idle 0.05 s" in proc.stdout, proc.stdout


@pytest.mark.skipif(os.geteuid() != 0, reason="uid_switch.py switches uid: root only")
def test_binds_and_uid_switch_benchmarks_run():
    """benchmarks/perf/binds.py (a few sandboxes of each command line, and of each group of
    mounts left out with ``--parts``) and uid_switch.py, as a user types them: they run and
    print the figures the README quotes."""
    perf = ROOT / "benchmarks" / "perf"
    proc = subprocess.run([sys.executable, str(perf / "binds.py"), "--blocks", "2", "--per-block", "3"],
                          capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stderr[-3000:]
    for name in ("one by one", "one folder"):
        assert re.search(rf"{name}\s+\(\s*\d+ binds\): +[\d.]+ ms a sandbox, machine CPU +[\d.]+ ms",
                         proc.stdout), proc.stdout
    assert re.search(r"one folder ÷ one by one: wall [\d.]+, machine CPU [\d.]+", proc.stdout), proc.stdout
    proc = subprocess.run([sys.executable, str(perf / "binds.py"), "--parts", "--blocks", "1", "--per-block", "3"],
                          capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stderr[-3000:]
    binds = {name: int(count) for name, count in re.findall(
        r"^(now|no /etc files|no fronts|no net ns)\s+\(\s*(\d+) binds\): +[\d.]+ ms a sandbox, machine CPU", proc.stdout, re.M)}
    # each group left out is really there to leave out: the same sandbox with fewer binds
    assert len(binds) == 4 and binds["no /etc files"] < binds["now"] and binds["no fronts"] < binds["now"] \
        and binds["no net ns"] == binds["now"], proc.stdout
    assert re.search(r"÷ now: no /etc files wall [\d.]+ CPU [\d.]+, no fronts wall", proc.stdout), proc.stdout
    proc = subprocess.run([sys.executable, str(perf / "uid_switch.py")], capture_output=True, text=True,
                          timeout=240)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert re.search(r"/bin/true: [\d.]+ ms   through the uid switch: [\d.]+ ms   added per command: "
                     r"-?[\d.]+ ms", proc.stdout), proc.stdout


def test_one_cell_is_run_and_printed_as_one_json_line_and_a_bad_cell_is_named():
    proc = subprocess.run([sys.executable, str(BENCH), "--cell", "2,1,6"], capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stderr[-3000:]
    cell = json.loads(proc.stdout.strip().splitlines()[-1])
    assert (cell["n"], cell["m"], cell["tasks"], cell["exit_code"], cell["failures"]) == (2, 1, 6, 0, 0), cell
    assert all(is_number(cell[name]) and cell[name] > 0 for name in ("makespan_s", "makespan_over_bound",
                                                                     "manager_cpu_ms_per_task", "tasks_per_s")), cell
    bad = subprocess.run([sys.executable, str(BENCH), "--cell", "2,0,6"], capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and "--cell takes three positive whole numbers N,M,TASKS, got '2,0,6'" in bad.stderr
