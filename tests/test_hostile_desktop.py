"""Hostile code in a desktop VM of the process provider (osworld mode): the desktop is the
same boundary as any VM (issue 16). Every row is an attack run twice, as an agent's command
(``/execute``) and inside an app the desktop starts (``/setup/launch``, as a task's config
starts its apps); each must fail: no capability, a non-root uid, no new user namespace, no
host secret, no remount, no signal to the agent. Then, seen from the host: every process of
the desktop (the session bus, Xvfb, openbox, AT-SPI, the apps) runs as an unprivileged user
with no capability, and as root the agent keeps only ``AGENT_CAPS``.

One VM serves the table (a module-scoped fixture), one more the X server: ~7 s on 2 cores.
"""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path

import pytest

from parallel_rollout.errors import ConfigError, VMError
from parallel_rollout.guest.client import GuestClient
from parallel_rollout.pool.providers import process
from parallel_rollout.pool.providers.sandbox_argv import AGENT_CAPS
from parallel_rollout.pool.providers.base import ProviderOptions
from parallel_rollout.pool.providers.verify import namespace_processes

pytestmark = pytest.mark.skipif(
    not all(shutil.which(p) for p in ("bwrap", "Xvfb", "openbox", "xterm", "dbus-daemon")),
    reason="the desktop packages are missing (./dev installs them)")

IS_ROOT = os.geteuid() == 0
#: exits 0 when any of io_uring's or the new mount API's calls reaches the kernel (x86_64)
NEW_SYSCALLS_PROBE = ("import ctypes; libc = ctypes.CDLL(None, use_errno=True); reached = []\n"
                      "for number in (425, 426, 427, 428, 429, 430, 431, 432, 433, 442):\n"
                      "    ctypes.set_errno(0)\n"
                      "    if libc.syscall(number, -1, 0, 0, 0, 0) >= 0 or ctypes.get_errno() != 1:\n"
                      "        reached.append(number)\n"
                      "raise SystemExit(0 if reached else 1)")
#: name -> a shell probe that exits 0 only if the attack worked
ROWS = {
    "capabilities": "grep -Eq '^Cap(Eff|Prm|Inh|Amb):[[:space:]]*0*[1-9a-f]' /proc/self/status",
    "root_uid": 'test "$(id -u)" = 0',
    "nested_userns": "unshare -U true",
    "nested_userns_as_root": "unshare -Ur true",
    "read_shadow": "cat /etc/shadow /etc/gshadow | grep -q .",
    "remount_readonly": "mount -o remount,bind,rw /usr",
    # as root the agent is another user; a non-root runner's agent shares the commands'
    # uid (the user namespace's one): signalling it is possible there, and costs the attempt
    "signal_agent": "kill -0 2" if IS_ROOT else None,
    # OSWorld's sudo (guest/shim/bin/sudo) runs the command with the caller's rights only
    "sudo_root": "echo password | sudo -S sh -c 'test \"$(id -u)\" = 0'",
    # the seccomp filter of every VM, a desktop's too (issue 24): io_uring and the new mount
    # API refused (any answer but EPERM reached the kernel), Linux AIO's io_setup too
    "io_uring_and_mount_api": f"python3 -c '{NEW_SYSCALLS_PROBE}'",
    "aio_contexts": "python3 -c 'import ctypes; c = ctypes.c_ulong(0); "
                    "raise SystemExit(ctypes.CDLL(None).syscall(206, 128, ctypes.byref(c)))'",
}
#: what OSWorld's setup steps do with sudo and must still work: a folder in the home, the user's
SUDO_IN_THE_HOME = "echo password | sudo -S mkdir ~/Desktop/by-sudo && test -O ~/Desktop/by-sudo"
#: what a healthy desktop runs besides the agent and the namespace's init (bwrap)
SESSION = {"Xvfb", "openbox", "dbus-daemon", "at-spi-bus-laun", "at-spi2-registr"}


