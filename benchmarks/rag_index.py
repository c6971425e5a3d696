#!/usr/bin/env python3
"""The rag mode's index: built once per corpus and run, mapped by every worker, never rebuilt.

Two runs of the shipped set (``--mode rag --data rag``, oracle, N workers × K loops) against a
fresh, empty index cache (``$PARALLEL_ROLLOUT_CACHE`` in a temporary folder):

1. **cold**: the runner finds no index for the WordNet corpus and builds it once, before any
   worker starts (``RagEnv.prepare_run``); the workers then only load it;
2. **warm**: the same run again: nothing is built, every worker loads the cached index.

Printed and written to ``benchmarks/results/rag-index-<date>.json``: how many index builds each
run made (counted from the cache: one ``built.json`` per build, with its build time), the
build's seconds, each run's wall time, and the time one worker takes to load the index
(memory-mapped) against the time to build it.

    python benchmarks/rag_index.py [--workers 4] [--envs-per-worker 2] [--limit 300]
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

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent


def builds(cache: Path) -> list[dict]:
    """Every index build the cache holds (one built.json each)."""
    return [json.loads(p.read_text()) for p in sorted(cache.glob("rag/*/built.json"))]


def run_once(cache: Path, out: Path, label: str, args) -> dict:
    """One CLI run of the shipped set; its wall time and the cache's builds after it."""
    env = dict(os.environ, PARALLEL_ROLLOUT_CACHE=str(cache))
    started = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, str(ROOT / "run_parallel_rollout.py"), "--mode", "rag", "--data", "rag",
         "--num-rollouts", str(args.workers), "--envs-per-worker", str(args.envs_per_worker),
         "--limit", str(args.limit), "--output-dir", str(out), "--run-id", label, "--no-progress"],
        capture_output=True, text=True, env=env)
    wall_s = time.perf_counter() - started
    if proc.returncode != 0:
        raise SystemExit(f"{label} run failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    summary = json.loads((out / label / "summary.json").read_text())
    return {"label": label, "wall_s": round(wall_s, 2), "builds_so_far": len(builds(cache)),
            "success_rate": summary["success_rate"], "finished": summary["finished"]}


def load_seconds(cache: Path) -> float:
    """Seconds a fresh process takes to open the cached index (what each worker pays once)."""
    code = ("import time; t = time.perf_counter(); "
            "from parallel_rollout.envs.rag.corpus import open_index, resolve_corpus; "
            "open_index(resolve_corpus('wordnet')); print(time.perf_counter() - t)")
    env = dict(os.environ, PARALLEL_ROLLOUT_CACHE=str(cache))
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True)
    return float(proc.stdout.strip())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--envs-per-worker", type=int, default=2)
    parser.add_argument("--limit", type=int, default=300)
    parser.add_argument("--out", type=Path, default=HERE / "results")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="rag-bench-") as tmp:
        cache, runs = Path(tmp) / "cache", Path(tmp) / "runs"
        cold = run_once(cache, runs, "cold", args)
        [build] = builds(cache)  # exactly one build for the whole cold run, or this fails
        warm = run_once(cache, runs, "warm", args)
        load_s = load_seconds(cache)
    report = {
        "workers": args.workers, "envs_per_worker": args.envs_per_worker, "tasks": args.limit,
        "load_average": os.getloadavg(), "documents": build["documents"],
        "build_s": round(build["build_s"], 2), "load_s": round(load_s, 3),
        "cold": cold, "warm": warm,
    }
    assert warm["builds_so_far"] == 1, "the warm run rebuilt the index"
    print(json.dumps(report, indent=2))
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / f"rag-index-{time.strftime('%Y-%m-%d')}.json").write_text(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
