"""/etc in a process VM: one copy of what another user may read of it, bound at /etc in one
bind (``pool/providers/system_data.py``), with no mask over the host's secrets, which it does
not hold; made again when it went; /etc bound with its secrets masked when it cannot be made."""

from __future__ import annotations

import os
import shutil
import stat
from pathlib import Path

import psutil
import pytest

from parallel_rollout.guest.client import GuestClient
from parallel_rollout.pool.providers import sandbox_fs, system_data
from parallel_rollout.pool.providers.base import ProviderOptions
from parallel_rollout.pool.providers.process import ProcessProvider
from process_support import base_dir, no_leaked_sandbox  # noqa: F401 - fixtures


def _listing(top: str) -> list[tuple[str, str, str]]:
    """Every entry under ``top`` (not followed): its path below it, its type and link target."""
    rows = []
    for root, dirs, files in os.walk(top):
        for name in dirs + files:
            path = os.path.join(root, name)
            mode = os.lstat(path).st_mode
            kind = "link" if stat.S_ISLNK(mode) else "dir" if stat.S_ISDIR(mode) else "file"
            rows.append((os.path.relpath(path, top), kind, os.readlink(path) if kind == "link" else ""))
    return sorted(rows)


def _in_vm(info, command: str) -> dict:
    return GuestClient(info.address).execute(command, shell=True)


def _argv_of(info) -> list[str]:
    """The bwrap command line of the VM's sandbox: its init's, or the nearest parent's."""
    init = psutil.Process(info.private["init_pid"])
    return next(proc.cmdline() for proc in (init, *init.parents()) if proc.name() == "bwrap")


def _binds_onto(argv: list[str], prefix: str) -> list[tuple[str, str]]:
    return [(argv[i + 1], argv[i + 2]) for i, arg in enumerate(argv[:-2])
            if arg.startswith("--") and "bind" in arg and argv[i + 2].startswith(prefix)]


def test_a_vm_sees_etc_through_one_copy_without_the_hosts_secrets(base_dir):
    """/etc is the copy, bound once; of the binds under it only the sandbox's passwd and group
    (and fronts), no mask; the VM lists the host's entries and links; the host's secrets are
    there, empty and unreadable; the sandbox's user is known by name; a program reads its
    configuration (the CA certificates, /etc/os-release)."""
    provider = ProcessProvider("etc", ProviderOptions(boot_timeout_s=20), base_dir=base_dir)
    info = provider.start("vm0")
    try:
        argv = _argv_of(info)
        etc = [source for source, target in _binds_onto(argv, "/etc") if target == "/etc"]
        assert len(etc) == 1 and etc[0].startswith(str(base_dir / system_data.ETC_FOLDERS)), etc
        masked = [target for _, target in _binds_onto(argv, "/etc/") if target in sandbox_fs.SECRET_FILES]
        assert masked == [], masked
        root = Path(f"/proc/{info.private['init_pid']}/root")
        assert _listing(f"{root}/etc") == _listing("/etc")
        for secret in sandbox_fs.SECRET_FILES:
            if os.path.isfile(secret):
                said = _in_vm(info, f"cat {secret}")
                assert said["returncode"] != 0 and "Permission denied" in said["error"], said
                assert os.path.getsize(f"{root}{secret}") == 0
        said = _in_vm(info, "id -un; cat /etc/os-release | head -1")
        assert said["returncode"] == 0 and said["output"].split()[0] == "user", said
        assert said["output"].splitlines()[1] == Path("/etc/os-release").read_text().splitlines()[0]
    finally:
        provider.stop(info)


