"""What one VM may cost the machine and the pool's other VMs (issue 24), as root and as nobody.

An answer that floods its output costs no process of the run its size. A VM has a memory
limit by default, sized from the VMs the pool boots (a runner with no memory cgroup, nobody
here, is told its VMs have none). Without a pids cgroup RLIMIT_NPROC caps each VM, at its
share of the runner's own limit. Two VMs at once each get the per-user kernel limits of a uid
of their own (inotify instances) and their share of the machine's pseudo-terminals.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import threading
from pathlib import Path

import psutil
import pytest

from conftest import assert_exactly_once, write_tasks
from hostile_tasks import GOT_IT, IS_ROOT, ROOT, loopback, run_pool, shell_tasks  # noqa: F401 - fixture
from nobody_runs import _nobody_can_run, _run_as_nobody
from parallel_rollout.config import build_config
from parallel_rollout.pool.providers import cgroups, default_memory_mb
from parallel_rollout.runner import Runner

pytestmark = pytest.mark.skipif(shutil.which("bwrap") is None, reason="needs bubblewrap")


#: an answer that prints 1 GB, then a line the kept tail ends with
FLOOD = "head -c 1000000000 /dev/zero | tr '\\0' x; echo; echo END-OF-FLOOD"
#: the most memory any process of the run (a worker, the pool, a guest agent) may hold
#: while an answer floods its output
FLOOD_RSS_MB = 200


class PeakRss:
    """The largest memory of its own each process below this one held while the block ran,
    sampled every 20 ms: its RSS, or where that is over ``uss_above_mb`` its USS (the pages
    no other process shares). A process forked from this one (pytest, hundreds of MB late in
    the suite) shares its parent's pages and counts them all in its RSS, which put the
    suite's own size over the limit in a run where no process of the flood held a byte of it.
    Nor does a process that was there before the block (multiprocessing's forkserver, which an
    earlier test of this pytest process started, and anything it still has): a CI-style run's
    flood test counted one such at 662 MB, where its own processes each stayed under the limit
    in every run alone and under load."""

    def __init__(self, uss_above_mb: int = 100) -> None:
        self.peaks: dict[int, tuple[int, str]] = {}
        self._uss_above = uss_above_mb << 20
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._before: set[tuple[int, float]] = set()

    def _sample(self) -> None:
        me = psutil.Process()
        while not self._stop.wait(0.02):
            for proc in me.children(recursive=True):
                try:
                    if (proc.pid, proc.create_time()) in self._before:
                        continue
                    rss = proc.memory_info().rss
                    if rss > self._uss_above:
                        rss = proc.memory_full_info().uss  # a walk of its maps: only for the large
                    if rss > self.peaks.get(proc.pid, (0, ""))[0]:
                        self.peaks[proc.pid] = (rss, " ".join(proc.cmdline())[:200])
                except psutil.Error:
                    pass

    def __enter__(self) -> "PeakRss":
        for proc in psutil.Process().children(recursive=True):
            try:
                self._before.add((proc.pid, proc.create_time()))
            except psutil.Error:
                pass
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()

    def over(self, limit_mb: int) -> list[tuple[int, str]]:
        """(MB, command line) of every process that went over ``limit_mb``."""
        return [(rss >> 20, cmd) for rss, cmd in self.peaks.values() if rss >> 20 > limit_mb]


def _observations(run_dir: Path, task: str) -> list[dict]:
    lines = []
    for path in sorted(run_dir.glob(f"trajectories/{task}/*/attempt-*.jsonl")):
        lines += [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return lines


FLOOD_TASKS = [{"id": "flood", "mode": "shell", "instruction": "print a lot",
                "reference": [FLOOD], "check": "true", "timeout": 120},
               {"id": "honest0", "mode": "shell", "instruction": "make ok",
                "reference": ["touch ~/ok"], "check": GOT_IT, "timeout": 30}]


def _check_flood(peaks: PeakRss, finals: dict, run_dir: Path) -> None:
    assert finals["flood#0"]["status"] == "success", json.dumps(finals["flood#0"])[:3000]
    assert finals["honest0#0"]["status"] == "success", finals["honest0#0"]
    outputs = [str(turn) for turn in _observations(run_dir, "flood")]
    assert any("END-OF-FLOOD" in text for text in outputs), outputs[:1]
    assert len(max(outputs, key=len)) < 20_000, "more than the kept tail reached the record"
    assert not peaks.over(FLOOD_RSS_MB), peaks.over(FLOOD_RSS_MB)
    assert peaks.peaks, "no process of the run was seen"


@pytest.mark.parametrize("user", ["runner", "nobody"])
def test_an_output_flood_costs_no_process_its_size(tmp_path, user):
    """An answer printing 1 GB: the guest agent and the worker read it as it comes and keep
    the tail (which ends with what it printed last); no process of the run holds more than
    200 MB, and the run goes on."""
    if user == "runner":
        with PeakRss() as peaks:
            data = write_tasks(tmp_path / "flood.jsonl", FLOOD_TASKS)
            outcome = Runner(build_config(dict(
                mode="shell", data=str(data), agent="oracle", num_rollouts=1, num_vms=1,
                use_vm_pool=True, output_dir=str(tmp_path / "out"), run_id="flood",
                progress=False))).run()
        finals = assert_exactly_once(outcome.run_dir, {"flood#0", "honest0#0"})
        _check_flood(peaks, finals, outcome.run_dir)
        return
    why = _nobody_can_run()
    if why:
        pytest.skip(why)
    with PeakRss() as peaks:
        # the runner's hard RLIMIT_NPROC (2000) is below the default cap of a VM (4096)
        for table in _run_as_nobody("shell", FLOOD_TASKS, None, "--vm-max-processes", "128"):
            assert table["proc"].returncode == 0, table["proc"].stderr[-2000:]
            _check_flood(peaks, table["finals"], table["run_dir"])


def test_a_vm_has_a_memory_limit_by_default(tmp_path):
    """Without --vm-memory-mb a shell VM is bounded too (base.default_memory_mb: min(2048 MB,
    80% of the host / M)): an answer that takes 500 MB more than that is killed, not given
    it, and the VM serves the next task."""
    if not IS_ROOT or "memory" not in cgroups.available():
        pytest.skip("the default limit is a memory cgroup's: none here"
                    + ("" if IS_ROOT else " for an unprivileged runner"))
    limit = default_memory_mb(1)
    hog = {"id": "hog", "mode": "shell", "instruction": "take memory", "timeout": 60,
           "reference": [f"python3 -c 'b = []\nfor _ in range({limit // 100 + 5}): "
                         "b.append(bytearray(100 << 20))' && touch ~/ok"], "check": GOT_IT}
    finals, summary, code = run_pool(tmp_path, "shell", [hog, FLOOD_TASKS[1]], vm_memory_mb=None,
                                     num_vms=1, num_rollouts=1)
    assert code == 0
    assert finals["hog#0"]["status"] == "failure" and finals["hog#0"]["reward"] == 0.0, finals["hog#0"]
    assert finals["honest0#0"]["status"] == "success", finals["honest0#0"]
    assert summary["vm"]["marked_dead"] == 0, summary["vm"]


@pytest.mark.parametrize("flags, vms", [
    (dict(mode="shell", num_rollouts=64), 64),  # a VM per worker: --num-rollouts VMs
    (dict(mode="shell", num_vms=64, use_vm_pool=True), 64),
    (dict(mode="py", num_vms=200, use_vm_pool=True), 200),  # py's own 2048 MB, never beyond the share
])
def test_the_default_memory_is_sized_from_the_pools_vms(flags, vms):
    """The default limit shares the host among the VMs the pool really boots: with one VM
    per worker that is --num-rollouts (it was sized from --num-vms, 3 by default, whatever
    the number of VMs), and the py mode's 2048 MB is no exception."""
    from parallel_rollout.envs.registry import get_env
    from parallel_rollout.pool.providers import provider_options
    from parallel_rollout.pool.providers.process import ProcessProvider

    config = build_config(flags)
    options = provider_options(config, ProcessProvider, [get_env(flags["mode"])])
    share = default_memory_mb(vms)
    assert options.default_memory_mb == share
    if flags["mode"] == "py" and "memory_mb" in ProcessProvider.supported_limits():
        assert options.memory_mb == min(2048, share)


