"""A whole run (the CLI, in-process) whose output folder is on a tiny tmpfs that fills up
mid-run: the run stops with a clear message and exit code 1, results.jsonl holds only whole
lines, no sample is given a final record because of the full disk, and a resume after space
is freed finishes every sample exactly once.

The store-level cases (a write cut back to the last whole line, ENOSPC on a real tmpfs) and
the two-runs-one-folder lock are in tests/test_results.py; this adds the run around them:
trajectories, events and the summary share the full disk with results.jsonl.
"""

from __future__ import annotations

import json
import subprocess
import time

import pytest
from click.testing import CliRunner

from chaos_support import reap_adopted_sandboxes  # noqa: F401 - an autouse fixture
from conftest import assert_exactly_once, shell_task, small_tmpfs, write_tasks
from parallel_rollout.cli import main

TASKS = 40


@pytest.fixture
def small_disk(tmp_path):
    """A 256 KiB tmpfs (a real ENOSPC); needs root, skipped elsewhere."""
    with small_tmpfs(tmp_path / "disk", "256k") as folder:
        yield folder


def cli(tmp_path, disk, *args):
    data = tmp_path / "tasks.jsonl"
    # the disk is far smaller than the 512 MB a run's start asks for (min-free-disk-mb)
    config = tmp_path / "run.toml"
    config.write_text("min-free-disk-mb = 0\n")
    return CliRunner().invoke(main, ["run", "--mode", "shell", "--data", str(data), "--num-rollouts", "2",
                                     "--output-dir", str(disk), "--run-id", "full", "--no-progress",
                                     "--config", str(config), *args])


def whole_lines(path):
    """The file's records; fails on a line that is not whole JSON."""
    data = path.read_bytes()
    assert not data or data.endswith(b"\n"), "results.jsonl ends in a torn line"
    assert b"\0" not in data
    return [json.loads(line) for line in data.splitlines()]


#: KiB of the 256 KiB disk filled before the run -> which write meets the full disk first
#: (tmpfs counts whole 4 KiB pages, so the first failure is deterministic for a size)
FILLERS = {200: "a trajectory", 208: "results.jsonl"}


@pytest.mark.timeout(120)
@pytest.mark.parametrize("filler_kib", sorted(FILLERS))
def test_output_disk_fills_mid_run_then_resume_finishes(tmp_path, small_disk, filler_kib):
    # Each sample writes a trajectory file (one 4 KiB tmpfs page at least), a result line
    # and a few event lines: with ~50 KiB free the disk fills after about ten samples.
    tasks = [shell_task(f"t{i:02d}", instruction="x" * 300) for i in range(TASKS)]
    write_tasks(tmp_path / "tasks.jsonl", tasks)
    filler = small_disk / "filler"
    filler.write_bytes(b"f" * (filler_kib * 1024))
    run_dir = small_disk / "full"

    # A short --task-timeout: an attempt that never reports back (an env loop lost to the
    # full disk) shows up as a task_timeout record instead of stalling the test.
    result = cli(tmp_path, small_disk, "--task-timeout", "20")
    stopped = next((line for line in result.output.splitlines() if line.startswith("run stopped:")), "")
    print(f"[full-disk {filler_kib} KiB, expected {FILLERS[filler_kib]}] {stopped}")
    assert result.exit_code == 1 and isinstance(result.exception, SystemExit), (result.output, result.exception)
    assert "Traceback" not in result.output
    message = " ".join(result.stderr.split())
    assert "No space left on device" in message and "--resume" in message and "--run-id full" in message
    # the pool stopped its VMs as asked: it is not reported gone, and its stats are kept
    assert "manager was already gone" not in message and "VMs: 2 process" in result.output
    records = whole_lines(run_dir / "results.jsonl")
    finals = [r for r in records if r["final"]]
    assert 0 < len(finals) < TASKS, "the disk did not fill mid-run; resize the filler"
    # a full disk is nobody's outcome: every final record is a real, graded success
    assert {r["status"] for r in finals} == {"success"}, {r["key"]: r["status"] for r in finals}

    # room again: the filler gone and the disk grown, since 256 KiB cannot hold the forty
    # samples' trajectories and report (a report that does not fit is exit 1, by design)
    filler.unlink()
    subprocess.run(["mount", "-o", "remount,size=1m", str(small_disk)], check=True)
    resumed = cli(tmp_path, small_disk, "--resume", "--task-timeout", "20")
    assert resumed.exit_code == 0, (resumed.output, resumed.stderr, resumed.exception)
    assert (run_dir / "report.html").is_file() and "cannot write" not in resumed.stderr
    finals = assert_exactly_once(run_dir, {f"t{i:02d}#0" for i in range(TASKS)})
    assert {r["status"] for r in finals.values()} == {"success"}
    whole_lines(run_dir / "results.jsonl")
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["finished"] == TASKS and summary["successes"] == TASKS


