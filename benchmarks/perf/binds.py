"""What the agent's files cost a process sandbox, bound one by one or as one folder.

    python benchmarks/perf/binds.py                       # 6 interleaved blocks of 40
    python benchmarks/perf/binds.py --blocks 2 --per-block 5

bubblewrap reads the sandbox's whole mount table again after each bind it makes (to
remount what lies below it read-only), so every bind costs more than its own mount. A
process VM's sandbox bound the agent's seven modules, their ``__pycache__`` and the
grading wrappers one by one; it now binds their folder (``pool/providers/agent_folder.py``)
once. This builds both command lines from the provider's own (``sandbox_argv``), runs
``/bin/true`` in each, in interleaved blocks, and prints the median wall time and the
machine's CPU (``/proc/stat``, so the kernel's work in its threads counts) per sandbox,
with their ratio.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "src"))

from measure import machine_cpu_s  # noqa: E402 - beside this file
from parallel_rollout.pool.providers import images, sandbox_argv  # noqa: E402
from parallel_rollout.pool.providers.base import ProviderOptions  # noqa: E402
from parallel_rollout.pool.providers.process import ProcessProvider  # noqa: E402


def _block(argv: list[str], n: int) -> tuple[float, float]:
    """(wall ms, machine CPU ms) per sandbox, over ``n`` in a row."""
    cpu, started = machine_cpu_s(), time.perf_counter()
    for _ in range(n):
        subprocess.run(argv, check=True)
    wall = time.perf_counter() - started
    cpu = machine_cpu_s() - cpu
    return wall / n * 1000, cpu / n * 1000


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--blocks", type=int, default=6, help="blocks of each command line")
    parser.add_argument("--per-block", type=int, default=40, help="sandboxes in a block")
    args = parser.parse_args()
    base = Path(tempfile.mkdtemp(prefix="binds-"))
    try:
        return _compare(base, args.blocks, args.per_block)
    finally:
        shutil.rmtree(base, ignore_errors=True)


def _compare(base: Path, blocks: int, per_block: int) -> int:
    provider = ProcessProvider("binds", ProviderOptions(), base_dir=base)
    spec = provider._spec  # noqa: SLF001 - the provider's own sandbox, as it boots it
    if spec.agent_dir is None:
        print("binds.py: the agent's folder could not be made (see the warning)", file=sys.stderr)
        return 2
    vm_dir = base / "binds" / "vm0"
    vm_dir.mkdir(parents=True)
    sandbox, _ = sandbox_argv.folder_argv(spec, "vm0", vm_dir, None)
    one = ["--ro-bind", str(spec.agent_dir), images.GUEST_DIR]
    at = next(i for i in range(len(sandbox)) if sandbox[i:i + 3] == one)
    # what a desktop binds (and every sandbox did): each file, the folder's __pycache__
    each = sandbox_argv.agent_binds(dataclasses.replace(spec, desktop=True))
    argvs = {"one by one": [*sandbox[:at], *each, *sandbox[at + 3:], "--", "/bin/true"],
             "one folder": [*sandbox, "--", "/bin/true"]}
    mounts = {name: sum(argv.count(flag) for flag in ("--ro-bind", "--bind")) for name, argv in argvs.items()}
    figures: dict[str, list[tuple[float, float]]] = {name: [] for name in argvs}
    for _ in range(blocks):
        for name, argv in argvs.items():
            figures[name].append(_block(argv, per_block))
    medians = {name: (statistics.median(w for w, _ in rows), statistics.median(c for _, c in rows))
               for name, rows in figures.items()}
    for name, (wall, cpu) in medians.items():
        print(f"{name:11s} ({mounts[name]:2d} binds): {wall:6.2f} ms a sandbox, machine CPU {cpu:6.2f} ms")
    (w1, c1), (w2, c2) = medians["one by one"], medians["one folder"]
    print(f"one folder ÷ one by one: wall {w2 / w1:.3f}, machine CPU {c2 / c1:.3f}   "
          f"load {os.getloadavg()[0]:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
