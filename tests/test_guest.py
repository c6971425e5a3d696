"""The guest agent, run as a real subprocess on a unix socket and driven by GuestClient."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from parallel_rollout.errors import GuestUnreachable
from parallel_rollout.guest import agent_commands
from parallel_rollout.guest import server as server_module
from parallel_rollout.guest.client import GuestClient, GuestRequestError

SERVER = Path(server_module.__file__)


def _start_agent(sock: Path, home: Path, *extra: str, **popen) -> subprocess.Popen:
    read_fd, write_fd = os.pipe()
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(home)}
    proc = subprocess.Popen(
        ["/usr/bin/python3", "-I", "-S", str(SERVER), "--unix", str(sock),
         "--ready-fd", str(write_fd), "--max-body-mb", "1", *extra],
        pass_fds=(write_fd,), env=env, cwd=home, **popen)
    os.close(write_fd)
    assert os.read(read_fd, 16).startswith(b"ready")
    os.close(read_fd)
    return proc


@pytest.fixture
def agent(tmp_path):
    """A running agent; yields (client, home); kills it and checks nothing is left."""
    home = tmp_path / "home"
    home.mkdir()
    proc = _start_agent(tmp_path / "agent.sock", home)
    yield GuestClient(f"unix:{tmp_path / 'agent.sock'}", timeout_s=10), home
    assert proc.poll() is None, "the agent died during the test"
    left = psutil.Process(proc.pid).children(recursive=True)  # what a failed test left
    proc.kill()
    proc.wait()
    for child in left:
        child.kill()


def test_the_agent_starts_on_the_c_modules_and_imports_what_every_command_needs(tmp_path):
    """What every command needs (agent_spawn) is imported by the boot (a standby's, while
    its VM is leased), not by the first command after a reset; and none of the standard
    library's modules that import enum, re, functools and collections (~25 ms of CPU at
    every process VM reset, half of the agent's start) is."""
    read_fd, write_fd = os.pipe()
    proc = subprocess.Popen(
        ["/usr/bin/python3", "-X", "importtime", "-I", "-S", str(SERVER), "--unix",
         str(tmp_path / "agent.sock"), "--ready-fd", str(write_fd)],
        pass_fds=(write_fd,), env={"PATH": os.environ.get("PATH", "/usr/bin:/bin")},
        cwd=tmp_path, stderr=subprocess.PIPE, text=True)
    os.close(write_fd)
    try:
        assert os.read(read_fd, 16).startswith(b"ready")
    finally:
        os.close(read_fd)
        proc.kill()
    imported = [line.rsplit("|", 1)[-1].strip() for line in proc.communicate()[1].splitlines()
                if line.startswith("import time:")]
    assert {"agent_commands", "agent_spawn", "agent_json", "_posixsubprocess", "_json",
            "_socket"} <= set(imported), imported
    heavy = {"subprocess", "json", "socket", "socketserver", "threading", "signal", "selectors",
             "re", "enum", "functools", "collections", "locale"}
    assert not heavy & set(imported), sorted(heavy & set(imported))


def _raw(sock_path: str, payload: bytes) -> bytes:
    """Send raw bytes, return the raw answer (for requests GuestClient would never send)."""
    with socket.socket(socket.AF_UNIX) as conn:
        conn.settimeout(10)
        conn.connect(sock_path)
        conn.sendall(payload)
        conn.shutdown(socket.SHUT_WR)  # EOF: a truncated body is seen as truncated
        chunks = []
        while chunk := conn.recv(65536):
            chunks.append(chunk)
    return b"".join(chunks)


def test_a_connection_whose_thread_cannot_start_is_served_on_the_accept_loops_thread(
        tmp_path, monkeypatch):
    """The agent's accept loop (agent_http.Server, on _thread): a connection whose thread
    cannot start (a fork bomb fills pids.max) is served all the same, on the loop's own
    thread (it was closed unserved: the /reap that would end the bomb with it); closing the
    listener ends the loop."""
    import threading
    import types

    from parallel_rollout.guest import agent_http, agent_server

    sock = tmp_path / "agent.sock"
    server = agent_http.make_server(agent_server.resolve, unix=str(sock))
    started = []

    def start_new_thread(func, args):
        started.append(args)
        if len(started) == 1:
            raise RuntimeError("can't start new thread")
        return threading.Thread(target=func, args=args, daemon=True).start()

    monkeypatch.setattr(agent_http, "_thread", types.SimpleNamespace(start_new_thread=start_new_thread))
    serving = threading.Thread(target=server.serve_forever, daemon=True)
    serving.start()
    try:
        first = _raw(str(sock), b"GET /health HTTP/1.1\r\nConnection: close\r\n\r\n")
        assert first.startswith(b"HTTP/1.1 200") and b'"ok"' in first, first
        assert GuestClient(f"unix:{sock}", timeout_s=10).health()["status"] == "ok"
        assert len(started) == 2
    finally:
        server.socket.shutdown(socket.SHUT_RDWR)  # wakes the blocked accept
        server.socket.close()
        serving.join(5)
    assert not serving.is_alive(), "the accept loop did not end with its socket"