def test_the_copy_holds_nothing_another_user_could_not_read(tmp_path, monkeypatch):
    """Files any user may read keep their content, mode and time; the others (a key, a
    shadow file) are empty files of mode 0; folders keep their modes (one not open to others
    too), links stay links, a FIFO is left out. Another content is another folder."""
    etc = tmp_path / "etc"
    (etc / "ssl" / "private").mkdir(parents=True)
    (etc / "hosts").write_text("127.0.0.1 localhost\n")
    (etc / "shadow").write_text("root:$6$secret:19000::::::\n")
    os.chmod(etc / "shadow", 0o640)
    (etc / "ssl" / "private" / "key.pem").write_text("PRIVATE KEY\n")
    os.chmod(etc / "ssl" / "private" / "key.pem", 0o600)
    os.chmod(etc / "ssl" / "private", 0o710)
    os.symlink("/usr/share/zoneinfo/UTC", etc / "localtime")
    os.symlink("ssl", etc / "ssl-link")
    os.mkfifo(etc / "initctl")
    monkeypatch.setattr(system_data, "ETC", str(etc))
    first = system_data.prepare_etc(tmp_path / "base")
    assert first is not None and first.parent == tmp_path / "base" / system_data.ETC_FOLDERS
    assert system_data.prepare_etc(tmp_path / "base") == first
    assert (first / "hosts").read_text() == "127.0.0.1 localhost\n"
    assert os.stat(first / "hosts").st_mtime_ns == os.stat(etc / "hosts").st_mtime_ns
    for secret in (first / "shadow", first / "ssl" / "private" / "key.pem"):
        assert secret.stat().st_size == 0 and stat.S_IMODE(secret.stat().st_mode) == 0, secret
    assert stat.S_IMODE((first / "ssl" / "private").stat().st_mode) == 0o710
    assert stat.S_IMODE(first.stat().st_mode) == stat.S_IMODE(etc.stat().st_mode)
    assert os.readlink(first / "localtime") == "/usr/share/zoneinfo/UTC"
    assert os.readlink(first / "ssl-link") == "ssl"
    assert not os.path.lexists(first / "initctl")
    (etc / "hosts.new").write_text("127.0.0.1 localhost other\n")
    os.rename(etc / "hosts.new", etc / "hosts")
    second = system_data.prepare_etc(tmp_path / "base")
    assert second != first and (second / "hosts").read_text() == "127.0.0.1 localhost other\n"


def test_a_copy_that_went_is_made_again_at_the_next_boot(base_dir):
    """A sweep of the base folder took the copy while the VM ran: its next reset's boot makes
    it again, and the VM reads /etc."""
    provider = ProcessProvider("etc-gone", ProviderOptions(boot_timeout_s=20), base_dir=base_dir)
    info = provider.start("vm0")
    try:
        (made,) = list((base_dir / system_data.ETC_FOLDERS).iterdir())
        shutil.rmtree(made)
        for _ in range(3):  # a standby booted before the removal may be handed out first
            info = provider.reset(info)
        assert made.is_dir()
        said = _in_vm(info, "cat /etc/hostname /etc/os-release >/dev/null && id -un")
        assert said["returncode"] == 0 and said["output"].strip() == "user", said
    finally:
        provider.stop(info)


def test_without_a_copy_etc_is_bound_with_its_secrets_masked(tmp_path, caplog):
    """A base folder where nothing can be made (a file there): a warning, and the sandbox binds
    the host's /etc with an empty file over each secret, as before the copy."""
    (tmp_path / system_data.ETC_FOLDERS).write_text("in the way")
    assert system_data.prepare_etc(tmp_path) is None
    assert "/etc's copy could not be made" in caplog.text
    assert _triples(sandbox_fs.system_binds(None))[-1] == ("--ro-bind", "/etc", "/etc")
    secrets = [path for path in sandbox_fs.SECRET_FILES if os.path.isfile(path)]
    masks = sandbox_fs.secret_masks(tmp_path / "empty", None)
    assert [masks[i + 2] for i, arg in enumerate(masks) if arg == "--ro-bind"] == secrets
    assert sandbox_fs.secret_masks(tmp_path / "empty", tmp_path / "copy") == []
    assert ("--ro-bind", str(tmp_path / "copy"), "/etc") in _triples(sandbox_fs.system_binds(tmp_path / "copy"))


def _triples(binds: list[str]) -> list[tuple[str, str, str]]:
    return [tuple(binds[i:i + 3]) for i in range(0, len(binds), 3)]
