"""A remote machine's guest agent started with a key (``--key-file``) takes nothing from a
connection that does not say it first, and a run given that key (``--vm-key-file``) works
without writing it anywhere in its folder.

Without a key, anything that reaches the agent's port drives the machine: another user of the
network, or a ``command`` agent's program (it keeps the host's network, which a model API
needs), which wrote the file the check reads through the agent itself and was graded 1.0
with no action of its own. The machines are real guest agents on 127.0.0.1 (``Machines`` of
test_remote.py), started with a key.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import socket
import subprocess
import sys
import tempfile
import uuid
from pathlib import Path

import pytest
from click.testing import CliRunner

from conftest import read_results, write_tasks
from parallel_rollout.cli import main
from parallel_rollout.guest.client import GuestClient, GuestRequestError, keyed_address
from parallel_rollout.errors import VMSettingsMismatch
from test_remote import AGENT, Machines, _free_port, remote

KEY = "k" + uuid.uuid4().hex


@pytest.fixture
def keyed(tmp_path):
    found = Machines(tmp_path / "machines", 1, key=KEY)
    try:
        yield found
    finally:
        found.power_off()


def _raw(port: int, data: bytes) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(data)
        answer = b""
        while chunk := sock.recv(65536):
            answer += chunk
    return answer


def test_a_keyed_agent_refuses_every_request_without_its_key(keyed):
    address = f"http://{keyed.addresses[0]}"
    home = keyed.home(keyed.ports[0])
    for client in (GuestClient(address), GuestClient(keyed_address(address, "not-" + KEY))):
        with pytest.raises(GuestRequestError) as refused:
            client.execute("echo pwned > ~/pwned.txt", shell=True)
        assert refused.value.status == 401
        with pytest.raises(GuestRequestError):
            client.write_file("~/pwned.txt", b"pwned")
        assert client.request("POST", "/reap", json={}, check=False).status == 401
    # a plain HTTP client (curl's request) is refused as well
    assert _raw(keyed.ports[0], b"GET /platform HTTP/1.1\r\nHost: x\r\n\r\n").startswith(b"HTTP/1.1 401 ")
    assert not (home / "pwned.txt").exists()
    # with the key it answers, and its commands do not see it
    client = keyed.client(keyed.addresses[0])
    assert client.execute("echo $((6 * 7))", shell=True)["output"] == "42\n"
    log = (keyed.state / f"agent-{keyed.ports[0]}.log").read_text()
    assert "refused a connection" in log and "wrong key" in log and KEY not in log, log
    assert KEY not in repr(client) and KEY not in str(refused.value)


def test_a_start_without_the_right_key_fails_at_once_saying_so(keyed, tmp_path):
    wrong = tmp_path / "wrong.key"
    wrong.write_text("not-" + KEY)
    for key_file, said in ((None, "asks for a key (401): give the run its agent's key with --vm-key-file FILE"),
                           (str(wrong), f"refused the key of --vm-key-file {wrong} (401)")):
        # a 401 is no agent still starting: the boot fails, not waits it out, as the run's settings
        provider = remote(keyed, reset_command="none", vm_key_file=key_file, boot_timeout_s=20.0)
        with pytest.raises(VMSettingsMismatch, match=re.escape(f"VM vm0: http://{keyed.addresses[0]} {said}")) as failed:
            provider.start("vm0")
        assert KEY not in str(failed.value)


def test_a_run_whose_key_the_agent_refuses_stops_at_its_first_boot(keyed, tmp_path):
    """A --vm-key-file that is not the agent's key: no reset or new boot mends that, so the
    run stops at its first boot (exit 2), naming the machine and the file, its attempts left to
    a resume. It was taken for a failed boot: the machine was reset and booted again until the
    replacement budget was spent (three reverts of the machine), and the run exited 1."""
    wrong = tmp_path / "wrong.key"
    wrong.write_text("not-" + KEY)
    data = write_tasks(tmp_path / "tasks.jsonl", [{"id": "t0", "instruction": "x", "check": "true",
                                                   "reference": ["true"]}])
    result = CliRunner().invoke(main, [
        "--mode", "shell", "--data", str(data), "--provider-name", "remote", "--vm-address", keyed.addresses[0],
        "--vm-key-file", str(wrong), "--reset-command", keyed.reset_command, "--num-rollouts", "1",
        "--output-dir", str(tmp_path / "out"), "--run-id", "r", "--no-progress"])
    assert result.exit_code == 2, result.output
    assert f"VM vm-0: http://{keyed.addresses[0]} refused the key of --vm-key-file {wrong} (401)" in result.output
    assert KEY not in result.output
    run = tmp_path / "out" / "r"
    boots = [e for e in map(json.loads, (run / "events.jsonl").read_text().splitlines()) if e.get("to") == "booting"]
    assert len(boots) == 1, boots  # no replacement booted
    assert [(r["status"], r["final"]) for r in read_results(run)] == [("vm_settings_mismatch", False)]


def test_the_key_in_the_environment_leaves_it(tmp_path):
    port = _free_port()
    env = {"PATH": os.environ["PATH"], "HOME": str(tmp_path), "PARALLEL_ROLLOUT_GUEST_KEY": KEY}
    proc = subprocess.Popen([sys.executable, "-I", str(AGENT), "--host", "127.0.0.1", "--port", str(port)],
                            env=env, cwd=tmp_path, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    try:
        client = GuestClient(keyed_address(f"http://127.0.0.1:{port}", KEY))
        client.wait_ready(15)
        assert KEY not in client.execute("env", shell=True)["output"]
        with pytest.raises(GuestRequestError):
            GuestClient(f"http://127.0.0.1:{port}").platform()
    finally:
        proc.kill()
        proc.wait()


def _agent_says(tmp_path, *args: str) -> str:
    """What the guest agent started with ``args`` says on stderr by the time it answers."""
    port, log = _free_port(), tmp_path / f"agent-{uuid.uuid4().hex[:6]}.log"
    with log.open("wb") as out:
        proc = subprocess.Popen([sys.executable, "-I", str(AGENT), "--host", "127.0.0.1", "--port", str(port), *args],
                                env={"PATH": os.environ["PATH"], "HOME": str(tmp_path)}, cwd=tmp_path,
                                stdin=subprocess.DEVNULL, stdout=out, stderr=out)
    try:
        GuestClient(keyed_address(f"http://127.0.0.1:{port}", KEY)).wait_ready(15)
    finally:
        proc.kill()
        proc.wait()
    return log.read_text()


def test_an_agent_whose_commands_can_read_its_key_file_says_so(tmp_path):
    """The README's agent started with --key-file and no --run-as: every command it runs can
    read the key (`cat ~/agent.key` put it in the run's trajectory and report), and it said
    nothing of it. It says so now; a file its --run-as user cannot read is kept quiet."""
    key_file = tmp_path / "agent.key"
    key_file.write_text(KEY + "\n")
    key_file.chmod(0o600)
    said = _agent_says(tmp_path, "--key-file", str(key_file))
    assert f"warning: the commands this agent runs can read --key-file {key_file}: one that prints it puts the " \
           "key in what it answers" in said, said
    assert KEY not in said
    if os.geteuid() != 0 or not shutil.which("setpriv"):
        return
    with tempfile.TemporaryDirectory(dir="/tmp") as shared:  # the run-as user may look in it (not in pytest's)
        os.chmod(shared, 0o755)
        key_file = Path(shared, "agent.key")
        key_file.write_text(KEY + "\n")
        key_file.chmod(0o600)  # root's alone
        assert "warning" not in _agent_says(tmp_path, "--key-file", str(key_file), "--run-as", "65534:65534")
        key_file.chmod(0o644)
        assert "can read --key-file" in _agent_says(tmp_path, "--key-file", str(key_file), "--run-as", "65534:65534")


def test_a_run_with_the_key_works_and_keeps_it_out_of_its_folder(keyed, tmp_path):
    data = write_tasks(tmp_path / "tasks.jsonl", [
        {"id": f"t{i}", "mode": "shell", "instruction": "x", "check": "test -f ~/snapshot.txt",
         "reference": ["true"]} for i in range(2)])
    result = CliRunner().invoke(main, [
        "--mode", "shell", "--data", str(data), "--provider-name", "remote", "--vm-address",
        f"http://{keyed.addresses[0]}", "--vm-key-file", str(keyed.key_file), "--num-rollouts", "1",
        "--reset-command", keyed.reset_command, "--output-dir", str(tmp_path / "out"), "--run-id", "keyed",
        "--no-progress"])
    assert result.exit_code == 0, (result.output, result.exception)
    run = tmp_path / "out" / "keyed"
    assert [r["status"] for r in read_results(run)] == ["success", "success"]
    assert json.loads((run / "config.json").read_text())["config"]["vm_key_file"] == str(keyed.key_file)
    for path in run.rglob("*"):
        if path.is_file():
            assert KEY.encode() not in path.read_bytes(), path
    assert KEY not in result.output and "no --vm-key-file" not in result.output


def test_a_bad_key_file_is_refused_before_the_run(keyed, tmp_path):
    empty = tmp_path / "empty.key"
    empty.write_text("\n")
    # the system's reason, not FileNotFoundError's name alone
    for key_file, message in ((tmp_path / "missing.key", "cannot read a key: No such file or directory"),
                              (empty, "one key")):
        result = CliRunner().invoke(main, [
            "--mode", "shell", "--data", str(write_tasks(tmp_path / "t.jsonl", [{"id": "t", "instruction": "x", "check": "true", "reference": ["true"]}])),
            "--provider-name", "remote", "--vm-address", keyed.addresses[0], "--vm-key-file", str(key_file),
            "--reset-command", "none", "--num-rollouts", "1", "--output-dir", str(tmp_path / "out"), "--no-progress"])
        assert result.exit_code == 2 and message in result.output, result.output


DRIVER = r"""
import json, socket, sys
port, key_file, log = int(sys.argv[1]), sys.argv[2], open(sys.argv[3], "a")
try:
    read = open(key_file).read().strip()
except OSError as exc:
    read = ""
    log.write("key file: %s\n" % type(exc).__name__)
body = json.dumps({"command": "echo pr-37 > ~/count.txt", "shell": True}).encode()
for first in (b"", ("PR-KEY %s\n" % read).encode()):
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(first + b"POST /execute HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                     b"Content-Length: %d\r\n\r\n" % len(body) + body)
        log.write("answer: %r\n" % sock.recv(64)[:12])
log.flush()
for line in sys.stdin:
    print(json.dumps("DONE"), flush=True)
"""


def test_a_command_agent_cannot_drive_the_keyed_agent(keyed, tmp_path):
    script, log = tmp_path / "driver.py", tmp_path / "driver.log"
    script.write_text(DRIVER)
    data = write_tasks(tmp_path / "tasks.jsonl", [{
        "id": "count", "mode": "shell", "instruction": "write pr-37 into ~/count.txt",
        "check": "grep -qx pr-37 ~/count.txt"}])
    argv = (sys.executable, str(script), str(keyed.ports[0]), str(keyed.key_file), str(log))
    result = CliRunner().invoke(main, [
        "--mode", "shell", "--data", str(data), "--provider-name", "remote", "--vm-address", keyed.addresses[0],
        "--vm-key-file", str(keyed.key_file), "--reset-command", keyed.reset_command, "--agent", "command",
        "--agent-cmd", " ".join(shlex.quote(p) for p in argv), "--num-rollouts", "1",
        "--output-dir", str(tmp_path / "out"), "--run-id", "driver", "--no-progress"])
    assert result.exit_code == 0, (result.output, result.exception)
    records = read_results(tmp_path / "out" / "driver")
    assert [(r["status"], r["reward"]) for r in records] == [("failure", 0.0)], records
    said = log.read_text()
    assert said.count("answer: b'HTTP/1.1 401") == 2, said


def test_the_dry_run_asks_each_machine_with_the_runs_key(keyed, tmp_path):
    """--dry-run of a remote run asks each machine's agent, with the run's key: one that refuses
    it (none given, another key) is a problem, and so, with --reset-command none (nothing
    starts a machine), is one that does not answer; exit 2, each named. The dry run passed all
    of these, and the run then failed each VM's boot until its replacement budget was spent."""
    data = write_tasks(tmp_path / "t.jsonl", [{"id": "t", "instruction": "x", "check": "true", "reference": ["true"]}])
    wrong = tmp_path / "wrong.key"
    wrong.write_text("not-" + KEY)
    up, down = keyed.addresses[0], f"127.0.0.1:{_free_port()}"

    def dry(*flags: str):
        result = CliRunner().invoke(main, ["--mode", "shell", "--data", str(data), "--provider-name", "remote",
                                           "--output-dir", str(tmp_path / "out"), "--dry-run", *flags])
        lines = [line for line in result.output.splitlines() if line.startswith(("  - machines:", "preflight passed"))]
        return result.exit_code, " ".join(lines)

    code, said = dry("--vm-address", up, "--vm-address", down, "--num-rollouts", "2",
                     "--vm-key-file", str(keyed.key_file), "--reset-command", "none")
    assert code == 2 and f"http://{down} did not answer" in said and up not in said, said
    code, said = dry("--vm-address", up, "--num-rollouts", "1", "--reset-command", "none")
    assert code == 2 and f"http://{up} asks for a key (401): give the run its agent's key" in said, said
    code, said = dry("--vm-address", up, "--num-rollouts", "1", "--reset-command", "none", "--vm-key-file", str(wrong))
    assert code == 2 and f"http://{up} refused the key of --vm-key-file {wrong} (401)" in said, said
    assert KEY not in said
    code, said = dry("--vm-address", up, "--num-rollouts", "1", "--reset-command", "none",
                     "--vm-key-file", str(keyed.key_file))
    assert code == 0 and "machines: the 1 remote machine(s) answer" in said, said
    # a reset command may be what starts a machine: one that does not answer yet passes
    code, said = dry("--vm-address", up, "--vm-address", down, "--num-rollouts", "2",
                     "--vm-key-file", str(keyed.key_file), "--reset-command", keyed.reset_command)
    assert code == 0 and "answer or are left to --reset-command" in said, said
