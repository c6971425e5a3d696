"""What a process sandbox's dead owner or failed boot leaves behind: nothing.

Sandboxes die with their owner (the pool's Manager), even one killed while it forks a
sandbox or one that exits during a boot; the sweep removes a crashed run's folders and leaves
a live run's alone (another run of the same run id included); a VM folder is labelled before
its sandbox boots; a boot that fails reports the agent's log, and a bwrap killed before it
reports its init leaves no orphan.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from parallel_rollout.errors import VMError
from parallel_rollout.pool.providers.base import ProviderOptions
from parallel_rollout.pool.providers.common import run_folders
from parallel_rollout.pool.providers.process import ProcessProvider
from process_support import (_alive, _processes_naming, base_dir, no_cgroups, no_leaked_sandbox,  # noqa: F401
                             provider, snapshot, vm)

pytestmark = pytest.mark.skipif(shutil.which("bwrap") is None, reason="needs bubblewrap")


_OWNER = """
import sys, time
from parallel_rollout.pool.providers.process import ProcessProvider
provider = ProcessProvider(sys.argv[1], base_dir=sys.argv[2])
infos = [provider.start(f"vm{i}") for i in range(2)]
print(" ".join(str(i.private["pid"]) for i in infos), flush=True)
time.sleep(600)
"""


def _start_owner(run_id: str, base_dir: Path):
    proc = subprocess.Popen([sys.executable, "-c", _OWNER, run_id, str(base_dir)],
                            stdout=subprocess.PIPE, text=True)
    pids = [int(p) for p in proc.stdout.readline().split()]
    assert len(pids) == 2
    return proc, pids


def test_sweep_after_owner_is_killed(base_dir):
    owner, pids = _start_owner("crashed", base_dir)
    live_owner, live_pids = _start_owner("live", base_dir)
    try:
        owner.send_signal(signal.SIGKILL)
        owner.wait()
        deadline = time.monotonic() + 3
        while any(_alive(p) for p in pids) and time.monotonic() < deadline:
            time.sleep(0.02)
        assert not any(_alive(p) for p in pids), "sandboxes outlived their owner"
        [crashed] = run_folders(base_dir, "crashed")
        assert sorted(os.listdir(crashed)) == ["vm0", "vm1"]  # folders remain

        # without a run id: only runs whose owner is gone
        assert sorted(ProcessProvider.sweep(base_dir=base_dir)) == ["crashed/vm0", "crashed/vm1"]
        assert not crashed.exists()
        assert all(_alive(p) for p in live_pids)

        # with a run id: that run goes, even though its owner still lives
        assert sorted(ProcessProvider.sweep("live", base_dir=base_dir)) == ["live/vm0", "live/vm1"]
        assert not any(_alive(p) for p in live_pids)
        assert not run_folders(base_dir, "live")
        assert ProcessProvider.sweep(base_dir=base_dir) == []
        assert (base_dir / ".agent-bytecode").is_dir()  # a cache, not a run: no sweep takes it
    finally:
        for proc in (owner, live_owner):
            proc.kill()
            proc.wait()


def test_the_sweep_command_names_each_run_s_vms(base_dir, monkeypatch):
    """Two killed runs each leave a vm0 and a vm1: `vms sweep` counts four and names each
    with its run (it printed "removed 4 process VM(s): vm0, vm0, vm1, vm1")."""
    from click.testing import CliRunner

    from parallel_rollout.cli import main

    owners = [_start_owner(run_id, base_dir) for run_id in ("night-1", "night-2")]
    for proc, _ in owners:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    monkeypatch.setenv("PARALLEL_ROLLOUT_PROCESS_DIR", str(base_dir))
    result = CliRunner().invoke(main, ["vms", "sweep"])
    assert result.exit_code == 0, result.output
    assert result.output.strip() == "removed 4 process VM(s): night-1/vm0, night-1/vm1, night-2/vm0, night-2/vm1"
    assert not any(_alive(pid) for _, pids in owners for pid in pids)


_DYING_OWNER = """
import faulthandler, signal, sys, time
faulthandler.register(signal.SIGUSR1)  # the test asks where it is when the fork never comes
from parallel_rollout.pool.providers import sandbox_processes
from parallel_rollout.pool.providers.process import ProcessProvider

