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