def test_reap_on_a_host_kills_only_what_the_commands_left(agent):
    """An agent run on a host (a remote machine, this test) without --reap-all: /reap kills
    its commands' leftovers, a daemon that left its session included, and nothing else of
    the machine (it once killed every process it could signal: CI runners, shells, all)."""
    client, _ = agent
    bystander = subprocess.Popen(["sleep", "60"])  # not the agent's: must survive
    try:
        client.execute("(setsid sh -c 'sleep 61' & sleep 62 &) >/dev/null 2>&1 </dev/null",
                       shell=True)
        agent_pid = client.health()["pid"]
        deadline = time.monotonic() + 10
        while True:  # both adopted by the agent (a subreaper), not by the machine's init
            left = [p for p in psutil.Process(agent_pid).children(recursive=True)
                    if p.name() == "sleep"]
            if len(left) == 2 or time.monotonic() > deadline:
                break
            time.sleep(0.05)
        assert len(left) == 2, left
        assert client.reap()
        assert bystander.poll() is None, "/reap killed a process that is not the agent's"
        psutil.wait_procs(left, timeout=5)
        assert not [p for p in left if p.is_running()
                    and p.status() != psutil.STATUS_ZOMBIE], left
        assert not psutil.Process(agent_pid).children(), "adopted orphans left as zombies"
        assert client.execute(["true"])["returncode"] == 0
    finally:
        bystander.kill()
        bystander.wait()


def test_health_and_platform(agent):
    client, _ = agent
    health = client.health()
    assert health["status"] == "ok" and isinstance(health["pid"], int)
    assert client.platform() == "Linux"


def test_execute_list_string_and_shell(agent):
    client, home = agent
    result = client.execute(["echo", "hi"])
    assert result == {"status": "success", "output": "hi\n", "error": "", "returncode": 0}
    assert client.execute("echo 'two words'")["output"] == "two words\n"
    result = client.execute("echo out; echo err >&2; exit 3", shell=True)
    assert (result["status"], result["output"], result["error"], result["returncode"]) == \
        ("success", "out\n", "err\n", 3)
    assert client.execute("pwd")["output"].strip() == str(home)  # cwd defaults to $HOME
    assert client.execute(["ls", "~"])["returncode"] == 0  # ~ expanded
    assert client.execute("pwd", cwd="/tmp")["output"].strip() == "/tmp"
    assert client.execute("echo $X", shell=True, env={"X": "y"})["output"] == "y\n"
    assert client.request("POST", "/setup/execute", json={"command": "true"}).json()[
        "returncode"] == 0


def test_command_not_found_is_an_answer_not_a_500(agent):
    client, _ = agent
    result = client.execute(["definitely-not-a-command-xyz"])
    assert result["status"] == "error" and result["returncode"] == 127
    assert "command not found" in result["message"]


def test_what_no_command_line_can_carry_is_the_commands_exit_126_not_a_500(agent):
    """A command that cannot start because of its own content is its own failure (a 500
    would be taken for a broken VM); a shell command past one exec argument's limit runs."""
    client, _ = agent
    long = "x" * 200_000  # past MAX_ARG_STRLEN (131072 bytes)
    assert client.execute(f"printf %s {long} | wc -c; echo $#", shell=True)["output"].split() == ["200000", "0"]
    cases = {"argument list too long: the command is": ["/bin/echo", long, long],
             "NUL byte": "echo a\0b", "text no command line can carry": ["echo", "\ud800"],
             "illegal environment variable name": "true"}
    for why, command in cases.items():
        env = {"A=B": "c"} if "environment" in why else None
        result = client.execute(command, shell=isinstance(command, str), env=env)
        assert (result["status"], result["returncode"]) == ("error", 126), result
        assert why in result["message"] and result["error"] == result["message"], result
    # a script's own text is its interpreter's to refuse
    result = client.run_python("print('\ud800')")
    assert result["return_code"] == 1 and "SyntaxError" in result["error"], result
    assert client.execute(["echo", "still here"])["output"] == "still here\n"


