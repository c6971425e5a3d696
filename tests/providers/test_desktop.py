"""The desktop in the docker and qemu guest images (osworld mode), as on the process provider.

Each image is built with ``--desktop`` (Debian's Xvfb, openbox, xterm, mousepad, pcmanfm,
xdotool, wmctrl, ffmpeg, AT-SPI) once per session. A VM of it must boot a desktop of the
requested size, show typed text in its screenshot's pixels, come back from a reset without
the task's windows, files or processes, and pass the shipped desktop tasks through a pool.
OSWorld's setup steps reach the shims as on the process provider: ``echo password | sudo -S
CMD`` runs CMD, and ``sudo``, ``vlc`` and ``thunderbird`` are guest/shim/bin's, first on PATH.
tests/test_osworld.py checks the same on the process provider, with every shipped task.
The desktop and its commands run as the VM's uid (64000 in a QEMU guest, one of the
sandbox range per container: sandbox_uids.py) with no capability, out of the agent's reach
(issue 16; tests/test_hostile_desktop.py has the process provider's table).
"""

from __future__ import annotations

import json
import time

import pytest

from conftest import assert_exactly_once
from readme_support import INSTALLED, ROOT, bash, readme_lines
from desktop_support import BIG_TERMINAL, HEIGHT, WIDTH, assert_typing_shows, process_names, wait_process, wait_window
from parallel_rollout.config import build_config
from parallel_rollout.guest.client import GuestClient
from parallel_rollout.pool.providers import images

TASKS = ROOT / "benchmarks" / "osworld_tasks.jsonl"
#: boots under TCG take longer with a desktop; two at once on two cores longer still
BOOT_TIMEOUT_S = {"docker": 60.0, "qemu": 300.0}


def _provider(harness):
    return harness.provider(desktop=True, screen_width=WIDTH, screen_height=HEIGHT,
                            boot_timeout_s=BOOT_TIMEOUT_S[harness.name])


#: an OSWorld setup step as its tasks write them: the password piped into sudo -S
OSWORLD_SUDO = "echo password | sudo -S sh -c 'id -u > ~/by-sudo.txt'"
#: the programs OSWorld's tasks call by name or as /usr/bin/NAME, which the shims wrap
SHIMMED = ("sudo", "vlc", "thunderbird")


def commands_uid(info) -> str:
    """The uid a VM's commands run as: the container's own on docker, 64000 in a QEMU guest."""
    return str(info.private.get("uid", 64000))


def assert_osworld_reaches_the_shims(client: GuestClient, uid: str) -> None:
    """OSWORLD_SUDO runs its command (as the commands' user: the sudo shim's rights are the
    caller's), SHIMMED resolve to guest/shim/bin on the commands' PATH, and a launch of
    /usr/bin/sudo is redirected to the shim and runs."""
    sudo = client.execute(OSWORLD_SUDO, shell=True, timeout=30)
    assert sudo["returncode"] == 0, sudo
    assert client.execute("cat ~/by-sudo.txt", shell=True)["output"].strip() == uid
    found = client.execute(f"for p in {' '.join(SHIMMED)}; do command -v $p; done",
                           shell=True)["output"].split()
    assert found == [f"{images.GUEST_SHIM_BIN}/{name}" for name in SHIMMED], found
    launched = client.launch(["/usr/bin/sudo", "-S", "sh", "-c", "echo ran > ~/launched.txt"])
    assert f"'{images.GUEST_SHIM_BIN}/sudo'" in launched, launched
    deadline = time.monotonic() + 30  # the launch does not wait: poll for what it wrote
    while (ran := client.execute("cat ~/launched.txt", shell=True))["output"] != "ran\n":
        assert time.monotonic() < deadline, ran
        time.sleep(0.5)


@pytest.mark.slow
def test_the_readme_desktop_image_build_command_keeps_the_built_image(desktop):
    """``parallel-rollout image build --provider docker --desktop  # or --provider qemu
    --desktop``, as the README prints it, once the session built the image: nothing to do."""
    [line] = [l for l in readme_lines("Docker and QEMU providers", "", "parallel-rollout image build")
              if "--desktop" in l]
    command, _, alternative = line.partition("#")
    assert alternative.split() == ["or", "--provider", "qemu", "--desktop"], line
    if desktop.name == "qemu":
        command = command.replace("--provider docker --desktop", alternative.split("or", 1)[1])
    assert command.split() == ["parallel-rollout", "image", "build", "--provider", desktop.name, "--desktop"]
    proc = bash(command, ROOT, env=INSTALLED)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "--force rebuilds it" in proc.stderr, proc.stderr[-3000:]
    assert proc.stdout.strip(), "the built image is printed"


def test_a_desktop_vm_shows_typed_text_and_resets_clean(desktop):
    # ~50 s under TCG on qemu, which the desktop fixture keeps for ./dev test --slow
    provider = _provider(desktop)
    info = provider.start("vm0")
    try:
        client = GuestClient(info.address, timeout_s=60.0)
        assert client.screen_size() == (WIDTH, HEIGHT)
        assert {"Xvfb", "openbox"} <= process_names(client)
        client.launch(BIG_TERMINAL)
        wait_window(client, "big", timeout_s=60)
        time.sleep(1.0)
        assert_typing_shows(client, settle_s=1.0)

        # what a task leaves: a file, a process, a window
        client.execute("echo x > ~/leftover.txt", shell=True)
        client.launch(["sleep", "300"])
        wait_process(client, "sleep")
        info = provider.reset(info)
        client = GuestClient(info.address, timeout_s=60.0)
        assert "big" not in client.execute(["wmctrl", "-l"])["output"]
        assert "leftover.txt" not in client.execute("ls -A ~", shell=True)["output"]
        left = process_names(client)
        assert not {"xterm", "sleep"} & left, left
        assert {"Xvfb", "openbox"} <= left
        assert client.screen_size() == (WIDTH, HEIGHT)
    finally:
        provider.stop(info)