def fill(disk) -> None:
    """Fill the disk to the last byte."""
    with open(disk / "filler", "wb", buffering=0) as fh:
        try:
            while True:
                fh.write(b"f" * 4096)
        except OSError:
            pass
        try:
            while True:
                fh.write(b"f")
        except OSError:
            pass


def test_pool_shutdown_on_a_full_disk_stops_its_vms_and_returns(small_disk):
    """The pool writes events.jsonl line by line; once the disk is full the lines it could not
    write stay in the file's buffer. shutdown() must still stop every VM and return — it used
    to raise OSError from closing that file, which the runner reads as a dead Manager."""
    from parallel_rollout.pool.manager import VMPoolManager

    pool = VMPoolManager("process", "full-disk-pool", 1, events_path=str(small_disk / "events.jsonl"))
    try:
        deadline = time.monotonic() + 30
        while pool.stats()["states"]["idle"] < 1:  # booted
            assert time.monotonic() < deadline, pool.stats()
            time.sleep(0.05)
        # tmpfs allocates whole pages: end the file on a page boundary, so that the pool's
        # next line needs a page the full disk does not have.
        events = small_disk / "events.jsonl"
        pad = 4096 - events.stat().st_size % 4096
        pad += 4096 if pad < 16 else 0
        with open(events, "a") as fh:
            fh.write('{"pad": "' + "x" * (pad - 12) + '"}\n')
        assert events.stat().st_size % 4096 == 0
        fill(small_disk)
        info = pool.lease("w0", "t#0", timeout=10)  # its event line cannot be written
        pool.release(info.vm_id, lease=info.lease)
    finally:
        pool.shutdown()
    assert pool.stats()["states"]["stopped"] == 1 and pool.stats()["states"]["dead"] == 0


def test_a_resume_on_a_disk_still_full_is_refused_naming_what_it_cannot_write(tmp_path, small_disk):
    """--resume while the disk is still full (min-free-disk-mb lowered, as its message offers)
    was a traceback from writing config.json (exit 1, a config.json.tmp left in the folder);
    it is now exit 2 naming the file, with the run folder as it was, and resumes once freed."""
    write_tasks(tmp_path / "tasks.jsonl", [shell_task(f"t{i}") for i in range(3)])
    first = cli(tmp_path, small_disk, "--limit", "2")
    assert first.exit_code == 0, (first.output, first.exception)
    run_dir = small_disk / "full"
    before = {name: (run_dir / name).read_bytes() for name in ("results.jsonl", "config.json")}
    fill(small_disk)
    resumed = cli(tmp_path, small_disk, "--resume")
    assert resumed.exit_code == 2, (resumed.output, resumed.exception)
    assert f"cannot write {run_dir}/config.json: No space left on device" in resumed.stderr, resumed.stderr
    assert {name: (run_dir / name).read_bytes() for name in before} == before
    assert not (run_dir / "config.json.tmp").exists()
    (small_disk / "filler").unlink()
    again = cli(tmp_path, small_disk, "--resume")
    assert again.exit_code == 0, (again.output, again.exception)
    assert_exactly_once(run_dir, {"t0#0", "t1#0"})  # the resume keeps the run's --limit
