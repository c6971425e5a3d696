"""What a command agent's program cannot change of the host: the runner's own code and
interpreter (the package, the virtualenv's site-packages, the standard library), wherever
they lie, a writable folder of its own included (here the checkout is under /tmp and the
interpreter under $HOME), nor a protected folder's name (renaming the folder above it away);
and it cannot reach a container daemon's control socket. It still writes /tmp, /var/tmp,
/dev/shm, $HOME and its current folder.

Before, the agent saw the host read-write: an agent run as root (root's uid, no capability,
but owner-write mode bits on root's files) could append to the runner's source, drop a
``.pth`` into site-packages that every later Python start runs, rewrite the stdlib, drive
Docker through its socket, and so rig every later grade. Each attack runs here through the
CLI as a user runs it; each is harmless should it succeed (an empty append, a ``.pth`` of a
comment, removed afterwards).
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import site
import socket
import sys
import sysconfig
import tempfile
from pathlib import Path
from types import SimpleNamespace

import pytest

import parallel_rollout
from agent_runs import needs_bwrap, run_cli
from conftest import write_tasks


def command_line(script: Path, *args: str) -> str:
    return " ".join(shlex.quote(part) for part in (sys.executable, str(script), *args))


def one_math_task(tmp_path: Path) -> Path:
    return write_tasks(tmp_path / "tasks.jsonl", [{"id": "m1", "mode": "math", "problem": "1+1", "answer": "2"}])


#: tries each attack its arguments name at turn 1, logs "<attack> done" or "<attack> refused: <why>", answers 2
HOSTILE_AGENT = r"""
import json, os, socket, sys
log, attacks = open(sys.argv[1], "a"), json.loads(sys.argv[2])

def append(path):
    open(path, "a").close()  # nothing written: the open is the attack

def create(path):
    with open(path, "x") as file:
        file.write("# harmless\n")

def rename_and_plant(old, new, plant):
    os.rename(old, new)
    os.makedirs(plant)

def connect(path):
    with socket.socket(socket.AF_UNIX) as client:
        client.connect(path)
        client.sendall(b"GET /_ping HTTP/1.0\r\n\r\n")

for line in sys.stdin:
    if json.loads(line)["turn"] == 1:
        for name, how, args in attacks:
            try:
                globals()[how](*args)
                log.write(f"{name} done\n")
            except OSError as exc:
                log.write(f"{name} refused: {exc.strerror}\n")
        log.flush()
    print(json.dumps("2"), flush=True)
"""


def run_attacks(tmp_path: Path, run_id: str, attacks: list) -> list[str]:
    """A run of one math task whose agent tries ``attacks``; its log, one line each."""
    script, log = tmp_path / "hostile.py", tmp_path / f"{run_id}.log"
    script.write_text(HOSTILE_AGENT)
    records = run_cli(tmp_path, run_id, "--mode", "math", "--data", str(one_math_task(tmp_path)),
                      "--agent-cmd", command_line(script, str(log), json.dumps(attacks)))
    assert [r["status"] for r in records] == ["success"], records  # it ran, and answered
    return log.read_text().splitlines()


def state(path: Path) -> tuple[bytes, int]:
    return path.read_bytes(), path.stat().st_mtime_ns


@needs_bwrap
def test_a_command_agent_cannot_change_the_runners_code_nor_its_interpreter(tmp_path):
    """It tried to append to the package's source, drop a .pth into the virtualenv's
    site-packages and write a module into the standard library's folder: each is refused
    (read-only), and nothing there changed."""
    source = Path(parallel_rollout.__file__)
    mark = f"pr-hostile-{os.getpid()}-{os.urandom(4).hex()}"
    pth = Path(site.getsitepackages()[0]) / f"{mark}.pth"
    stdlib = Path(sysconfig.get_paths()["stdlib"]) / f"{mark}.py"
    before = state(source)
    try:
        log = run_attacks(tmp_path, "code", [["source", "append", [str(source)]],
                                             ["site-packages", "create", [str(pth)]],
                                             ["stdlib", "create", [str(stdlib)]]])
        assert log == [f"{name} refused: Read-only file system" for name in ("source", "site-packages", "stdlib")]
        assert state(source) == before and not pth.exists() and not stdlib.exists()
    finally:
        for made in (pth, stdlib):
            made.unlink(missing_ok=True)


@needs_bwrap
def test_a_command_agent_cannot_connect_to_a_container_daemons_socket(tmp_path, monkeypatch):
    """A unix socket that stands for Docker's (the one $DOCKER_HOST names, which the docker
    provider drives), listening: the agent's connect is refused and none waits to be
    accepted; the runner's own connect gets through."""
    path = tmp_path / "docker.sock"
    with socket.socket(socket.AF_UNIX) as server:
        server.bind(str(path))
        server.listen(8)
        monkeypatch.setenv("DOCKER_HOST", f"unix://{path}")
        log = run_attacks(tmp_path, "daemon", [["docker", "connect", [str(path)]]])
        assert log == ["docker refused: Connection refused"], log
        server.setblocking(False)
        with pytest.raises(BlockingIOError):  # no connection of the agent's waits
            server.accept()
        with socket.socket(socket.AF_UNIX) as client:  # it was there to be reached
            client.connect(str(path))
            server.setblocking(True)
            server.accept()[0].close()


