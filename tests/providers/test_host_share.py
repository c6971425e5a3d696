"""A pool's VMs within their share of what they take from the machine (``host_share.py``):
the memory of a runner whose own cgroup is limited (a container, a systemd unit, a CI pod),
the host's pid and file tables. Runs go through the CLI, in a cgroup made for the test."""

from __future__ import annotations

import math
import os
import shutil
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import pytest

from conftest import ROOT, limited_cgroup, read_results, write_tasks
from parallel_rollout.pool.providers import host_share

pytestmark = pytest.mark.skipif(shutil.which("bwrap") is None, reason="needs bubblewrap")

#: fills the three tmpfs folders of the sandbox: memory of the VM's, which no process holds
FILL_TMPFS = ("dd if=/dev/zero of=/tmp/f bs=1M; dd if=/dev/zero of=/dev/shm/f bs=1M; "
              "dd if=/dev/zero of=$HOME/f bs=1M; echo filled")
#: then grows a process until the VM's memory limit kills it
HOG = "python3 -c 'x = []\nwhile True: x.append(bytearray(16 << 20))'; echo hog $?"


def run_cli(tmp_path: Path, tasks: list[dict], *flags: str, procs: Path | None = None,
            run_id: str = "share") -> subprocess.CompletedProcess:
    """An oracle shell run as a user types it, in the cgroup whose ``cgroup.procs`` is
    ``procs`` (moved in before the runner starts) when one is given."""
    data = write_tasks(tmp_path / "tasks.jsonl", tasks)
    argv = [sys.executable, "-m", "parallel_rollout", "run", "--mode", "shell", "--data", str(data),
            "--use-vm-pool", "--output-dir", str(tmp_path / "out"), "--run-id", run_id,
            "--no-progress", *flags]
    if procs is not None:
        argv = ["/bin/sh", "-c", 'echo $$ > "$0" && exec "$@"', str(procs), *argv]
    env = dict(os.environ, PYTHONPATH=str(ROOT / "src"))
    return subprocess.run(argv, capture_output=True, text=True, env=env, timeout=600)


def test_a_runner_in_a_limited_cgroup_outlives_its_vms_filling_their_memory(tmp_path):
    """A runner in a cgroup of 700 MB, default limits: the VM's default memory came from the
    host's RAM (2048 MB here), so one answer that only filled its tmpfs (3 × 341 MB) took the
    runner's cgroup over its limit and the kernel killed the runner (exit 137, no
    results.jsonl, VM folders and cgroups left). The default now takes the cgroup's limit for
    the machine's memory: the VM meets its own limit first, and what gets killed is in it."""
    with limited_cgroup(700) as cgroup:
        tasks = [{"id": "fill", "mode": "shell", "instruction": "fill", "check": "test -s /tmp/f && test -s /dev/shm/f && test -s ~/f",
                  "reference": [FILL_TMPFS]},
                 {"id": "hog", "mode": "shell", "instruction": "fill and hog", "check": "true",
                  "reference": [f"{FILL_TMPFS}; {HOG}"]}]
        proc = run_cli(tmp_path, tasks, "--num-vms", "1", procs=cgroup / "cgroup.procs")
        assert proc.returncode in (0, 1), (proc.returncode, proc.stderr[-2000:])
        assert not list(cgroup.rglob("vm-*")), "the VM's cgroups were left"
    run_dir = tmp_path / "out" / "share"
    assert (run_dir / "summary.json").exists()
    records = {r["task_id"]: r for r in read_results(run_dir) if r.get("final")}
    assert records["fill"]["status"] == "success", records["fill"]
    # the hog met the VM's own limit: its process killed (or the VM, the task's violation),
    # never an infrastructure failure (an OOM kill outside the VM's limit)
    assert records["hog"]["status"] in ("success", "sandbox_violation"), records["hog"]
    assert not records["hog"]["infrastructure"], records["hog"]
    trajectory = (run_dir / records["hog"]["trajectory"]).read_text()
    assert records["hog"]["status"] == "sandbox_violation" or "hog 137" in trajectory, trajectory[-2000:]


