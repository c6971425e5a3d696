"""Two desktop agents on one host (two ``remote`` machines that are one: one /tmp, one network),
as a user starts them (``server.py --host … --port … --desktop WxH``). Each takes a display of
its own, says which in ``/health``, and goes on when the other stops. The host's /tmp is a
tmpfs of their own here (a mount namespace), so that what their X servers and buses make
there is gone with them."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil
import pytest

from conftest import ROOT
from desktop_support import pixels
from parallel_rollout.guest import desktop
from parallel_rollout.guest.client import GuestClient

pytestmark = pytest.mark.skipif(
    os.geteuid() != 0 or not all(map(shutil.which, ("Xvfb", "openbox", "xprop", "unshare"))),
    reason="needs root (a mount namespace for /tmp), Xvfb, openbox and x11-utils")


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


#: the agent's interpreter: the one the venv was made from (the agent needs only the standard
#: library), as a venv under /tmp (a CI clone's) is hidden by the agents' own /tmp
GUEST_PYTHON = getattr(sys, "_base_executable", sys.executable)


def _guest_copy() -> Path:
    """The agent's files where a tmpfs on /tmp does not hide them (a checkout, pytest's folders
    are under /tmp)."""
    copy = Path(tempfile.mkdtemp(prefix="pr-desktops-", dir="/dev/shm"))
    shutil.copytree(ROOT / "src/parallel_rollout/guest", copy / "guest",
                    ignore=shutil.ignore_patterns("__pycache__"))
    return copy


@contextlib.contextmanager
def desktop_agents(tmp_path, *extra: list[str], env: dict | None = None, homes: tuple = (),
                   own_tmp: bool = False):
    """Agents with a desktop on loopback ports, one home (or each its own of ``homes``), one
    /tmp (or each its own: ``own_tmp``), one for each list of extra options (two without);
    yields their clients and the process that holds them."""
    extra = extra or ([], [])
    ports = [_free_port() for _ in extra]
    copy = _guest_copy()
    server = copy / "guest" / "server.py"
    starts = " & ".join(
        f"{f'HOME={home} ' if home else ''}{GUEST_PYTHON} {server} --host 127.0.0.1 --port {port} "
        f"--desktop 320x240 {' '.join(more)}"
        for port, more, home in zip(ports, extra, list(homes) + [None] * len(extra)))
    if own_tmp:  # as systemd's PrivateTmp gives each service
        starts = " & ".join(f"unshare --mount --propagation private sh -c 'mount -t tmpfs tmpfs /tmp && "
                            f"exec {start.strip()}'" for start in starts.split(" & "))
    script = f"mount -t tmpfs tmpfs /tmp && {{ {starts} & wait; }}"
    env = env or {"PATH": os.environ["PATH"], "HOME": str(tmp_path), "PARALLEL_ROLLOUT_ATSPI": "0"}
    log = tmp_path / "agents.log"  # a file (opened before the mount): a pipe's read would wait for every agent's end
    with log.open("wb") as sink:
        holder = subprocess.Popen(["unshare", "--mount", "--propagation", "private", "sh", "-c", script],
                                  env=env, stdout=subprocess.DEVNULL, stderr=sink, start_new_session=True)
    clients = [GuestClient(f"http://127.0.0.1:{port}", timeout_s=30) for port in ports]
    try:
        deadline = time.monotonic() + 60
        for client in clients:
            while True:
                try:
                    client.health()
                    break
                except Exception:  # noqa: BLE001 - not up yet
                    assert holder.poll() is None and time.monotonic() < deadline, log.read_text()[-3000:]
                    time.sleep(0.2)
        yield clients, holder
    finally:
        left = psutil.Process(holder.pid).children(recursive=True) if holder.poll() is None else []
        with contextlib.suppress(ProcessLookupError):
            os.killpg(holder.pid, signal.SIGTERM)
        for process in left:  # Xvfb, openbox, dbus: sessions of their own
            with contextlib.suppress(psutil.NoSuchProcess):
                process.kill()
        holder.wait(timeout=30)
        shutil.rmtree(copy)


def test_two_desktop_agents_on_one_host_take_a_display_each_and_one_outlives_the_other(tmp_path):
    """Each desktop took display :0: the second agent's Xvfb could not, and the agent exited
    ("Xvfb exited before it was ready"). Now each takes the first free display (two starting at
    once included), or the one --display names, /health says which, and stopping one leaves
    the other's desktop serving."""
    with desktop_agents(tmp_path, [], [], ["--display", ":57"]) as ([first, second, named], _):
        displays = [first.health()["display"], second.health()["display"]]
        assert displays[0] != displays[1] and all(d and d[0] == ":" for d in displays), displays
        assert named.health()["display"] == ":57" and ":57" not in displays
        shown = [second.execute(["sh", "-c", "echo $DISPLAY"])["output"].strip()]
        assert shown == [displays[1]]  # what the agent's commands (pyautogui, apps) draw on
        assert pixels(first.screenshot())[:2] == (320, 240) == pixels(second.screenshot())[:2]
        os.kill(first.health()["pid"], signal.SIGTERM)
        deadline = time.monotonic() + 30
        while True:
            with contextlib.suppress(Exception):
                first.health()
                assert time.monotonic() < deadline, "the first agent did not stop"
                time.sleep(0.2)
                continue
            break
        assert pixels(second.screenshot())[:2] == (320, 240)
        assert second.health()["display"] == displays[1]


