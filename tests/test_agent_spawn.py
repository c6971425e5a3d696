"""``guest/agent_spawn``: a command started through ``_posixsubprocess.fork_exec`` (the fast
way) behaves as one started through ``subprocess.Popen`` (the way of a Python the module does
not know): the same output, exit codes, errors, session, descriptors and user; and the fast
way's arguments fit every CPython it is used on."""

from __future__ import annotations

import gc
import os
import subprocess
from pathlib import Path

import pytest

from parallel_rollout.guest import agent_spawn

GUEST = Path(agent_spawn.__file__).parent


@pytest.fixture(params=[True, False], ids=["fork_exec", "popen"])
def way(request, monkeypatch: pytest.MonkeyPatch) -> bool:
    if request.param and not agent_spawn.FAST:
        pytest.skip("this Python has no fork_exec shape the agent knows")
    monkeypatch.setattr(agent_spawn, "FAST", request.param)
    return request.param


def _run(argv, **kwargs) -> tuple[int, bytes, bytes]:
    child = agent_spawn.spawn(argv, **{"cwd": "/", **kwargs})
    out = child.stdout.read()
    err = child.stderr.read() if child.stderr is not None else b""
    child.stdout.close()
    if child.stderr is not None:
        child.stderr.close()
    return child.wait(), out, err


def _open_fds() -> set[str]:
    gc.collect()  # what an earlier test left closes its descriptors now, not during the check
    return set(os.listdir("/proc/self/fd"))


def test_output_exit_code_and_merged_streams(way: bool, tmp_path: Path) -> None:
    assert _run(["/bin/sh", "-c", "echo out; echo err >&2; exit 3"]) == (3, b"out\n", b"err\n")
    assert _run(["/bin/sh", "-c", "echo out; echo err >&2"], merge_stderr=True) == \
        (0, b"out\nerr\n", b"")
    # a program without a slash is looked up on the command's own PATH
    (tmp_path / "hello").write_text("#!/bin/sh\necho hello from $0\n")
    (tmp_path / "hello").chmod(0o755)
    code, out, _ = _run(["hello"], env={"PATH": f"/nowhere:{tmp_path}"})
    assert (code, out) == (0, f"hello from {tmp_path}/hello\n".encode())


def test_cwd_env_stdin_and_session(way: bool, tmp_path: Path) -> None:
    code, out, _ = _run(["/bin/sh", "-c", "pwd; env | sort; cat; ps -o sid= -o pgid= -p $$; echo $$"],
                        cwd=str(tmp_path), env={"ONLY": "this", "PATH": "/usr/bin:/bin"})
    lines = out.decode().split("\n")
    assert code == 0 and lines[0] == str(tmp_path)
    assert [line for line in lines if "=" in line and not line.startswith(("PWD=", "SHLVL=", "_="))] \
        == ["ONLY=this", "PATH=/usr/bin:/bin"]
    sid, pgid = lines[-3].split()
    assert sid == pgid == lines[-2], "not the leader of a session of its own"


def test_what_cannot_start_raises_what_popen_raises(way: bool, tmp_path: Path) -> None:
    before = _open_fds()
    with pytest.raises(FileNotFoundError) as missing:
        agent_spawn.spawn(["no-such-program-here"], cwd="/", env={"PATH": "/usr/bin:/bin"})
    assert missing.value.filename == "no-such-program-here"
    script = tmp_path / "not-executable"
    script.write_text("echo no\n")
    with pytest.raises(PermissionError):
        agent_spawn.spawn([str(script)], cwd="/")
    with pytest.raises(FileNotFoundError) as bad_cwd:
        agent_spawn.spawn(["/bin/true"], cwd=str(tmp_path / "gone"))
    assert bad_cwd.value.filename == str(tmp_path / "gone")
    with pytest.raises(NotADirectoryError):
        agent_spawn.spawn(["/bin/true"], cwd=str(script))
    for _ in range(20):
        assert _run(["/bin/true"])[0] == 0
    # only a descriptor that appeared is a leak: one an earlier test's leftovers closed meanwhile
    # (a CI run saw four go) is not
    assert not _open_fds() - before, "a descriptor leaked"


def test_only_the_passed_descriptors_reach_the_command(way: bool) -> None:
    passed, kept = os.pipe(), os.pipe()
    try:
        os.set_inheritable(kept[1], True)  # inheritable, but not passed: close_fds closes it
        code, out, _ = _run(["/bin/sh", "-c", "ls /proc/$$/fd; readlink /proc/$$/fd/0"],
                            pass_fds=(passed[1],))
        fds = out.decode().split()
        assert code == 0 and str(passed[1]) in fds and str(kept[1]) not in fds
        assert fds[-1] == "/dev/null"
    finally:
        for fd in (*passed, *kept):
            os.close(fd)


def test_a_killed_command_and_a_wait_that_times_out(way: bool) -> None:
    child = agent_spawn.spawn(["sleep", "30"], cwd="/")
    with pytest.raises(subprocess.TimeoutExpired):
        child.wait(timeout=0.1)
    assert child.poll() is None
    child.kill()
    assert child.wait() == -9
    child.kill()  # reaped: a no-op, not a signal to whatever has its pid now
    child.stdout.close()
    child.stderr.close()


@pytest.mark.skipif(os.geteuid() != 0, reason="switching users needs root")
def test_the_commands_user_set_in_the_child(way: bool) -> None:
    code, out, _ = _run(["/bin/sh", "-c", "id -u; id -g; id -G"], user=(65534, 65534))
    assert (code, out.decode().split()) == (0, ["65534", "65534", "65534"])


PYTHONS = sorted(Path("/root/.pyenv/versions").glob("3.*/bin/python3"))
CHECK = """
import os, sys
sys.path.insert(0, sys.argv[1])
import agent_spawn
assert agent_spawn.FAST == ((3, 9) <= sys.version_info[:2] <= (3, 13)), agent_spawn.FAST
child = agent_spawn.spawn(["/bin/sh", "-c", "echo $0 $X >&2; exit 5"], cwd="/", env={"X": "y"},
                          merge_stderr=True)
assert child.stdout.read() == b"/bin/sh y\\n" and child.wait() == 5, child.returncode
for argv, cwd, error in ((["no-such-program"], "/", FileNotFoundError),
                         (["/bin/true"], "/no/such/dir", FileNotFoundError)):
    try:
        agent_spawn.spawn(argv, cwd=cwd)
    except error:
        pass
    else:
        raise AssertionError(argv)
if os.geteuid() == 0 and sys.version_info >= (3, 9):  # the user set in the child (Popen(user=): 3.9)
    child = agent_spawn.spawn(["/bin/sh", "-c", "id -u; id -G"], cwd="/", user=(65534, 65534))
    assert child.stdout.read().split() == [b"65534", b"65534"] and child.wait() == 0
print("ok", sys.version_info[:2], agent_spawn.FAST)
"""


@pytest.mark.parametrize("python", PYTHONS, ids=[p.parts[-3] for p in PYTHONS])
def test_every_python_on_the_machine_starts_commands(python: Path) -> None:
    """fork_exec's private arguments changed in 3.9 and 3.11: each shape the module gives
    is the one that Python takes (a guest's Python is not the host's)."""
    if subprocess.run([str(python), "-c", "import sys; sys.exit(sys.version_info < (3, 7))"]).returncode:
        pytest.skip("the agent needs Python 3.7 or newer")
    result = subprocess.run([str(python), "-I", "-S", "-c", CHECK, str(GUEST)],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0 and result.stdout.startswith("ok"), result.stderr