def test_a_vm_memory_over_the_runners_cgroup_is_refused_before_anything_starts(tmp_path):
    """--vm-memory-mb 1024 for a runner in a cgroup of 350 MB: the VM's tmpfs fill took the
    cgroup over its limit and the kernel killed the runner. It is now a usage error that names
    the flag, the cgroup and its limit, and nothing starts."""
    with limited_cgroup(350) as cgroup:
        tasks = [{"id": "fill", "mode": "shell", "instruction": "fill", "check": "true",
                  "reference": [FILL_TMPFS]}]
        proc = run_cli(tmp_path, tasks, "--num-vms", "1", "--vm-memory-mb", "1024",
                       procs=cgroup / "cgroup.procs")
        assert proc.returncode == 2, (proc.returncode, proc.stderr[-2000:])
        said = " ".join(proc.stderr.split())
        assert "--vm-memory-mb 1024" in said and str(cgroup) in said and "(350 MB)" in said, said
        assert "give --vm-memory-mb at most 280" in said, said
        assert not (tmp_path / "out" / "share").exists()
        assert not list(cgroup.iterdir()) or not list(cgroup.rglob("vm-*"))


def test_the_memory_ceiling_is_the_least_limit_of_the_cgroup_and_its_ancestors(tmp_path):
    """v2: memory.max and memory.high of the runner's cgroup and every ancestor the mount
    shows; v1: memory.limit_in_bytes, ~2**63 meaning none; a mount of another subtree (or of
    the runner's cgroup itself, as a container without a cgroup namespace sees it)."""
    v2 = tmp_path / "v2"
    for folder, files in {"": {}, "a": {"memory.max": "max", "memory.high": str(900 << 20)},
                          "a/b": {"memory.max": str(1 << 30), "memory.high": "max"}}.items():
        (v2 / folder).mkdir(parents=True, exist_ok=True)
        for name, value in files.items():
            (v2 / folder / name).write_text(value + "\n")
    mountinfo = f"30 20 0:26 / {v2} rw,nosuid - cgroup2 cgroup2 rw\n"
    ceiling = host_share.memory_ceiling(mountinfo, "0::/a/b\n")
    assert (ceiling.limit_bytes, ceiling.path) == (900 << 20, v2 / "a" / "memory.high")
    assert "(900 MB)" in str(ceiling) and str(v2 / "a") in str(ceiling)
    v1 = tmp_path / "v1"
    v1.mkdir()
    (v1 / "memory.limit_in_bytes").write_text("9223372036854771712\n")
    # docker without a cgroup namespace: the container's cgroup mounted as the mount's root
    mountinfo = f"31 20 0:27 /docker/abc {v1} rw - cgroup cgroup rw,memory\n"
    assert host_share.memory_ceiling(mountinfo, "4:memory:/docker/abc\n") is None
    (v1 / "memory.limit_in_bytes").write_text(str(300 << 20))
    assert host_share.memory_ceiling(mountinfo, "4:memory:/docker/abc\n").limit_bytes == 300 << 20
    assert host_share.memory_ceiling(mountinfo, "4:memory:/other\n") is None


def test_an_explicit_process_cap_over_the_pid_share_is_refused(tmp_path):
    """8 VMs of 4096 processes are 32768 pids: the whole of a kernel.pid_max of 32768, and
    every process of the machine then failed to fork. A cap over the VMs' share is refused."""
    shares = host_share.table_shares(2)
    if shares.pids is None:
        pytest.skip("no kernel.pid_max here")
    # two samples: a run boots no more VMs than it can use (one sample would get one)
    tasks = [{"id": f"t{i}", "mode": "shell", "instruction": "x", "check": "true", "reference": ["true"]}
             for i in range(2)]
    proc = run_cli(tmp_path, tasks, "--num-vms", "2", "--vm-max-processes", str(shares.pids + 1))
    assert proc.returncode == 2, (proc.returncode, proc.stderr[-2000:])
    said = " ".join(proc.stderr.split())
    assert f"--vm-max-processes {shares.pids + 1}" in said and "kernel.pid_max" in said, said
    assert f"give at most {shares.pids}" in said, said


def test_more_spares_than_the_pid_table_has_room_for_are_refused_by_name(tmp_path):
    """--spare-vms 100000 (spares are not cut to the samples as --num-vms is) left each VM a
    share of 0 pids: the run died of a ZeroDivisionError traceback; each VM needs a few."""
    shares = host_share.table_shares(1)
    if shares.pids is None:
        pytest.skip("no kernel.pid_max here")
    tasks = [{"id": "t", "mode": "shell", "instruction": "x", "check": "true", "reference": ["true"]}]
    proc = run_cli(tmp_path, tasks, "--num-vms", "1", "--spare-vms", str(shares.pids))
    said = " ".join(proc.stderr.split())
    assert proc.returncode == 2 and "Traceback" not in said, (proc.returncode, proc.stderr[-2000:])
    assert f"{shares.pids + 1} VMs (the pool's and its spares) leave each 0 processes" in said, said
    assert "run fewer VMs (--num-vms, --spare-vms)" in said and not (tmp_path / "out" / "share").exists(), said


