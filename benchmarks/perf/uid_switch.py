"""What the sandbox's uid switch adds to one command, against the same command started directly.

    python benchmarks/perf/uid_switch.py      # as root: the agent switches uid only as root

The guest agent, running as root inside a sandbox, started every graded command through
util-linux ``setpriv`` (uid 64000, no capabilities, an empty bounding set, no new privileges:
``guest/agent_commands.py``): one more exec per command. Since issue 30 only a desktop agent
(or one that could not seal itself) does; the others switch the uid in their own fork. This times ``/bin/true`` started
directly and through the same ``setpriv`` flags, in interleaved blocks, and prints the median
of each and their difference: the part of the perf benchmark's VM time per command that the
uid switch explains.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "src"))

from parallel_rollout.guest import agent_commands  # noqa: E402


def _block(argv: list[str], n: int) -> float:
    started = time.perf_counter()
    for _ in range(n):
        subprocess.run(argv, check=True)
    return (time.perf_counter() - started) / n * 1000


def main() -> int:
    if os.geteuid() != 0:
        print("uid_switch.py: run it as root (the agent switches uid only as root)", file=sys.stderr)
        return 2
    agent_commands.run_as = (64000, 64000)
    wrapped = agent_commands.as_user(["/bin/true"])
    plain, switched = [], []
    for _ in range(8):
        plain.append(_block(["/bin/true"], 50))
        switched.append(_block(wrapped, 50))
    p, s = statistics.median(plain), statistics.median(switched)
    print(f"/bin/true: {p:.2f} ms   through the uid switch: {s:.2f} ms   "
          f"added per command: {s - p:.2f} ms ({s / p:.2f}x)   load {os.getloadavg()[0]:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
