"""ProcessProvider against real bubblewrap sandboxes: lifecycle, reset, isolation, sweep."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
from pathlib import Path

import psutil
import pytest

from parallel_rollout.errors import ConfigError, VMError
from parallel_rollout.guest.client import GuestClient
from parallel_rollout.pool.providers import get_provider
from parallel_rollout.pool.providers.base import ProviderOptions
from parallel_rollout.pool.providers import cgroups, standby
from parallel_rollout.pool.providers.process import ProcessProvider

pytestmark = pytest.mark.skipif(shutil.which("bwrap") is None, reason="needs bubblewrap")


def _bwraps() -> set[int]:
    return {p.pid for p in psutil.Process().children(recursive=True)
            if p.name() == "bwrap" and p.status() != psutil.STATUS_ZOMBIE}


@pytest.fixture(autouse=True)
def no_leaked_sandbox():
    """Every test must leave no bwrap process of its own behind."""
    before = _bwraps()
    yield
    deadline = time.monotonic() + 3
    while _bwraps() - before and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _bwraps() - before, "a test leaked a sandbox"


@pytest.fixture
def base_dir():
    # short, so socket paths stay under the unix limit (tmp_path is long)
    path = Path(tempfile.mkdtemp(prefix="prt-", dir="/tmp"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def snapshot(tmp_path):
    snap = tmp_path / "snap"
    (snap / "sub").mkdir(parents=True)
    (snap / "a.txt").write_text("initial")
    (snap / "sub" / "b.txt").write_text("nested")
    return snap


@pytest.fixture
def provider(base_dir, snapshot):
    return ProcessProvider("run1", ProviderOptions(snapshot_name=str(snapshot),
                                                   boot_timeout_s=10), base_dir=base_dir)


@pytest.fixture
def vm(provider):
    info = provider.start("vm0")
    yield info
    provider.stop(info)


def _sandbox_pids(info) -> set[int]:
    """Host pids of bwrap, the namespace init and everything below it."""
    pids = {info.private["pid"], info.private["init_pid"]}
    try:
        pids |= {p.pid for p in psutil.Process(info.private["init_pid"]).children(True)}
    except psutil.NoSuchProcess:
        pass
    return pids


def _alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


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
    assert not (base_dir / "run1/vm0/home").exists()
    assert "tmpfs" in client.execute("df --output=fstype ~ /tmp", shell=True)["output"]
    meta = (base_dir / "run1/vm0/meta.json").read_text()
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


def test_the_agent_folder_is_readable_by_others_whatever_the_umask(tmp_path):
    """The commands' user reads the modules and runs the wrappers: the folder's modes are
    0755 and 0644 by the sources' run bits, whatever the runner's umask (the checkout's own
    modes are checked when the provider starts: test_hostile.py)."""
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


def test_healthy_false_after_outside_kill_and_stop_is_idempotent(provider, vm, base_dir):
    assert provider.healthy(vm)
    os.kill(vm.private["pid"], signal.SIGKILL)
    deadline = time.monotonic() + 3
    while provider.healthy(vm) and time.monotonic() < deadline:
        time.sleep(0.01)
    assert not provider.healthy(vm)
    provider.stop(vm)
    provider.stop(vm)
    assert not (base_dir / "run1" / "vm0").exists()
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
    assert not (base_dir / "run1").exists()


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
        assert sorted(os.listdir(base_dir / "crashed")) == ["vm0", "vm1"]  # folders remain

        # without a run id: only runs whose owner is gone
        assert sorted(ProcessProvider.sweep(base_dir=base_dir)) == ["vm0", "vm1"]
        assert not (base_dir / "crashed").exists()
        assert all(_alive(p) for p in live_pids)

        # with a run id: that run goes, even though its owner still lives
        assert sorted(ProcessProvider.sweep("live", base_dir=base_dir)) == ["vm0", "vm1"]
        assert not any(_alive(p) for p in live_pids)
        assert not (base_dir / "live").exists()
        assert ProcessProvider.sweep(base_dir=base_dir) == []
        assert (base_dir / ".agent-bytecode").is_dir()  # a cache, not a run: no sweep takes it
    finally:
        for proc in (owner, live_owner):
            proc.kill()
            proc.wait()


_DYING_OWNER = """
import sys, time
from parallel_rollout.pool.providers import sandbox_processes
from parallel_rollout.pool.providers.process import ProcessProvider

