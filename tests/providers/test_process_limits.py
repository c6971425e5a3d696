"""What a process provider refuses and what it bounds: configuration errors, a base folder
that is not its own, a VM's memory and processes through its cgroups, and a machine whose
cgroup hierarchy refuses (no limit then, but the tmpfs folders are still sized).
"""

from __future__ import annotations

import functools
import os
import shutil
from pathlib import Path

import pytest

from parallel_rollout.errors import ConfigError, VMError
from parallel_rollout.guest.client import GuestClient
from parallel_rollout.pool.providers.base import ProviderOptions
from parallel_rollout.pool.providers import cgroups, host_share, process, standby
from parallel_rollout.pool.providers.process import ProcessProvider
from parallel_rollout.pool.providers.sandbox_uids import SandboxUids
from process_support import base_dir, no_cgroups, no_leaked_sandbox  # noqa: F401 - fixtures

pytestmark = pytest.mark.skipif(shutil.which("bwrap") is None, reason="needs bubblewrap")


def test_config_errors(base_dir, tmp_path):
    with pytest.raises(ConfigError, match="--path-to-vm cannot be honoured"):
        ProcessProvider("r", ProviderOptions(path_to_vm="/x.vmx"), base_dir=base_dir)
    with pytest.raises(ConfigError, match="--snapshot-name .*: no such folder"):
        ProcessProvider("r", ProviderOptions(snapshot_name=str(tmp_path / "nope")),
                        base_dir=base_dir)
    with pytest.raises(ConfigError, match="run id"):
        ProcessProvider("../evil", base_dir=base_dir)
    with pytest.raises(ConfigError, match="vm id"):
        ProcessProvider("r", base_dir=base_dir).start("a/b")


def test_empty_snapshot_and_memory_limit(base_dir):
    provider = ProcessProvider("run3", ProviderOptions(memory_mb=200), base_dir=base_dir)
    info = provider.start("vm0")
    try:
        client = GuestClient(info.address)
        assert client.execute("ls -A", shell=True)["output"] == ""
        big = client.run_python("x = bytearray(400 * 1024 * 1024)")
        if "memory" in cgroups.available():
            # the sandbox's cgroup: the kernel kills the hog, the agent lives on
            assert big["return_code"] == -9, big
            # the limit is the sandbox's sum, not per process: two 150 MB halves meet it
            half = "python3 -c 'x = bytearray(150 << 20); import time; time.sleep(3)'"
            pair = client.execute(f"{half} & p=$!; {half}; b=$?; wait $p; echo $? $b",
                                  shell=True, timeout=20)
            assert "137" in pair["output"].split(), pair
        else:
            assert big["status"] == "error" and "MemoryError" in big["error"]
        assert client.run_python("x = bytearray(20 * 1024 * 1024)")["status"] == "success"
    finally:
        provider.stop(info)


@pytest.mark.skipif("pids" not in cgroups.available(), reason="no writable pids cgroup")
def test_max_processes(base_dir):
    provider = ProcessProvider("run4", ProviderOptions(max_processes=12), base_dir=base_dir)
    info = provider.start("vm0")
    try:
        client = GuestClient(info.address)
        result = client.execute(
            "for i in $(seq 30); do sleep 5 & done 2>&1; echo started", shell=True,
            timeout=3)
        assert "fork" in (result["output"] + result["error"]).lower()
        info = provider.reset(info)  # the cgroup survives a reset, the limit still holds
        assert GuestClient(info.address).execute(["true"])["returncode"] == 0
    finally:
        provider.stop(info)
    assert info.private["cgroups"] and not any(Path(p).exists() for p in info.private["cgroups"])


def test_a_hierarchy_that_refuses_is_not_available(no_cgroups, base_dir):
    assert cgroups.available() == frozenset()
    assert "pids.max" in cgroups.why_unavailable("pids")
    assert list(no_cgroups.root.iterdir()) == []  # the probe left nothing behind
    with pytest.raises(ConfigError, match="pids cgroup.*pids.max"):
        ProcessProvider("r", ProviderOptions(max_processes=5), base_dir=base_dir)
    with pytest.raises(VMError, match="cannot limit pids here"):
        cgroups.VMCgroup("r", "vm0", max_processes=5)


def test_without_a_memory_cgroup_the_tmpfs_folders_are_still_sized(no_cgroups, base_dir):
    provider = ProcessProvider("run5", ProviderOptions(memory_mb=60), base_dir=base_dir)
    info = provider.start("vm0")
    try:
        client = GuestClient(info.address)
        fill = client.execute("dd if=/dev/zero of=/tmp/f bs=1M 2>&1; dd if=/dev/zero of=$HOME/f "
                              "bs=1M 2>&1; du -sm /tmp/f $HOME/f", shell=True, timeout=30)
        sizes = [int(line.split()[0]) for line in fill["output"].splitlines()[-2:]]
        # 60 MB // 6 each, not the 512 MB and 1 GB a host without cgroups would lend
        assert fill["output"].count("No space left") == 2 and max(sizes) <= 10, fill
    finally:
        provider.stop(info)