def test_without_a_memory_cgroup_nobody_is_told_its_vms_have_no_memory_limit():
    """A runner that is not root has no memory cgroup here (none is delegated to nobody), and
    an unprivileged user has no other way to bound a sandbox's total memory: no default limit
    applies (a default RLIMIT_AS per process would break browsers), and the run says so on
    the console; with --vm-memory-mb a memory hog is stopped (the memory_hog row as nobody)."""
    why = _nobody_can_run()
    if why:
        pytest.skip(why)
    tasks = [t for t in FLOOD_TASKS if t["id"] == "honest0"]
    for table in _run_as_nobody("shell", tasks, None, "--vm-max-processes", "128", memory_mb=None):
        proc = table["proc"]
        assert proc.returncode == 0, proc.stderr[-2000:]
        assert table["finals"]["honest0#0"]["status"] == "success", table["finals"]
        assert "the VMs have no memory limit; --vm-memory-mb sets one" in proc.stderr, proc.stderr[-2000:]


#: forks sleepers until the cap refuses one; writes how many it got
COUNT_FORKS = ("import os, time\nn = 0\nfor _ in range(400):\n    try:\n        pid = os.fork()\n"
               "    except OSError:\n        break\n    if pid == 0:\n        time.sleep(60)\n"
               "        os._exit(0)\n    n += 1\nopen(os.path.expanduser('~/n'), 'w').write(str(n))\n")


