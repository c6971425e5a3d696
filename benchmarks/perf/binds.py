"""What the agent's files cost a process sandbox, bound one by one or as one folder.

    python benchmarks/perf/binds.py                       # 6 interleaved blocks of 40
    python benchmarks/perf/binds.py --blocks 2 --per-block 5
    python benchmarks/perf/binds.py --fronts              # the grading fronts' binds
    python benchmarks/perf/binds.py --parts               # what each group of mounts costs now
    python benchmarks/perf/binds.py --etc                 # /etc's copy against /etc masked

bubblewrap reads the sandbox's whole mount table again after each bind it makes (to
remount what lies below it read-only), so every bind costs more than its own mount. A
process VM's sandbox bound the agent's seven modules, their ``__pycache__`` and the
grading wrappers one by one; it now binds their folder (``pool/providers/agent_folder.py``)
once. This builds both command lines from the provider's own (``sandbox_argv``), runs
``/bin/true`` in each, in interleaved blocks, and prints the median wall time and the
machine's CPU (``/proc/stat``, so the kernel's work in its threads counts) per sandbox,
with their ratio.

``--fronts``: the grading wrappers' fronts (``pool/providers/grading_fronts.py``) the same way: a
sandbox with none, with env's, git's and python's bound file by file (what a process VM bound
without the fronts' folder), with every wrapper's bound file by file, and with the fronts'
folder (what it binds now), each's ratio to none.

``--parts``: the provider's sandbox as it boots now, and the same with one group of its mounts
left out at a time: the binds over files of /etc (the host's secrets masked, the sandbox's
passwd and group, python's sitecustomize.py front), the grading fronts' binds, and the
network namespace (``--unshare-net``); each's ratio to the whole.

``--etc``: the provider's sandbox with /etc's copy (``system_data.prepare_etc``: one bind, no
mask) against the same with the host's /etc and an empty file over each of its secrets.
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
from parallel_rollout.pool.providers import grading_fronts, images, sandbox_argv, sandbox_fs  # noqa: E402
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
    parser.add_argument("--fronts", action="store_true", help="the grading fronts' binds instead")
    parser.add_argument("--parts", action="store_true", help="each group of the mounts, left out in turn")
    parser.add_argument("--etc", action="store_true", help="/etc's copy against /etc with its secrets masked")
    args = parser.parse_args()
    base = Path(tempfile.mkdtemp(prefix="binds-"))
    run = _fronts if args.fronts else _parts if args.parts else _etc if args.etc else _compare
    try:
        return run(base, args.blocks, args.per_block)
    finally:
        shutil.rmtree(base, ignore_errors=True)


def _sandbox(base: Path, field: str, what: str):
    """The provider's own sandbox spec and command line, as it boots it; None (and why, printed)
    when its ``field`` folder (``what``) could not be made."""
    spec = ProcessProvider("binds", ProviderOptions(), base_dir=base)._spec  # noqa: SLF001
    if getattr(spec, field) is None:
        print(f"binds.py: {what} could not be made (see the warning)", file=sys.stderr)
        return None
    vm_dir = base / "binds" / "vm0"
    vm_dir.mkdir(parents=True)
    return spec, sandbox_argv.folder_argv(spec, "vm0", vm_dir, None)[0]


def _compare(base: Path, blocks: int, per_block: int) -> int:
    made = _sandbox(base, "agent_dir", "the agent's folder")
    if made is None:
        return 2
    spec, sandbox = made
    one = ["--ro-bind", str(spec.agent_dir), images.GUEST_DIR]
    at = next(i for i in range(len(sandbox)) if sandbox[i:i + 3] == one)
    # what a desktop binds (and every sandbox did): each file, the folder's __pycache__
    each = sandbox_argv.agent_binds(dataclasses.replace(spec, desktop=True))
    argvs = {"one by one": [*sandbox[:at], *each, *sandbox[at + 3:], "--", "/bin/true"],
             "one folder": [*sandbox, "--", "/bin/true"]}
    medians = _medians(argvs, blocks, per_block)
    (w1, c1), (w2, c2) = medians["one by one"], medians["one folder"]
    print(f"one folder ÷ one by one: wall {w2 / w1:.3f}, machine CPU {c2 / c1:.3f}   "
          f"load {os.getloadavg()[0]:.2f}")
    return 0


def _medians(argvs: dict[str, list[str]], blocks: int, per_block: int) -> dict[str, tuple[float, float]]:
    """Each command line's median (wall, CPU) ms a sandbox over interleaved blocks, printed."""
    mounts = {name: sum(argv.count(flag) for flag in ("--ro-bind", "--bind")) for name, argv in argvs.items()}
    figures: dict[str, list[tuple[float, float]]] = {name: [] for name in argvs}
    for _ in range(blocks):
        for name, argv in argvs.items():
            figures[name].append(_block(argv, per_block))
    medians = {name: (statistics.median(w for w, _ in rows), statistics.median(c for _, c in rows))
               for name, rows in figures.items()}
    for name, (wall, cpu) in medians.items():
        print(f"{name:11s} ({mounts[name]:2d} binds): {wall:6.2f} ms a sandbox, machine CPU {cpu:6.2f} ms")
    return medians