#: takes open files in child processes (each as many as it may) until it holds ``limit`` in
#: all or cannot fork; writes how many to ~/files and holds them ``hold`` seconds
FILE_BOMB = textwrap.dedent("""\
    import os, sys, time
    limit, hold = int(sys.argv[1]), float(sys.argv[2])
    r, w = os.pipe()
    counts = os.fdopen(r)
    taken = 0
    while taken < limit:
        try:
            pid = os.fork()
        except OSError:
            break
        if pid == 0:
            counts.close()
            fds = []
            try:
                while taken + len(fds) < limit:
                    fds.append(os.open("/dev/null", os.O_RDONLY))
            except OSError:
                pass
            os.write(w, b"%d\\n" % len(fds))
            time.sleep(hold)
            os._exit(0)
        taken += int(counts.readline())
    open(os.path.expanduser("~/files"), "w").write(str(taken))
    time.sleep(hold)
""")


@pytest.mark.slow
def test_a_vm_cannot_take_more_than_its_share_of_the_hosts_file_table(tmp_path):
    """15 processes of 20,000 open files each took 300,000 of the host's file table (its
    memory cgroup charged 72 MB): ~124 such processes take all of fs.file-max, and every
    process of the machine (other VMs' agents among them) then gets ENFILE. Each VM now holds
    at most pids.max × RLIMIT_NOFILE files, within its share: an answer that tries for twice
    its share gets its share at most, and another VM's task passes meanwhile."""
    file_max = host_share._sysctl("fs.file-max")
    if file_max is None or file_max >= 2**62:
        pytest.skip("fs.file-max is unbounded here")
    # enough VMs that a VM's share is cheap to reach (the bomb's processes are Python forks)
    vms = max(2, math.ceil(host_share.TABLE_SHARE * file_max / 80_000))
    if vms > 32:
        pytest.skip(f"fs.file-max {file_max}: a VM's share is too big to take in a test")
    share = host_share.table_shares(vms).files
    tasks = [{"id": "bomb", "mode": "shell", "instruction": "files", "timeout": 120,
              "check": f"test \"$(cat ~/files)\" -gt {share}",
              "reference": [f"python3 -c '{FILE_BOMB}' {2 * share} 25"]},
             {"id": "innocent", "mode": "shell", "instruction": "work", "timeout": 120,
              "check": "test -s ~/listing && grep -q 7 ~/sum",
              "reference": ["sleep 15; ls -la / /usr/bin > ~/listing && python3 -c 'print(3 + 4)' > ~/sum"]}]
    # a run boots no more VMs than its samples can use at once, and a VM's share is of the
    # VMs booted: as many samples as VMs, and as many rollouts
    tasks += [{"id": f"filler{n}", "mode": "shell", "instruction": "nothing", "check": "true", "reference": ["true"]}
              for n in range(vms - len(tasks))]
    peak = [int(Path("/proc/sys/fs/file-nr").read_text().split()[0])]
    baseline, done = peak[0], threading.Event()

    def watch() -> None:
        while not done.wait(0.1):
            peak.append(int(Path("/proc/sys/fs/file-nr").read_text().split()[0]))

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    try:
        proc = run_cli(tmp_path, tasks, "--num-vms", str(vms), "--num-rollouts", str(vms))
    finally:
        done.set()
        watcher.join()
    assert not any(cut in proc.stderr for cut in ("VMs are booted", "VM is booted")), proc.stderr[-2000:]  # no fewer: the share is theirs
    records = {r["task_id"]: r for r in read_results(tmp_path / "out" / "share") if r.get("final")}
    bomb_log = (tmp_path / "out" / "share" / records["bomb"]["trajectory"]).read_text()
    print(f"{vms} VMs, a VM's share {share} of fs.file-max {file_max}; host file-nr "
          f"{baseline} -> peak {max(peak)} (+{max(peak) - baseline})")
    # the bomb got no more than its share: its check (more than the share) failed
    assert records["bomb"]["status"] == "failure", (records["bomb"], bomb_log[-2000:])
    assert records["innocent"]["status"] == "success", records["innocent"]
    assert proc.returncode in (0, 1), proc.stderr[-2000:]
    # what the host's table held meanwhile: the VM's share and some room for what other
    # processes of the machine open and close (the bomb tried for twice the share)
    assert max(peak) - baseline <= share + max(20_000, share // 2), (baseline, max(peak))
