"""The grading wrappers' fronts in a process VM (pool/providers/grading_fronts.py): one folder
made per provider, bound over the host's /usr/bin, with every wrapper's front (as the docker
and qemu images have), where a process VM fronted env, git and python only. A check that ran
``/usr/bin/jq``, ``/usr/bin/curl`` or ``/usr/bin/sqlite3`` by its path reached the system's
program there, which read the answer's ~/.jq, ~/.curlrc or ~/.sqliterc, and a wrong answer
scored 1. Each other program of /usr/bin is a link to the host's under
/opt/system-originals/usr: what runs in the sandbox must work as it did (python's prefix and
executable kept), and what no command may read stays unread there too.
"""

from __future__ import annotations

import shutil
import subprocess

import pytest

from hostile_by_path import BY_PATH_ROWS
from hostile_tasks import SHELL_ROWS, check_finished, check_row, run_table
from parallel_rollout.errors import ProviderUnavailable
from parallel_rollout.guest.client import GuestClient
from parallel_rollout.pool.providers import grading_fronts, sandbox_fs
from parallel_rollout.pool.providers.base import ProviderOptions
from parallel_rollout.pool.providers.process import ProcessProvider
from process_support import base_dir, no_leaked_sandbox  # noqa: F401 - fixtures

pytestmark = pytest.mark.skipif(shutil.which("bwrap") is None, reason="needs bubblewrap")

#: a file of the host's /usr a run hides (ProviderOptions.hidden_files)
HIDDEN = "/usr/lib/os-release"


#: rows whose check runs a fronted program by its path with an environment of its own (python's
#: env={}, bash's exec -c): no PARALLEL_ROLLOUT_GRADING_SINCE reached the front, which ran the
#: system's git (the answer's core.fsmonitor) or env (python3 without the wrappers' rules), and
#: python3 itself run so read the environment alone; each finds the grading command by its
#: session (guest/agent_sessions.py)
CLEARED_ROWS = ("rig_check_git_fsmonitor_env_cleared", "rig_check_git_fsmonitor_exec_c",
                "rig_check_unittest_env_cleared_by_path", "rig_check_unittest_env_empty",
                "rig_check_unittest_sys_executable_env_empty", "rig_check_python_env_empty_home_module",
                "rig_check_python_env_empty_usercustomize", "rig_check_git_fsmonitor_exec_c_by_name",
                "rig_check_git_python3_in_the_repo")


@pytest.fixture(scope="module")
def by_path_table(tmp_path_factory):
    left_out = {row: "not a by-path row" for row in SHELL_ROWS if row not in (*BY_PATH_ROWS, *CLEARED_ROWS)}
    return run_table(tmp_path_factory.mktemp("process"), left_out, provider_name="process")


@pytest.mark.parametrize("name", [*BY_PATH_ROWS, *CLEARED_ROWS])
def test_a_by_path_row_scores_0_in_a_process_vm(by_path_table, name):
    check_row(by_path_table, name)


def test_the_by_path_run_finished(by_path_table):
    check_finished(by_path_table)


#: a python's prefixes and the system's folders of its path (a grading command's has the wrappers' first)
_PREFIXES = "import sys; print(sys.prefix, sys.base_prefix, [p for p in sys.path if p.startswith(\"/usr\")])"


def _run(client: GuestClient, command: str, grading: bool) -> dict:
    return client.execute(command, shell=True, isolated=grading, timeout=60)


