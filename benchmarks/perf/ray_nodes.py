"""--backend ray against its bound with 1, 2 and 3 nodes, and its overhead against local.

    python benchmarks/perf/ray_nodes.py            # 240 tasks per run (minutes on 2 cores)
    python benchmarks/perf/ray_nodes.py --smoke    # seconds; checks the report

The nodes are raylets of one ``ray.cluster_utils.Cluster`` on this machine (127.0.0.1), each
with its own process-sandbox pool of M VMs and N worker actors, so the "cluster" shares this
host's cores: the numbers say what Ray's placement and the driver cost, not what more hosts
buy. Same workload and definitions as ``pool.py`` (``workload.py``, ``measure``):

* **makespan / bound** per node count, the bound being Σ(VM time + reset time) / (total VMs
  = nodes × M);
* **overhead**: zero-length tasks (no VM, no think), ms per task through Ray (1 node) over the
  local backend, as a ratio, in the same invocation.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
# Ray's workers import workload.py by its module:Class path: the raylets hand them this.
os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(HERE), os.environ.get("PYTHONPATH")]))
os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")  # every Ray process on 127.0.0.1

from pool import AGENT, MODES, measure, write_tasks  # noqa: E402
from parallel_rollout.config import build_config  # noqa: E402
from parallel_rollout.runner import Runner  # noqa: E402

PROFILES = {
    "full": {"tasks": 240, "vms": 2, "workers": 4, "think_s": 0.2, "vm_s": 0.05, "overhead_tasks": 400},
    "smoke": {"tasks": 12, "vms": 1, "workers": 2, "think_s": 0.01, "vm_s": 0.01, "overhead_tasks": 20},
}


def run(workdir: Path, label: str, spec: dict[str, Any], *, mode: str, backend: str,
        address: str | None, nodes: int) -> dict[str, Any]:
    """One Runner run; measure()'s numbers with the node count."""
    tasks = spec["overhead_tasks"] if mode == "perf_none" else spec["tasks"]
    data = write_tasks(workdir / f"{label}.jsonl", tasks, mode, 0.0 if mode == "perf_none" else spec["think_s"],
                       None if mode == "perf_none" else spec["vm_s"])
    flags: dict[str, Any] = dict(mode=MODES[mode], data=str(data), agent=AGENT, output_dir=str(workdir / "runs"),
                                 run_id=label, progress=False, max_retries=0, backend=backend,
                                 num_rollouts=1 if mode == "perf_none" else spec["workers"])
    if address:
        flags["ray_address"] = address
    if mode != "perf_none":
        flags.update(use_vm_pool=True, num_vms=spec["vms"])
    started = time.time()
    outcome = Runner(build_config(flags)).run()
    vms = spec["vms"] * nodes if mode != "perf_none" else 0
    metrics = measure(outcome.run_dir, vms, started)
    metrics.update(label=label, backend=backend, nodes=nodes, vms=vms, exit_code=outcome.exit_code)
    return metrics


def main(argv: list[str] | None = None) -> int:
    from ray.cluster_utils import Cluster

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--smoke", action="store_true", help="seconds; checks the report, not the speed")
    parser.add_argument("--out", type=Path, default=HERE / "results", help="where the JSON goes")
    args = parser.parse_args(argv)
    profile = "smoke" if args.smoke else "full"
    spec = PROFILES[profile]
    logging.getLogger("parallel_rollout").setLevel(logging.WARNING)
    workdir = Path(tempfile.mkdtemp(prefix="pr-perf-ray-"))
    node_args = dict(num_cpus=1, object_store_memory=80 * 1024 * 1024)
    cluster = Cluster(initialize_head=True, connect=False, head_node_args=dict(node_args, include_dashboard=False))
    began = time.time()
    rows: list[dict[str, Any]] = []
    try:
        rows.append(run(workdir, "local-ovh", spec, mode="perf_none", backend="local", address=None, nodes=1))
        rows.append(run(workdir, "local", spec, mode="perf_call", backend="local", address=None, nodes=1))
        for nodes in (1, 2, 3):
            while len(cluster.list_all_nodes()) < nodes:
                cluster.add_node(**node_args)
            cluster.wait_for_nodes()
            if nodes == 1:
                rows.append(run(workdir, "ray-ovh", spec, mode="perf_none", backend="ray",
                                address=cluster.address, nodes=1))
            rows.append(run(workdir, f"ray-{nodes}", spec, mode="perf_call", backend="ray",
                            address=cluster.address, nodes=nodes))
    finally:
        cluster.shutdown()
        shutil.rmtree(workdir, ignore_errors=True)
    by = {r["label"]: r for r in rows}
    report = {
        "version": 1, "profile": profile, "spec": spec, "date": time.strftime("%Y-%m-%d %H:%M:%S"),
        "duration_s": round(time.time() - began, 1), "cpus": os.cpu_count(), "runs": rows,
        "ratios": {
            "ray_overhead_over_local": round(by["ray-ovh"]["ms_per_task"] / by["local-ovh"]["ms_per_task"], 3),
            "ray_1node_makespan_over_local": round(by["ray-1"]["makespan_s"] / by["local"]["makespan_s"], 3),
            **{f"ray_{n}nodes_makespan_over_bound": by[f"ray-{n}"]["makespan_over_bound"] for n in (1, 2, 3)},
            "local_makespan_over_bound": by["local"]["makespan_over_bound"],
        },
    }
    print(f"{'run':10} {'nodes':>5} {'VMs':>4} {'tasks':>5} {'fail':>4} {'makespan':>9} {'bound':>7} "
          f"{'ratio':>6} {'ms/task':>8}")
    for r in rows:
        print(f"{r['label']:10} {r['nodes']:5} {r['vms']:4} {r['tasks']:5} {r['failures']:4} "
              f"{r['makespan_s']:9.2f} {r['bound_s'] or 0:7.2f} {r['makespan_over_bound'] or 0:6.2f} "
              f"{r['ms_per_task']:8.2f}")
    print(json.dumps(report["ratios"], indent=1))
    args.out.mkdir(parents=True, exist_ok=True)
    path = args.out / (time.strftime("%Y-%m-%d") + f"-ray{'' if profile == 'full' else '-' + profile}.json")
    path.write_text(json.dumps(report, indent=1) + "\n")
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