real = sandbox_processes.guarded
# a second between the fork and bwrap's exec: the window where bwrap has no parent-death
# signal of its own yet (it sets it up when it starts)
sandbox_processes.guarded = lambda argv, owner, procs=(): real(
    ["/bin/sh", "-c", 'sleep 1; exec "$@"', "slow", *argv], owner, procs)
provider = ProcessProvider("dying", base_dir=sys.argv[1])
print("booting", flush=True)
provider.start("vm0")
time.sleep(600)
"""


def _processes_naming(folder: Path) -> list[psutil.Process]:
    """Every live process on the host whose command line names ``folder``."""
    found = []
    for proc in psutil.process_iter(["cmdline", "status"]):
        if proc.info["status"] != psutil.STATUS_ZOMBIE \
                and any(f"{folder}/" in arg for arg in proc.info["cmdline"] or ()):
            found.append(proc)
    return found


def test_an_owner_killed_while_it_forks_a_sandbox_leaves_nothing(base_dir):
    """The owner of the sandboxes (the pool's Manager) SIGKILLed after its fork of a sandbox
    and before bwrap set up its own parent-death signal: that bwrap used to start anyway,
    re-parented, after the sweep that follows the crash had looked, and leave its child (a
    bare bwrap with no child of its own) waiting forever. The fork now dies with its owner
    from its first instruction on."""
    owner = subprocess.Popen([sys.executable, "-c", _DYING_OWNER, str(base_dir)],
                             stdout=subprocess.PIPE, text=True)
    vm_dir = base_dir / "dying" / "vm0"
    try:
        assert owner.stdout.readline().strip() == "booting"
        deadline = time.monotonic() + 10
        while not _processes_naming(vm_dir) and time.monotonic() < deadline:
            time.sleep(0.01)  # the fork is under way: the slow shell names the folder
        assert _processes_naming(vm_dir), "the owner never forked the sandbox"
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
from test_process import StuckProvider as Stuck
from parallel_rollout.pool.providers import process
process.read_until = lambda fd, terminator, deadline: time.sleep(600)  # nobody reads it

def owner(base_dir):
    provider = Stuck("exiting", base_dir=base_dir)
    threading.Thread(target=provider.start, args=("vm0",), daemon=True).start()
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        bwraps = [p for p in psutil.Process().children() if p.name() == "bwrap"]
        if bwraps and bwraps[0].children():
            break
        time.sleep(0.01)
    print("held" if bwraps and bwraps[0].children() else "not held", flush=True)
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
    vm_dir = base_dir / "exiting" / "vm0"
    try:
        assert owner.stdout.strip() == "held", owner.stderr[-2000:]
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


@pytest.mark.parametrize("folder", ["vm0", "vm0.b"])
def test_a_vm_folder_of_another_live_run_of_the_run_id_is_left_alone(base_dir, folder):
    """Two runs of one run id (two output folders) name their VMs alike. A folder of the other
    run whose pool lives, between two boots of its VM (no sandbox in it, the VM in its standby's
    folder), is that run's: a boot here refuses it instead of removing it (that broke the other
    run's VM mid-task, blamed on its task)."""
    other_pool = subprocess.Popen(["sleep", "60"])
    try:
        vm_dir = base_dir / "same" / folder
        vm_dir.mkdir(parents=True)
        (vm_dir / "meta.json").write_text(json.dumps({
            "run_id": "same", "vm_id": "vm0", "vm_dir": str(vm_dir), "owner_pid": other_pool.pid,
            "owner_create_time": psutil.Process(other_pool.pid).create_time()}))
        provider = ProcessProvider("same", ProviderOptions(boot_timeout_s=10), base_dir=base_dir)
        with pytest.raises(VMError, match=rf"belongs to another live run of that id \(pool pid {other_pool.pid}\)"):
            provider.start("vm0")
        assert (vm_dir / "meta.json").is_file()
        assert ProcessProvider.sweep("same", base_dir=base_dir, orphans_only=True) == []
        assert (vm_dir / "meta.json").is_file()
    finally:
        other_pool.kill()
        other_pool.wait()
    # once that run's pool is gone, the folder is a leftover: the next boot takes its place
    provider = ProcessProvider("same", ProviderOptions(boot_timeout_s=10), base_dir=base_dir)
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
    assert not (base_dir / "depth").exists()


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
            return sorted({arg.split("/turns/")[1].split("/")[0] for proc in _processes_naming(base_dir / "turns")
                           for arg in proc.cmdline() if "/turns/" in arg})

        deadline = time.monotonic() + 20
        while sandboxes() != ["vm0", "vm0.b", "vm0.c"] and time.monotonic() < deadline:
            time.sleep(0.05)  # the two standbys beside the VM
        assert sandboxes() == ["vm0", "vm0.b", "vm0.c"]
    finally:
        provider.stop(vm)
    assert not [pid for pid in pids if _alive(pid)]
    assert not _processes_naming(base_dir / "turns")
    assert not (base_dir / "turns").exists()


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
    from parallel_rollout.pool.providers import process

    Stuck = StuckProvider
    real_read_until = process.read_until
    held: list[psutil.Process] = []
    vm_dir = base_dir / "orphan" / "vm0"

    def kill_bwrap_then_read(fd, terminator, deadline):
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
        return real_read_until(fd, terminator, deadline)

    monkeypatch.setattr(process, "read_until", kill_bwrap_then_read)
    provider = Stuck("orphan", ProviderOptions(boot_timeout_s=5), base_dir=base_dir)
    with pytest.raises(VMError, match="did not boot"):
        provider.start("vm0")
    assert held and not any(_alive(child.pid) for child in held), \
        f"bwrap's child outlived the failed boot: {[c.pid for c in held if _alive(c.pid)]}"
    assert _bwraps_naming(vm_dir) == []
    assert not vm_dir.exists()


def test_config_errors(base_dir, tmp_path):
    with pytest.raises(ConfigError, match="path_to_vm"):
        ProcessProvider("r", ProviderOptions(path_to_vm="/x.vmx"), base_dir=base_dir)
    with pytest.raises(ConfigError, match="not a folder"):
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


@pytest.fixture
def no_cgroups(tmp_path, monkeypatch):
    """A machine whose only cgroup hierarchy looks writable but refuses (a plain folder: no
    limit files), as a CI runner's container or an undelegated cgroup v2 does."""
    fake = cgroups.Hierarchy(tmp_path / "cg", 2, frozenset({"pids", "memory"}))
    fake.root.mkdir()
    monkeypatch.setattr(cgroups, "hierarchies", lambda: [fake])
    cgroups._probe.cache_clear()
    yield fake
    cgroups._probe.cache_clear()


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


def test_the_base_folder_must_be_ours(tmp_path):
    from parallel_rollout.pool.providers.common import secure_base_dir

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
def test_each_vm_runs_its_commands_as_a_uid_of_its_own(provider, base_dir):
    """Two VMs of a run and one of another run have three uids, named ``user`` in each
    sandbox's /etc/passwd; a reset keeps a VM's, a stopped VM's is handed out again."""
    other = ProcessProvider("run2", ProviderOptions(boot_timeout_s=10), base_dir=base_dir)
    infos = [provider.start("vm0"), provider.start("vm1"), other.start("vm0")]
    try:
        def whoami(info):
            return GuestClient(info.address).execute("id -u; id -un", shell=True)["output"].split()

        seen = [whoami(info) for info in infos]
        assert len({uid for uid, _ in seen}) == 3 and {name for _, name in seen} == {"user"}, seen
        assert all(int(uid) >= 64000 for uid, _ in seen), seen
        infos[0] = provider.reset(infos[0])
        assert whoami(infos[0]) == seen[0]
        provider.stop(infos[1])
        infos[1] = provider.start("vm2")
        assert whoami(infos[1]) == seen[1]  # the lowest free one: vm1's, given back
    finally:
        for info, owner in zip(infos, (provider, provider, other)):
            owner.stop(info)