def test_the_base_folder_must_be_ours(base_dir):
    from parallel_rollout.pool.providers.common import secure_base_dir

    tmp_path = base_dir  # short: a provider checks its sockets' room as it is made

    made = secure_base_dir(tmp_path / "new" / "base")
    assert made.stat().st_mode & 0o777 == 0o700
    loose = tmp_path / "loose"
    loose.mkdir()
    os.chmod(loose, 0o777)
    with pytest.raises(ConfigError, match="writable by other users"):
        ProcessProvider("r", base_dir=loose).start("vm0")
    link = tmp_path / "link"
    link.symlink_to(loose)
    with pytest.raises(ConfigError, match="not a folder"):
        ProcessProvider("r", base_dir=link).start("vm0")
    if os.geteuid() == 0:
        theirs = tmp_path / "theirs"
        theirs.mkdir()
        os.chown(theirs, 65534, 65534)
        with pytest.raises(ConfigError, match="belongs to uid 65534"):
            ProcessProvider("r", base_dir=theirs).start("vm0")


@pytest.mark.skipif(os.geteuid() != 0, reason="an unprivileged runner's VMs share its uid")
def test_a_full_uid_range_is_a_clear_error_never_a_uid_outside_it(base_dir, tmp_path, monkeypatch):
    """The range holds 1000 uids and a VM takes one per folder (2-3): --num-vms 400 needs
    more. A pool that alone needs more is refused before it starts; one that finds the rest
    held by other runs fails that VM's boot, and gives back what it took. Both name the range
    and the variable that moves it (a range of 4 here, in a lock folder of this test's)."""
    monkeypatch.setenv(standby.STANDBY_ENV, "1")  # two folders a VM
    small = functools.partial(SandboxUids, first=64000, count=4, lock_dir=tmp_path / "uids")
    monkeypatch.setattr(process, "SandboxUids", small)
    the_range = r"uids 64000-64003, whose start \$PARALLEL_ROLLOUT_SANDBOX_UID moves"
    with pytest.raises(ConfigError, match=rf"3 VMs take 6 sandbox uids \(2 each\), more than the 4 of "
                                          rf"the range \({the_range}\) that no account has.*"
                                          r"PARALLEL_ROLLOUT_PROCESS_STANDBY=0"):
        ProcessProvider("r", ProviderOptions(pool_size=3), base_dir=base_dir)
    provider = ProcessProvider("r", ProviderOptions(pool_size=2), base_dir=base_dir)
    other_run = small()
    assert [other_run.acquire(f"x{i}") for i in range(3)] == [64000, 64001, 64002]
    with pytest.raises(VMError, match=rf"all 4 sandbox uids \({the_range}\) are held by live VMs on "
                                      r"this machine, 1 of them by this run; vm0\.b has none"):
        provider.start("vm0")
    assert [p.name for p in base_dir.iterdir() if not p.name.startswith(".")] == []
    assert provider._uids.uid("vm0") is None and other_run.acquire("x3") == 64003


def test_a_uid_of_an_account_or_group_of_the_host_is_never_handed_out(tmp_path):
    """A sandbox's uid (and gid) is its own: one an account has (Debian's libvirt-qemu is
    64055, inside the default range) would share that account's per-user limits and own its
    files. Here nobody (65534), in a range of three around it."""
    import pwd

    nobody = pwd.getpwnam("nobody").pw_uid
    uids = SandboxUids(first=nobody - 1, count=3, lock_dir=tmp_path / "uids")
    assert nobody in uids.accounts
    taken = [uids.acquire(key) for key in ("a", "b")]
    assert nobody not in taken and len(set(taken)) == 2
    with pytest.raises(VMError, match="all 3 sandbox uids"):
        uids.acquire("c")
    with pytest.raises(ConfigError, match=r"more than the 2 of the range .* that no account has"):
        uids.check_room(3)


def test_every_process_of_a_sandbox_has_its_share_of_open_files_and_goes_first_to_the_oom_killer(base_dir):
    """RLIMIT_NOFILE was the runner's (20,000 here) and pids.max 4096: ~124 processes of one
    VM took the host's whole file table (fs.file-max), and every process of the machine got
    ENFILE. Every process of a sandbox now has the VM's share (``host_share``), soft and hard,
    which the code cannot raise; and it is the OOM killer's first choice, so that a limit
    the runner shares (its cgroup's, the host's) kills a VM's process, never the runner."""
    provider = ProcessProvider("run6", ProviderOptions(pool_size=2), base_dir=base_dir)
    info = provider.start("vm0")
    try:
        said = GuestClient(info.address).execute(
            "ulimit -Sn; ulimit -Hn; cat /proc/self/oom_score_adj; ulimit -n 4096 2>/dev/null && echo raised; "
            "(echo 0 > /proc/self/oom_score_adj) 2>/dev/null && echo lowered", shell=True)["output"].split()
    finally:
        provider.stop(info)
    nofile = host_share.vm_process_limits(None, process.DEFAULT_MAX_PROCESSES, 2)[2]
    assert nofile <= host_share.DEFAULT_NOFILE
    assert said[:3] == [str(nofile), str(nofile), "1000"], said
    assert "raised" not in said
    if _capable(24):  # CAP_SYS_RESOURCE: set by a runner that has it, the code cannot lower it
        assert "lowered" not in said


def _capable(bit: int) -> bool:
    """Whether this process has the capability of number ``bit`` (CapEff)."""
    status = Path("/proc/self/status").read_text()
    return bool(int(status.split("CapEff:")[1].split()[0], 16) >> bit & 1)
