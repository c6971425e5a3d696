"""The census of the programs OSWorld's tasks run in a guest (``envs/osworld/programs.py``,
``scripts/osworld_programs.py``): how programs are read out of steps, getters, shell scripts
and the oracle's references, and that the desktop image has every one that Debian packages
(gsettings was missing from the docker and qemu images while the process provider, which
sees the host's /usr, had it: the same task passed on one provider and failed on the others).
"""

from __future__ import annotations

import io
import subprocess
import sys
import tarfile

import pytest

from conftest import OSWORLD_EXAMPLES, ROOT
from parallel_rollout.envs.osworld import programs
from parallel_rollout.envs.osworld.references import references
from parallel_rollout.pool.providers import images

EXAMPLES = OSWORLD_EXAMPLES
DESKTOP_TREE = images.rootfs_tarball_path(**images.guest_recipe(desktop=True))


@pytest.mark.parametrize("script, expected", [
    ("gsettings set org.gnome.desktop.session idle-delay 0", {"gsettings"}),
    ("export DBUS_SESSION_BUS_ADDRESS='unix:path=/run/user/1000/bus'\n"
     "gsettings get org.gnome.shell favorite-apps", {"gsettings"}),
    # OSWorld's 3ce045a0: bc inside "$(…)" inside double quotes, gsettings after timeout
    ("""S=$(timeout 10 gsettings get a b 2>/dev/null | grep -oE '[0-9]+' | head -1); """
     """if [ -n "$S" ] && [ "$(echo "$S >= 1.2" | bc -l 2>/dev/null || echo 0)" = "1" ]; """
     """then echo yes; else echo no; fi""", {"timeout", "gsettings", "grep", "head", "echo", "bc"}),
    ("echo pw | sudo -S -u root systemctl restart x && sudo apt-get install -y jq",
     {"echo", "sudo", "systemctl", "apt-get"}),
    ("for f in a b; do cp $f /tmp; done", {"cp"}),
    ("cd ~/x && ./run.sh > out.txt 2>&1; export X; history -c; $EDITOR f", set()),
    ("exec code --foo `which vlc`", {"code", "which"}),
    ("printf 'a\nb' | xsel -ib # copy", {"printf", "xsel"}),
])
def test_shell_programs_are_the_first_words_of_commands(script, expected):
    assert programs.shell_programs(script) == expected


def test_task_programs_reads_steps_and_command_getters():
    task = {"config": [
        {"type": "execute", "parameters": {"command": ["gsettings", "set", "a", "b", "1"]}},
        {"type": "launch", "parameters": {"command": ["google-chrome", "--remote-debugging-port=1337"]}},
        {"type": "execute", "parameters": {"command": ["/bin/bash", "-c", "zip -qr a.zip a && rm -r a"]}},
        {"type": "command", "parameters": {"command": "unzip -o x.zip", "shell": True}},
        {"type": "download", "parameters": {"files": [{"path": "~/x", "url": "u"}]}}],
        "evaluator": {"postconfig": [{"type": "launch", "parameters": {"command": "nautilus"}}],
                      "result": [{"type": "vm_command_line", "command": "pactl list | head", "shell": True},
                                 {"type": "vm_file", "path": "~/x"}],
                      "expected": {"type": "vm_command_error", "command": ["git", "status"]}}}
    assert programs.task_programs(task) == {
        "gsettings": {"execute"}, "google-chrome": {"launch"}, "/bin/bash": {"execute"},
        "zip": {"execute"}, "rm": {"execute"}, "unzip": {"command"}, "nautilus": {"launch"},
        "pactl": {"getter"}, "head": {"getter"}, "git": {"getter"}}


def test_reference_programs_reads_subprocess_calls():
    code = ("import os, subprocess\nsubprocess.run('pkill -x vlc; sleep 1', shell=True)\n"
            "subprocess.run(['wmctrl', '-l'], capture_output=True)\n"
            "subprocess.run(['bash', '-i'], input='gio trash --restore trash:///x\\nexit\\n', text=True)\n"
            "os.system('xdg-mime default vlc.desktop video/mp4')\nprint(os.path.join('a', 'b'))")
    assert programs.reference_programs(code) == {"pkill", "sleep", "wmctrl", "bash", "gio", "xdg-mime"}
    assert programs.reference_programs("DONE") == set()
    assert programs.reference_programs("not python (") == set()
    gsettings = [e for e in references().values() if e["why"] == "gsettings"]
    assert len(gsettings) == 4
    assert all(programs.reference_programs(e["reference"][0]) == {"gsettings"} for e in gsettings)


def test_image_programs_and_locate_follow_the_guest_path(tmp_path):
    tarball = tmp_path / "tree.tar"
    with tarfile.open(tarball, "w") as archive:
        for name, kind in [("./bin", "usr/bin"), ("./usr/bin/", None), ("./usr/bin/gsettings", ""),
                           ("./usr/bin/chromium", ""), ("./usr/sbin/gsettings", ""),
                           ("./usr/share/doc/git", "")]:
            entry = tarfile.TarInfo(name)
            if kind:
                entry.type, entry.linkname = tarfile.SYMTYPE, kind
            elif kind is None:
                entry.type = tarfile.DIRTYPE
            archive.addfile(entry, io.BytesIO(b""))
    image = programs.image_programs(tarball)
    assert image["gsettings"] == "/usr/sbin/gsettings"  # /usr/sbin comes first on PATH
    assert image["/bin/gsettings"] == image["/usr/bin/gsettings"] == "/usr/bin/gsettings"
    assert "git" not in image
    assert programs.locate("gsettings", {"getter"}, image) == "/usr/sbin/gsettings"
    assert programs.locate("/usr/bin/vlc", {"launch"}, image, {"vlc"}) == "shim"
    assert programs.locate("google-chrome", {"launch"}, image) == "alias chromium"
    assert programs.locate("google-chrome", {"launch", "execute"}, image) is None
    assert programs.locate("git", {"execute"}, image) is None
    assert programs.guest_shims() >= {"sudo", "vlc", "thunderbird"}


@pytest.mark.skipif(EXAMPLES is None, reason="needs OSWorld's evaluation_examples (shared/osworld)")
@pytest.mark.skipif(not DESKTOP_TREE.exists(), reason="the desktop image is not built "
                    "(parallel-rollout image build --provider docker --desktop)")
def test_the_desktop_image_has_every_program_osworld_runs_that_debian_packages():
    """The census of test_all against the desktop recipe's tree: nothing missing but what
    LEFT_OUT leaves out, saying why (VS Code, nautilus, timedatectl). Before the image had
    DESKTOP_TOOLS it failed: gsettings, gio, bc, zip, unzip, jq, git, pip … missing."""
    proc = subprocess.run([sys.executable, str(ROOT / "scripts" / "osworld_programs.py"), str(EXAMPLES),
                           "--missing"], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    assert "gsettings" not in proc.stdout
    assert "code " in proc.stdout and "(expected: VS Code is not in Debian)" in proc.stdout
