"""OSWorld on a machine of one's own (``--provider-name remote``) whose agent runs the desktop
(``--desktop``): every action is ``python -c "import pyautogui; …"``, and such a machine's
python has no pyautogui unless one installs it. Real guest agents with Xvfb on 127.0.0.1 (the
host's display :0: this file runs alone, with the other remote-provider tests)."""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import shutil
import socket
import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path

import pytest
from click.testing import CliRunner

from conftest import read_results, write_tasks
from parallel_rollout.cli import main
from parallel_rollout.errors import GuestUnreachable
from parallel_rollout.guest.client import GuestClient
from providers.test_remote import AGENT, _free_port

pytestmark = pytest.mark.skipif(not all(shutil.which(p) for p in ("Xvfb", "openbox", "xdotool")),
                                reason="no Xvfb, openbox or xdotool for a desktop")


@contextmanager
def desktop_agent(tmp_path: Path, server: Path, size: str = "1920x1080"):
    """The guest agent ``server`` with ``--desktop size``, its commands' ``python`` one without
    pyautogui (as Debian's and Ubuntu's are); yields its port."""
    assert importlib.util.find_spec("pyautogui") is None  # the python the machine's commands get
    bin_dir, home = tmp_path / "bin", tmp_path / "home"
    bin_dir.mkdir()
    home.mkdir()
    (bin_dir / "python").symlink_to(sys.executable)
    port = _free_port()
    with (tmp_path / "agent.log").open("wb") as log:
        agent = subprocess.Popen([sys.executable, "-I", str(server), "--host", "127.0.0.1", "--port", str(port),
                                  "--desktop", size], cwd=home, stdin=subprocess.DEVNULL, stdout=log,
                                 stderr=log, env={"PATH": f"{bin_dir}:{os.environ['PATH']}", "HOME": str(home)})
    try:
        GuestClient(f"http://127.0.0.1:{port}").wait_ready(60)
        yield port
    finally:
        agent.terminate()
        agent.wait(timeout=30)


def test_a_desktop_agent_gives_its_commands_its_own_pyautogui(tmp_path):
    """The agent's xdotool-backed pyautogui (shim/) is on its commands' PYTHONPATH, as this
    project's images put it: every OSWorld action on such a machine failed with
    ModuleNotFoundError, and each task was graded 0 as the agent's failure."""
    with desktop_agent(tmp_path, AGENT) as port:
        done = GuestClient(f"http://127.0.0.1:{port}").execute(
            ["python", "-c", "import pyautogui; print(pyautogui.__file__, pyautogui.size())"], timeout=60)
    assert done["returncode"] == 0, done
    assert done["output"].split()[0] == str(AGENT.parent / "shim" / "pyautogui.py"), done


def test_an_osworld_run_on_a_machine_without_pyautogui_stops_saying_so(tmp_path):
    """A machine where the actions' pyautogui cannot be had (here an agent's folder without
    its shim): the run stops at its first episode naming what to install (exit 1), its attempt
    left to a resume, as the web mode's missing Chromium does; it ran every task, each action
    failing, and graded them all 0 as the agent's own failures."""
    guest = tmp_path / "guest"
    shutil.copytree(AGENT.parent, guest, ignore=shutil.ignore_patterns("__pycache__", "shim"))
    data = write_tasks(tmp_path / "t.jsonl", [
        {"id": f"t{i}", "mode": "osworld", "instruction": "nothing to do", "config": [],
         "evaluator": {"func": "infeasible"}, "reference": ["FAIL"]} for i in range(2)])
    with desktop_agent(tmp_path, guest / "server.py") as port:
        result = CliRunner().invoke(main, [
            "--mode", "osworld", "--data", str(data), "--agent", "oracle", "--provider-name", "remote",
            "--vm-address", f"127.0.0.1:{port}", "--reset-command", "none", "--num-rollouts", "1",
            "--output-dir", str(tmp_path / "out"), "--run-id", "r", "--no-progress"])
    assert result.exit_code == 1, result.output
    assert "the VM's python has no pyautogui, which every action runs: install it there" in result.output
    records = read_results(tmp_path / "out" / "r")
    assert [(r["status"], r["final"]) for r in records] == [("guest_prerequisite_missing", False)], records


def test_a_machine_whose_screen_is_not_the_runs_stops_the_run_at_once(tmp_path):
    """A machine whose screen is 1280x720 under a run that asks the default 1920x1080: no
    reset or new boot changes that, so the run stops at its first boot (exit 2, as a bad
    flag), naming the machine, its size and the flags to give, its attempt left to a resume.
    It was taken for a failed boot: the machine booted again and again until the replacement
    budget was spent (a reset command's revert each time), and the run exited 1."""
    data = write_tasks(tmp_path / "t.jsonl", [
        {"id": "t0", "mode": "osworld", "instruction": "nothing to do", "config": [],
         "evaluator": {"func": "infeasible"}, "reference": ["FAIL"]}])
    with desktop_agent(tmp_path, AGENT, size="1280x720") as port:
        result = CliRunner().invoke(main, [
            "--mode", "osworld", "--data", str(data), "--agent", "oracle", "--provider-name", "remote",
            "--vm-address", f"127.0.0.1:{port}", "--reset-command", "none", "--num-rollouts", "1",
            "--output-dir", str(tmp_path / "out"), "--run-id", "r", "--no-progress"])
    assert result.exit_code == 2, result.output
    assert (f"VM vm-0 (http://127.0.0.1:{port}) has a 1280x720 screen; the run asks for 1920x1080: set the "
            "machine's screen to 1920x1080, or start a new run with --screen-width 1280 --screen-height 720") \
        in result.output
    assert "resume with:" in result.output
    boots = [e for e in map(json.loads, (tmp_path / "out" / "r" / "events.jsonl").read_text().splitlines())
             if e.get("event") == "vm" and e.get("to") == "booting"]
    assert len(boots) == 1, boots  # no replacement booted
    records = read_results(tmp_path / "out" / "r")
    assert [(r["status"], r["final"]) for r in records] == [("vm_settings_mismatch", False)], records