@needs_bwrap
def test_a_command_agent_cannot_reach_the_runners_multiprocessing_sockets(tmp_path):
    """The runner's fork server listens in a ``pymp-*`` folder of the temp folder, and on
    Python 3.11 it forks and runs whatever a connection sends it, unauthenticated: outside
    the agent's sandbox, as the runner (found in review: a pickled os.system wrote a file on
    the host from the runner's PID namespace). A listener in such a folder, as the fork
    server's: the agent finds no socket there to connect to."""
    folder = Path(tempfile.mkdtemp(prefix="pymp-prtest-", dir=tempfile.gettempdir()))
    path = folder / "listener-test"
    try:
        with socket.socket(socket.AF_UNIX) as server:
            server.bind(str(path))
            server.listen(8)
            log = run_attacks(tmp_path, "forkserver", [["fork server", "connect", [str(path)]]])
            assert log == ["fork server refused: No such file or directory"], log
            with socket.socket(socket.AF_UNIX) as client:  # it was there to be reached
                client.connect(str(path))
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def test_a_transient_socket_folder_is_hidden_in_one_step(tmp_path):
    """A ``pymp-*`` folder is another process's (a run, a test), removed as that process
    ends: removed between bwrap's tmpfs over it and its remount read-only, it took the tmpfs
    with it and bwrap failed the agent's start ("Can't remount readonly on
    /newroot/tmp/pymp-…: Unable to find … in mount table"; two CI-style runs, an agent's
    record `error`). It gets a tmpfs alone (its sockets out of reach all the same, as the
    test above checks); a folder of the run's own keeps its read-only tmpfs."""
    from parallel_rollout.agents.agent_sandbox import in_own_pid_namespace

    transient = Path(tempfile.mkdtemp(prefix="pymp-prtest-", dir=tempfile.gettempdir()))
    kept = tmp_path / "run-folder"
    kept.mkdir()
    try:
        argv = in_own_pid_namespace(["true"], hidden=(str(transient), str(kept)))
    finally:
        shutil.rmtree(transient, ignore_errors=True)
    at = argv.index(os.path.realpath(transient))
    assert argv[at - 1] == "--tmpfs" and "--remount-ro" not in argv[at + 1:at + 2], argv
    real = os.path.realpath(kept)
    assert argv[argv.index(real) - 1:argv.index(real) + 3] == ["--tmpfs", real, "--remount-ro", real], argv


@needs_bwrap
def test_a_command_agent_cannot_rename_a_hidden_folder_away(tmp_path, monkeypatch):
    """The VM folders are hidden from it, an empty read-only folder each; but an agent that
    renamed the folder above one (under /tmp, writable) could make a folder of its own by its
    name, a cached guest agent of its own in it, which every later sandbox would run. The
    folders between a writable one and what it must not touch are mount points to it: the
    rename is refused, and the VM folder is where it was."""
    base = Path(tempfile.mkdtemp(prefix="pr-rename-"))
    process_dir = base / "outer" / "process"
    monkeypatch.setenv("PARALLEL_ROLLOUT_PROCESS_DIR", str(process_dir))
    try:
        log = run_attacks(tmp_path, "rename", [["rename", "rename_and_plant",
                                                [str(base / "outer"), str(base / "moved"),
                                                 str(process_dir / ".agent-bytecode" / "planted")]]])
        assert log == ["rename refused: Device or resource busy"], log
        assert not (base / "moved").exists() and not (process_dir / ".agent-bytecode" / "planted").exists()
    finally:
        shutil.rmtree(base, ignore_errors=True)


BENIGN_AGENT = r"""
import json, os, sys
log, mark = open(sys.argv[1], "a"), sys.argv[2]
for line in sys.stdin:
    if json.loads(line)["turn"] == 1:
        for folder in ("/tmp", "/var/tmp", "/dev/shm", os.environ["HOME"], "."):
            path = os.path.join(folder, mark)
            try:
                with open(path, "w") as file:
                    file.write("scratch")
                os.unlink(path)
                log.write(f"{folder} written\n")
            except OSError as exc:
                log.write(f"{folder} refused: {exc.strerror}\n")
        log.flush()
    print(json.dumps("2"), flush=True)
"""


