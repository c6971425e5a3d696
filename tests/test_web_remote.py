"""web mode on a remote machine (``--provider remote``), which no reset clears by killing its
processes: an episode cut before its grading (its worker killed at --task-timeout, the run
stopped) leaves no page server or Chromium running there. The machine is a guest agent on a
loopback port, as ``tests/test_web.py`` stands one up."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import psutil
import pytest

from conftest import write_tasks
from parallel_rollout.config import build_config
from parallel_rollout.envs.registry import task_validators
from parallel_rollout.envs.web.browser import PAGE_SERVER
from parallel_rollout.envs.web.env import WebEnv, driver_source
from parallel_rollout.guest import agent_reap
from parallel_rollout.guest.client import GuestClient
from parallel_rollout.pool.providers import provider_options
from parallel_rollout.pool.providers.remote import RemoteProvider
from parallel_rollout.tasks import load_tasks
from test_web import ROOT, live_descendants, remote_agent, web_task

pytestmark = pytest.mark.skipif(not any(map(os.path.exists, ("/usr/bin/chromium", "/usr/bin/chromium-browser"))),
                                reason="Debian's chromium is not installed")


def start_episode(tmp_path, data, server, port) -> list[psutil.Process]:
    """An episode's start on the machine with no end after it (what a worker killed mid-episode
    leaves): its page server and Chromium, found among the agent's descendants."""
    env = WebEnv(build_config(dict(mode="web", data=str(data), agent="oracle")))
    env.trajectory_dir = str(tmp_path / "traj")
    env.reset(load_tasks(str(data), default_mode="web", validators=task_validators())[0],
              GuestClient(f"http://127.0.0.1:{port}", timeout_s=60))
    return live_descendants(server.pid)


def commands(processes: list[psutil.Process]) -> list[list[str]]:
    found = []
    for process in processes:
        try:
            found.append(process.cmdline())
        except psutil.NoSuchProcess:  # Chromium's short-lived helpers
            pass
    return found


def still_running(processes: list[psutil.Process], wait_s: float = 10.0) -> list[list[str]]:
    """The command lines of ``processes`` still running (not ended, nor zombies: the agent, a
    subreaper, reaps them when it next asks) after up to ``wait_s``."""
    deadline = time.monotonic() + wait_s
    while True:
        running = []
        for process in processes:
            try:
                if process.is_running() and process.status() != psutil.STATUS_ZOMBIE:
                    running.append(process.cmdline())
            except psutil.NoSuchProcess:
                pass
        if not running or time.monotonic() > deadline:
            return running
        time.sleep(0.1)


def zombies_under(pid: int) -> list[int]:
    """The children of ``pid`` that are zombies."""
    found = []
    for child in psutil.Process(pid).children():
        try:
            if child.status() == psutil.STATUS_ZOMBIE:
                found.append(child.pid)
        except psutil.NoSuchProcess:
            pass  # collected meanwhile
    return found


def test_a_cut_episodes_browser_ends_at_the_machines_reset_and_at_its_stop(tmp_path):
    """The options a web run gives the remote provider carry the driver's stop: the next reset
    of the machine (--reset-command none: nothing else ends anything) ends the page server
    and Chromium a cut episode left, and so does the stop at the run's end; and the agent, a
    child subreaper, collects their zombies, which piled up under it until it ended."""
    data = write_tasks(tmp_path / "web.jsonl", [web_task("click-button")])
    with remote_agent(tmp_path, os.environ["PATH"]) as (server, port):
        config = build_config(dict(mode="web", data=str(data), agent="oracle", provider_name="remote",
                                   vm_address=(f"127.0.0.1:{port}",), reset_command="none",
                                   num_rollouts=1))
        provider = RemoteProvider("cut", provider_options(config, RemoteProvider, [WebEnv]))
        info = provider.start("vm-0")
        for end in (provider.reset, provider.stop):
            started = start_episode(tmp_path, data, server, port)
            found = commands(started)
            assert any(PAGE_SERVER in c for c in found) and any("--headless" in c for c in found), found
            end(info)
            assert still_running(started) == [], end.__name__
        assert server.poll() is None  # the machine's agent itself is not ours to stop
        # nor do their zombies pile up under the agent (a dozen an episode) as long as it runs
        deadline = time.monotonic() + 4 * agent_reap.ORPHAN_LOOK_S
        while zombies := zombies_under(server.pid):
            assert time.monotonic() < deadline, f"zombies left under the agent: {zombies}"
            time.sleep(0.2)