@pytest.mark.skipif(not shutil.which("dbus-daemon"), reason="dbus-daemon is not installed")
def test_an_agent_whose_desktop_cannot_start_leaves_no_session_bus_behind(tmp_path):
    """The session bus starts while Xvfb does, in a session of its own: an agent whose Xvfb
    could not take the display (another X server's socket there) did not even exit (seen for
    60 s), and its bus and Xvfb outlived it, the machine's for good."""
    copy = _guest_copy()
    script = (f"mount -t tmpfs tmpfs /tmp && exec {GUEST_PYTHON} {copy / 'guest' / 'server.py'} "
              f"--host 127.0.0.1 --port {_free_port()} --desktop 320x240 --display :58")
    taken = socket.socket(socket.AF_UNIX)
    try:
        taken.bind("\0/tmp/.X11-unix/X58")  # the abstract socket X servers listen on: :58 is taken
        agent = subprocess.run(["unshare", "--mount", "--propagation", "private", "sh", "-c", script],
                               env={"PATH": os.environ["PATH"], "HOME": str(tmp_path)},
                               capture_output=True, text=True, timeout=30)
    finally:
        taken.close()
        shutil.rmtree(copy)
        left = [p for p in psutil.process_iter(["cmdline"])
                if any(part.endswith(("dbus-session-58", ":58")) or "bus_58" in part for part in p.info["cmdline"] or [])]
        for process in left:
            with contextlib.suppress(psutil.NoSuchProcess):
                process.kill()
    assert agent.returncode != 0 and "Xvfb on :58 exited before it was ready" in agent.stderr, agent.stderr[-2000:]
    assert not left, [p.info["cmdline"] for p in left]


@pytest.mark.skipif(not shutil.which("dbus-daemon") or not desktop.find(desktop.BUS_LAUNCHER, desktop.LIBEXEC_DIRS),
                    reason="dbus-daemon or at-spi2-core is not installed")
def test_a_session_bus_slower_than_five_seconds_still_gives_the_desktop_its_at_spi(tmp_path):
    """The session bus had 5 s to say its address where Xvfb had 20: a qemu guest under TCG on a
    loaded machine (load 26) took longer, the bus was killed and the desktop went on without
    AT-SPI (no accessibility tree for OSWorld's a11y observations). It now has the desktop's
    own time: a dbus-daemon that takes 7 s is waited for and serves the agent's commands."""
    slow = Path(tempfile.mkdtemp(prefix="pr-slow-bus-", dir="/dev/shm"))  # the agents' /tmp hides tmp_path
    real = shutil.which("dbus-daemon")
    (slow / "dbus-daemon").write_text(f"#!/bin/sh\nsleep 7\nexec {real} \"$@\"\n")
    (slow / "dbus-daemon").chmod(0o755)
    try:
        env = {"PATH": f"{slow}:{os.environ['PATH']}", "HOME": str(tmp_path)}
        with desktop_agents(tmp_path, [], env=env) as ([agent], _):
            said = agent.execute(["sh", "-c", "echo $DBUS_SESSION_BUS_ADDRESS"])["output"].strip()
            log = (tmp_path / "agents.log").read_text()
            assert said.startswith("unix:path=/tmp/dbus-session"), (said, log[-2000:])
            assert "no AT-SPI bus" not in log, log[-2000:]
            # the bus answers: the desktop's AT-SPI bus was activated on it
            found = agent.execute(["dbus-send", "--session", "--print-reply", "--dest=org.a11y.Bus",
                                   "/org/a11y/bus", "org.a11y.Bus.GetAddress"])
            assert found["returncode"] == 0 and "unix:" in found["output"], found
    finally:
        shutil.rmtree(slow)


@pytest.mark.skipif(not shutil.which("chromium"), reason="Debian's chromium is not installed")
def test_a_web_episode_runs_on_a_machine_whose_agent_has_a_desktop(tmp_path):
    """A remote machine's agent started with --desktop (its session bus and AT-SPI on, for
    OSWorld's tasks): the web mode's headless Chromium joined that bus, its Page.navigate never
    answered, and every web episode there failed to start (vm_error, "TimeoutError: timed out")."""
    from conftest import write_tasks
    from parallel_rollout.config import build_config
    from parallel_rollout.envs.registry import task_validators
    from parallel_rollout.envs.web.env import WebEnv
    from parallel_rollout.envs.web.oracle import next_action
    from parallel_rollout.tasks import load_tasks
    from test_web import web_task

    data = write_tasks(tmp_path / "web.jsonl", [web_task("click-button", seed=3)])
    [task] = load_tasks(str(data), default_mode="web", validators=task_validators())
    env = {"PATH": os.environ["PATH"], "HOME": str(tmp_path)}  # the bus and AT-SPI on, as by default
    with desktop_agents(tmp_path, [], env=env) as ([client], _):
        web = WebEnv(build_config(dict(mode="web", data=str(data), agent="oracle")))
        web.trajectory_dir = str(tmp_path / "traj")
        seen = web.reset(task, client)
        step = web.step(next_action(web.env_name, seen))
        assert step.done and web.evaluate()[0] == 1.0, step.observation