def test_a_shell_tasks_reap_ends_its_leftovers_not_the_agents_desktop(tmp_path):
    """A shell task on a desktop agent (``--desktop``) leaves a daemon and an app, then the
    shell mode's /reap before its check: the daemon and the app end, but the desktop the agent
    started (its session bus, Xvfb, window manager) is the agent's own and lives on, so the next
    OSWorld task's screenshots and actions work. The reap ended the desktop too, and every later
    desktop task on that agent failed (no display)."""
    with desktop_agent(tmp_path, AGENT) as port:
        client = GuestClient(f"http://127.0.0.1:{port}")
        left = client.execute("setsid sleep 300 > /dev/null 2>&1 & echo $!", shell=True)["output"]
        app = client.execute("xterm > /dev/null 2>&1 & echo $!", shell=True)["output"]
        assert client.reap()
        for pid in (int(left), int(app)):
            assert not os.path.exists(f"/proc/{pid}"), f"{pid} outlived the reap"
        assert client.screen_size() == (1920, 1080)
        assert client.screenshot().startswith(b"\x89PNG")
        moved = client.execute(["python", "-c", "import pyautogui; pyautogui.moveTo(7, 9)"], timeout=30)
        assert moved["returncode"] == 0, moved
        assert client.cursor_position() == (7, 9)


@pytest.mark.slow  # two desktop agents: ~6 s
def test_a_desktop_agent_whose_tasks_can_end_another_desktop_says_so(tmp_path):
    """Two desktop agents on one host whose commands run as one user (here root): a task of
    one can end the other's desktop (pkill Xvfb, kill -9 -1), and the other's task then fails
    as its own. The design contains it (--run-as a user of its own per agent: a task signals
    only that user's processes); an agent started without it beside another's X server says
    so in its log, naming that server and the flag. It said nothing."""
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    with desktop_agent(tmp_path / "a", AGENT) as first:
        display = GuestClient(f"http://127.0.0.1:{first}").health()["display"]
        xvfb = [pid for pid in os.listdir("/proc") if pid.isdigit() and _cmdline(pid)[:2] == ["Xvfb", display]]
        assert len(xvfb) == 1, xvfb
        with desktop_agent(tmp_path / "b", AGENT):
            log = (tmp_path / "b" / "agent.log").read_text()
    said = " ".join(log.split())
    assert "warning: this machine runs other X servers (" in said, log
    assert f"pid {xvfb[0]}, uid {os.getuid()}" in said, log
    assert "start each desktop agent with --run-as UID:GID of a user of its own" in said, log


def _cmdline(pid: str) -> list[str]:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace").split("\0")
    except OSError:
        return []


@pytest.mark.slow  # a desktop agent's start: ~3 s
def test_a_run_as_desktop_agent_passes_over_a_display_a_killed_root_x_server_left(tmp_path):
    """A killed X server of root's left its socket in /tmp/.X11-unix (nobody binds it; every
    root desktop agent stopped leaves one): a root agent's Xvfb takes that display over, but one
    started with --run-as (a user of its own per agent, as the README says to keep two agents'
    tasks apart) runs Xvfb as that user, who cannot remove root's file from the sticky folder:
    the agent, as root, removes it first. Its Xvfb exited ('server already running') and the
    agent never came up."""
    from parallel_rollout.guest import desktop

    display = desktop.free_display()  # the display a new agent would take now
    fd, claim = desktop._claim
    os.close(fd)
    claim.close()
    desktop._claim = None
    stale = Path(desktop.X11_SOCKETS) / f"X{display[1:]}"
    if stale.exists() and stale.lstat().st_uid != 0:  # a killed X server's of another user: as X does
        stale.unlink()
    made = not stale.exists()  # else root's, as a root agent stopped here leaves (its Xvfb killed)
    if made:
        with socket.socket(socket.AF_UNIX) as left:  # bound, then its server gone: the file stays
            left.bind(str(stale))
    tmp_path.chmod(0o755)
    home = tmp_path / "home"
    home.mkdir()
    os.chown(home, 64101, 64101)
    port = _free_port()
    try:
        with (tmp_path / "agent.log").open("wb") as log:
            agent = subprocess.Popen([sys.executable, "-I", str(AGENT), "--host", "127.0.0.1", "--port", str(port),
                                      "--desktop", "800x600", "--run-as", "64101:64101"], cwd=home,
                                     stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                                     env={"PATH": os.environ["PATH"], "HOME": str(home)})
        try:
            client = GuestClient(f"http://127.0.0.1:{port}")
            deadline = time.monotonic() + 30
            while agent.poll() is None and time.monotonic() < deadline:
                with contextlib.suppress(OSError, GuestUnreachable):
                    client.wait_ready(1)
                    break
            assert agent.poll() is None, (tmp_path / "agent.log").read_text()[-3000:]
            assert client.health()["display"] == display  # the leftover gone, as a root Xvfb takes it over
            assert client.screen_size() == (800, 600)
            assert client.screenshot().startswith(b"\x89PNG")
        finally:
            agent.terminate()
            agent.wait(timeout=30)
    finally:
        if made:
            stale.unlink(missing_ok=True)