def test_timeout_kills_the_whole_process_group(agent):
    client, _ = agent
    started = time.monotonic()
    result = client.execute("sleep 300 & echo $!; sleep 300", shell=True, timeout=0.5)
    assert time.monotonic() - started < 5
    assert result["status"] == "error" and result["timeout"] is True
    assert result["returncode"] == -9 and "timed out after 0.5s" in result["message"]
    background = int(result["output"])
    time.sleep(0.1)
    assert not psutil.pid_exists(background) or \
        psutil.Process(background).status() == psutil.STATUS_ZOMBIE
    assert client.health()["status"] == "ok"


def _started(command: str) -> subprocess.Popen:
    """``command`` by sh, in a session of its own, its output piped: as the agent starts one."""
    return subprocess.Popen(["/bin/sh", "-c", command], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            start_new_session=True)


def test_a_command_that_exits_as_its_deadline_fires_answers_its_own_exit(monkeypatch):
    """A check that exited 0 between its deadline and the kill (a race seen at 0.001 s) was
    answered "timed out", and graded 0: a command that had exited when the kill reached it
    answers its own status. The race made certain: the kill waits for its real exit."""
    kill = agent_commands._kill_group

    def kill_once_exited(pgid):
        os.waitid(os.P_PID, pgid, os.WEXITED | os.WNOWAIT)  # it exits on its own, not yet reaped
        kill(pgid)
    monkeypatch.setattr(agent_commands, "_kill_group", kill_once_exited)
    for command in ("exec >/dev/null 2>&1; sleep 0.3; exit 0", "sleep 0.3; echo done; exit 4"):
        result = agent_commands._finish(_started(command), 0.05, None)
        assert "timeout" not in result and result["returncode"] == (0 if "exit 0" in command else 4), result
    # one the kill reached timed out, as ever
    monkeypatch.setattr(agent_commands, "_kill_group", kill)
    result = agent_commands._finish(_started("exec >/dev/null 2>&1; sleep 30"), 0.05, None)
    assert result["timeout"] is True and result["returncode"] == -9, result


@pytest.mark.parametrize("start", ["setsid sh -c", "sh -c"])
def test_a_command_that_leaves_a_process_holding_its_output_returns_when_it_exits(agent, start):
    """``server &`` without a redirect (in a session of its own, or in the command's group):
    its shell's exit ends the command, a short grace later, with its output and exit code and
    a note, not a timeout after the whole limit; the process runs on, writing (drained, not
    killed by SIGPIPE at its next line), until /reap."""
    client, home = agent
    started = time.monotonic()
    result = client.execute(f"{start} 'echo $$ > ~/pid; while :; do echo tick; sleep 0.05; done' &"
                            " echo started; exit 3", shell=True, timeout=8)
    assert time.monotonic() - started < 4, result
    assert result["status"] == "success" and result["returncode"] == 3, result
    assert result["output"].startswith("started\n") and "timeout" not in result, result
    assert "still holds its output" in result["note"], result
    time.sleep(0.5)
    background = psutil.Process(int((home / "pid").read_text()))
    assert background.status() != psutil.STATUS_ZOMBIE, "the background process did not run on"
    assert client.reap()
    background.wait(5)


def test_hung_command_does_not_block_other_requests(agent):
    client, _ = agent
    import threading

    answers = []
    slow = threading.Thread(target=lambda: answers.append(client.execute("sleep 2",
                                                                         timeout=1.5)))
    slow.start()
    time.sleep(0.1)
    started = time.monotonic()
    assert client.execute("echo fast")["output"] == "fast\n"
    assert time.monotonic() - started < 1.0  # served while the other one hangs
    slow.join()
    assert answers[0]["timeout"] is True


def test_run_python(agent):
    client, _ = agent
    result = client.run_python("import sys; print('py', sys.version_info[0])")
    assert result == {"status": "success", "message": "Command executed successfully",
                      "need_more": False, "output": "py 3\n", "error": "", "return_code": 0}
    failed = client.run_python("raise SystemExit('boom')")
    assert failed["status"] == "error" and failed["return_code"] == 1
    assert "boom" in failed["error"]
    slow = client.run_python("import time; time.sleep(30)", timeout=0.3)
    assert slow["status"] == "error" and slow["timeout"] is True


