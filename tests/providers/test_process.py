"""ProcessProvider against real bubblewrap sandboxes: a VM's life and its isolation.

Start, commands and files, no network and a read-only system, a reset that restores the
snapshot and kills everything (from a standby sandbox booted beside the VM), a uid of its own
per VM, a death from outside named, and a stop that leaves nothing. The agent's folder:
test_process_agent_folder.py; what a dead owner or a failed boot leaves: test_process_leftovers.py;
configuration and limits: test_process_limits.py.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import statistics
import textwrap
import threading
import time
from pathlib import Path

import psutil
import pytest

from parallel_rollout.config import build_config
from parallel_rollout.errors import ConfigError, VMError
from parallel_rollout.guest.client import GuestClient
from parallel_rollout.pool.providers import get_provider, provider_options
from parallel_rollout.pool.providers.base import ProviderOptions
from parallel_rollout.pool.providers import cgroups, standby
from parallel_rollout.pool.providers.process import ProcessProvider
from pool_support import fds_above, wait_until
from process_support import (_alive, _processes_naming, _sandbox_pids, base_dir, no_leaked_sandbox,  # noqa: F401
                             provider, snapshot, vm)

pytestmark = pytest.mark.skipif(shutil.which("bwrap") is None, reason="needs bubblewrap")


def test_registered_and_available():
    assert get_provider("process") is ProcessProvider
    ProcessProvider.check_available()


def test_start_execute_and_files(vm, base_dir):
    client = GuestClient(vm.address)
    assert vm.provider == "process" and vm.run_id == "run1"
    assert client.health()["vm"] == "vm0"
    result = client.execute("hostname; echo $HOME; pwd; cat a.txt", shell=True)
    assert result["output"].split() == ["vm0", "/home/user", "/home/user", "initial"]
    client.write_file("~/new/file.bin", b"\x00\x01data")
    assert client.read_file("/home/user/new/file.bin") == b"\x00\x01data"
    # the home is a sized tmpfs of the sandbox, not a folder on the host's disk
    vm_dir = Path(vm.private["vm_dir"])
    assert vm_dir.parent.parent == base_dir and vm_dir.parent.name.startswith("run1@")  # the pool's own
    assert not (vm_dir / "home").exists()
    assert "tmpfs" in client.execute("df --output=fstype ~ /tmp", shell=True)["output"]
    meta = (vm_dir / "meta.json").read_text()
    assert '"run_id": "run1"' in meta and str(vm.private["pid"]) in meta


def test_isolation_no_network_and_readonly_system(vm):
    client = GuestClient(vm.address)
    with socket.socket() as listener:  # a service on the host's loopback
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        port = listener.getsockname()[1]
        probe = client.run_python(textwrap.dedent(f"""
            import socket
            try:
                socket.create_connection(("127.0.0.1", {port}), timeout=2)
                print("connected")
            except OSError as exc:
                print("refused", exc)
        """))
    assert probe["output"].startswith("refused")
    interfaces = client.execute("cat /proc/net/dev", shell=True)["output"]
    assert [line.split(":")[0].strip() for line in interfaces.splitlines()[2:]] == ["lo"]
    write = client.execute("touch /usr/pwned", shell=True)
    assert write["returncode"] != 0 and "Read-only" in write["error"]
    # its own pid namespace: the agent is pid 2, under bwrap's init
    assert client.health()["pid"] == 2
    env = client.execute(["env"])["output"]
    assert "PARALLEL_ROLLOUT_VM=vm0" in env and "PYTEST" not in env


@pytest.mark.skipif(os.geteuid() != 0, reason="as another user uid 0 in the sandbox is no one's root")
def test_the_kernels_knobs_are_read_only_to_the_sandboxs_root(vm):
    """The agent of a root runner's sandbox is uid 0: a sysctl and the SysRq trigger ask for
    no more, so /proc/sys and /proc/sysrq-trigger must be read-only in there (kernel.core_pattern
    runs a program as the host's root). Opened for writing, never written, through the
    sandbox's own root from the host (what uid 0 inside sees)."""
    import errno

    root = Path(f"/proc/{vm.private['init_pid']}/root")
    knobs = ["proc/sys/kernel/core_pattern", "proc/sys/vm/drop_caches"]
    if os.path.exists("/proc/sysrq-trigger"):  # a kernel without SysRq has none
        knobs.append("proc/sysrq-trigger")
    for knob in knobs:
        with pytest.raises(OSError) as refused:
            os.close(os.open(root / knob, os.O_WRONLY | os.O_APPEND))
        assert refused.value.errno == errno.EROFS, (knob, refused.value)
    # still the sandbox's own values where it has a namespace of its own
    client = GuestClient(vm.address)
    assert client.execute("cat /proc/sys/kernel/hostname", shell=True)["output"].strip() == "vm0"


def test_reset_restores_snapshot_and_kills_everything(provider, vm):
    client = GuestClient(vm.address)
    client.write_file("~/scratch.txt", b"after snapshot")
    client.execute("echo changed > a.txt && rm sub/b.txt", shell=True)
    # a daemon that escapes the agent's process group, as a leaky task would
    client.execute("setsid sleep 1000 > /dev/null 2>&1 < /dev/null &", shell=True)
    time.sleep(0.1)
    old = _sandbox_pids(vm)
    assert any(psutil.Process(p).name() == "sleep" for p in old if _alive(p))

    new = provider.reset(vm)

    assert not [p for p in old if _alive(p)], "a process of the old sandbox survived"
    assert new.private["pid"] != vm.private["pid"]
    client = GuestClient(new.address)
    listing = client.execute("find . -type f | sort; cat a.txt", shell=True)["output"]
    assert listing.split() == ["./a.txt", "./sub/b.txt", "initial"]
    assert "sleep" not in client.execute(["ps", "-eo", "comm"])["output"]
    vm.private.update(new.private)  # so the fixture stops the live one


def test_boot_and_reset_among_fds_above_1023(provider):
    """With --num-vms 200 the pool's process held fds above 1023, which select() refused:
    8 VMs died at boot ("filedescriptor out of range in select()"). Every pipe, socket and
    pidfd of these boots is above it (tests/test_high_fds.py: each wait alone)."""
    with fds_above(1024):
        info = provider.start("vm0")
        try:
            assert GuestClient(info.address).execute(["true"])["returncode"] == 0
            info = provider.reset(info)
            assert GuestClient(info.address).execute(["true"])["returncode"] == 0
        finally:
            provider.stop(info)


def test_reset_speed(provider, vm):
    info, times = vm, []
    for _ in range(15):
        started = time.perf_counter()
        info = provider.reset(info)
        GuestClient(info.address).health()
        times.append(time.perf_counter() - started)
    vm.private.update(info.private)
    p50 = statistics.median(times)
    print(f"\nprocess reset (to a /health answer): p50 {p50 * 1000:.1f} ms, "
          f"max {max(times) * 1000:.1f} ms")
    assert p50 < 2.0  # sanity only; the number is a benchmark, not a test


def test_healthy_false_after_outside_kill_and_stop_is_idempotent(provider, vm, base_dir):
    assert provider.healthy(vm)
    os.kill(vm.private["pid"], signal.SIGKILL)
    deadline = time.monotonic() + 3
    while provider.healthy(vm) and time.monotonic() < deadline:
        time.sleep(0.01)
    assert not provider.healthy(vm)
    provider.stop(vm)
    provider.stop(vm)
    assert not Path(vm.private["vm_dir"]).exists()
    assert not [p for p in _sandbox_pids(vm) if _alive(p)]


@pytest.mark.parametrize("victim", ["bwrap", "init", "agent"])
def test_death_cause_names_a_kill_from_outside(provider, vm, victim):
    """A sandbox SIGKILLed from outside (its bwrap, its namespace init, or, the runner being
    root, its agent: the task's user can signal neither) is not the task's doing, and the
    provider says why: the pool then retries the task on another VM instead of blaming it."""
    if victim != "bwrap" and os.geteuid() != 0:
        pytest.skip("as another user the task shares its agent's uid: it could have killed it")
    init = vm.private["init_pid"]
    pid = {"bwrap": vm.private["pid"], "init": init,
           "agent": psutil.Process(init).children()[0].pid}[victim]
    os.kill(pid, signal.SIGKILL)
    cause = provider.death_cause(vm)
    assert cause and "SIGKILL" in cause, cause
    assert ("bwrap" in cause) == (victim == "bwrap"), cause


def test_death_cause_is_none_while_it_runs_and_after_the_pools_own_kill(provider, vm, monkeypatch):
    from parallel_rollout.pool.providers import sandbox_processes

    monkeypatch.setattr(sandbox_processes, "DEATH_WAIT_S", 0.2)
    assert provider.death_cause(vm) is None  # alive: whatever broke, the task may have
    provider.stop(vm)
    assert provider.death_cause(vm) is None  # the pool's own kill


@pytest.mark.skipif("memory" not in cgroups.available(), reason="no writable memory cgroup")
def test_death_cause_blames_the_task_once_its_vm_reached_its_memory_limit(base_dir):
    """A task that ran its VM into its memory limit may have brought down what died next
    (the VM's own OOM kills): no cause outside it is claimed."""
    provider = ProcessProvider("run5", ProviderOptions(memory_mb=200), base_dir=base_dir)
    info = provider.start("vm0")
    try:
        assert GuestClient(info.address).run_python("x = bytearray(400 << 20)")["return_code"] == -9
        os.kill(info.private["pid"], signal.SIGKILL)
        assert provider.death_cause(info) is None
    finally:
        provider.stop(info)


def test_stop_removes_processes_and_folder(provider, base_dir):
    info = provider.start("vm1")
    GuestClient(info.address).execute("setsid sleep 1000 >/dev/null 2>&1 &", shell=True)
    time.sleep(0.05)
    pids = _sandbox_pids(info)
    provider.stop(info)
    assert not [p for p in pids if _alive(p)]
    assert not provider.run_dir.exists()


def test_sandbox_outlives_the_thread_that_started_it(provider):
    box = {}
    thread = threading.Thread(target=lambda: box.update(info=provider.start("vmt")))
    thread.start()
    thread.join()
    time.sleep(0.3)  # PDEATHSIG would have fired by now if it followed this thread
    try:
        assert provider.healthy(box["info"])
    finally:
        provider.stop(box["info"])


def test_standbys_per_vm_follow_the_cpus_unless_set(monkeypatch, base_dir):
    """Two standbys per VM where the runner may use more CPUs than the pool has VMs, one
    where it may not; $PARALLEL_ROLLOUT_PROCESS_STANDBY sets it (0 to 4), and a value that
    is not one is refused, naming the variable, before any VM starts."""
    monkeypatch.delenv(standby.STANDBY_ENV, raising=False)
    monkeypatch.setattr(standby.os, "sched_getaffinity", lambda pid: {0, 1, 2, 3})
    assert [standby.depth(vms) for vms in (1, 3, 4, 16)] == [2, 2, 1, 1]
    for text, depth in (("0", 0), ("1", 1), (" 4 ", 4)):
        monkeypatch.setenv(standby.STANDBY_ENV, text)
        assert standby.depth(16) == depth
    for text in ("5", "-1", "two", "1.5"):
        monkeypatch.setenv(standby.STANDBY_ENV, text)
        with pytest.raises(ConfigError, match=f"PARALLEL_ROLLOUT_PROCESS_STANDBY={text!r}: give the standby sandboxes per VM, 0 to 4"):
            ProcessProvider("depth", ProviderOptions(boot_timeout_s=10), base_dir=base_dir)
    assert not list(base_dir.glob("depth*"))


def test_two_standbys_take_turns_with_the_vm_in_three_folders(monkeypatch, base_dir):
    """With two standbys a reset hands out the older one (booted two resets ago) and starts
    the next in the folder it freed: the sandbox moves vm0 → vm0.b → vm0.c → vm0 …, each
    a fresh one, two more booted beside it; a stop takes all three and their folders."""
    monkeypatch.setenv(standby.STANDBY_ENV, "2")
    provider = ProcessProvider("turns", ProviderOptions(boot_timeout_s=20), base_dir=base_dir)
    vm = provider.start("vm0")
    seen, pids = [], set()
    try:
        for step in range(5):
            GuestClient(vm.address).execute(f"echo {step} > /tmp/step", shell=True)
            vm = provider.reset(vm)
            seen.append(Path(vm.private["vm_dir"]).name)
            pids |= _sandbox_pids(vm)
            assert GuestClient(vm.address).execute("cat /tmp/step", shell=True)["returncode"] != 0
        assert seen == ["vm0", "vm0.b", "vm0.c", "vm0", "vm0.b"]  # the first reset boots its own
        def sandboxes() -> list[str]:  # the folders some bwrap names
            pool = f"{provider.run_dir}/"
            return sorted({arg.split(pool)[1].split("/")[0] for proc in _processes_naming(provider.run_dir)
                           for arg in proc.cmdline() if pool in arg})

        deadline = time.monotonic() + 20
        while sandboxes() != ["vm0", "vm0.b", "vm0.c"] and time.monotonic() < deadline:
            time.sleep(0.05)  # the two standbys beside the VM
        assert sandboxes() == ["vm0", "vm0.b", "vm0.c"]
    finally:
        provider.stop(vm)
    assert not [pid for pid in pids if _alive(pid)]
    assert not _processes_naming(provider.run_dir)
    assert not provider.run_dir.exists()


def test_run_guest_is_emptied_by_a_reset(provider, vm):
    # seen from the host (the sandbox's root through its init): /run is the agent's, and
    # the agent reads files for a grader with the commands' user's rights (agent_files)
    def leftover(info) -> Path:
        return Path(f"/proc/{info.private['init_pid']}/root/run/guest/leftover")

    GuestClient(vm.address).write_file("/run/guest/leftover", b"from the last task")
    assert leftover(vm).read_bytes() == b"from the last task"
    new = provider.reset(vm)
    vm.private.update(new.private)
    assert GuestClient(new.address).health()["status"] == "ok"
    assert not leftover(new).exists()


def _whoami(info) -> list[str]:
    return GuestClient(info.address).execute("id -u; id -un", shell=True)["output"].split()


@pytest.mark.skipif(os.geteuid() != 0, reason="an unprivileged runner's VMs share its uid")
def test_each_vm_runs_its_commands_as_a_uid_of_its_own(provider, base_dir):
    """Two VMs of a run and one of another run have three uids, named ``user`` in each
    sandbox's /etc/passwd; a reset in the VM's folder keeps its uid, a stopped VM's is handed
    out again."""
    other = ProcessProvider("run2", ProviderOptions(boot_timeout_s=10), base_dir=base_dir)
    infos = [provider.start("vm0"), provider.start("vm1"), other.start("vm0")]
    try:
        seen = [_whoami(info) for info in infos]
        assert len({uid for uid, _ in seen}) == 3 and {name for _, name in seen} == {"user"}, seen
        assert all(int(uid) >= 64000 for uid, _ in seen), seen
        infos[0] = provider.reset(infos[0])  # the first reset boots in the VM's own folder
        assert Path(infos[0].private["vm_dir"]).name == "vm0" and _whoami(infos[0]) == seen[0]
        provider.stop(infos[1])
        infos[1] = provider.start("vm2")
        # the lowest free one: vm1's, given back (the test runs alone: conftest.EXCLUSIVE, since
        # a run of another xdist worker takes and frees uids of the machine meanwhile)
        assert _whoami(infos[1]) == seen[1]
    finally:
        for info, owner in zip(infos, (provider, provider, other)):
            owner.stop(info)


@pytest.mark.skipif(os.geteuid() != 0, reason="an unprivileged runner's VMs share its uid")
def test_a_reset_hands_out_its_standby_and_kills_the_old_sandbox_behind_it(monkeypatch, base_dir):
    """A reset whose standby has booted returns it before the old sandbox is gone, and the
    two never share a uid: each folder of the VM has one of its own (per-user limits such as
    inotify instances held by the dying sandbox's processes are not the new one's). The old
    sandbox's processes, a daemon that left its process group among them, die just after;
    the folder takes the next standby once they have; a stop right after a swap leaves no
    process and no folder."""
    monkeypatch.setenv(standby.STANDBY_ENV, "1")
    provider = ProcessProvider("swap", ProviderOptions(boot_timeout_s=20), base_dir=base_dir)
    vm = provider.start("vm0")
    pids, uids = set(), {}
    try:
        for step in range(4):
            client = GuestClient(vm.address)
            client.execute("setsid sleep 1000 > /dev/null 2>&1 < /dev/null &", shell=True)
            uids.setdefault(Path(vm.private["vm_dir"]).name, set()).add(_whoami(vm)[0])
            old = _sandbox_pids(vm)
            pids |= old
            if step:  # after the first reset, whose standby boots meanwhile
                _wait_for_standby(provider, "vm0")
            new = provider.reset(vm)
            moved = new.private["vm_dir"] != vm.private["vm_dir"]
            assert moved == bool(step), (step, vm.private["vm_dir"], new.private["vm_dir"])
            deadline = time.monotonic() + 10
            while [p for p in old if _alive(p)]:
                assert time.monotonic() < deadline, "a process of the replaced sandbox survived"
                time.sleep(0.005)
            assert "sleep" not in GuestClient(new.address).execute(["ps", "-eo", "comm"])["output"]
            vm = new
        assert sorted(uids) == ["vm0", "vm0.b"], uids
        assert all(len(seen) == 1 for seen in uids.values()) and len(set().union(*uids.values())) == 2, uids
        GuestClient(vm.address).execute("setsid sleep 1000 > /dev/null 2>&1 < /dev/null &", shell=True)
        pids |= _sandbox_pids(vm)
        _wait_for_standby(provider, "vm0")
        vm = provider.reset(vm)
        pids |= _sandbox_pids(vm)
    finally:
        provider.stop(vm)  # at once: the replaced sandbox may still be dying
    assert not [pid for pid in pids if _alive(pid)]
    assert not _processes_naming(provider.run_dir)
    assert not provider.run_dir.exists()


def _wait_for_standby(provider, vm_id: str) -> None:
    """Until the VM's next standby has booted (a reset then swaps it in)."""
    wait_until(lambda: provider._standby.ready(vm_id), 20)


def test_a_boot_past_its_timeout_says_the_timeout_as_the_config_file_set_it(tmp_path, base_dir):
    """A sandbox whose guest agent is not ready within the boot timeout a config file set
    (boot_timeout_s = 0.01): it said "(--boot-timeout-s 0.01)", a flag no one typed; it says
    the key as the file writes it, and the file, as the pool's own watchdog says it."""
    (tmp_path / "run.toml").write_text("boot_timeout_s = 0.01\n")
    config = build_config({}, str(tmp_path / "run.toml"))
    provider = ProcessProvider("late", provider_options(config, ProcessProvider, []), base_dir=base_dir)
    with pytest.raises(VMError) as caught:
        provider.start("vm0")
    assert (f"timed out waiting for the guest agent after 0.01s (boot_timeout_s in {tmp_path / 'run.toml'})"
            in str(caught.value)), caught.value