def test_a_start_cut_under_way_leaves_nothing_running_on_the_machine(tmp_path):
    """The machine's stop (a run stopped, an attempt past --task-timeout) while an episode's
    start is under way ends the start too, not only the browser and page server it started:
    the driver waited out its 40 s for the browser the stop had killed, and one it started
    after the stop ran on with nothing left to end it."""
    import threading

    data = write_tasks(tmp_path / "web.jsonl", [web_task("click-button")])
    [task] = load_tasks(str(data), default_mode="web", validators=task_validators())
    with remote_agent(tmp_path, os.environ["PATH"]) as (server, port):
        config = build_config(dict(mode="web", data=str(data), agent="oracle", provider_name="remote",
                                   vm_address=(f"127.0.0.1:{port}",), reset_command="none", num_rollouts=1))
        provider = RemoteProvider("cutstart", provider_options(config, RemoteProvider, [WebEnv]))
        info = provider.start("vm-0")
        env = WebEnv(config)
        env.trajectory_dir = str(tmp_path / "traj")
        failed = []

        def start() -> None:
            try:
                env.reset(task, GuestClient(f"http://127.0.0.1:{port}", timeout_s=120))
            except Exception as exc:  # noqa: BLE001 - the start cut: its error is expected
                failed.append(exc)

        starting = threading.Thread(target=start)
        starting.start()
        deadline = time.monotonic() + 60
        while not any("--headless" in c for c in commands(live_descendants(server.pid))):
            assert time.monotonic() < deadline and starting.is_alive(), "the start never launched Chromium"
            time.sleep(0.02)
        under_way = live_descendants(server.pid)  # the driver, its page server and Chromium
        provider.stop(info)
        assert still_running(under_way, wait_s=5) == []
        starting.join(timeout=60)
    assert not starting.is_alive() and failed, "the start ran on past the machine's stop"


@pytest.mark.slow  # ~30 s: Chromium starts, then the attempt runs to its --task-timeout
def test_an_attempt_cut_at_its_task_timeout_leaves_no_browser_on_the_remote_machine(tmp_path):
    """Through the CLI: an agent that thinks past --task-timeout has its worker killed, and
    the page server and Chromium its episode started on the remote machine end with it."""
    task = web_task("click-button", answers=['click("1")'], think_s=600)
    data = write_tasks(tmp_path / "slow.jsonl", [task])
    with remote_agent(tmp_path, os.environ["PATH"]) as (server, port):
        proc = subprocess.run(
            [sys.executable, "-m", "parallel_rollout.cli", "run", "--mode", "web", "--data", str(data),
             "--agent", "py_agents:ScriptedAnswerAgent", "--provider-name", "remote",
             "--vm-address", f"127.0.0.1:{port}", "--reset-command", "none", "--num-rollouts", "1",
             "--task-timeout", "25", "--output-dir", str(tmp_path / "out"), "--run-id", "cut", "--no-progress"],
            capture_output=True, text=True, timeout=300,
            env={**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), str(ROOT / "tests")])})
        left = commands(live_descendants(server.pid))
    records = [json.loads(line) for line in (tmp_path / "out" / "cut" / "results.jsonl").read_text().splitlines()]
    assert [(r["status"], r["failure"]["phase"]) for r in records] == [("task_timeout", "agent")], \
        proc.stderr[-3000:]
    assert left == []


#: run after browser.py's source in the guest: close Chromium through DevTools, wait for it to end
_CLOSE = """
ws = Socket(_devtools("/json/version")["webSocketDebuggerUrl"], timeout=10)
try:
    ws.call("Browser.close")
except Exception:
    pass  # the browser may close the socket before it answers
def running(pid, started):
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            stat = fh.read()
    except OSError:
        return False
    return _started(pid) == started and b"chrom" in stat.split(b")")[0] and stat.rsplit(b")", 1)[1].split()[0] != b"Z"


for pid, started in _ours():
    while running(pid, started):
        time.sleep(0.1)
print("closed")
"""