def _skip_unless_nproc_caps_a_sandbox_as_nobody() -> None:
    """Skip unless the tests can run as nobody and RLIMIT_NPROC caps nobody's sandboxes."""
    why = _nobody_can_run()
    if why:
        pytest.skip(why)
    if not subprocess.run(["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups",
                           sys.executable, "-c", "from parallel_rollout.pool.providers import "
                           "cgroups; raise SystemExit(not cgroups.nproc_caps_a_sandbox())"],
                          env={**os.environ, "PYTHONPATH": str(ROOT / "src")}).returncode == 0:
        pytest.skip("RLIMIT_NPROC does not cap a sandbox here (Linux before 5.14)")


def test_without_a_pids_cgroup_rlimit_nproc_caps_each_vm_as_nobody(loopback):
    """A runner that is not root and has no pids cgroup (nobody here: the v1 hierarchy is
    root's) caps each VM with RLIMIT_NPROC in the sandbox's user namespace: a task gets fewer
    than --vm-max-processes 128 processes even though nobody runs more than that on the
    host, a fork bomb is contained, and the run finishes."""
    _skip_unless_nproc_caps_a_sandbox_as_nobody()
    tasks = [{"id": "count_forks", "mode": "shell", "instruction": "fork until refused",
              "reference": [f"python3 -c \"{COUNT_FORKS}\" >/dev/null 2>&1 </dev/null"], "timeout": 20,
              "check": 'n=$(cat ~/n) && [ "$n" -ge 50 ] && [ "$n" -lt 128 ]'},
             *[t for t in shell_tasks(loopback.port) if t["id"] in ("fork_bomb", "honest0")]]
    for table in _run_as_nobody("shell", tasks, None, "--vm-max-processes", "128"):
        proc = table["proc"]
        assert proc.returncode == 0, proc.stderr[-2000:]
        finals = table["finals"]
        assert finals["count_forks#0"]["status"] == "success", finals["count_forks#0"]
        assert finals["fork_bomb#0"]["reward"] == 0.0 and finals["honest0#0"]["status"] == "success"
        assert table["summary"]["vm"]["marked_dead"] == 0, table["summary"]["vm"]


#: forks sleepers until refused (at most 3000), says how many, and holds them a while
HOLD_FORKS = ("import os, time\nn = 0\nwhile n < 3000:\n    try:\n        pid = os.fork()\n"
              "    except OSError:\n        break\n    if pid == 0:\n        time.sleep(20)\n"
              "        os._exit(0)\n    n += 1\nopen(os.path.expanduser('~/n'), 'w').write(str(n))\n"
              "time.sleep(10)\n")


