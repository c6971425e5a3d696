"""What a shell check's scan for links into ``/proc`` costs in a big tree made before the
attempt (``agent_grading.links_into_processes``), with and without the lease's time.

    python benchmarks/perf/link_scan.py                      # 100k files on /dev/shm (tmpfs)
    python benchmarks/perf/link_scan.py --files 20000 --root /var/tmp

The tree is a copy of a virtualenv's shape: packages of 40 files, each with a ``__pycache__``
of 40 and a subpackage of 20 (with no subfolder). It is made, then the lease begins (``since``),
then one link to ``/proc/self/cmdline`` is made in a subpackage deep in it, which both scans must
find. "every folder" passes no ``since``: every folder is read and every link looked at, as the
scan did on every check before folders dated before the lease were pruned; "since the lease"
is what a check now pays. Each is the best of ``--repeat`` scans (the machine's other jobs only
add time). Only the tree is scanned (the host's own ``/tmp`` is left out).
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "src"))

from parallel_rollout.guest import agent_grading  # noqa: E402


def build(root: Path, files: int) -> Path:
    """A tree of about ``files`` empty files; the folder a late link goes into."""
    site = root / "venv" / "lib" / "python3" / "site-packages"
    packages = max(1, files // 100)
    for number in range(packages):
        package = site / f"pkg{number}"
        for folder, count in ((package, 40), (package / "__pycache__", 40), (package / "sub", 20)):
            folder.mkdir(parents=True)
            for index in range(count):
                (folder / f"m{index}.py").touch()
    return site / f"pkg{packages // 2}" / "sub"


def best(home: Path, since: float | None, repeat: int) -> tuple[float, list[str]]:
    times, found = [], []
    for _ in range(repeat):
        started = time.perf_counter()
        found = agent_grading.links_into_processes(str(home), time.monotonic() + 600, since)
        times.append(time.perf_counter() - started)
    return min(times), found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--files", type=int, default=100_000)
    parser.add_argument("--root", default="/dev/shm" if os.path.isdir("/dev/shm") else None,
                        help="where the tree is made (default: /dev/shm, a tmpfs as a sandbox's home)")
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    agent_grading.WRITABLE_FOLDERS = ()  # the tree alone, not this host's /tmp
    home = Path(tempfile.mkdtemp(prefix="link-scan-", dir=args.root))
    try:
        late = build(home, args.files)
        time.sleep(0.05)  # a ctime is the kernel's coarse clock: the lease begins after the tree
        since = time.time()
        time.sleep(0.05)
        (late / "count.txt").symlink_to("/proc/self/cmdline")
        full, found_full = best(home, None, args.repeat)
        pruned, found_pruned = best(home, since, args.repeat)
        assert found_full == found_pruned == [f"{late / 'count.txt'} -> /proc/self/cmdline"], (found_full, found_pruned)
        print(f"{args.files} files in {home} ({args.root}), best of {args.repeat}:")
        print(f"  every folder     {full * 1000:8.1f} ms")
        print(f"  since the lease  {pruned * 1000:8.1f} ms")
        print(f"  ratio            {full / pruned:8.2f}x  (the late link found by both)")
    finally:
        shutil.rmtree(home, ignore_errors=True)


if __name__ == "__main__":
    main()