def test_the_next_episode_on_a_remote_machine_starts_from_a_fresh_browser_profile(tmp_path):
    """No reset clears a remote machine's home (--reset-command none), where the browser's
    profile lives: the local storage and cookies a page set in one episode were the next
    episode's. Each start begins from an empty profile, as a VM's reset gives elsewhere."""
    from test_web import _STATE

    data = write_tasks(tmp_path / "web.jsonl", [web_task("click-button")])
    [task] = load_tasks(str(data), default_mode="web", validators=task_validators())
    with remote_agent(tmp_path, os.environ["PATH"]) as (server, port):
        client = GuestClient(f"http://127.0.0.1:{port}", timeout_s=60)
        first = WebEnv(build_config(dict(mode="web", data=str(data), agent="oracle")))
        first.trajectory_dir = str(tmp_path / "first")
        first.reset(task, client)
        dirty = first._call({"op": "eval", "expression": "localStorage.setItem('carried', 'yes');"
                             "document.cookie = 'carried=yes; max-age=86400; path=/'; " + _STATE}, 30)
        assert json.loads(dirty["value"])["local"] == "yes"
        # Chromium closed as a user closes it writes them to the profile (a kill may lose them)
        closed = client.run_python(f"{driver_source()}\nPORTS.update({first.ports!r})\n{_CLOSE}", timeout=60)
        assert "closed" in closed["output"], closed
        first.evaluate()  # the episode's end: what is left of its browser stops
        log = tmp_path / ".cache" / "web-agents" / f"port-{port}" / "browser.log"
        with log.open("a") as earlier:
            earlier.write("a line of an earlier episode\n")
        second = WebEnv(build_config(dict(mode="web", data=str(data), agent="oracle")))
        second.trajectory_dir = str(tmp_path / "second")
        second.reset(task, client)
        clean = second._call({"op": "eval", "expression": _STATE}, 30)
        second.evaluate()
    assert json.loads(clean["value"]) == {"local": None, "session": None, "cookie": ""}
    # the browser's log holds this episode's lines alone: it grew by every episode the
    # machine ran, and a failed start quoted an earlier episode's tail as its own
    assert "GET /miniwob/click-button.html" in log.read_text() and "earlier episode" not in log.read_text()


def test_a_profile_folder_that_is_a_link_on_the_machine_is_used_as_it_is(tmp_path):
    """A machine whose web profile folder is a link to another disk: the start, which empties
    the profile, does not fail on it (the link is left, and used), and empties the folder it
    links to: what the last episode left there (its cookies) was kept, the link being all
    the emptying tried to remove."""
    data = write_tasks(tmp_path / "web.jsonl", [web_task("click-button")])
    [task] = load_tasks(str(data), default_mode="web", validators=task_validators())
    elsewhere = tmp_path / "big-disk" / "profile"
    (elsewhere / "Default" / "Local Storage").mkdir(parents=True)
    left = elsewhere / "Default" / "Local Storage" / "carried.ldb"  # what the last episode stored
    left.write_text("carried=yes")
    with remote_agent(tmp_path, os.environ["PATH"]) as (server, port):
        profile = tmp_path / ".cache" / "web-agents" / f"port-{port}" / "profile"
        profile.parent.mkdir(parents=True)
        profile.symlink_to(elsewhere)
        env = WebEnv(build_config(dict(mode="web", data=str(data), agent="oracle")))
        env.trajectory_dir = str(tmp_path / "traj")
        first = env.reset(task, GuestClient(f"http://127.0.0.1:{port}", timeout_s=60))
        env.evaluate()
    assert first["utterance"] and profile.is_symlink()
    assert not left.exists()


def test_two_machines_on_one_host_run_their_web_episodes_at_once(tmp_path):
    """Two agents on one host (two remote machines that are the same host) and one home, an
    episode on each at once: each drives its own browser and page, by ports the OS gave. The
    driver's fixed ports (DevTools 9222, the page server 8765) let the second episode's Chromium
    and server fail to bind, and its start went on against the first one's; and the episodes
    of one home kept one pids file and one profile there, so the second's start ended the
    first's browser (its next step failed): each agent now keeps its own."""
    from parallel_rollout.envs.web.oracle import next_action

    data = write_tasks(tmp_path / "web.jsonl", [web_task("click-button", seed=1), web_task("enter-text", seed=2)])
    tasks = load_tasks(str(data), default_mode="web", validators=task_validators())
    with remote_agent(tmp_path, os.environ["PATH"]) as (_, port_a), \
            remote_agent(tmp_path, os.environ["PATH"]) as (_, port_b):
        envs, seen = [], []
        for task, port in zip(tasks, (port_a, port_b)):
            env = WebEnv(build_config(dict(mode="web", data=str(data), agent="oracle")))
            env.trajectory_dir = str(tmp_path / task.id)
            seen.append(env.reset(task, GuestClient(f"http://127.0.0.1:{port}", timeout_s=60)))
            envs.append(env)  # the first episode runs on while the second starts
        assert envs[0].ports["cdp"] != envs[1].ports["cdp"] and envs[0].ports["http"] != envs[1].ports["http"]
        done, rewards = [False, False], [None, None]
        for _ in range(10):  # their turns interleaved, each by the oracle of its own page
            for i, env in enumerate(envs):
                if not done[i]:
                    step = env.step(next_action(env.env_name, seen[i]))
                    seen[i], done[i] = step.observation, step.done
                    if done[i]:  # graded at once: its browser ends while the other's episode goes on
                        rewards[i] = env.evaluate()[0]
        assert done[0] and envs[1].steps > envs[0].steps  # the second went on after the first's end
    assert done == [True, True] and rewards == [1.0, 1.0], seen