real = sandbox_processes.guarded
# a second between the fork and bwrap's exec: the window where bwrap has no parent-death
# signal of its own yet (it sets it up when it starts)
sandbox_processes.guarded = lambda argv, owner, *limits: real(
    ["/bin/sh", "-c", 'sleep 1; exec "$@"', "slow", *argv], owner, *limits)
provider = ProcessProvider("dying", base_dir=sys.argv[1])
print("booting", provider.run_dir, flush=True)
provider.start("vm0")
time.sleep(600)
"""


def test_an_owner_killed_while_it_forks_a_sandbox_leaves_nothing(base_dir, tmp_path):
    """The owner of the sandboxes (the pool's Manager) SIGKILLed after its fork of a sandbox
    and before bwrap set up its own parent-death signal: that bwrap used to start anyway,
    re-parented, after the sweep that follows the crash had looked, and leave its child (a
    bare bwrap with no child of its own) waiting forever. The fork now dies with its owner
    from its first instruction on."""
    stderr = tmp_path / "owner.err"
    with open(stderr, "w") as err:
        owner = subprocess.Popen([sys.executable, "-c", _DYING_OWNER, str(base_dir)],
                                 stdout=subprocess.PIPE, stderr=err, text=True)
    said, run_dir = (owner.stdout.readline().split() + ["", ""])[:2]
    vm_dir = Path(run_dir or base_dir / "dying") / "vm0"
    try:
        assert said == "booting", stderr.read_text()
        deadline = time.monotonic() + 60
        while not _processes_naming(vm_dir) and owner.poll() is None and time.monotonic() < deadline:
            time.sleep(0.01)  # the fork is under way: the slow shell names the folder
        if not _processes_naming(vm_dir):
            if owner.poll() is None:
                owner.send_signal(signal.SIGUSR1)  # its threads' stacks, into its stderr
                time.sleep(1)
            pytest.fail(f"the owner never forked the sandbox (exit {owner.poll()}):\n{stderr.read_text()}")
        owner.kill()
        owner.wait()
        time.sleep(2.5)  # the slow shell would have exec'd bwrap by now
        left = [f"{p.pid} {' '.join(p.cmdline())[:80]}" for p in _processes_naming(vm_dir)]
        assert not left, f"the dead owner's sandbox lives on: {left}"
    finally:
        owner.kill()
        owner.wait()
        ProcessProvider.sweep(base_dir=base_dir)
        for proc in _processes_naming(vm_dir):
            proc.kill()


_EXITING_OWNER = """
import os, sys, threading, time
import psutil
sys.path.insert(0, sys.argv[3])
from test_process_leftovers import StuckProvider as Stuck
from parallel_rollout.pool.providers import sandbox_launch
sandbox_launch.read_until = lambda fd, terminator, deadline, budget_s, *pidfd: time.sleep(600)  # nobody reads it

def owner(base_dir):
    provider = Stuck("exiting", base_dir=base_dir)
    threading.Thread(target=provider.start, args=("vm0",), daemon=True).start()
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        bwraps = [p for p in psutil.Process().children() if p.name() == "bwrap"]
        if bwraps and bwraps[0].children():
            break
        time.sleep(0.01)
    print(provider.run_dir, "held" if bwraps and bwraps[0].children() else "not held", flush=True)
    sys.exit(0)  # a boot under way, as when the pool's Manager exits after a shutdown

if __name__ == "__main__":
    if sys.argv[2] == "multiprocessing":  # the pool's Manager is one
        import multiprocessing
        child = multiprocessing.get_context("spawn").Process(target=owner, args=(sys.argv[1],))
        child.start()
        child.join()
    else:
        owner(sys.argv[1])
"""


@pytest.mark.parametrize("how", ["script", "multiprocessing"])
def test_an_owner_that_exits_during_a_boot_leaves_no_child_of_bwrap(base_dir, tmp_path, how):
    """An owner that exits (the pool's Manager at the end of a run, or following a dead
    runner) while a boot is under way: --die-with-parent kills that bwrap, but its child,
    which waits for bwrap's word before it execs the init and has no parent-death signal
    of its own yet, stayed behind (a bare bwrap with no child), with no sweep to come when
    the runner is gone too. The owner now kills what it launched on its way out."""
    script = tmp_path / "owner.py"  # a file: a spawned child imports its target from it
    script.write_text(_EXITING_OWNER)
    owner = subprocess.run([sys.executable, str(script), str(base_dir), how,
                            str(Path(__file__).parent)], capture_output=True, text=True, timeout=60)
    run_dir, _, said = owner.stdout.strip().partition(" ")
    vm_dir = Path(run_dir or base_dir / "exiting") / "vm0"
    try:
        assert said == "held", owner.stderr[-2000:]
        deadline = time.monotonic() + 3
        while _processes_naming(vm_dir) and time.monotonic() < deadline:
            time.sleep(0.05)
        left = [f"{p.pid} {' '.join(p.cmdline())[:80]} children {p.children()}"
                for p in _processes_naming(vm_dir)]
        assert not left, f"left behind by an owner that exited: {left}"
    finally:
        ProcessProvider.sweep(base_dir=base_dir)
        for proc in _processes_naming(vm_dir):
            proc.kill()


def test_sweep_of_another_run_leaves_ours_alone(provider, vm, base_dir):
    assert ProcessProvider.sweep("other-run", base_dir=base_dir) == []
    assert ProcessProvider.sweep(base_dir=base_dir) == []  # our owner (this process) lives
    assert provider.healthy(vm)


def test_two_live_runs_of_one_run_id_boot_the_same_vm_ids_each_in_its_own_folders(base_dir):
    """Two runs of one run id (two output folders) may run at once. Their pools kept
    ``<base>/<run id>/vm-0`` alike, and the second one's boots failed ("VM vm-0 of run same is
    already running") and spent its VM replacements. Each pool has a folder of its own now
    (``<run id>@<key>``): both boot, reset and stop their vm0 and vm1, a sweep of the run's
    orphans leaves the live one's alone, and takes them once that pool is gone."""
    other_pool, theirs = _start_owner("same", base_dir)
    try:
        provider = ProcessProvider("same", ProviderOptions(boot_timeout_s=10), base_dir=base_dir)
        ours = [provider.start(f"vm{i}") for i in range(2)]
        try:
            ours = [provider.reset(info) for info in ours]  # into the standbys' folders
            assert all(provider.healthy(info) for info in ours)
            assert ProcessProvider.sweep("same", base_dir=base_dir, orphans_only=True) == []
            assert all(provider.healthy(info) for info in ours) and all(_alive(p) for p in theirs)
        finally:
            for info in ours:
                provider.stop(info)
        assert all(_alive(p) for p in theirs) and not provider.run_dir.exists()
        [their_folder] = run_folders(base_dir, "same")
    finally:
        other_pool.kill()
        other_pool.wait()
    assert sorted(ProcessProvider.sweep("same", base_dir=base_dir, orphans_only=True)) == ["same/vm0", "same/vm1"]
    assert not their_folder.exists()


@pytest.mark.parametrize("folder", ["vm0", "vm0.b"])
def test_a_live_pools_vm_folder_is_never_taken_over(base_dir, folder):
    """A folder of this pool's that names another live pool as its owner (which the pools'
    keys make unlikely: it was how two runs of one run id met) is left alone: a boot refuses
    it rather than break that pool's VM mid-task, and takes it once that pool is gone."""
    other_pool = subprocess.Popen(["sleep", "60"])
    provider = ProcessProvider("same", ProviderOptions(boot_timeout_s=10), base_dir=base_dir)
    try:
        vm_dir = provider.run_dir / folder
        vm_dir.mkdir(parents=True)
        (vm_dir / "meta.json").write_text(json.dumps({
            "run_id": "same", "vm_id": "vm0", "vm_dir": str(vm_dir), "owner_pid": other_pool.pid,
            "owner_create_time": psutil.Process(other_pool.pid).create_time()}))
        with pytest.raises(VMError, match=rf"belongs to another live run of that id \(pool pid {other_pool.pid}\)"):
            provider.start("vm0")
        assert (vm_dir / "meta.json").is_file()
        assert ProcessProvider.sweep("same", base_dir=base_dir, orphans_only=True) == []
        assert (vm_dir / "meta.json").is_file()
    finally:
        other_pool.kill()
        other_pool.wait()
    vm = provider.start("vm0")
    try:
        assert provider.healthy(vm)
    finally:
        provider.stop(vm)


def test_a_vm_folder_is_labelled_before_its_sandbox_boots(base_dir):
    """A sweep of orphans (another run of the run id starting) takes a VM folder with no
    meta.json for a leftover. The label is written as the folder is made, so such a sweep
    during a boot (cgroups, socket, seccomp program, bwrap) leaves the folder alone: it
    removed the folder of a first boot, the VM's own and its standby's."""
    swept: dict[str, list[str]] = {}

    class Swept(ProcessProvider):
        def _boot(self, vm_id, vm_dir, group):
            swept[vm_dir.name] = ProcessProvider.sweep("same", base_dir=base_dir, orphans_only=True)
            return super()._boot(vm_id, vm_dir, group)

    provider = Swept("same", ProviderOptions(boot_timeout_s=10), base_dir=base_dir)
    vm = provider.start("vm0")
    try:
        for _ in range(4):  # the standbys' folders are made at the first reset's standby boots
            vm = provider.reset(vm)
            assert provider.healthy(vm)
    finally:
        provider.stop(vm)
    assert swept == {name: [] for name in ["vm0", "vm0.b", "vm0.c"][:provider._standby.depth + 1]}


def test_boot_failure_reports_the_agent_log(base_dir):
    class BrokenAgent(ProcessProvider):
        def _argv(self, *args):
            argv = super()._argv(*args)
            return argv[:argv.index("--") + 1] + [
                "/bin/sh", "-c", "echo agent exploded >&2; sleep 100"]

    provider = BrokenAgent("run2", ProviderOptions(boot_timeout_s=0.5), base_dir=base_dir)
    started = time.monotonic()
    with pytest.raises(VMError, match="agent exploded"):
        provider.start("vm0")
    assert time.monotonic() - started < 5


def _bwraps_naming(folder: Path) -> list[psutil.Process]:
    """Every live bwrap on the host whose command line names ``folder`` (re-parented or not)."""
    found = []
    for proc in psutil.process_iter(["name", "cmdline", "status"]):
        if proc.info["name"] == "bwrap" and proc.info["status"] != psutil.STATUS_ZOMBIE \
                and any(f"{folder}/" in arg for arg in proc.info["cmdline"] or ()):
            found.append(proc)
    return found


class StuckProvider(ProcessProvider):
    """A process provider whose bwrap is held between its fork and its word to the child
    (which then execs the init): a full --info-fd pipe, as long as nobody reads it."""

    def _argv(self, vm_id, vm_dir, ready_w, info_w, sock_fd):
        os.set_blocking(info_w, False)
        try:
            while True:
                os.write(info_w, b"x" * 4096)
        except BlockingIOError:
            os.set_blocking(info_w, True)
        return super()._argv(vm_id, vm_dir, ready_w, info_w, sock_fd)


@pytest.mark.parametrize("machine", ["cgroups", "no cgroups"])
def test_bwrap_killed_before_it_reports_its_init_leaves_no_orphan(machine, base_dir, request,
                                                                  monkeypatch):
    """bwrap forks its child, which waits for a word from bwrap before it execs the namespace
    init. Killed in between (a chaos kill, an OOM), bwrap never reports the init on --info-fd
    and the child waits forever, re-parented to pid 1. The failed boot must still kill it."""
    if machine == "no cgroups":
        request.getfixturevalue("no_cgroups")
    from parallel_rollout.pool.providers import sandbox_launch

    Stuck = StuckProvider
    real_read_until = sandbox_launch.read_until
    held: list[psutil.Process] = []
    provider = Stuck("orphan", ProviderOptions(boot_timeout_s=5), base_dir=base_dir)
    vm_dir = provider.run_dir / "vm0"

    def kill_bwrap_then_read(fd, terminator, deadline, budget_s, bwrap_pidfd=None):
        if terminator == b"}":  # the --info-fd read: bwrap is stuck writing it
            deadline = time.monotonic() + 10
            while not held and time.monotonic() < deadline:
                # the cgroup-joining shell becomes bwrap when it execs; then bwrap forks
                bwraps = [p for p in psutil.Process().children() if _alive(p.pid)
                          and p.name() == "bwrap" and f"{vm_dir}/" in " ".join(p.cmdline())]
                held[:] = [c for b in bwraps for c in b.children()]
                time.sleep(0.01)
            assert held, "bwrap never forked its child"
            bwrap, = bwraps
            bwrap.kill()
        return real_read_until(fd, terminator, deadline, budget_s, bwrap_pidfd)

    monkeypatch.setattr(sandbox_launch, "read_until", kill_bwrap_then_read)
    with pytest.raises(VMError, match="did not boot"):
        provider.start("vm0")
    assert held and not any(_alive(child.pid) for child in held), \
        f"bwrap's child outlived the failed boot: {[c.pid for c in held if _alive(c.pid)]}"
    assert _bwraps_naming(vm_dir) == []
    assert not vm_dir.exists()


#: a "bwrap" that starts its child, reports it on --info-fd and dies of SIGTERM before it
#: lets the child go on: the real one's child then waits forever for bwrap's word, holding
#: the ready pipe's write end (a SIGTERM to every process of a job, as ``systemctl stop``
#: sends it, caught a standby's boot there; its stop waited out the 60 s boot timeout)
_DYING_BWRAP = """#!/usr/bin/env python3
import os, signal, subprocess, sys
info_fd = int(sys.argv[sys.argv.index("--info-fd") + 1])
child = subprocess.Popen(["sleep", "1000"], close_fds=False)
os.write(info_fd, b'{"child-pid": %d}' % child.pid)
os.kill(os.getpid(), signal.SIGTERM)
"""


def test_bwrap_killed_after_it_reports_its_init_ends_the_boot_at_once(base_dir, tmp_path):
    """The boot's wait for the agent's ready line ends when bwrap has died, not at the boot
    timeout: the pipe's writer still lives, so no EOF comes. The reported child is killed."""
    fake = tmp_path / "bwrap"
    fake.write_text(_DYING_BWRAP)
    fake.chmod(0o755)

    class DyingBwrap(ProcessProvider):
        def _argv(self, *args):
            return [str(fake), *super()._argv(*args)[1:]]

    provider = DyingBwrap("dying", ProviderOptions(boot_timeout_s=120), base_dir=base_dir)
    sleeps_before = {p.pid for p in psutil.process_iter(["name"]) if p.info["name"] == "sleep"}
    with pytest.raises(VMError, match="did not boot: bwrap was killed by SIGTERM before the guest agent was ready"):
        provider.start("vm0")
    left = [p for p in psutil.process_iter(["name", "status"]) if p.info["name"] == "sleep"
            and p.pid not in sleeps_before and p.info["status"] != psutil.STATUS_ZOMBIE]
    assert left == [], f"bwrap's child outlived the failed boot: {left}"


def test_a_run_id_of_64_characters_boots_under_the_default_folder_and_sweeps(tmp_path):
    """Socket paths must stay within sun_path: a long run id names its pool folders by a
    prefix and a hash (a 64-character one, the longest allowed, failed every boot before),
    and a base folder that leaves no room is a usage error as the provider is made, not a
    pool whose every boot fails."""
    from parallel_rollout.errors import ConfigError
    from parallel_rollout.pool.providers.common import MAX_SOCKET_PATH
    from parallel_rollout.pool.providers.process import base_dir_default

    run_id = "r" * 60 + "-end"
    provider = ProcessProvider(run_id, ProviderOptions(boot_timeout_s=10), base_dir=base_dir_default())
    info = provider.start("n12-vm-40")
    try:
        assert provider.healthy(info)
        assert len(str(provider.run_dir)) < len(str(base_dir_default())) + 40
        assert run_folders(base_dir_default(), run_id) == [provider.run_dir]
        assert run_folders(base_dir_default(), "r" * 60 + "-oth") == []  # same prefix, other id
        info = provider.reset(info)
        assert provider.healthy(info)
    finally:
        provider.stop(info)
    long_base = tmp_path / ("b" * (MAX_SOCKET_PATH - 40))
    with pytest.raises(ConfigError, match=r"socket path .* is longer than 100 characters; set "
                                          r"PARALLEL_ROLLOUT_PROCESS_DIR to a shorter folder"):
        ProcessProvider("run", ProviderOptions(), base_dir=long_base)


@pytest.mark.parametrize("owner", ["alive", "dead"])
def test_a_sweep_of_orphans_leaves_a_live_pools_unlabelled_folder(base_dir, owner):
    """A pool labels a folder a moment after it makes it; two standby boots at once let a
    sweep of orphans (another run of the run id starting) find one of them unlabelled and
    take it from under its boot (seen in CI). A pool folder is one pool's: while a label in
    it names its owner alive, none of its folders is a leftover; once the owner is gone,
    all of them are."""
    from parallel_rollout.pool.providers.common import owner_label, pool_folder, write_meta

    gone = subprocess.Popen(["true"])
    gone.wait()
    pool = pool_folder(base_dir, "same", "0123abcd")
    (pool / "vm0").mkdir(parents=True)
    (pool / "vm0.c").mkdir()  # made, not labelled yet
    label = dict(owner_label()) if owner == "alive" else {"owner_pid": gone.pid, "owner_create_time": 1.0}
    write_meta(pool / "vm0", {"run_id": "same", "vm_id": "vm0", **label})
    swept = ProcessProvider.sweep("same", base_dir=base_dir, orphans_only=True)
    if owner == "alive":
        assert swept == [] and (pool / "vm0").is_dir() and (pool / "vm0.c").is_dir()
    else:
        assert swept == ["same/vm0"] and not pool.exists()


@pytest.mark.skipif(os.geteuid() != 0 or shutil.which("unshare") is None, reason="needs root and unshare")
def test_a_sweep_in_another_pid_namespace_leaves_a_live_pool_alone(base_dir):
    """`unshare --pid --fork --mount-proc parallel-rollout vms sweep` sees no process of the
    live pool's (its pid means nothing there) and removed its VMs ("removed 2 process
    VM(s)"), though `vms sweep` says a live run's VMs are never removed. The pool holds a
    lock on its folder (flock: the folder's, in every namespace); once its owner is gone the
    same sweep takes them."""
    owner, pids = _start_owner("live", base_dir)
    env = {**os.environ, "PARALLEL_ROLLOUT_PROCESS_DIR": str(base_dir)}
    argv = ["unshare", "--pid", "--fork", "--mount-proc", sys.executable, "-m", "parallel_rollout", "vms", "sweep"]
    try:
        swept = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=120)
        assert swept.returncode == 0, swept.stderr
        assert swept.stdout.strip() == "removed 0 process VM(s)", swept.stdout
        assert all(_alive(p) for p in pids) and len(run_folders(base_dir, "live")) == 1
    finally:
        owner.kill()
        owner.wait()
    deadline = time.monotonic() + 3
    while any(_alive(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.02)
    swept = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=120)
    assert swept.stdout.strip() == "removed 2 process VM(s): live/vm0, live/vm1", (swept.stdout, swept.stderr)


def test_a_pools_first_vm_folder_is_made_in_a_locked_pool_folder(base_dir, monkeypatch):
    """At a pool's first VM the pool folder is made and locked before the VM folder is made
    in it: a sweep in another PID namespace (where the owner's pid says nothing) never finds
    the new, unlabelled VM folder in an unlocked pool folder."""
    from parallel_rollout.pool.providers import common, pool_lock

    seen: dict[str, bool] = {}
    makedirs = os.makedirs

    def spying(path, *args, **kwargs):
        path = Path(path)
        if path.name == "vm0" or path.parent.name == "vm0":
            vm_dir = path if path.name == "vm0" else path.parent
            seen.setdefault(str(vm_dir), pool_lock.pool_locked(vm_dir.parent))
        return makedirs(path, *args, **kwargs)

    monkeypatch.setattr(common.os, "makedirs", spying)
    provider = ProcessProvider("first", ProviderOptions(boot_timeout_s=10), base_dir=base_dir)
    vm = provider.start("vm0")
    monkeypatch.setattr(common.os, "makedirs", makedirs)
    try:
        assert seen and all(seen.values()), seen
    finally:
        provider.stop(vm)
