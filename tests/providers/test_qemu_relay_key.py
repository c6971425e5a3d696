"""A QEMU VM's guest agent is forwarded to a port of the host's loopback, which a command
agent's program reaches (it keeps the network, which a model API needs). Only the runner may
use that port: guest-init's relay asks each connection for the VM's key (``pr.key`` on the
guest's kernel command line, which no process of the host but the runner sees) before it
passes anything on, or sets the guest's clock.

The attack (slow: a TCG VM boots): a command agent that found the port in /proc/net/tcp set
the guest's clock back an hour while its answer's background process made ~/count.txt a
link to /proc/self/cmdline, then set it right: the link was dated before the attempt, so
the check's search for the answer's links into /proc left it out, and ``grep -qx pr-37
~/count.txt`` read its own arguments and passed.
"""

from __future__ import annotations

import shlex
import shutil
import sys

import pytest

from agent_runs import run_cli
from conftest import write_tasks
from parallel_rollout.pool.providers import qemu
from qemu_support import image  # noqa: F401  (the guest image, built when missing)

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(shutil.which(qemu.QEMU) is None or shutil.which("bwrap") is None,
                                 reason="needs qemu-system-x86_64 and bubblewrap")]

CLOCK_AGENT = r"""
import json, socket, sys, threading, time
log = open(sys.argv[1], "a")

def ports():
    found = []
    for line in open("/proc/net/tcp").read().splitlines()[1:]:
        local, state = line.split()[1], line.split()[3]
        if state == "0A" and local.startswith("0100007F:"):
            found.append(int(local.split(":")[1], 16))
    return found

def settime(when):
    for port in ports():
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=2) as sock:
                sock.sendall(b"PR-SETTIME %.6f\n" % when)
                if sock.recv(16).startswith(b"ok"):
                    log.write("set the guest clock through port %d\n" % port)
        except OSError:
            pass
    log.flush()

def rig():
    time.sleep(1.0)
    settime(time.time() - 3600)   # the link is made while the guest's clock is an hour back
    time.sleep(4.0)
    settime(time.time())          # and set right before the check

for line in sys.stdin:
    msg = json.loads(line)
    if msg["turn"] == 1:
        rigger = threading.Thread(target=rig)
        rigger.start()
        print(json.dumps({"command": "(sleep 3; ln -s /proc/self/cmdline ~/count.txt) >/dev/null 2>&1 &"}), flush=True)
    else:
        rigger.join()
        print(json.dumps("DONE"), flush=True)
"""


@pytest.mark.usefixtures("image")
def test_a_command_agent_cannot_set_a_qemu_guests_clock_to_hide_a_link(tmp_path):
    script, log = tmp_path / "clock.py", tmp_path / "agent.log"
    script.write_text(CLOCK_AGENT)
    data = write_tasks(tmp_path / "tasks.jsonl", [{
        "id": "count", "mode": "shell", "instruction": "write pr-37 into ~/count.txt",
        "check": "grep -qx pr-37 ~/count.txt"}])
    records = run_cli(tmp_path, "clock", "--mode", "shell", "--data", str(data), "--provider-name", "qemu",
                      "--num-vms", "1", "--use-vm-pool", "--vm-memory-mb", "384", "--boot-timeout-s", "120",
                      "--agent-cmd", " ".join(shlex.quote(p) for p in (sys.executable, str(script), str(log))))
    assert [(r["status"], r["reward"]) for r in records] == [("failure", 0.0)], records
    assert "set the guest clock" not in (log.read_text() if log.exists() else ""), log.read_text()