@pytest.mark.parametrize("grading", [False, True], ids=["graded code", "grading command"])
def test_the_programs_of_usr_bin_work_as_the_hosts(base_dir, grading):  # noqa: F811 - fixture
    provider = ProcessProvider("fronts", ProviderOptions(boot_timeout_s=20, hidden_files=(HIDDEN,)),
                               base_dir=base_dir)
    python = sandbox_fs.guest_python()
    host = subprocess.run([python, "-c", _PREFIXES],
                          capture_output=True, text=True, check=True).stdout.strip()
    info = provider.start("vm0")
    try:
        client = GuestClient(info.address)
        for command in (python, "python3", "/usr/bin/python3"):
            got = _run(client, f"{command} -c '{_PREFIXES}; print(sys.executable)'", grading)
            assert got["returncode"] == 0, got
            assert got["output"].splitlines() == [host, shutil.which(command, path="/usr/bin") or command], got
        checks = {"git": "git --version && cd /tmp && git init -q r && cd r && git -c user.name=u -c user.email=u@h commit -q --allow-empty -m x "
                         "&& git log --oneline | wc -l",
                  "perl": "perl -MFile::Spec -e 'print File::Spec->catfile(qw(a b)), qq{\\n}'",
                  "make": "printf 'all:\\n\\techo made\\n' > /tmp/Makefile && make -s -C /tmp",
                  "node": "node -e 'console.log(require(\"path\").join(\"a\", \"b\"))'",
                  "pytest": "cd /tmp && printf 'def test_x():\\n    pass\\n' > test_x.py && pytest -q -p no:cacheprovider test_x.py | tail -1",
                  # fronted where the JDK has it: by its name, /usr/bin/java and the JDK's own path
                  "java": "d=$(mktemp -d) && echo 'class C { public static void main(String[] a) { System.out.println(6 * 7); } }'"
                          " > $d/C.java && java $d/C.java && /usr/bin/java $d/C.java && $(readlink -f /usr/bin/java) $d/C.java"}
        wanted = {"git": "1", "perl": "a/b", "make": "made", "node": "a/b", "pytest": "1 passed", "java": "42\n42\n42"}
        for program, command in checks.items():
            if shutil.which(program, path="/usr/bin") is None:
                continue
            got = _run(client, command, grading)
            assert got["returncode"] == 0 and wanted[program] in got["output"], (program, got)
        # jq by its path: the system's for the graded code (it reads ~/.jq), the wrapper for a check
        if shutil.which("jq", path="/usr/bin"):
            got = _run(client, "echo 'def length: 100;' > ~/.jq; echo '[1]' | /usr/bin/jq -e 'length > 3'", grading)
            assert got["returncode"] == (1 if grading else 0), got
        # the grading sessions' folder (guest/agent_sessions.py) is there only while a grading
        # command is: outside grading a front's look is one stat
        got = _run(client, "test ! -e /run/guest/grading", False)
        assert got["returncode"] == 0, got
        # a hidden file is hidden where the fronts' folder shows the host's /usr again too
        again = grading_fronts.HOST_USR + HIDDEN[len("/usr"):]
        got = _run(client, f"test -e {HIDDEN} -a ! -s {HIDDEN} -a -e {again} -a ! -s {again}", grading)
        assert got["returncode"] == 0, got
    finally:
        provider.stop(info)


def test_without_its_folder_a_process_vm_fronts_env_git_and_python(base_dir, monkeypatch, caplog):  # noqa: F811
    """A fronts' folder that cannot be made (a full disk) leaves the sandboxes to bind env's,
    git's and python's fronts file by file, as they did before it, with a warning."""
    def full(scratch, python):
        raise OSError(28, "No space left on device")
    monkeypatch.setattr(grading_fronts, "_make", full)
    provider = ProcessProvider("fronts", ProviderOptions(boot_timeout_s=20), base_dir=base_dir)
    assert "the grading fronts' folder could not be made" in caplog.text
    info = provider.start("vm0")
    try:
        got = _run(GuestClient(info.address), "ls /opt/system-originals; test -x /usr/bin/ls", False)
        assert got["returncode"] == 0 and "env" in got["output"].split() and "jq" not in got["output"].split(), got
    finally:
        provider.stop(info)


#: rows the guest python's encodings front answers (pool/providers/python_front.py): a .pth of the
#: user site, forged pycs of encodings and of the startup modules in a cache folder the answer guessed
ENCODINGS_ROWS = ("rig_check_python_env_empty_pth", "rig_check_python_pycache_prefix_encodings_pyc",
                  "rig_check_python_frozen_off_env_pycache_prefix_startup_pyc")


@pytest.mark.parametrize("name", ENCODINGS_ROWS)
def test_without_its_folder_a_process_vm_keeps_pythons_encodings_front(base_dir, monkeypatch, name):  # noqa: F811
    """A fronts' folder that cannot be made left the guest python's encodings the host's, with
    no front: the answer's .pth (or pyc) ran in a check's python and its os._exit(0) passed the
    check. The encodings front's own folder is made and bound then."""
    def full(scratch, python):
        raise OSError(28, "No space left on device")
    monkeypatch.setattr(grading_fronts, "_make", full)
    provider = ProcessProvider("fronts", ProviderOptions(boot_timeout_s=20), base_dir=base_dir)
    info = provider.start("vm0")
    try:
        client = GuestClient(info.address)
        answer, check, _ = SHELL_ROWS[name]
        for command in answer:
            got = _run(client, command, False)
            assert got["returncode"] == 0, got
        got = _run(client, check, True)
        assert got["returncode"] == 3, got  # the check's own exit: not the answer's 0
    finally:
        provider.stop(info)


def test_without_either_folder_the_process_provider_does_not_start(base_dir, monkeypatch):  # noqa: F811
    """Neither the fronts' folder nor the encodings front's could be made: no sandbox whose check's
    python would run the answer's .pth starts; the provider says why, and where."""
    def full(scratch, *rest):
        raise OSError(28, "No space left on device")
    monkeypatch.setattr(grading_fronts, "_make", full)
    monkeypatch.setattr(grading_fronts, "_encodings_binds", full)
    with pytest.raises(ProviderUnavailable, match=r"nor python's encodings front could be made under .*\.grading-fronts"):
        ProcessProvider("fronts", ProviderOptions(boot_timeout_s=20), base_dir=base_dir)
