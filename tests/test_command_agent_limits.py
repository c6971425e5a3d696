"""What a command agent writes costs the host a bounded amount, whatever it writes: a reply
line past ``MAX_REPLY_BYTES`` is the agent's protocol error (not read into memory, never sent
to the VM), its stderr is kept as a tail in memory (no file grows on the host's disk); and a
request too large for a guest agent is refused before it is sent, the caller's failure,
never a VM that stopped answering.
"""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import sys
import threading
import time

import psutil
import pytest
from click.testing import CliRunner

from agent_runs import needs_bwrap
from conftest import assert_exactly_once, shell_task, write_tasks
from parallel_rollout.agents.command_process import MAX_REPLY_BYTES, STDERR_TAIL
from parallel_rollout.cli import main
from parallel_rollout.guest import client as guest_client

#: megabytes of stderr the agent writes before its reply
STDERR_MB = 96

FLOODING_AGENT = f"""\
import json, sys
for line in sys.stdin:
    chunk = "e" * 2**20
    for _ in range({STDERR_MB}):
        sys.stderr.write(chunk)
    sys.stderr.write("the end of stderr\\n"); sys.stderr.flush()
    command = "true " + " " * {MAX_REPLY_BYTES}
    print(json.dumps({{"command": command}}), flush=True)
"""


def deleted_files_open(pids: set[int]) -> int:
    """Bytes held by files these processes keep open that have no name any more (temporary
    files: disk the host cannot see in any folder)."""
    held = 0
    for pid in pids:
        try:
            fds = os.listdir(f"/proc/{pid}/fd")
        except OSError:
            continue
        for fd in fds:
            try:
                if os.readlink(f"/proc/{pid}/fd/{fd}").endswith(" (deleted)"):
                    held += os.stat(f"/proc/{pid}/fd/{fd}").st_size
            except OSError:
                pass
    return held


@needs_bwrap
def test_an_oversized_reply_is_the_agents_protocol_error_and_costs_the_host_little(tmp_path):
    script = tmp_path / "flood.py"
    script.write_text(FLOODING_AGENT)
    data = write_tasks(tmp_path / "tasks.jsonl", [shell_task("big")])
    peak, done = [0], threading.Event()

    def watch() -> None:
        while not done.is_set():
            family = {p.pid for p in psutil.Process().children(recursive=True)}
            peak[0] = max(peak[0], deleted_files_open(family))
            time.sleep(0.02)

    watcher = threading.Thread(target=watch)
    watcher.start()
    try:
        result = CliRunner().invoke(main, [
            "--mode", "shell", "--data", str(data), "--output-dir", str(tmp_path), "--run-id", "big",
            "--num-rollouts", "1", "--agent", "command", "--no-progress",
            "--agent-cmd", " ".join(shlex.quote(p) for p in (sys.executable, str(script)))])
    finally:
        done.set()
        watcher.join()
    assert result.exit_code == 0, result.output[-3000:]
    [record] = assert_exactly_once(tmp_path / "big", {"big#0"}).values()
    message = record["failure"]["message"]
    assert record["status"] == "error" and not record["infrastructure"] and record["turns"] == 0, record
    assert f"protocol error: the agent wrote a line longer than {MAX_REPLY_BYTES} bytes" in message, message
    # stderr: its tail, quoted within bounds
    assert "; stderr tail:\neeee" in message and len(message) <= STDERR_TAIL + 1000, message[-200:]
    # no VM was blamed: nothing was sent to it
    events = [json.loads(line) for line in (tmp_path / "big" / "events.jsonl").read_text().splitlines()]
    assert not [e for e in events if e.get("from") == "leased" and e.get("to") == "dead"], events
    assert peak[0] < 2**20, f"{peak[0]} bytes of the agent's output went to unnamed files on the host"


#: lines of 15 MiB the agent writes that no observation asked for
STRAY_LINES = 40

STRAY_FLOOD_AGENT = f"""\
import json, os, sys
line = (json.dumps({{"command": "x" * (15 << 20)}}) + "\\n").encode()
for raw in sys.stdin:
    if json.loads(raw)["turn"] == 1:
        print(json.dumps({{"command": "sleep 6"}}), flush=True)  # the worker waits for its VM meanwhile
        out = os.fdopen(1, "wb", closefd=False)
        for _ in range({STRAY_LINES}):
            out.write(line)
        out.flush()
    else:
        print(json.dumps("DONE"), flush=True)
"""


@needs_bwrap
def test_stray_lines_cost_the_worker_a_few_lines_of_memory_and_fail_the_attempt(tmp_path):
    """An agent that writes 600 MiB of lines no observation asked for (each under the reply
    cap) while its worker waits for the VM: the worker queued them all, grew to gigabytes and
    was OOM-killed, which recorded worker_died (infrastructure: never graded), so an agent
    could turn its failed tasks into ungraded ones. The worker keeps a few lines at most (the
    agent blocks on its full pipe), and the attempt is the agent's protocol error, graded."""
    script = tmp_path / "strays.py"
    script.write_text(STRAY_FLOOD_AGENT)
    data = write_tasks(tmp_path / "tasks.jsonl", [shell_task("flood")])
    peak, done = [0], threading.Event()

    def watch() -> None:
        while not done.is_set():
            for proc in psutil.process_iter(["cmdline"]):
                if "bwrap" in " ".join(proc.info["cmdline"] or ()) and str(script) in proc.info["cmdline"]:
                    with contextlib.suppress(psutil.Error):
                        peak[0] = max(peak[0], proc.parent().memory_info().rss)  # its worker's
            time.sleep(0.05)

    watcher = threading.Thread(target=watch)
    watcher.start()
    try:
        result = CliRunner().invoke(main, [
            "--mode", "shell", "--data", str(data), "--output-dir", str(tmp_path), "--run-id", "strays",
            "--num-rollouts", "1", "--num-vms", "1", "--use-vm-pool", "--agent", "command", "--no-progress",
            "--agent-cmd", " ".join(shlex.quote(p) for p in (sys.executable, str(script)))])
    finally:
        done.set()
        watcher.join()
    assert result.exit_code == 0, result.output[-3000:]
    [record] = assert_exactly_once(tmp_path / "strays", {"flood#0"}).values()
    assert record["status"] == "error" and not record["infrastructure"], record
    assert "protocol error: before this observation was sent the agent wrote a line no observation asked for" \
        in record["failure"]["message"], record["failure"]["message"][:500]
    assert 0 < peak[0] < 200 * 2**20, f"the worker grew to {peak[0] >> 20} MiB"


def test_a_request_too_large_for_the_guest_is_refused_before_it_is_sent(tmp_path, monkeypatch):
    """Refused as the guest agent would refuse it (413: the caller's error, a ValueError),
    not sent and cut off mid-send (which reads as a VM that stopped answering). No socket
    exists here: anything sent would be GuestUnreachable."""
    monkeypatch.setattr(guest_client, "MAX_REQUEST_BYTES", 4096, raising=False)
    client = guest_client.GuestClient(f"unix:{tmp_path / 'no-agent.sock'}")
    with pytest.raises(guest_client.GuestRequestError, match="more than the 4096 the guest agent reads; not sent"):
        client.execute("true " + "x" * 5000, shell=True)
    with pytest.raises(guest_client.GuestUnreachable):  # a small one is sent (and finds nobody)
        client.execute("true", shell=True)
