"""The guest agent's folder of a process sandbox: its modules compiled ahead once per source
into one read-only folder (with the grading wrappers) that a boot binds, readable by the
commands' user whatever the umask, pruned after a week without a boot, and the ways a boot
does without it (a desktop sandbox, a noexec base, a folder that cannot be made again).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from parallel_rollout.guest.client import GuestClient
from parallel_rollout.pool.providers.base import ProviderOptions
from parallel_rollout.pool.providers.process import ProcessProvider
from process_support import base_dir, no_leaked_sandbox, provider, snapshot, vm  # noqa: F401 - fixtures

pytestmark = pytest.mark.skipif(shutil.which("bwrap") is None, reason="needs bubblewrap")


def test_the_agent_loads_its_modules_compiled_ahead_from_one_read_only_folder(provider, vm):
    """A boot imports the agent's modules from the bytecode compiled once by the guest's
    python, instead of compiling them again at every reset; the modules, their bytecode and
    the grading wrappers are one bind (a mount the fewer for bwrap to make and read back),
    read-only, and the commands' user can run the wrappers."""
    folder = provider._spec.agent_dir
    assert folder is not None and folder.parent == provider.base_dir.resolve() / ".agent-bytecode"
    client = GuestClient(vm.address)
    probe = ("python3 -v -I -S -c 'import sys; sys.path.insert(0, \"/opt/parallel-rollout\"); "
             "import agent_http, agent_commands' 2>&1 | grep '^# code object from'; "
             "touch /opt/parallel-rollout/__pycache__/x /opt/parallel-rollout/grading_bin/x 2>&1; "
             "echo '{\"a\": 1}' | PATH=/opt/parallel-rollout/grading_bin:$PATH jq -c .a")
    result = client.execute(probe, shell=True, timeout=30)
    for name in ("agent_http", "agent_commands"):
        assert f"'/opt/parallel-rollout/__pycache__/{name}.cpython-" in result["output"], result
    assert result["output"].count("Read-only file system") == 2, result
    assert result["output"].rstrip().endswith("\n1"), result
    mounts = Path(f"/proc/{vm.private['init_pid']}/mountinfo").read_text().splitlines()
    agent_mounts = [line.split()[4] for line in mounts if line.split()[4].startswith("/opt/parallel-rollout")]
    assert agent_mounts == ["/opt/parallel-rollout"], agent_mounts


def _agent_files(*modules: Path, wrappers: Path | None = None):
    from parallel_rollout.pool.providers import agent_folder, sandbox_fs

    return agent_folder.AgentFiles(sandbox_fs.guest_python(), modules, (), (wrappers,) if wrappers else ())


def test_the_agent_folder_is_made_once_per_source_and_skipped_when_it_cannot_be(tmp_path, caplog):
    from parallel_rollout.pool.providers import agent_folder

    source = tmp_path / "mod.py"
    source.write_text("X = 1\n")
    first = agent_folder.prepare(_agent_files(source), tmp_path)
    assert sorted(p.name for p in first.iterdir()) == ["__pycache__", "mod.py"]
    [made] = (first / "__pycache__").iterdir()
    assert made.name.startswith("mod.cpython-") and made.name.endswith(".pyc")
    assert (first / "mod.py").read_text() == "X = 1\n"
    assert agent_folder.prepare(_agent_files(source), tmp_path) == first
    source.write_text("X = 22\n")  # a changed source: a new folder, the old one untouched
    second = agent_folder.prepare(_agent_files(source), tmp_path)
    assert second != first and (first / "mod.py").read_text() == "X = 1\n"
    source.write_text("def broken(:\n")
    assert agent_folder.prepare(_agent_files(source), tmp_path) is None
    assert "could not be made" in caplog.text and "SyntaxError" in caplog.text
    assert sorted(p.name for p in (tmp_path / ".agent-bytecode").iterdir()) == sorted([first.name, second.name])