def test_run_bash_script(agent, tmp_path):
    client, _ = agent
    result = client.run_bash_script("echo a; echo b >&2; pwd; exit 4", working_dir="/tmp")
    assert result == {"status": "error", "output": "a\nb\n/tmp\n", "error": "",
                      "returncode": 4}
    assert client.run_bash_script("true")["status"] == "success"
    slow = client.run_bash_script("sleep 30", timeout=0.3)
    assert slow["timeout"] is True and slow["status"] == "error"


def test_file_round_trip_and_listing(agent):
    client, home = agent
    payload = bytes(range(256)) * 100
    client.write_file("~/deep/er/blob.bin", payload)
    assert (home / "deep/er/blob.bin").read_bytes() == payload
    assert client.read_file("~/deep/er/blob.bin") == payload
    # JSON form of /file and of /setup/upload
    assert client.request("POST", "/file", json={"file_path": str(home / "deep/er/blob.bin")}
                          ).body == payload
    answer = client.request("POST", "/setup/upload",
                            json={"file_path": "~/j.txt", "content_b64": "aGk="})
    assert answer.text == "File Uploaded: 2 bytes" and (home / "j.txt").read_text() == "hi"
    with pytest.raises(FileNotFoundError):
        client.read_file("~/missing")
    tree = client.list_directory(str(home))["directory_tree"]
    assert tree["type"] == "directory" and tree["name"] == "home"
    deep = next(c for c in tree["children"] if c["name"] == "deep")
    assert deep["children"][0]["children"] == [{"type": "file", "name": "blob.bin"}]
    with pytest.raises(GuestRequestError) as exc:
        client.list_directory(str(home / "missing"))
    assert exc.value.status == 400


@pytest.mark.parametrize("method,path,body,status,needle", [
    ("POST", "/execute", b"{not json", 400, "not valid JSON"),
    ("POST", "/execute", b"[1, 2]", 400, "JSON object"),
    ("POST", "/execute", b"{}", 400, "missing required field 'command'"),
    ("POST", "/execute", b'{"command": 5}', 400, "must be a list or a string"),
    ("POST", "/execute", b'{"command": []}', 400, "non-empty list"),
    ("POST", "/execute", b'{"command": "ls", "timeout": "x"}', 400, "'timeout'"),
    ("POST", "/execute", b'{"command": "ls", "timeout": -1}', 400, "positive"),
    ("POST", "/execute", b'{"command": "ls", "cwd": "/nope/nope"}', 400, "does not exist"),
    ("POST", "/run_python", b'{"code": 3}', 400, "'code'"),
    ("POST", "/run_bash_script", b"", 400, "empty body"),
    ("POST", "/file", b"", 400, "file_path"),
    ("POST", "/list_directory", b'{"path": 1}', 400, "'path'"),
    ("GET", "/execute", b"", 405, "takes POST"),
    ("GET", "/nope", b"", 404, "no such route"),
])
def test_malformed_requests_get_4xx_and_the_server_keeps_serving(
        agent, method, path, body, status, needle):
    client, _ = agent
    response = client.request(method, path, data=body or None,
                              content_type="application/json" if body else None, check=False)
    assert response.status == status
    assert response.json()["status"] == "error" and needle in response.json()["message"]
    with pytest.raises(GuestRequestError):
        client.request(method, path, data=body or None, content_type="application/json")
    assert client.health()["status"] == "ok"


def test_upload_without_file_part_is_400(agent):
    client, _ = agent
    body = b'--XX\r\nContent-Disposition: form-data; name="file_path"\r\n\r\n/tmp/x\r\n--XX--\r\n'
    response = client.request("POST", "/setup/upload", data=body,
                              content_type="multipart/form-data; boundary=XX", check=False)
    assert response.status == 400 and "file_data" in response.json()["message"]