@pytest.fixture(scope="module")
def desktop() -> dict:
    """One desktop VM, attacked by every row both ways, with an xterm and mousepad open; what
    came of it, read before the VM is stopped (the leak check runs after every test)."""
    provider = process.ProcessProvider("hostile-desktop", ProviderOptions(
        desktop=True, screen_width=800, screen_height=600))
    info = provider.start("vm0")
    try:
        client = GuestClient(info.address)
        rows = [name for name, probe in ROWS.items() if probe]
        for name in rows:  # launched first: they run while the commands do
            record = f"~/launched-{name}.rc"
            client.launch(["sh", "-c", f"{ROWS[name]}; echo $? > {record}.tmp; mv {record}.tmp {record}"])
        commands = {name: client.execute(ROWS[name], shell=True, timeout=30) for name in rows}
        sudo = client.execute(SUDO_IN_THE_HOME, shell=True, timeout=30)
        launched = {name: _wait_record(client, f"~/launched-{name}.rc") for name in rows}
        # an app of each kind: a terminal with its shell, and a GTK app (on the AT-SPI bus)
        client.launch(["xterm", "-T", "hostile"])
        wanted = SESSION | {"xterm", "bash"}
        if shutil.which("mousepad"):
            client.launch(["mousepad"])
            wanted.add("mousepad")
        deadline = time.monotonic() + 30
        while True:
            processes = {pid: (comm, cmdline, _status(pid))
                         for pid, comm, cmdline in namespace_processes(info.private["init_pid"])}
            if wanted <= {comm for comm, _, _ in processes.values()} or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        agent = client.health()["pid"]
        # last: every process the user may signal (as root that spares the agent)
        client.execute("kill -9 -1", shell=True, timeout=30)
        try:
            after_kill = client.health()["status"]
        except VMError as exc:
            after_kill = str(exc)
        return {"commands": commands, "launched": launched, "processes": processes, "sudo": sudo,
                "wanted": wanted, "init": info.private["init_pid"], "agent": agent,
                "after_kill": after_kill}
    finally:
        provider.stop(info)


def _wait_record(client: GuestClient, record: str) -> str:
    """The exit status a launched probe wrote to ``record``."""
    deadline = time.monotonic() + 30
    while (done := client.execute(f"cat {record}", shell=True))["returncode"] != 0:
        assert time.monotonic() < deadline, f"the launched probe never wrote {record}"
        time.sleep(0.1)
    return done["output"].strip()


@pytest.mark.parametrize("name", [name for name, probe in ROWS.items() if probe])
def test_an_attack_from_a_desktop_command_fails(desktop, name):
    done = desktop["commands"][name]
    assert done["returncode"] not in (0, None), (name, done)


@pytest.mark.parametrize("name", [name for name, probe in ROWS.items() if probe])
def test_an_attack_from_an_app_the_desktop_launches_fails(desktop, name):
    assert desktop["launched"][name] not in ("", "0"), (name, desktop["launched"][name])


@pytest.mark.skipif(not IS_ROOT, reason="a non-root runner's agent shares the commands' uid")
def test_kill_everything_from_a_desktop_spares_the_agent(desktop):
    assert desktop["after_kill"] == "ok", desktop["after_kill"]


def test_sudo_of_osworlds_setup_steps_works_in_the_home(desktop):
    assert desktop["sudo"]["returncode"] == 0, desktop["sudo"]


def test_every_process_of_the_desktop_is_unprivileged(desktop):
    processes = desktop["processes"]
    names = {comm for comm, _, _ in processes.values()}
    assert desktop["wanted"] <= names, f"missing {desktop['wanted'] - names}: {sorted(names)}"
    agents = [pid for pid, (comm, cmdline, _) in processes.items()
              if comm == "python3" and "server.py" in cmdline]
    assert len(agents) == 1, agents
    assert desktop["agent"] == 2  # its pid inside, which the signal_agent row aims at
    privileged = [f"{pid} {comm} uid {status['Uid']} CapEff {status['CapEff']}"
                  for pid, (comm, _, status) in processes.items()
                  if status and pid not in (desktop["init"], agents[0])
                  and (status["Uid"].split()[1] == "0" or int(status["CapEff"], 16)
                       or int(status["CapPrm"], 16))]
    assert not privileged, privileged
    if IS_ROOT:
        assert int(processes[agents[0]][2]["CapEff"], 16) == _mask(AGENT_CAPS)