def _around_fronts(base: Path):
    """(spec, the sandbox's command line, what comes before its fronts' binds, what after);
    None when the fronts' folder could not be made."""
    made = _sandbox(base, "fronts_dir", "the fronts' folder")
    if made is None:
        return None
    spec, sandbox = made
    folder = grading_fronts.bwrap_binds(spec.python, spec.fronts_dir)
    at = next(i for i in range(len(sandbox)) if sandbox[i:i + len(folder)] == folder)
    return spec, sandbox, sandbox[:at], sandbox[at + len(folder):]


def _fronts(base: Path, blocks: int, per_block: int) -> int:
    made = _around_fronts(base)
    if made is None:
        return 2
    spec, sandbox, before, after = made
    every = grading_fronts.plan(grading_fronts.GuestFiles(), os.path.abspath(spec.python))
    every_binds = sandbox_fs.open_dirs(grading_fronts.SYSTEM_ORIGINALS)
    for kept, real in every.originals.items():
        every_binds += ["--ro-bind", real, kept]
    for real, front in every.fronts.items():
        every_binds += ["--ro-bind", str(grading_fronts.GRADING_BIN / front), real]
    argvs = {"none": [*before, *after, "--", "/bin/true"],
             "env+git": [*before, *grading_fronts.bwrap_binds(spec.python), *after, "--", "/bin/true"],
             "every file": [*before, *every_binds, *after, "--", "/bin/true"],
             "the folder": [*sandbox, "--", "/bin/true"]}
    _ratios(_medians(argvs, blocks, per_block), "none")
    return 0


def _parts(base: Path, blocks: int, per_block: int) -> int:
    made = _around_fronts(base)
    if made is None:
        return 2
    _, sandbox, before, after = made
    argvs = {"now": [*sandbox, "--", "/bin/true"],
             "no /etc files": [*_without_binds(sandbox, lambda dest: dest.startswith("/etc/")), "--", "/bin/true"],
             "no fronts": [*before, *after, "--", "/bin/true"],
             "no net ns": [*(part for part in sandbox if part != "--unshare-net"), "--", "/bin/true"]}
    _ratios(_medians(argvs, blocks, per_block), "now")
    return 0


def _etc(base: Path, blocks: int, per_block: int) -> int:
    made = _sandbox(base, "etc_dir", "/etc's copy")
    if made is None:
        return 2
    spec, sandbox = made
    masked = sandbox_argv.folder_argv(dataclasses.replace(spec, etc_dir=None), "vm0", base / "binds" / "vm0", None)[0]
    argvs = {"/etc masked": [*masked, "--", "/bin/true"], "/etc's copy": [*sandbox, "--", "/bin/true"]}
    _ratios(_medians(argvs, blocks, per_block), "/etc masked")
    return 0


def _ratios(medians: dict[str, tuple[float, float]], against: str) -> None:
    """Each command line's median wall time and CPU ÷ those of ``against``'s, printed."""
    wall, cpu = medians[against]
    print(f"÷ {against}: " + ", ".join(f"{name} wall {w / wall:.3f} CPU {c / cpu:.3f}"
                                       for name, (w, c) in medians.items() if name != against)
          + f"   load {os.getloadavg()[0]:.2f}")


def _without_binds(argv: list[str], left_out) -> list[str]:
    """``argv`` without its read-only binds whose destination ``left_out`` names."""
    kept, i = [], 0
    while i < len(argv):
        if argv[i] == "--ro-bind" and left_out(argv[i + 2]):
            i += 3
            continue
        kept.append(argv[i])
        i += 1
    return kept


if __name__ == "__main__":
    sys.exit(main())