def test_oversized_and_broken_http_is_rejected(agent):
    client, _ = agent
    sock = client.address[len("unix:"):]
    huge = _raw(sock, b"POST /execute HTTP/1.1\r\nContent-Length: 999999999999\r\n\r\n")
    assert huge.startswith(b"HTTP/1.1 413") and b"exceeds the limit" in huge
    over = client.request("POST", "/setup/upload", data=b"x" * (2 * 1024 * 1024),
                          content_type="application/json", check=False)
    assert over.status == 413
    assert _raw(sock, b"garbage\r\n\r\n").startswith(b"HTTP/1.1 400")
    chunked = _raw(sock, b"POST /execute HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n")
    assert chunked.startswith(b"HTTP/1.1 411")
    short = _raw(sock, b"POST /execute HTTP/1.1\r\nContent-Length: 10\r\n\r\n{}")
    assert short.startswith(b"HTTP/1.1 400") and b"body ended after 2 of 10" in short
    body = json.loads(_raw(sock, b"GET /health HTTP/1.0\r\n\r\n").split(b"\r\n\r\n", 1)[1])
    assert body["status"] == "ok"


def test_unreachable_agent_raises_guest_unreachable(tmp_path):
    client = GuestClient(f"unix:{tmp_path / 'no.sock'}", timeout_s=1)
    with pytest.raises(GuestUnreachable, match="no.sock"):
        client.health()
    started = time.monotonic()
    with pytest.raises(GuestUnreachable, match="not ready after 0.2s"):
        client.wait_ready(0.2)
    assert time.monotonic() - started < 2
    with pytest.raises(GuestUnreachable):
        GuestClient("http://127.0.0.1:1", timeout_s=1).health()


def test_agent_that_never_answers_times_out(tmp_path):
    listener = socket.socket(socket.AF_UNIX)
    listener.bind(str(tmp_path / "mute.sock"))
    listener.listen()  # accepts connections, never answers
    try:
        with pytest.raises(GuestUnreachable, match="timed out|TimeoutError"):
            GuestClient(f"unix:{tmp_path / 'mute.sock'}", timeout_s=0.3).health()
    finally:
        listener.close()


def test_wait_ready_and_tcp_mode(tmp_path):
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    proc = subprocess.Popen([sys.executable, str(SERVER), "--host", "127.0.0.1",
                             "--port", str(port)], cwd=tmp_path)
    try:
        client = GuestClient(f"http://127.0.0.1:{port}")
        client.wait_ready(10)
        assert client.execute(["echo", "tcp"])["output"] == "tcp\n"
    finally:
        proc.kill()
        proc.wait()


def test_limit_as_applies_to_commands(tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    proc = _start_agent(tmp_path / "a.sock", home, "--limit-as", str(200 * 1024 * 1024))
    try:
        client = GuestClient(f"unix:{tmp_path / 'a.sock'}")
        big = client.run_python("x = bytearray(400 * 1024 * 1024)")
        assert big["status"] == "error" and "MemoryError" in big["error"]
        assert client.run_python("x = bytearray(10 * 1024 * 1024)")["status"] == "success"
        assert client.execute(["no-such-cmd-abc"])["returncode"] == 127
        assert client.execute("echo ok", shell=True)["output"] == "ok\n"
    finally:
        proc.kill()
        proc.wait()


SEALED_COMMAND = """
import json, sys
sys.path.insert(0, sys.argv[1])  # the guest's files, as a sandbox runs them
import agent_commands, agent_server
agent_commands.run_as = (64000, 64000)
agent_commands.direct = sealed = agent_server._seal()
agent_commands._setpriv = None  # a command through setpriv would raise
result = agent_commands.run("id -u; id -G; grep -E '^(Cap|NoNewPrivs)' /proc/self/status",
                            shell=True, timeout=10)
print(json.dumps({"sealed": sealed, **result}))
"""


@pytest.mark.skipif(os.geteuid() != 0, reason="an agent switches users only as root")
def test_a_sealed_agent_starts_commands_as_its_user_with_what_setpriv_gave_them(tmp_path):
    guest = Path(server_module.__file__).parent
    child = subprocess.run([sys.executable, "-I", "-c", SEALED_COMMAND, str(guest)],
                           capture_output=True, text=True, timeout=30, cwd=tmp_path,
                           env={"HOME": str(tmp_path), "PATH": os.environ["PATH"]})
    assert child.returncode == 0, child.stderr
    answer = json.loads(child.stdout)
    assert answer["sealed"] and answer["returncode"] == 0, answer
    lines = answer["output"].splitlines()
    assert lines[:2] == ["64000", "64000"]  # its uid, and no group but its own
    status = dict(line.split(":\t") for line in lines[2:])
    assert {name: int(status[name], 16) for name in ("CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb")} \
        == dict.fromkeys(("CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"), 0)
    assert status["NoNewPrivs"] == "1"