def test_boots_at_once_and_a_scratch_an_interrupted_run_left_make_the_folder_all_the_same(tmp_path, caplog):
    """The pool boots its VMs in threads of one process: with the folder gone, each made it in
    one scratch named by the pid, so the second failed (File exists) and removed the first's
    as it cleaned up: every boot but one, or all, bound the package's files and the provider
    kept them so; and a run() interrupted while it made it left that scratch to the next
    run() of the interpreter, which warned and did without it."""
    import threading

    from parallel_rollout.pool.providers import agent_folder

    source = tmp_path / "mod.py"
    source.write_text("X = 1\n")
    files = _agent_files(source)
    folder = tmp_path / ".agent-bytecode" / files.key()
    folder.with_name(f".{folder.name}.{os.getpid()}").mkdir(parents=True)  # an interrupted run's
    made: list = []
    threads = [threading.Thread(target=lambda: made.append(agent_folder.use(folder, files))) for _ in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert made == [folder] * 3 and "could not be made" not in caplog.text, (made, caplog.text)
    assert sorted(p.name for p in (folder / "__pycache__").iterdir())[0].startswith("mod.cpython-")
    assert [p.name for p in folder.parent.iterdir() if p != folder] == [f".{folder.name}.{os.getpid()}"]


def test_the_agent_folder_is_readable_by_others_whatever_the_umask(tmp_path):
    """The commands' user reads the modules and runs the wrappers: the folder's modes are
    0755 and 0644 by the sources' run bits, whatever the runner's umask (the checkout's own
    modes are checked when the provider starts: test_grading_out_of_reach.py)."""
    from parallel_rollout.pool.providers import agent_folder

    source, wrappers = tmp_path / "mod.py", tmp_path / "grading_bin"
    source.write_text("X = 1\n")
    wrappers.mkdir()
    (wrappers / "jq").write_text("#!/bin/sh\n")
    (wrappers / "wgetrc").write_text("")
    os.chmod(source, 0o600), os.chmod(wrappers / "jq", 0o700), os.chmod(wrappers / "wgetrc", 0o600)
    old = os.umask(0o077)
    try:
        folder = agent_folder.prepare(_agent_files(source, wrappers=wrappers), tmp_path)
    finally:
        os.umask(old)
    modes = {str(p.relative_to(folder)): p.stat().st_mode & 0o777 for p in [folder, *folder.rglob("*")]}
    pyc = next(name for name in modes if name.endswith(".pyc"))
    assert modes == {".": 0o755, "mod.py": 0o644, "__pycache__": 0o755, pyc: 0o644,
                     "grading_bin": 0o755, "grading_bin/jq": 0o755, "grading_bin/wgetrc": 0o644}


def test_agent_folders_no_boot_used_for_a_week_are_removed(tmp_path):
    from parallel_rollout.pool.providers import agent_folder

    folders = tmp_path / ".agent-bytecode"
    stale, recent = folders / "0123456789abcdef", folders / "fedcba9876543210"
    for folder, age_days in ((stale, 8), (recent, 6)):
        folder.mkdir(parents=True)
        (folder / "x.pyc").write_bytes(b"")
        then = time.time() - age_days * 86400
        os.utime(folder, (then, then))
    source = tmp_path / "mod.py"
    source.write_text("X = 1\n")
    made = agent_folder.prepare(_agent_files(source), tmp_path)
    assert sorted(folders.iterdir()) == sorted([made, recent])


def test_a_desktop_sandbox_binds_the_agent_file_by_file_with_the_folders_bytecode(tmp_path):
    """The folder is read-only, so a desktop's modules cannot be bound into it: a desktop
    sandbox binds the agent's files one by one beside them, with the folder's bytecode."""
    import dataclasses

    from parallel_rollout.pool.providers import sandbox_argv

    spec = sandbox_argv.SandboxSpec(bwrap="bwrap", python="/usr/bin/python3", agent_dir=tmp_path,
                                    snapshot=None, desktop=False, screen="1280x720",
                                    memory_mb=None, limit_as=None, limit_nproc=None)
    binds = sandbox_argv.agent_binds(spec)
    assert binds == ["--ro-bind", str(tmp_path), "/opt/parallel-rollout"]
    for desktop, agent_dir in ((True, tmp_path), (False, None)):
        binds = sandbox_argv.agent_binds(dataclasses.replace(spec, desktop=desktop, agent_dir=agent_dir))
        targets = binds[2::3]
        assert "/opt/parallel-rollout/server.py" in targets and "/opt/parallel-rollout/grading_bin" in targets
        assert ("/opt/parallel-rollout/__pycache__" in targets) == (agent_dir is not None)
        assert "/opt/parallel-rollout" not in targets


@pytest.mark.skipif(os.geteuid() != 0, reason="mounting a noexec tmpfs takes root")
def test_on_a_noexec_base_the_agent_is_bound_file_by_file_and_its_wrappers_run(base_dir):
    """A hardened /tmp is mounted noexec, and a bind keeps that: the grading wrappers in the
    agent's folder could not run there. The sandbox binds the agent's files (and the
    wrappers) from the package instead, with the folder's bytecode."""
    noexec = base_dir / "noexec"
    noexec.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "noexec,mode=0700", "tmpfs", str(noexec)], check=True)
    try:
        provider = ProcessProvider("run1", ProviderOptions(boot_timeout_s=10), base_dir=noexec / "base")
        assert provider._spec.agent_dir is not None
        vm = provider.start("vm0")
        try:
            mounts = Path(f"/proc/{vm.private['init_pid']}/mountinfo").read_text().splitlines()
            agent_mounts = {line.split()[4] for line in mounts if line.split()[4].startswith("/opt/parallel-rollout")}
            assert {"/opt/parallel-rollout/server.py", "/opt/parallel-rollout/__pycache__",
                    "/opt/parallel-rollout/grading_bin"} <= agent_mounts, agent_mounts
            result = GuestClient(vm.address).execute(
                "echo '{\"a\": 1}' | PATH=/opt/parallel-rollout/grading_bin:$PATH jq -c .a; "
                "python3 -v -I -S -c 'import sys; sys.path.insert(0, \"/opt/parallel-rollout\"); "
                "import agent_http' 2>&1 | grep '^# code object from .*agent_http'", shell=True, timeout=30)
            assert result["output"].startswith("1\n"), result
            assert "/opt/parallel-rollout/__pycache__/agent_http.cpython-" in result["output"], result
        finally:
            provider.stop(vm)
    finally:
        subprocess.run(["umount", "-l", str(noexec)], check=False)