@pytest.mark.slow
def test_one_vm_cannot_take_the_runners_process_limit_as_nobody():
    """As nobody without a pids cgroup, every sandbox's processes also count against the
    runner's own RLIMIT_NPROC (2000 here): a VM's default cap is its share of it (the
    limit split among the pool's two VMs and the runner: cgroups.nproc_share), so a task
    forking all it can leaves the other VM room to start its commands. At 4096 per VM the
    first took the 2000 whole and the other VM's commands failed to start."""
    _skip_unless_nproc_caps_a_sandbox_as_nobody()
    share = 2000 // 3
    tasks = [{"id": "hog", "mode": "shell", "instruction": "fork all you can", "timeout": 40,
              "reference": [f"python3 -c \"{HOLD_FORKS}\" >/dev/null 2>&1 </dev/null"],
              "check": f'n=$(cat ~/n) && [ "$n" -ge 50 ] && [ "$n" -le {share} ]'},
             {"id": "victim", "mode": "shell", "instruction": "start 50 processes", "timeout": 40,
              "reference": ["sleep 4; for i in $(seq 50); do sleep 5 & done; wait && touch ~/ok"],
              "check": GOT_IT}]
    for table in _run_as_nobody("shell", tasks):
        assert table["proc"].returncode == 0, table["proc"].stderr[-2000:]
        finals = table["finals"]
        assert finals["hog#0"]["status"] == "success", finals["hog#0"]
        assert finals["victim#0"]["status"] == "success", finals["victim#0"]
        first, second = sorted(finals.values(), key=lambda record: record["started_at"])
        assert first["vm"] != second["vm"] and second["started_at"] < first["ended_at"], (first, second)


#: takes every inotify instance its user may have, says how many, and holds them a while
HOLD_INOTIFY = ("import ctypes, os, time\nlibc = ctypes.CDLL(None, use_errno=True)\nn = 0\n"
                "while n < 100000 and libc.inotify_init() >= 0:\n    n += 1\n"
                "open(os.path.expanduser(\"~/n\"), \"w\").write(str(n))\ntime.sleep(8)\n")


def test_one_vm_cannot_take_another_vms_per_user_limits(tmp_path):
    """Two VMs at once, each task takes every inotify instance its user may hold (128 by
    default) and keeps them: as root each VM's commands have a uid of their own
    (sandbox_uids.py), so both get (nearly) all of them. With one uid for every VM the
    second got none ("inotify_init: Too many open files")."""
    if not IS_ROOT:
        pytest.skip("an unprivileged runner's VMs share its uid: per-user kernel limits are "
                    "the runner's, split by nothing (README, 'What the sandbox is, and is not')")
    check_own_per_user_limits(*run_pool(tmp_path, "shell", hold_inotify_tasks()))


def hold_inotify_tasks() -> list[dict]:
    """Two tasks that each take every inotify instance their user may hold, and pass only
    if they got at least three quarters of them."""
    limit = int(Path("/proc/sys/fs/inotify/max_user_instances").read_text())
    return [{"id": f"hold{i}", "mode": "shell", "instruction": "hold inotify instances",
             "reference": [f"python3 -c '{HOLD_INOTIFY}'"], "timeout": 30,
             "check": f'n=$(cat ~/n) && [ "$n" -ge {limit * 3 // 4} ]'} for i in range(2)]


def check_own_per_user_limits(finals: dict, summary: dict, code: int) -> None:
    """Both hold_inotify_tasks succeeded, on two VMs at once (not one after the other)."""
    assert code == 0
    for key, record in finals.items():
        assert record["status"] == "success", record
    first, second = sorted(finals.values(), key=lambda record: record["started_at"])
    assert first["vm"] != second["vm"] and second["started_at"] < first["ended_at"], (first, second)


#: takes every pseudo-terminal it can, says how many, and holds them a while
HOLD_PTYS = ("import os, time\nfds = []\nwhile len(fds) < 5000:\n    try:\n"
             "        fds.append(os.openpty())\n    except OSError:\n        break\n"
             "open(os.path.expanduser(\"~/n\"), \"w\").write(str(len(fds)))\ntime.sleep(8)\n")