@pytest.mark.skipif(not all(map(shutil.which, ("chromium", "socat"))), reason="chromium or socat is not installed")
def test_two_desktop_agents_on_one_host_each_reach_their_own_chrome(tmp_path):
    """OSWorld's Chrome tasks start Chrome on --remote-debugging-port=1337 and socat on 9222,
    ports of the machine: on two desktop agents of one host (homes of their own) the second's
    could not listen, and its getters read the first agent's browser. The host's first keeps
    OSWorld's ports, the other maps them to its own (in /setup/launch and the getters)."""
    from parallel_rollout.envs.osworld import chrome, setup as steps
    from test_osworld_apps import env_on

    with desktop_agents(tmp_path, homes=("/tmp/home-a", "/tmp/home-b")) as (clients, _):
        for name, client in zip("AB", clients):
            steps.run_steps(env_on(client), [  # a Chrome task's first steps, plus a page to tell them apart
                {"type": "launch", "parameters": {"command": [
                    "google-chrome", "--remote-debugging-port=1337", f"data:text/html,agent-{name}"]}},
                {"type": "launch", "parameters": {"command": ["socat", "tcp-listen:9222,fork", "tcp:localhost:1337"]}},
            ], "config")
        assert [[page["url"] for page in chrome.pages(client)] for client in clients] == [
            ["data:text/html,agent-A"], ["data:text/html,agent-B"]]
        mapped = [client.health().get("devtools_ports") for client in clients]
        assert sorted(map(bool, mapped)) == [False, True], mapped  # one kept OSWorld's, one has its own
        # a Chrome task's postconfig on the first: its Chromium ends, the other agent's goes on
        steps.run_steps(env_on(clients[0]), [{"type": "launch", "parameters": {"command": ["pkill", "chrome"]}}],
                        "postconfig")
        assert [page["url"] for page in chrome.pages(clients[1])] == ["data:text/html,agent-B"]
        assert _own_chromium(clients[0]) == 0 < _own_chromium(clients[1])


def _own_chromium(client: GuestClient) -> int:
    """How many Chromium processes run with this agent's profile folder."""
    home = client.execute(["sh", "-c", "echo $HOME"])["output"].strip()
    return sum(f"--user-data-dir={home}/" in " ".join(p.info["cmdline"] or [])
               for p in psutil.process_iter(["cmdline"]))


@pytest.mark.slow  # ~3 s: the suite's time is near its budget
def test_desktop_agents_with_a_tmp_each_started_at_once_all_serve(tmp_path):
    """Agents of one host whose /tmp is each its own (systemd's PrivateTmp) but whose network
    is one, started at once: each claimed :0 in its own /tmp, and all Xvfbs but one exited at
    start (X's abstract socket is the network's), and all kept OSWorld's DevTools ports. The
    claims are the network's now: a display each, all but one on ports of their own."""
    with desktop_agents(tmp_path, [], [], [], own_tmp=True) as (clients, _):
        answers = [client.health() for client in clients]
        assert len({answer["display"] for answer in answers}) == 3, answers
        assert sorted("devtools_ports" in answer for answer in answers) == [False, True, True], answers


def test_a_display_a_killed_x_server_left_is_free_again():
    """A killed X server leaves its socket file (nobody binds it) and a lock naming a gone
    pid; X takes such a display, and so does the agent: a host whose Xvfb were killed 64 times
    had no display left for one ("no free X display among :0-:63")."""
    from parallel_rollout.guest import desktop

    def release():
        fd, claim = desktop._claim
        claim.close()
        os.close(fd)
        desktop._claim = None

    number = int(desktop.free_display()[1:])
    release()
    gone = subprocess.Popen(["true"])
    gone.wait()
    path, lock = f"{desktop.X11_SOCKETS}/X{number}", f"/tmp/.X{number}-lock"
    os.makedirs(desktop.X11_SOCKETS, exist_ok=True)
    made = not os.path.lexists(path)  # (one a killed X server left may be there already)
    if made:
        with socket.socket(socket.AF_UNIX) as stale:
            stale.bind(path)  # closed: the file stays, bound by nobody
    try:
        with open(lock, "w") as handle:
            handle.write(f"{gone.pid:10d}\n")
        assert desktop.free_display() == f":{number}"
        release()
    finally:
        for left in (path, lock)[0 if made else 1:]:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(left)