def test_a_boot_marks_its_agent_folder_used_and_makes_it_again_when_it_went(provider):
    folder = provider._spec.agent_dir
    shutil.rmtree(folder)  # pruned by another provider after a week of no boot, say
    vm = provider.start("again")
    try:
        assert folder.is_dir() and provider._spec.agent_dir == folder
        result = GuestClient(vm.address).execute(
            "python3 -v -I -S -c 'import sys; sys.path.insert(0, \"/opt/parallel-rollout\"); "
            "import agent_http' 2>&1 | grep '^# code object from'", shell=True, timeout=30)
        assert "'/opt/parallel-rollout/__pycache__/agent_http.cpython-" in result["output"], result
        then = time.time() - 86400
        os.utime(folder, (then, then))
        provider.stop(provider.start("marks"))
        assert folder.stat().st_mtime > time.time() - 60
    finally:
        provider.stop(vm)


def test_a_boot_whose_agent_folder_cannot_be_made_again_binds_the_packages_files(provider, monkeypatch):
    from parallel_rollout.pool.providers import agent_folder

    monkeypatch.setattr(agent_folder, "use", lambda folder, files: None)
    vm = provider.start("plain")
    try:
        assert provider._spec.agent_dir is None
        result = GuestClient(vm.address).execute(
            "ls /opt/parallel-rollout/grading_bin/jq && test ! -e /opt/parallel-rollout/__pycache__",
            shell=True, timeout=30)
        assert result["returncode"] == 0, result
    finally:
        provider.stop(vm)
