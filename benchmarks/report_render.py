"""How long report.html takes to write and to open for a large run (a benchmark, not a test).

    python benchmarks/report_render.py                    # 10,000 samples
    python benchmarks/report_render.py --samples 50000 --no-browser

Makes a synthetic run folder shaped like a real one: ``--samples`` samples (groups of 4)
over 8 workers and 3 pooled VMs, each attempt leased, run and reset in events.jsonl, about
9% failures and 2% infrastructure retries, a 3-turn trajectory per attempt, summary.json
from the runner's own ``summarize``. Then it times ``write_report`` and, unless
``--no-browser``, opening the page in headless Chromium until its script has drawn the
first page of the table (Playwright, Debian's chromium).
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import tempfile
import time
from pathlib import Path

from parallel_rollout.report.html import write_report
from parallel_rollout.results import summarize

CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking",
                  "--disable-component-update", "--disable-sync"]


def synthetic_run(run_dir: Path, samples: int, seed: int = 7) -> None:
    """A run folder of ``samples`` samples: results, events, trajectories, summary, config."""
    rng = random.Random(seed)
    run_dir.mkdir(parents=True)
    t0 = time.time() - 3600
    worker_free = {f"w{i}": t0 for i in range(8)}
    vm_free = {f"vm-{i}": t0 for i in range(3)}
    records, events = [], []
    for vm in vm_free:
        events.append({"time": t0, "event": "vm", "vm": vm, "from": None, "to": "booting"})
        events.append({"time": t0 + 1, "event": "vm", "vm": vm, "from": "booting", "to": "idle"})
    for index in range(samples):
        task, sample = f"task-{index // 4:05d}", index % 4
        attempt = 0
        while True:
            worker = min(worker_free, key=worker_free.get)
            vm = min(vm_free, key=vm_free.get)
            start = max(worker_free[worker], vm_free[vm])
            duration = rng.lognormvariate(0.0, 0.6)
            end = start + duration
            infra = rng.random() < 0.02 and attempt == 0
            success = not infra and rng.random() < 0.91
            status = "vm_error" if infra else ("success" if success else rng.choice(["failure", "max_turns"]))
            key = f"{task}#{sample}"
            rel = f"trajectories/{task}/{sample}/attempt-{attempt}.jsonl"
            records.append({
                "key": key, "task_id": task, "sample_idx": sample, "attempt": attempt, "mode": "shell",
                "tags": ["odd" if index % 2 else "even"], "status": status, "reward": 1.0 if success else 0.0,
                "success": success, "infrastructure": infra, "final": not infra,
                "failure": {"type": "VMError", "message": "guest stopped answering", "traceback": ""} if infra else None,
                "eval": {"check_returncode": 0 if success else 1}, "turns": 3, "worker": worker, "pid": 1000,
                "slot": 0, "vm": vm, "vms": [vm], "lease_wait_s": round(start - worker_free[worker], 4),
                "started_at": round(start, 4), "ended_at": round(end, 4), "duration_s": round(duration, 4),
                "trajectory": rel, "usage": {}, "run_id": run_dir.name,
            })
            events.append({"time": start, "event": "vm", "vm": vm, "from": "idle", "to": "leased", "task": key})
            events.append({"time": end, "event": "vm", "vm": vm, "from": "leased", "to": "resetting"})
            events.append({"time": end + 0.03, "event": "vm", "vm": vm, "from": "resetting", "to": "idle"})
            worker_free[worker], vm_free[vm] = end, end + 0.03
            path = run_dir / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text("".join(json.dumps({"turn": t, "action": {"command": f"ls -la /tmp/{t}"},
                                                "observation": {"output": "x" * 300, "returncode": 0},
                                                "done": t == 3, "info": {}}) + "\n" for t in (1, 2, 3)))
            if not infra:
                break
            attempt += 1
    events.sort(key=lambda e: e["time"])
    (run_dir / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    (run_dir / "events.jsonl").write_text("".join(json.dumps(e) + "\n" for e in events))
    summary = summarize(records, total_samples=samples, pool_stats=None, started_at=t0)
    summary["run_id"] = run_dir.name
    (run_dir / "summary.json").write_text(json.dumps(summary, indent=2))
    (run_dir / "config.json").write_text(json.dumps({"run_id": run_dir.name, "config": {
        "mode": "shell", "agent": "oracle", "provider_name": "process", "group_size": 4}}))


def open_in_browser(report: Path) -> float:
    """Seconds from navigation to the first page of the table drawn, in headless Chromium."""
    from playwright.sync_api import sync_playwright

    with tempfile.TemporaryDirectory() as profile, sync_playwright() as pw:
        context = pw.chromium.launch_persistent_context(
            profile, executable_path=shutil.which("chromium") or "/usr/bin/chromium", headless=True,
            args=CHROMIUM_FLAGS)
        try:
            page = context.new_page()
            started = time.perf_counter()
            page.goto(report.as_uri())
            page.wait_for_selector("body[data-ready='1']", timeout=120_000)
            opened = time.perf_counter() - started
            rows = page.locator("#samples-body tr").count()
            assert rows == 50, rows
            return opened
        finally:
            context.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=10_000)
    parser.add_argument("--no-browser", action="store_true", help="only time writing the page")
    parser.add_argument("--keep", action="store_true", help="keep the synthetic folder and print its path")
    args = parser.parse_args()
    folder = Path(tempfile.mkdtemp(prefix="report-bench-"))
    try:
        run_dir = folder / "synthetic"
        made = time.perf_counter()
        synthetic_run(run_dir, args.samples)
        made = time.perf_counter() - made
        started, cpu = time.perf_counter(), time.process_time()
        report = write_report(run_dir)
        written, cpu = time.perf_counter() - started, time.process_time() - cpu
        size_mb = report.stat().st_size / 1e6
        # CPU time too: on a shared machine the wall time mostly measures the neighbours
        print(f"{args.samples} samples (folder made in {made:.1f}s): report.html written in {written:.2f}s "
              f"({cpu:.2f}s CPU), {size_mb:.1f} MB")
        if not args.no_browser:
            print(f"opened in headless chromium (first table page drawn) in {open_in_browser(report):.2f}s")
        if args.keep:
            print(f"kept: {run_dir}")
    finally:
        if not args.keep:
            shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    main()
