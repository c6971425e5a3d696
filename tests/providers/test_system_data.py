"""The system programs' data of /var in a process VM: one copy, bound at /var in one bind
(``pool/providers/system_data.py``), with the same files the host has; made again when it
went; the folders bound one by one when it cannot be made."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import psutil
import pytest

from parallel_rollout.guest.client import GuestClient
from parallel_rollout.pool.providers import sandbox_fs, system_data
from parallel_rollout.pool.providers.base import ProviderOptions
from parallel_rollout.pool.providers.process import ProcessProvider
from process_support import base_dir, no_leaked_sandbox  # noqa: F401 - fixtures

pytestmark = pytest.mark.skipif(not sandbox_fs.system_data_found(), reason="this host has none of /var's system data")


def _listing(top: str) -> list[tuple[str, int, str]]:
    """Every entry under ``top``: its path below it, size (files) and link target."""
    rows = []
    for root, dirs, files in os.walk(top):
        for name in sorted(dirs + files):
            path = os.path.join(root, name)
            link = os.readlink(path) if os.path.islink(path) else ""
            size = os.lstat(path).st_size if os.path.isfile(path) and not link else 0
            rows.append((os.path.relpath(path, top), size, link))
    return sorted(rows)


def _in_vm(info, command: str) -> str:
    result = GuestClient(info.address).execute(command, shell=True)
    assert result["returncode"] == 0, result
    return result["output"]


def _argv_of(info) -> list[str]:
    """The bwrap command line of the VM's sandbox: its init's, or the nearest parent's."""
    init = psutil.Process(info.private["init_pid"])
    return next(proc.cmdline() for proc in (init, *init.parents()) if proc.name() == "bwrap")


def test_a_vm_sees_the_hosts_system_data_through_one_bind(base_dir):
    """The sandbox binds /var once (the copy), none of the folders one by one, and lists the
    same entries, sizes and links in each as the host; a program reads them: aspell loads its
    dictionary through /usr/lib/aspell's links into /var/lib/aspell and names misspelt words."""
    provider = ProcessProvider("data", ProviderOptions(boot_timeout_s=20), base_dir=base_dir)
    info = provider.start("vm0")
    try:
        argv = _argv_of(info)
        var_binds = [argv[i + 1] for i, arg in enumerate(argv[:-2])
                     if arg.startswith("--") and "bind" in arg and argv[i + 2].startswith("/var")]
        assert len(var_binds) == 1 and var_binds[0].startswith(str(base_dir / system_data.FOLDERS)), var_binds
        root = Path(f"/proc/{info.private['init_pid']}/root")
        for folder in sandbox_fs.system_data_found():
            assert _listing(f"{root}{folder}") == _listing(folder), folder
        assert _in_vm(info, "stat -c %a /var /var/lib /var/cache").split() == ["755"] * 3
        if shutil.which("aspell") and os.path.isdir("/var/lib/aspell"):
            assert _in_vm(info, "echo 'the helo wrld' | aspell list").split() == ["helo", "wrld"]
    finally:
        provider.stop(info)


def test_a_copy_that_went_is_made_again_at_the_next_boot(base_dir):
    """A sweep of the base folder took the copy while the VM ran: its next reset's boot makes
    it again (the VM sees the data), as the agent's folder is made again."""
    provider = ProcessProvider("gone", ProviderOptions(boot_timeout_s=20), base_dir=base_dir)
    info = provider.start("vm0")
    try:
        copies = base_dir / system_data.FOLDERS
        (made,) = list(copies.iterdir())
        shutil.rmtree(made)
        for _ in range(3):  # a standby booted before the removal may be handed out first
            info = provider.reset(info)
        assert made.is_dir()
        first = sandbox_fs.system_data_found()[0]
        assert _in_vm(info, f"ls {first}").split() == sorted(os.listdir(first))
    finally:
        provider.stop(info)


def test_without_a_copy_the_folders_are_bound_one_by_one(tmp_path, caplog):
    """A base folder where nothing can be made (a file there): a warning, and the sandbox's
    binds are the folders themselves, as before the copy."""
    (tmp_path / system_data.FOLDERS).write_text("in the way")
    assert system_data.prepare(tmp_path) is None
    assert "the system data's folder could not be made" in caplog.text
    binds = sandbox_fs.system_data(None)
    assert [binds[i + 1] for i, arg in enumerate(binds) if arg == "--ro-bind"] == sandbox_fs.system_data_found()
    assert sandbox_fs.system_data(tmp_path / "copy") == ["--ro-bind", str(tmp_path / "copy"), "/var"]


def test_the_copy_follows_the_hosts_data(tmp_path, monkeypatch):
    """Another content (a package upgraded: a file renamed in) is another folder; the same
    content, the same folder, used again."""
    data = tmp_path / "var" / "lib" / "words"
    data.mkdir(parents=True)
    (data / "en.dict").write_text("hello\n")
    os.symlink("en.dict", data / "default")
    monkeypatch.setattr(sandbox_fs, "SYSTEM_DATA", (str(data),))
    monkeypatch.setattr(system_data, "MOUNT_POINTS", ())
    monkeypatch.setattr(system_data, "VAR", str(tmp_path / "var"))
    first = system_data.prepare(tmp_path / "base")
    assert system_data.prepare(tmp_path / "base") == first
    assert (first / "lib" / "words" / "en.dict").read_text() == "hello\n"
    assert os.readlink(first / "lib" / "words" / "default") == "en.dict"
    (data / "en.dict.new").write_text("hello\nworld\n")
    os.rename(data / "en.dict.new", data / "en.dict")
    second = system_data.prepare(tmp_path / "base")
    assert second != first and (second / "lib" / "words" / "en.dict").read_text() == "hello\nworld\n"
