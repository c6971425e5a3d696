"""The guest agent's start: CPU from ``python3 server.py`` to its first command answered.

    python benchmarks/perf/agent_start.py                  # against the agent of 75a8dfb
    python benchmarks/perf/agent_start.py --against REF --rounds 60

A ``process`` VM's reset starts a new agent (the standby's), so this is CPU every reset
costs the machine. Each round starts the agent of this tree and the agent of ``--against``
(a git commit of this repository, its ``guest`` folder taken out with ``git archive``), in
alternating order, and a bare ``python3 -I -S -c pass`` beside them: each waits for the
agent's ``--ready-fd``, sends one ``/execute`` of ``true`` over its unix socket, reads the
answer and kills it; the CPU is the child's (``RUSAGE_CHILDREN``: the agent, its command),
user plus system. Printed: medians and means in ms, and this tree ÷ the other.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

from measure import child_cpu_ms  # this folder: the script's own

ROOT = Path(__file__).resolve().parents[2]
GUEST = "src/parallel_rollout/guest"
PYTHON = "/usr/bin/python3"  # what the process provider's sandboxes run the agent with


def _agent_and_one_command(guest: Path, scratch: Path) -> None:
    sock = scratch / "agent.sock"
    read_fd, write_fd = os.pipe()
    agent = subprocess.Popen([PYTHON, "-I", "-S", str(guest / "server.py"), "--unix", str(sock),
                              "--ready-fd", str(write_fd)], pass_fds=(write_fd,),
                             env={"PATH": "/usr/bin:/bin", "HOME": str(scratch)})
    os.close(write_fd)
    try:
        if not os.read(read_fd, 16).startswith(b"ready"):
            raise SystemExit(f"agent_start.py: the agent in {guest} did not start")
        body = json.dumps({"command": ["true"]}).encode()
        with socket.socket(socket.AF_UNIX) as conn:
            conn.connect(str(sock))
            conn.sendall(b"POST /execute HTTP/1.1\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body))
            answer = b"".join(iter(lambda: conn.recv(65536), b""))
        if b'"returncode": 0' not in answer:
            raise SystemExit(f"agent_start.py: the agent in {guest} answered {answer[:300]!r}")
    finally:
        os.close(read_fd)
        agent.kill()
        agent.wait()


def _checkout(ref: str, into: Path) -> Path:
    archive = into / "guest.tar"
    subprocess.run(["git", "-C", str(ROOT), "archive", "-o", str(archive), ref, GUEST], check=True)
    with tarfile.open(archive) as tar:
        tar.extractall(into, filter="data")
    return into / GUEST


def _summary(values: list[float]) -> tuple[float, float]:
    ordered = sorted(values)
    return ordered[len(ordered) // 2], sum(ordered) / len(ordered)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--against", default="75a8dfb",
                        help="the git commit whose agent is the baseline (default 75a8dfb: the "
                             "agent on socketserver, json and subprocess)")
    parser.add_argument("--rounds", type=int, default=40, help="starts of each agent (default 40)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch_dir:
        scratch = Path(scratch_dir)
        sides = {"this tree": ROOT / GUEST, args.against: _checkout(args.against, scratch)}
        cpu: dict[str, list[float]] = {name: [] for name in (*sides, "bare python3")}
        for round_no in range(args.rounds):
            order = list(sides) if round_no % 2 == 0 else list(reversed(sides))
            for name in order:
                cpu[name].append(child_cpu_ms(lambda: _agent_and_one_command(sides[name], scratch)))
            cpu["bare python3"].append(child_cpu_ms(
                lambda: subprocess.run([PYTHON, "-I", "-S", "-c", "pass"], check=True)))
    print(f"CPU of an agent's start and its first command, {args.rounds} rounds "
          f"(load {os.getloadavg()[0]:.1f}):")
    for name, values in cpu.items():
        median, mean = _summary(values)
        print(f"  {name:>14}  median {median:6.1f} ms   mean {mean:6.1f} ms")
    ratio = _summary(cpu["this tree"])[0] / _summary(cpu[args.against])[0]
    print(f"  this tree ÷ {args.against}: {ratio:.3f} (medians)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