def hold_pty_tasks() -> list[dict]:
    """Two tasks that each take every pseudo-terminal they can and hold them: each passes
    only if it got its VM's share (sandbox_fs.MAX_PTYS), no more and not much less."""
    from parallel_rollout.pool.providers.sandbox_fs import MAX_PTYS

    return [{"id": f"hold{i}", "mode": "shell", "instruction": "hold ptys",
             "reference": [f"python3 -c '{HOLD_PTYS}'"], "timeout": 30,
             "check": f'n=$(cat ~/n) && [ "$n" -ge {MAX_PTYS * 3 // 4} ] && [ "$n" -le {MAX_PTYS} ]'}
            for i in range(2)]


@pytest.mark.parametrize("user", ["runner", "nobody"])
def test_one_vm_cannot_take_the_machines_ptys(tmp_path, user):
    """Two VMs at once, each task takes every pseudo-terminal it can and keeps them. The
    kernel's pty.max is one pool for every sandbox of the machine (3072 beyond the host's
    reserve): before each sandbox's devpts had a cap of its own, the first took them all
    and the second got none ("openpty: No space left on device")."""
    if user == "runner":
        check_own_per_user_limits(*run_pool(tmp_path, "shell", hold_pty_tasks()))
        return
    why = _nobody_can_run()
    if why:
        pytest.skip(why)
    for table in _run_as_nobody("shell", hold_pty_tasks(), None, "--vm-max-processes", "128"):
        assert table["proc"].returncode == 0, table["proc"].stderr[-2000:]
        check_own_per_user_limits(table["finals"], table["summary"], 0)


def test_the_pty_cap_never_remounts_the_hosts_devpts():
    """The cap is a remount, which changes a devpts for every mount of it: asked of a
    process that shares the host's /dev/pts (this one), it refuses and leaves it as it was."""
    from parallel_rollout.pool.providers.sandbox_fs import cap_ptys

    before = [line for line in Path("/proc/self/mountinfo").read_text().splitlines() if "devpts" in line]
    why = cap_ptys(os.getpid(), own_userns=not IS_ROOT)
    assert why and "host's" in why, why
    after = [line for line in Path("/proc/self/mountinfo").read_text().splitlines() if "devpts" in line]
    assert after == before


@pytest.mark.skipif(not IS_ROOT, reason="a runner that is not root caps by nsenter")
def test_the_pty_cap_from_a_thread_caps_the_sandbox_and_leaves_the_runner_where_it_was(monkeypatch):
    """As root the cap is remounted from a thread of the runner that joins the sandbox's
    mount namespace and root (no nsenter, no mount program: ~5 ms of every boot). The
    sandbox's devpts gets the cap; the process (its other threads, and threads it starts
    later) stays in its own namespace, root and folder, with its own devpts untouched."""
    from parallel_rollout.pool.providers import sandbox_fs
    from parallel_rollout.pool.providers.process import ProcessProvider

    def no_programs(*args, **kwargs):
        raise AssertionError(f"ran a program: {args}")

    def seen_by_a_new_thread() -> list[str]:
        seen: list[str] = []
        thread = threading.Thread(target=lambda: seen.extend(
            [os.readlink("/proc/thread-self/ns/mnt"), os.readlink("/proc/thread-self/root"), os.getcwd()]))
        thread.start()
        thread.join()
        return seen

    def devpts(pid: int | str) -> list[str]:
        return [line.split(" - ")[1] for line in Path(f"/proc/{pid}/mountinfo").read_text().splitlines()
                if " /dev/pts " in line]

    provider = ProcessProvider("pty-cap-thread")
    info = provider.start("vm0")
    try:
        here = [os.readlink("/proc/self/ns/mnt"), os.readlink("/proc/self/root"), os.getcwd()]
        own_devpts = devpts("self")
        monkeypatch.setattr(sandbox_fs.subprocess, "run", no_programs)
        assert sandbox_fs.cap_ptys(info.private["init_pid"], own_userns=False, limit=17) is None
        assert any("max=17" in line for line in devpts(info.private["init_pid"])), devpts(info.private["init_pid"])
        assert [os.readlink("/proc/self/ns/mnt"), os.readlink("/proc/self/root"), os.getcwd()] == here
        assert seen_by_a_new_thread() == here
        assert devpts("self") == own_devpts
        assert not sandbox_fs._thread_failed
    finally:
        provider.stop(info)
