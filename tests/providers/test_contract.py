"""The provider contract, one test body per clause, run against every provider.

Parametrized over ``process``, ``docker`` and ``qemu`` by the ``harness`` fixture
(tests/providers/conftest.py), which prepares each provider (a Docker daemon and the guest
image for docker, the guest image for qemu) or skips it with the reason. After every test,
nothing of its runs may be left: no container, qemu process, overlay, socket or folder.

Then the docker provider's own promises (isolation, limits, errors, the image cache), and the
shipped benchmarks through the pool on docker, which must end as they do on ``process``.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from parallel_rollout.config import build_config
from parallel_rollout.errors import ConfigError, ProviderUnavailable
from parallel_rollout.guest.client import GuestClient
from parallel_rollout.pool.providers.base import ProviderOptions
from parallel_rollout.pool.providers.docker import DockerProvider
from parallel_rollout.pool.providers.docker_cli import LABEL, containers

ROOT = Path(__file__).resolve().parents[2]
SHELL_TASKS = ROOT / "benchmarks" / "shell_tasks.jsonl"
#: a process with this name in its command line is what a leaky task leaves running
STRAY = "pr-contract-stray"


@pytest.fixture
def provider(harness):
    return harness.provider()


@pytest.fixture
def vm(provider):
    info = provider.start("vm0")
    yield info
    provider.stop(info)


def _stray_running(client: GuestClient) -> bool:
    probe = client.run_python(textwrap.dedent(f"""
        import os
        found = False
        for pid in filter(str.isdigit, os.listdir("/proc")):
            try:
                with open(f"/proc/{{pid}}/cmdline", "rb") as f:
                    found |= f.read().startswith(b"{STRAY}")
            except OSError:
                pass
        print(found)
    """))
    return probe["output"].strip() == "True"


# ------------------------------------------------------------------------ contract


def test_start_reaches_the_guest_agent(harness, provider, vm):
    assert vm.provider == harness.name and vm.vm_id == "vm0" and vm.run_id == provider.run_id
    assert GuestClient(vm.address).health()["status"] == "ok"
    assert provider.healthy(vm)


def test_execute(vm):
    client = GuestClient(vm.address)
    result = client.execute("echo $((6 * 7)); echo oops >&2; exit 3", shell=True)
    assert (result["output"], result["error"].strip(), result["returncode"]) == ("42\n", "oops", 3)
    assert client.execute(["python3", "-c", "print('py')"])["output"] == "py\n"
    assert client.platform() == "Linux"


def test_file_round_trip(vm):
    client = GuestClient(vm.address)
    payload = bytes(range(256)) * 64
    client.write_file("~/sub/dir/blob.bin", payload)
    assert client.read_file("~/sub/dir/blob.bin") == payload
    client.write_file("/tmp/t.txt", b"tmp")
    assert client.execute("cat /tmp/t.txt", shell=True)["output"] == "tmp"


def test_reset_restores_the_snapshot(provider, vm):
    client = GuestClient(vm.address)
    client.write_file("~/after-snapshot.txt", b"written after the snapshot")
    client.write_file("/tmp/after-snapshot.txt", b"also")
    # a daemon that escapes the agent's process group, as a leaky task's would
    client.execute(f"setsid bash -c 'exec -a {STRAY} sleep 1000' >/dev/null 2>&1 < /dev/null &",
                   shell=True)
    deadline = time.monotonic() + 10
    while not _stray_running(client):
        assert time.monotonic() < deadline, "the stray process never started"
        time.sleep(0.05)

    info = provider.reset(vm)
    try:
        client = GuestClient(info.address)
        assert info.vm_id == "vm0" and provider.healthy(info)
        listing = client.execute("ls -a ~ /tmp", shell=True)["output"]
        assert "after-snapshot.txt" not in listing
        assert not _stray_running(client), "a process started after the snapshot survived reset"
        # and again, from the reset VM
        client.write_file("~/second.txt", b"2")
        info = provider.reset(info)
        assert "second.txt" not in GuestClient(info.address).execute("ls ~", shell=True)["output"]
    finally:
        provider.stop(info)


def test_healthy_turns_false_when_killed_from_outside(harness, provider, vm):
    assert provider.healthy(vm)
    harness.kill_from_outside(vm)
    deadline = time.monotonic() + 10
    while provider.healthy(vm):
        assert time.monotonic() < deadline, "still healthy 10 s after it was killed"
        time.sleep(0.1)
    provider.stop(vm)  # stopping a dead VM works and cleans up (the fixture stops it again)


def test_death_cause_names_a_kill_from_outside(harness, provider, vm):
    """A VM killed from outside (an operator, the host's OOM killer) is not its task's doing:
    the provider says so, and why, and the pool retries the task on another VM instead of
    blaming it. While the VM runs, no cause is claimed (whatever broke, the task may have)."""
    assert provider.death_cause(vm) is None
    harness.kill_from_outside(vm)
    cause = provider.death_cause(vm)
    assert cause and "SIGKILL" in cause, cause


def test_stop_leaves_nothing_and_is_idempotent(harness, provider):
    infos = [provider.start(f"vm{i}") for i in range(2)]
    assert harness.leftovers(provider.run_id)
    for info in infos:
        provider.stop(info)
        provider.stop(info)
    assert harness.leftovers(provider.run_id) == []
    for info in infos:
        assert not provider.healthy(info)


SWEEP_CHILD = textwrap.dedent("""
    import json, sys, time
    from parallel_rollout.pool.providers import get_provider
    from parallel_rollout.pool.providers.base import ProviderOptions
    name, run_id, boot_timeout = sys.argv[1], sys.argv[2], float(sys.argv[3])
    provider = get_provider(name)(run_id, ProviderOptions(boot_timeout_s=boot_timeout))
    infos = [provider.start(f"vm{i}") for i in range(2)]
    provider.reset(infos[0])  # the VM is mid-life: reset once, its spare (if any) exists
    print(json.dumps([i.vm_id for i in infos]), flush=True)
    time.sleep(3600)
""")


def _pool_owner(harness, run_id: str, script: str = SWEEP_CHILD) -> subprocess.Popen:
    """A process of its own that owns a pool of ``run_id`` (``script``: two VMs, one reset,
    by default), once it has said what its script prints when its VMs are up."""
    child = subprocess.Popen([sys.executable, "-c", script, harness.name, run_id, str(harness.boot_timeout_s)],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    line = child.stdout.readline()
    if script == SWEEP_CHILD and json.loads(line or "null") != ["vm0", "vm1"]:
        _kill_owner(child)
        pytest.fail(child.stderr.read() if not line else line)
    return child


def _kill_owner(child: subprocess.Popen) -> None:
    """SIGKILL a pool's owner, as a killed run: its VMs stay behind."""
    child.send_signal(signal.SIGKILL)
    child.wait(timeout=30)
    child.stdout.close()
    child.stderr.close()


def test_sweep_after_a_sigkilled_owner_leaves_nothing(harness, provider, vm):
    """A run killed with SIGKILL cannot stop its VMs; ``sweep()`` finds them by their labels
    and owner, and leaves the VMs of live runs (``vm`` here) alone."""
    dead_run = harness.new_run_id()
    child = _pool_owner(harness, dead_run)
    try:
        assert harness.leftovers(dead_run)
    finally:
        _kill_owner(child)
    removed = harness.cls.sweep()
    assert {f"{dead_run}/vm0", f"{dead_run}/vm1"} <= set(removed)
    assert harness.leftovers(dead_run) == []
    assert provider.healthy(vm), "sweep() removed a VM whose owner is alive"
    assert harness.leftovers(provider.run_id)
    harness.cls.sweep(provider.run_id)  # by run id: the owner's liveness does not matter
    assert harness.leftovers(provider.run_id) == []


# --------------------------------------------------------------------- docker only


@pytest.fixture
def docker(docker_harness):
    return docker_harness


def test_docker_isolation_network_none_fresh_tmp_and_limits(docker):
    provider = docker.provider(memory_mb=256, max_processes=50)
    info = provider.start("vm0")
    try:
        client = GuestClient(info.address)
        assert client.execute(["hostname"])["output"].strip() == "vm0"
        ifaces = client.run_python("import socket; print([n for _, n in socket.if_nameindex()])")
        assert ifaces["output"].strip() == "['lo']"
        assert client.execute("ls -A /tmp", shell=True)["output"] == ""
        limits = client.execute("cat /sys/fs/cgroup/pids.max /sys/fs/cgroup/pids/pids.max "
                                "/sys/fs/cgroup/memory.max "
                                "/sys/fs/cgroup/memory/memory.limit_in_bytes 2>/dev/null",
                                shell=True)["output"].split()
        assert "50" in limits and str(256 * 1024 * 1024) in limits
        # open files within the VM's share of the host's file table, which no command can raise
        assert client.execute("ulimit -Sn; ulimit -Hn", shell=True)["output"].split() == ["1024", "1024"]
        assert "refused" in client.execute("ulimit -n 4096 2>&1 || echo refused", shell=True)["output"]
        env = client.execute(["env"])["output"]
        assert "PARALLEL_ROLLOUT_VM=vm0" in env and "HOME=/home/user" in env
    finally:
        provider.stop(info)


#: a docker pool of one VM whose spare is up (its containers stay as they are), in a process of its own
DOCKER_ONE_VM_CHILD = textwrap.dedent("""
    import sys, time
    from parallel_rollout.pool.providers.base import ProviderOptions
    from parallel_rollout.pool.providers.docker import DockerProvider
    provider = DockerProvider(sys.argv[2], ProviderOptions(boot_timeout_s=float(sys.argv[3])))
    provider.start("vm0")
    provider._spares["vm0"].result(timeout=60)  # its spare, booted in the background
    print("ready", flush=True)
    time.sleep(3600)
""")


def test_docker_two_live_runs_of_one_run_id_each_keep_their_own_vm0(docker):
    """Two runs of one run id (two output folders) may run at once, each with a vm0. Their
    pools looked at every container labelled with the run and VM ids: the second one's boot
    refused the first's ("belongs to another live run of that id") and spent a replacement,
    and its stop would remove them. Each pool handles only its own now (a ``.pool`` label, a
    folder of its own); a sweep of the run's orphans leaves a live pool's alone, and takes
    them once that pool is gone. The other pool runs in a process of its own: a pool holds
    a lock on its folder while its process lives, which a sweep reads as a live pool."""
    run_id = docker.new_run_id()
    other = _pool_owner(docker, run_id, DOCKER_ONE_VM_CHILD)
    try:
        theirs = {c["name"]: c["state"] for c in containers(f"{LABEL}.run={run_id}")}
        assert sorted(theirs.values()) == ["running", "running"], (theirs, other.stderr.read())
        ours = docker.provider(run_id)
        vm = ours.start("vm0")
        try:
            vm = ours.reset(vm)
            assert ours.healthy(vm)
        finally:
            ours.stop(vm)
        assert {c["name"]: c["state"] for c in containers(f"{LABEL}.run={run_id}")} == theirs
        assert DockerProvider.sweep(run_id, orphans_only=True) == []
        assert {c["name"]: c["state"] for c in containers(f"{LABEL}.run={run_id}")} == theirs
        _kill_owner(other)
        assert DockerProvider.sweep(run_id, orphans_only=True) == [f"{run_id}/vm0"]  # its pool is gone
        assert containers(f"{LABEL}.run={run_id}") == []
    finally:
        if other.returncode is None:
            _kill_owner(other)
        DockerProvider.sweep(run_id)


@pytest.mark.skipif(os.geteuid() != 0 or shutil.which("unshare") is None, reason="needs root and unshare")
def test_docker_sweep_in_another_pid_namespace_leaves_a_live_run_alone(docker):
    """`unshare --pid --fork --mount-proc parallel-rollout vms sweep --provider-name docker`
    sees no process of a live run there (its owner's pid means nothing) and removed its
    containers, though a live run's VMs are never swept. A docker pool holds a lock on its
    folder (flock: the folder's, in every namespace), as the process and qemu pools do: the
    live run's containers stay, a killed run's go, and the live one's go once it is killed."""
    live, dead = docker.new_run_id(), docker.new_run_id()
    owners = {run_id: _pool_owner(docker, run_id) for run_id in (live, dead)}
    # --run-id: this test's runs only (another session's on this daemon are not its to judge)
    argv = ["unshare", "--pid", "--fork", "--mount-proc", sys.executable, "-m", "parallel_rollout", "vms",
            "sweep", "--provider-name", "docker", "--run-id"]

    def sweep(run_id: str) -> str:
        done = subprocess.run([*argv, run_id], capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stderr[-3000:]
        return done.stdout.strip()

    try:
        _kill_owner(owners[dead])
        assert sweep(live) == "removed 0 docker VM(s)"
        assert {c["state"] for c in containers(f"{LABEL}.run={live}")} == {"running"}
        assert sweep(dead) == f"removed 2 docker VM(s): {dead}/vm0, {dead}/vm1"
        assert docker.leftovers(dead) == []
        _kill_owner(owners[live])
        assert sweep(live) == f"removed 2 docker VM(s): {live}/vm0, {live}/vm1"
        assert docker.leftovers(live) == []
    finally:
        for child in owners.values():
            if child.returncode is None:
                _kill_owner(child)


def test_docker_snapshot_name_is_an_image(docker, tmp_path):
    provider = docker.provider()
    info = provider.start("vm0")
    snapshot = f"{provider.run_id.lower()}-snap:1"
    try:
        client = GuestClient(info.address)
        client.write_file("~/prepared.txt", b"in the snapshot")
        subprocess.run(["docker", "commit", info.private["name"], snapshot], check=True,
                       capture_output=True, timeout=120)
    finally:
        provider.stop(info)
    try:
        with pytest.raises(ConfigError, match="--snapshot-name .no-such-image-pr:0.: no such docker image"):
            docker.provider(snapshot_name="no-such-image-pr:0")
        snap_provider = docker.provider(snapshot_name=snapshot)
        info = snap_provider.start("vm0")
        try:
            client = GuestClient(info.address)
            client.write_file("~/later.txt", b"after")
            info = snap_provider.reset(info)
            listing = GuestClient(info.address).execute("ls ~", shell=True)["output"].split()
            assert "prepared.txt" in listing and "later.txt" not in listing
        finally:
            snap_provider.stop(info)
    finally:
        subprocess.run(["docker", "rmi", "-f", snapshot], capture_output=True, timeout=120)


def test_docker_without_a_daemon_says_how_to_start_one(docker, monkeypatch):
    monkeypatch.setenv("DOCKER_HOST", "unix:///nonexistent/docker.sock")
    with pytest.raises(ProviderUnavailable, match=r"no Docker daemon answers at "
                       r"unix:///nonexistent/docker.sock; start one with: dockerd --bridge=none"):
        docker.cls.check_available()


def test_docker_image_build_is_cached(docker):
    started = time.monotonic()
    lines: list[str] = []
    tag = docker.cls.build_image(log=lines.append)
    assert time.monotonic() - started < 10 and "nothing to build" in lines[-1]
    assert tag.startswith("parallel-rollout-guest:")


def test_docker_desktop_without_its_image_says_how_to_build_it(docker, monkeypatch):
    monkeypatch.setenv("PARALLEL_ROLLOUT_PROG", "parallel-rollout")  # the hint names the tool as typed
    from parallel_rollout.pool.providers import docker as docker_module

    monkeypatch.setattr(docker_module, "image_tag", lambda desktop=False: "pr-missing:desktop"
                        if desktop else "pr-missing:plain")
    with pytest.raises(ProviderUnavailable, match=r"image pr-missing:desktop is not built; build "
                       r"it with: parallel-rollout image build --provider docker --desktop$"):
        docker.cls("r", ProviderOptions(desktop=True))


def test_docker_rejects_what_it_cannot_honour(docker):
    with pytest.raises(ConfigError, match="--path-to-vm cannot be honoured"):
        docker.cls("r", ProviderOptions(path_to_vm="/x.qcow2"))
    with pytest.raises(ConfigError, match="--vm-memory-mb must be positive"):
        docker.cls("r", ProviderOptions(memory_mb=0))
    assert docker.cls.supported_limits() == {"memory_mb", "max_processes"}


# ------------------------------------------------------------ benchmarks on docker


def _run(tmp_path, harness, **flags):
    from parallel_rollout.runner import Runner

    run_id = harness.new_run_id()
    base = dict(output_dir=str(tmp_path / "out"), run_id=run_id, progress=False,
                provider_name=harness.name, num_rollouts=4, num_vms=2, use_vm_pool=True)
    base.update(flags)
    return Runner(build_config(base)).run()


@pytest.mark.slow
def test_shell_benchmark_on_docker_matches_process(docker, tmp_path):
    outcome = _run(tmp_path, docker, mode="shell", data=str(SHELL_TASKS))
    assert outcome.exit_code == 0, outcome.message
    assert outcome.summary["successes"] == 25
    assert outcome.summary["status_counts"] == {"success": 25}
    assert outcome.summary["vm"]["resets"] >= 24


@pytest.mark.slow
def test_py_benchmark_on_docker(docker, tmp_path):
    outcome = _run(tmp_path, docker, mode="py", data="humaneval", agent="oracle", limit=20)
    assert outcome.exit_code == 0, outcome.message
    assert outcome.summary["status_counts"] == {"success": 20}