@needs_bwrap
def test_a_command_agent_still_writes_scratch_space_its_home_and_its_folder(tmp_path, monkeypatch):
    """What it may write: /tmp, /var/tmp, /dev/shm, $HOME and its current folder (the
    runner's)."""
    folder = tmp_path / "cwd"
    folder.mkdir()
    monkeypatch.chdir(folder)
    script, log = tmp_path / "benign.py", tmp_path / "benign.log"
    script.write_text(BENIGN_AGENT)
    records = run_cli(tmp_path, "benign", "--mode", "math", "--data", str(one_math_task(tmp_path)),
                      "--agent-cmd", command_line(script, str(log), f"pr-benign-{os.getpid()}-{os.urandom(4).hex()}"))
    assert [r["status"] for r in records] == ["success"], records
    home = os.environ["HOME"]
    assert log.read_text().splitlines() == [f"{where} written" for where in ("/tmp", "/var/tmp", "/dev/shm", home, ".")]
    assert list(folder.iterdir()) == []


def test_the_agents_current_folder_is_writable_wherever_it_lies():
    """Its current folder is among the writable ones even outside /tmp, /var/tmp, /dev/shm
    and $HOME (the test above runs in one under /tmp, which is writable anyway)."""
    from parallel_rollout.agents.agent_sandbox import _host_view

    view = _host_view("/opt", "/nonexistent-home")
    assert "/opt" in view.writable and "/nonexistent-home" not in view.writable, view


@needs_bwrap
def test_the_runners_code_inside_a_writable_folder_is_read_only_again(tmp_path):
    """Whatever the checkout's layout here: a folder given as the runner's code inside a
    writable folder is read-only to the agent, its neighbour writable, and the folder above
    it cannot be renamed away (a mount point)."""
    import subprocess
    from parallel_rollout.agents.agent_sandbox import HostView, in_own_pid_namespace

    top = tmp_path / "top"
    code = top / "outer" / "code"
    code.mkdir(parents=True)
    script = (f"echo x > {code}/f 2>/dev/null && echo code-written; echo x > {top}/f && echo top-written; "
              f"mv {top}/outer {top}/moved 2>/dev/null && echo renamed; true")
    view = HostView((str(top),), (str(code),))
    done = subprocess.run(in_own_pid_namespace(["sh", "-c", script], view=view), capture_output=True, text=True,
                          timeout=60)
    assert done.stdout.split() == ["top-written"], (done.stdout, done.stderr)
    assert not (code / "f").exists() and (top / "outer").is_dir()


def test_the_whole_output_folder_is_hidden_unless_it_holds_what_the_agent_needs(tmp_path, monkeypatch):
    """--output-dir /tmp or ~ would hide the agent's scratch space or its home (and a pyenv
    interpreter there): its run's folder alone is hidden then, as when the output folder
    holds its current folder or its program."""
    from parallel_rollout.agents.command import run_folder

    program = tmp_path / "agent.py"
    program.write_text("")
    monkeypatch.chdir(tmp_path)

    def hidden(output_dir: str, agent: str = "/usr/bin/true") -> tuple[str, ...]:
        return run_folder(SimpleNamespace(run_id="r1", output_dir=output_dir, agent_cmd=agent))

    assert hidden(str(tmp_path)) == (str(tmp_path / "r1"),)  # its current folder
    monkeypatch.chdir("/")
    assert hidden("/tmp") == (os.path.realpath("/tmp") + "/r1",)
    home = os.path.realpath(os.path.expanduser("~"))
    assert hidden("~") == (os.path.join(home, "r1"),)
    elsewhere = Path(tempfile.mkdtemp(prefix="pr-out-", dir="/var/tmp"))
    try:
        assert hidden(str(elsewhere)) == (str(elsewhere),)
        (elsewhere / "agent.py").write_text("")
        assert hidden(str(elsewhere), f"python3 {elsewhere / 'agent.py'}") == (str(elsewhere / "r1"),)
    finally:
        shutil.rmtree(elsewhere)


@needs_bwrap
def test_a_hidden_path_reached_through_a_symlink_is_hidden_once_by_its_real_path(tmp_path):
    """A file to hide named through a symlink to a folder hidden already (a task's gold file
    beside a task file whose folder is linked): bwrap mounted it again inside the read-only
    tmpfs and failed, so that every start of the agent failed. Hidden by its real path, the
    folder is hidden once, the file is nowhere to read, and the agent runs."""
    import subprocess
    from parallel_rollout.agents.agent_sandbox import HostView, in_own_pid_namespace

    secret = tmp_path / "secret"
    secret.mkdir()
    (secret / "gold.txt").write_text("the answer\n")
    (tmp_path / "link").symlink_to(secret)
    view = HostView((str(tmp_path),), ())
    hidden = (str(secret), str(tmp_path / "link" / "gold.txt"))
    done = subprocess.run(in_own_pid_namespace(["sh", "-c", f"cat {secret}/gold.txt {tmp_path}/link/gold.txt; "
                                                "echo ran"], hidden, view), capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0 and done.stdout == "ran\n", (done.stdout, done.stderr)