def test_the_accessibility_tree_of_a_gtk_app_in_the_image(desktop):
    # ~40-80 s under TCG on qemu, which the desktop fixture keeps for ./dev test --slow
    provider = _provider(desktop)
    info = provider.start("vm0")
    try:
        client = GuestClient(info.address, timeout_s=60.0)
        client.launch(["mousepad"])
        wait_window(client, "Mousepad", timeout_s=60)
        time.sleep(1.0)
        started = time.monotonic()
        tree = client.accessibility_tree(timeout=30.0)
        took = time.monotonic() - started
        assert tree.startswith("<desktop-frame ") and "Mousepad" in tree
        if desktop.name == "docker":
            # mousepad's own AT-SPI nodes (attr:toolkit is never in the window-list form)
            assert '<application name="mousepad"' in tree and 'attr:toolkit="gtk"' in tree
            assert "<menu-bar" in tree
        else:
            # under TCG the walk may outlive its 20 s bound: then the window list, in bounded time
            assert took < 24.0
        # on the same VM (the QEMU desktop's one boot of the default run; ~2 s under TCG)
        assert_osworld_reaches_the_shims(client, commands_uid(info))
    finally:
        provider.stop(info)


#: from a desktop command: the name, uid and effective capabilities of every process in the
#: VM (from /proc: images need not have ps), its own first
WHO_RUNS = ("for s in /proc/self/status /proc/[0-9]*/status; do awk '/^Name:/{n=$2} "
            "/^Uid:/{u=$3} /^CapEff:/{c=$2} END{print n, u, c}' $s 2>/dev/null; done")


@pytest.mark.parametrize("desktop", ["docker", pytest.param("qemu", marks=pytest.mark.slow)],
                         indirect=True)
def test_a_desktop_and_its_commands_are_unprivileged_and_spare_the_agent(desktop):
    provider = _provider(desktop)
    info = provider.start("vm0")
    try:
        client = GuestClient(info.address, timeout_s=60.0)
        agent = client.health()["pid"]
        rows = client.execute(WHO_RUNS, shell=True)["output"].split("\n")
        seen = [row.split() for row in rows if len(row.split()) == 3]
        uid = commands_uid(info)
        assert seen[0][1:] == [uid, "0000000000000000"], seen[0]  # the command itself
        by_name = {name: (uid, caps) for name, uid, caps in seen[1:]}
        for name in ("Xvfb", "openbox", "dbus-daemon"):  # the desktop is the same user's
            assert by_name.get(name) == (uid, "0000000000000000"), (name, by_name)
        home = client.execute("id -un; test -O ~ && touch ~/mine", shell=True)  # its own home
        assert (home["returncode"], home["output"].strip()) == (0, "user"), home
        signal = client.execute(f"kill -9 {agent}", shell=True)
        assert signal["returncode"] != 0, signal
        client.execute("kill -9 -1", shell=True, timeout=30)  # all it may signal
        assert client.health()["status"] == "ok"
        assert client.health()["pid"] == agent
    finally:
        provider.stop(info)


def _shipped(snapshots_once: bool) -> list[dict]:
    tasks = [json.loads(line) for line in TASKS.read_text().splitlines() if line.strip()]
    if not snapshots_once:
        return tasks
    first: dict[str, dict] = {}
    for task in tasks:
        first.setdefault(task["snapshot"], task)
    return list(first.values())


@pytest.mark.slow
def test_the_oracle_passes_shipped_desktop_tasks_through_a_shared_pool(desktop, tmp_path):
    from parallel_rollout.runner import Runner

    # ~200 s under TCG on qemu

    # docker: every shipped task (N=3, M=2); qemu under TCG: one task of each kind (terminal, editor,
    # file manager, LibreOffice) through one VM, reset between them
    under_tcg = desktop.name == "qemu"
    tasks = _shipped(snapshots_once=under_tcg)
    data = tmp_path / "tasks.jsonl"
    data.write_text("".join(json.dumps(t) + "\n" for t in tasks))
    (tmp_path / "osworld_files").symlink_to(TASKS.with_name("osworld_files"))  # their inputs
    flags = dict(mode="osworld", data=str(data), agent="oracle", provider_name=desktop.name,
                 num_rollouts=2 if under_tcg else 3, num_vms=1 if under_tcg else 2,
                 use_vm_pool=True, output_dir=str(tmp_path / "out"),
                 run_id=desktop.new_run_id(), progress=False, screen_width=WIDTH,
                 screen_height=HEIGHT, action_space="computer_13",
                 boot_timeout_s=BOOT_TIMEOUT_S[desktop.name])
    outcome = Runner(build_config(flags)).run()
    assert outcome.exit_code == 0, outcome.message
    finals = assert_exactly_once(outcome.run_dir, {f"{t['id']}#0" for t in tasks})
    failed = {k: (r["status"], r.get("eval"), r.get("failure")) for k, r in finals.items()
              if r["status"] != "success"}
    assert not failed
    assert outcome.summary["vm"]["resets"] >= len(tasks) - 1