def test_an_x_server_of_the_users_cannot_take_the_agent_down():
    # the X server is the user's: a command replaces it with one smaller than the desktop,
    # so reading the desktop's size is an X error, on which libX11 exits its process; that
    # process is the screenshot's child, never the agent (which then answers 500)
    provider = process.ProcessProvider("hostile-x", ProviderOptions(
        desktop=True, screen_width=800, screen_height=600))
    info = provider.start("vm0")
    try:
        client = GuestClient(info.address)
        replaced = client.execute(
            "pkill -x Xvfb; while [ -e /tmp/.X11-unix/X0 ]; do sleep 0.05; done;"
            " setsid Xvfb :0 -screen 0 320x240x24 -nolisten tcp >/dev/null 2>&1 </dev/null &"
            " for i in $(seq 100); do [ -S /tmp/.X11-unix/X0 ] && exit 0; sleep 0.1; done; exit 1",
            shell=True, timeout=30)
        assert replaced["returncode"] == 0, replaced
        with pytest.raises(VMError, match="screenshot failed"):
            client.screenshot()
        assert client.health()["status"] == "ok"
    finally:
        provider.stop(info)


@pytest.mark.skipif(not IS_ROOT, reason="as another user the desktop shares the runner's uid")
def test_guest_files_the_desktops_user_cannot_read_are_a_clear_error(tmp_path, monkeypatch):
    shim = tmp_path / "shim"
    (shim / "bin").mkdir(parents=True)
    (shim / "bin" / "vlc").write_text("#!/bin/sh\n")
    (shim / "bin" / "vlc").chmod(0o700)  # a checkout made under umask 077
    (shim / "pyautogui.py").write_text("")
    (shim / "pyautogui.py").chmod(0o644)
    monkeypatch.setattr(process, "SHIM_DIR", shim)  # the readability check's list
    with pytest.raises(ConfigError, match=r"cannot read the guest's .*shim/bin/vlc \(0o700\).*"
                                          r"chmod -R o\+rX"):
        process.ProcessProvider("hostile-modes", ProviderOptions(desktop=True))
    (shim / "bin" / "vlc").chmod(0o755)
    process.ProcessProvider("hostile-modes", ProviderOptions(desktop=True))


def _status(pid: int) -> dict[str, str]:
    try:
        lines = Path(f"/proc/{pid}/status").read_text().splitlines()
    except OSError:
        return {}  # exited meanwhile
    return {key: value.strip() for key, _, value in (line.partition(":") for line in lines)}


#: capability numbers (linux/capability.h) of the names AGENT_CAPS uses
_CAP_NUMBERS = {"CAP_CHOWN": 0, "CAP_DAC_OVERRIDE": 1, "CAP_FOWNER": 3, "CAP_KILL": 5,
                "CAP_SETGID": 6, "CAP_SETUID": 7, "CAP_SETPCAP": 8}


def _mask(names) -> int:
    return sum(1 << _CAP_NUMBERS[name] for name in names)


def test_the_probes_can_succeed_outside_the_sandbox():
    # the probes detect what they claim: on the host as root, the capability, uid and
    # shadow probes succeed (so a sandbox that leaked those would fail the rows above)
    if not IS_ROOT:
        pytest.skip("the host's own root is what the probes detect")
    import subprocess

    names = ["capabilities", "root_uid", "io_uring_and_mount_api", "aio_contexts"] + \
        (["read_shadow"] if _readable("/etc/shadow") else [])
    for name in names:
        assert subprocess.run(["sh", "-c", ROWS[name]], timeout=10).returncode == 0, name


def _readable(path: str) -> bool:
    try:
        return bool(Path(path).read_bytes())
    except OSError:
        return False
