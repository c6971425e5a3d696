"""``compare`` on two real runs that differ in known samples, and ``runs list`` over real runs
that ended complete, interrupted (SIGINT) and partial (pool exhausted)."""

from __future__ import annotations

import json
import os
import signal
import shutil
import subprocess
import sys
import time

import pytest
from click.testing import CliRunner

from conftest import ROOT, shell_task, small_tmpfs, write_tasks
from parallel_rollout import exit_codes
from parallel_rollout.cli import main
from parallel_rollout.config import build_config
from parallel_rollout.runner import Runner

scipy_stats = pytest.importorskip("scipy.stats")


def failing(task_id: str) -> dict:
    return shell_task(task_id, reference=["true"])


def too_long(task_id: str) -> dict:
    """More commands than --max-turns 3 allows: ends max_turns."""
    return shell_task(task_id, reference=["true", "true", "true", f"touch ~/{task_id}.done"])


def real_run(tmp_path, run_id: str, tasks: list[dict], **flags):
    data = write_tasks(tmp_path / f"{run_id}.jsonl", tasks)
    config = dict(mode="shell", data=str(data), output_dir=str(tmp_path / "out"), run_id=run_id, num_rollouts=2,
                  max_turns=3, progress=False)
    config.update(flags)
    return Runner(build_config(config)).run()


def test_compare_names_exactly_the_flipped_samples_on_the_intersection(tmp_path):
    # A: t0..t9, t0-t2 fail. B: t1..t11 (t0 dropped, t10 and t11 new); t1 now passes,
    # t3 and t4 now fail, t5 now runs out of turns (a failure type A never had).
    a_tasks = [failing(f"t{i}") if i < 3 else shell_task(f"t{i}") for i in range(10)]
    b_tasks = []
    for i in range(1, 12):
        tid = f"t{i}"
        b_tasks.append(failing(tid) if i in (2, 3, 4) else too_long(tid) if i == 5 else shell_task(tid))
    assert real_run(tmp_path, "a", a_tasks).exit_code == 0
    assert real_run(tmp_path, "b", b_tasks).exit_code == 0

    result = CliRunner().invoke(main, ["compare", "a", "b", "--output-dir", str(tmp_path / "out")])
    assert result.exit_code == 0, result.output
    out = result.output
    assert "the task sets differ; compared on the intersection of 9 samples (1 only in A, 2 only in B)" in out
    assert "pass -> fail: 3: t3#0, t4#0, t5#0" in out
    assert "fail -> pass: 1: t1#0" in out
    assert "new failure types in B: max_turns (1)" in out
    # over the 9 shared: A 7/9 pass, B 5/9
    assert "success rate: 77.8% -> 55.6%" in out
    expected_p = scipy_stats.binomtest(3, 4, 0.5).pvalue  # McNemar exact: 3 of 4 discordant one way
    assert f"McNemar exact p={expected_p:.4g}, not significant" in out

    page = tmp_path / "out" / "b" / "compare-a.html"
    html = page.read_text()
    for key in ("t3#0", "t4#0", "t5#0", "t1#0"):
        assert f'data-key="{key}"' in html
    assert 'href="../a/report.html#sample=t3#0"' in html
    assert (tmp_path / "out" / "b" / "compare-a.txt").read_text().startswith("compare a (A) -> b (B)")

    check = CliRunner().invoke(main, ["compare", str(tmp_path / "out" / "a"), str(tmp_path / "out" / "b"),
                                      "--check", "--html", str(tmp_path / "cmp.html")])
    assert check.exit_code == 0  # worse, but not significantly
    missing = CliRunner().invoke(main, ["compare", "a", "zzz", "--output-dir", str(tmp_path / "out")])
    assert missing.exit_code == 2 and "zzz: no such run folder" in missing.output
    # with --check a baseline that is not there (a missed night) is no verdict, exit 5 (the
    # README's table, as `run --compare-to` does); a missing B stays a usage error
    no_baseline = CliRunner().invoke(main, ["compare", "zzz", "b", "--output-dir", str(tmp_path / "out"), "--check"])
    assert no_baseline.exit_code == exit_codes.EXIT_NO_VERDICT, no_baseline.output
    assert "no verdict: no baseline: zzz: no such run folder" in no_baseline.output
    no_b = CliRunner().invoke(main, ["compare", "a", "zzz", "--output-dir", str(tmp_path / "out"), "--check"])
    assert no_b.exit_code == 2 and "zzz: no such run folder" in no_b.output
    # both missing (a mistyped B on a missed night): B's usage error, not "no verdict"
    neither = CliRunner().invoke(main, ["compare", "zzz", "yyy", "--output-dir", str(tmp_path / "out"), "--check"])
    assert neither.exit_code == 2 and "yyy: no such run folder" in neither.output, neither.output


def test_runs_list_shows_complete_interrupted_and_partial_runs(tmp_path):
    out = tmp_path / "out"
    assert real_run(tmp_path, "done", [shell_task("a"), failing("b")]).exit_code == 0
    exhausted = real_run(tmp_path, "broken", [shell_task("c")], provider_name="chaos_plugins:BootFailsProvider",
                         use_vm_pool=True, num_vms=1, max_vm_replacements=0)
    assert exhausted.exit_code == exit_codes.EXIT_ABORTED

    slow = write_tasks(tmp_path / "slow.jsonl",
                       [shell_task(f"s{i}", reference=["sleep 0.5", f"touch ~/s{i}.done"]) for i in range(12)])
    proc = subprocess.Popen([sys.executable, str(ROOT / "run_parallel_rollout.py"), "--mode", "shell", "--data",
                             str(slow), "--num-rollouts", "1", "--output-dir", str(out), "--run-id", "stopped",
                             "--no-progress"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 60
    results = out / "stopped" / "results.jsonl"
    while not (results.exists() and results.read_text().count("\n") >= 1):
        assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
        time.sleep(0.05)
    # still going: its lock is held, which `partial` (killed, aborted) did not tell apart
    live = CliRunner().invoke(main, ["runs", "list", "--output-dir", str(out), "--json"])
    assert proc.poll() is None, "the run ended before it was listed"
    assert [json.loads(line)["status"] for line in live.output.splitlines()] == ["complete", "partial", "running"], \
        live.output
    proc.send_signal(signal.SIGINT)
    said = proc.communicate(timeout=60)
    assert proc.returncode == exit_codes.EXIT_INTERRUPTED, (results.read_text(), *said)

    result = CliRunner().invoke(main, ["runs", "list", "--output-dir", str(out)])
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert lines[0].split() == ["RUN", "ID", "STARTED", "MODE", "SAMPLES", "SUCCESS", "STATUS"]
    by_id = {line.split()[0]: line.split() for line in lines[1:]}
    assert list(by_id) == ["done", "broken", "stopped"]  # oldest first
    assert by_id["done"][-4:] == ["shell", "2/2", "50.0%", "complete"]
    assert by_id["broken"][-4:] == ["shell", "0/1", "-", "partial"]
    assert by_id["stopped"][-1] == "interrupted" and by_id["stopped"][-4] == "shell"
    # aborted and interrupted runs get their report.html too
    for run_id in ("broken", "stopped"):
        assert f"run <span id=\"run-id\">{run_id}</span>" in (out / run_id / "report.html").read_text()

    as_json = CliRunner().invoke(main, ["runs", "list", "--output-dir", str(out), "--json"])
    rows = [json.loads(line) for line in as_json.output.splitlines()]
    assert [r["status"] for r in rows] == ["complete", "partial", "interrupted"]
    assert rows[0]["success_rate"] == 0.5 and rows[0]["finished"] == 2 and rows[0]["total"] == 2
    empty = CliRunner().invoke(main, ["runs", "list", "--output-dir", str(tmp_path / "none")])
    assert empty.exit_code == 2 and "no such output folder" in empty.output


def test_a_baseline_still_running_is_said_to_be(tmp_path):
    """Last night's job still going (hung, or slow) when tonight's is gated on it: no verdict,
    exit 5, as for any unfinished baseline, but it said `partial`, as of a run that died."""
    out, tasks = tmp_path / "out", [shell_task(f"s{i}", reference=["sleep 0.5", f"touch ~/s{i}.done"]) for i in range(20)]
    slow = write_tasks(tmp_path / "slow.jsonl", tasks)
    proc = subprocess.Popen([sys.executable, str(ROOT / "run_parallel_rollout.py"), "--mode", "shell", "--data",
                             str(slow), "--num-rollouts", "1", "--output-dir", str(out), "--run-id", "night1",
                             "--no-progress"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 60
        while not ((out / "night1" / "results.jsonl").exists()
                   and (out / "night1" / "results.jsonl").read_text().count("\n") >= 1):
            assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
            time.sleep(0.05)
        tonight = CliRunner().invoke(main, ["run", "--mode", "shell", "--data", str(write_tasks(tmp_path / "t.jsonl",
                                     tasks[:2])), "--output-dir", str(out), "--run-id", "night2", "--no-progress",
                                     "--compare-to", "night1"])
        assert proc.poll() is None, "the baseline ended before tonight's run was gated"
    finally:
        proc.send_signal(signal.SIGINT)
        proc.communicate(timeout=60)
    assert tonight.exit_code == exit_codes.EXIT_NO_VERDICT, tonight.output
    assert "no verdict: the baseline A is unfinished (running: " in tonight.output, tonight.output


@pytest.mark.parametrize("summary", [True, False], ids=["summary", "no-summary"])
def test_runs_list_names_a_run_by_its_folder(tmp_path, summary):
    """A copied run folder is listed under its own name, which --run-id, report and compare
    take, not again under the id its config.json keeps."""
    import shutil

    out = tmp_path / "out"
    assert real_run(tmp_path, "nightly", [shell_task("a")]).exit_code == 0
    if not summary:  # killed before its summary: the line comes from results.jsonl
        (out / "nightly" / "summary.json").unlink()
    shutil.copytree(out / "nightly", out / "nightly-copy")
    result = CliRunner().invoke(main, ["runs", "list", "--output-dir", str(out), "--json"])
    assert result.exit_code == 0, result.output
    assert sorted(json.loads(line)["run_id"] for line in result.output.splitlines()) == ["nightly", "nightly-copy"]
    # compare names it so too: it said "compare nightly (A) -> nightly (B)" and wrote compare-nightly.txt
    compared = CliRunner().invoke(main, ["compare", "nightly-copy", "nightly", "--output-dir", str(out)])
    assert compared.exit_code == 0 and compared.output.startswith("compare nightly-copy (A) -> nightly (B)"), compared.output
    assert (out / "nightly" / "compare-nightly-copy.txt").is_file()


def test_a_corrupted_results_line_is_named_by_file_and_line(tmp_path):
    run_dir = tmp_path / "out" / "c"
    run_dir.mkdir(parents=True)
    good = {"key": "a#0", "task_id": "a", "sample_idx": 0, "attempt": 0, "status": "success", "success": True,
            "final": True}
    (run_dir / "results.jsonl").write_text(json.dumps(good) + "\n{not json\n" + '{"key": "torn')
    result = CliRunner().invoke(main, ["report", str(run_dir)])
    assert result.exit_code == 2
    assert f"{run_dir / 'results.jsonl'}:2: corrupted record" in " ".join(result.output.split())
    (run_dir / "results.jsonl").write_text(json.dumps(good) + "\n" + '{"key": "torn')  # a write in progress
    assert CliRunner().invoke(main, ["report", str(run_dir)]).exit_code == 0


def test_runs_list_names_a_run_with_a_corrupted_line_and_load_run_says_where(tmp_path):
    """A run whose results.jsonl has a corrupt line is still a run: listed with its problem
    (file:line, as `report` says it), and load_run() names the line instead of 'not a run'."""
    from parallel_rollout.api import NotARunFolder, load_run
    from parallel_rollout.errors import ConfigError

    out = tmp_path / "out"
    assert real_run(tmp_path, "good", [shell_task("a")]).exit_code == 0
    bad = out / "bad"
    bad.mkdir()
    (bad / "config.json").write_text(json.dumps({"run_id": "bad", "config": {"mode": "shell"}}))
    good = {"key": "a#0", "task_id": "a", "sample_idx": 0, "attempt": 0, "status": "success", "final": True}
    (bad / "results.jsonl").write_text(json.dumps(good) + "\n{not json\n")

    result = CliRunner().invoke(main, ["runs", "list", "--output-dir", str(out)])
    assert result.exit_code == 0, result.output
    row = next(line for line in result.output.splitlines() if line.startswith("bad "))
    assert "unreadable" in row and "results.jsonl:2: corrupted record" in row
    as_json = CliRunner().invoke(main, ["runs", "list", "--output-dir", str(out), "--json"])
    rows = {r["run_id"]: r for r in map(json.loads, as_json.output.splitlines())}
    assert set(rows) == {"good", "bad"} and rows["good"]["problem"] is None
    assert rows["bad"]["status"] == "unreadable" and rows["bad"]["mode"] == "shell"
    assert rows["bad"]["problem"].startswith("results.jsonl:2: corrupted record")

    with pytest.raises(ConfigError, match=r"results\.jsonl:2: corrupted record") as raised:
        load_run(bad)
    assert not isinstance(raised.value, NotARunFolder)


def test_report_and_compare_make_missing_folders_and_name_a_path_they_cannot_write(tmp_path):
    """report -o and compare --html make the folders they need; a path that cannot be written
    (under a file, under /proc) is a usage error naming it, never a traceback; but for
    compare --check, whose verdict stands."""
    assert real_run(tmp_path, "a", [shell_task("a")]).exit_code == 0
    run_dir = tmp_path / "out" / "a"
    copy = shutil.copytree(run_dir, tmp_path / "out" / "b")  # a run compared with itself is refused
    made = CliRunner().invoke(main, ["report", str(run_dir), "-o", str(tmp_path / "nodir" / "deeper" / "r.html")])
    assert made.exit_code == 0, made.output
    assert (tmp_path / "nodir" / "deeper" / "r.html").read_text().startswith("<!DOCTYPE html>")
    (tmp_path / "afile").write_text("a file, not a folder")
    shown = {}
    for argv, path in ((["report", str(run_dir), "-o", str(tmp_path / "afile" / "r.html")],
                        tmp_path / "afile" / "r.html"),
                       (["compare", str(run_dir), str(copy), "--html", "/proc/pr-x.html"], "/proc/pr-x.")):
        result = CliRunner().invoke(main, argv)
        assert result.exit_code == 2, result.output
        assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
        shown[argv[0]] = " ".join(result.output.split())
        assert f"cannot write {path}" in shown[argv[0]]
    # why, of the path given: it said "File exists" (mkdir's, of the file on the way)
    assert f"{tmp_path / 'afile'} is a file, not a folder" in shown["report"]
    assert not list(tmp_path.glob("afile*.tmp"))
    # with --check the verdict is the answer (as run --compare-to's): said, and the exit is its
    # own, not a usage error that a nightly job cannot tell from a wrong flag
    checked = CliRunner().invoke(main, ["compare", str(run_dir), str(copy), "--html", "/proc/pr-x.html", "--check"])
    assert checked.exit_code == 0, checked.output
    said = " ".join(checked.output.split())
    assert "cannot write /proc/pr-x." in said and "the verdict stands" in said and "success rate:" in said


def test_a_report_that_fills_the_disk_leaves_no_tmp_file(tmp_path):
    assert real_run(tmp_path, "a", [shell_task("a")]).exit_code == 0
    with small_tmpfs(tmp_path / "disk", "64k") as disk:
        run_dir = disk / "a"
        run_dir.mkdir()
        for name in ("config.json", "results.jsonl", "summary.json"):
            shutil.copy(tmp_path / "out" / "a" / name, run_dir / name)
        filler = disk / "filler"
        with open(filler, "wb", buffering=0) as fh:  # the disk full but for 8 KiB: no room for the page
            try:
                while True:
                    fh.write(b"f" * 4096)
            except OSError:
                fh.truncate(max(0, fh.tell() - 8192))
        result = CliRunner().invoke(main, ["report", str(run_dir)])
        assert result.exit_code == 2, result.output
        assert f"cannot write {run_dir / 'report.html'}: No space left on device" in " ".join(result.output.split())
        assert sorted(p.name for p in run_dir.iterdir()) == ["config.json", "results.jsonl", "summary.json"]
        filler.unlink()


def test_compare_check_pairs_only_graded_samples(tmp_path, monkeypatch):
    """A sample never graded (an infrastructure failure after its retries) has no score, so
    no 0 either: compare --check pairs the samples graded in both runs and says how many it
    left out, instead of counting 8 never-graded samples as pass -> fail (a false exit 4)."""
    monkeypatch.setenv("PR_CHAOS_DIR", str(tmp_path))
    monkeypatch.syspath_prepend(str(ROOT / "tests"))
    tasks_a = [shell_task(f"t{i}") for i in range(12)]
    tasks_b = [shell_task(f"t{i}", chaos="sigkill_always") if i >= 4 else shell_task(f"t{i}") for i in range(12)]
    agent = dict(agent="chaos_plugins:ChaosAgent", max_retries=0)
    assert real_run(tmp_path, "a", tasks_a, **agent).exit_code == 0
    assert real_run(tmp_path, "b", tasks_b, **agent).exit_code == exit_codes.EXIT_ABORTED
    result = CliRunner().invoke(main, ["compare", "a", "b", "--output-dir", str(tmp_path / "out"), "--check"])
    assert result.exit_code == 0, result.output
    assert "left out: 8 shared sample(s) never graded in A or B" in result.output
    assert "success rate: 100.0% -> 100.0%" in result.output and "pass -> fail: 0" in result.output
    assert "only 4 shared samples" in result.output
    assert "8 shared samples left out: never graded" in (tmp_path / "out" / "b" / "compare-a.html").read_text()


def test_runs_list_reads_a_results_file_changed_since_its_summary(tmp_path):
    """summary.json stamps the results.jsonl it counted (size, mtime): a line corrupted right
    after the run (within the second) makes the run `unreadable`, not the summary's status."""
    out = tmp_path / "out"
    assert real_run(tmp_path, "r", [shell_task("a"), shell_task("b")]).exit_code == 0
    results = out / "r" / "results.jsonl"
    lines = results.read_text().splitlines(keepends=True)
    lines[1] = "{" + lines[1][1:].replace('"', "'", 1)  # the same size, no longer JSON
    results.write_text("".join(lines))
    summary = out / "r" / "summary.json"
    os.utime(summary, ns=(results.stat().st_mtime_ns, results.stat().st_mtime_ns))  # not older
    as_json = CliRunner().invoke(main, ["runs", "list", "--output-dir", str(out), "--json"])
    row = json.loads(as_json.output)
    assert row["status"] == "unreadable" and row["problem"].startswith("results.jsonl:2: corrupted record"), row


def _never_graded_run(tmp_path, monkeypatch):
    """Run r: ok0, ok1 succeed, bad fails, lost's one attempt (--max-retries 0) dies with its
    worker: never graded (exit 1)."""
    monkeypatch.setenv("PR_CHAOS_DIR", str(tmp_path))
    monkeypatch.syspath_prepend(str(ROOT / "tests"))
    tasks = [shell_task("ok0"), shell_task("ok1"), failing("bad"), shell_task("lost", chaos="sigkill")]
    first = real_run(tmp_path, "r", tasks, agent="chaos_plugins:ChaosAgent", max_retries=0)
    assert first.exit_code == exit_codes.EXIT_ABORTED
    return tmp_path / "out"


def test_a_resumed_never_graded_sample_has_one_final_line(tmp_path, monkeypatch):
    """A sample that used up its retries on infrastructure failures is never graded: its last
    record is `never_graded`, not `final`, so after a resume grades it results.jsonl holds one
    `"final": true` line per sample (a plain `select(.final)` counts each once; there were
    two, the worker_died one and the success)."""
    out = _never_graded_run(tmp_path, monkeypatch)
    results = out / "r" / "results.jsonl"
    lost = [json.loads(line) for line in results.read_text().splitlines() if '"lost#0"' in line]
    assert [(r["final"], r.get("never_graded"), r["status"]) for r in lost] == [(False, True, "worker_died")]

    again = subprocess.run([sys.executable, str(ROOT / "run_parallel_rollout.py"), "--output-dir", str(out),
                            "--run-id", "r", "--resume", "--no-progress"], capture_output=True, text=True,
                           timeout=120, env={**os.environ, "PYTHONPATH": str(ROOT / "tests")})
    assert again.returncode == 0, again.stderr
    records = [json.loads(line) for line in results.read_text().splitlines()]
    finals = [r["key"] for r in records if r["final"]]
    assert sorted(finals) == ["bad#0", "lost#0", "ok0#0", "ok1#0"]  # one each: no double count
    assert [r["attempt"] for r in records if r["key"] == "lost#0"] == [0, 1]
    row = json.loads(CliRunner().invoke(main, ["runs", "list", "--output-dir", str(out), "--json"]).output)
    assert (row["status"], row["success_rate"], row["finished"]) == ("complete", 0.75, 4)


def test_runs_list_and_summary_give_the_graded_rate_and_say_ungraded(tmp_path, monkeypatch):
    """A run with a sample never graded exited 1, and its console said "success rate of the
    graded samples 66.7%, 1 never graded"; summary.json's success_rate and `runs list` said
    50.0% (the never-graded sample counted as a failure) and `complete`. Both give the graded
    samples' rate now, and `runs list` says `ungraded`, from summary.json or from the records."""
    out = _never_graded_run(tmp_path, monkeypatch)
    summary = json.loads((out / "r" / "summary.json").read_text())
    assert summary["success_rate"] == summary["success_rate_graded"] == 0.6667 and summary["ungraded"] == 1
    row = json.loads(CliRunner().invoke(main, ["runs", "list", "--output-dir", str(out), "--json"]).output)
    assert (row["status"], row["success_rate"], row["finished"], row["total"]) == ("ungraded", 0.6667, 4, 4)
    table = CliRunner().invoke(main, ["runs", "list", "--output-dir", str(out)]).output
    assert "66.7%" in table and " ungraded" in table
    (out / "r" / "results.jsonl").touch()  # changed since the summary: read from the records
    row = json.loads(CliRunner().invoke(main, ["runs", "list", "--output-dir", str(out), "--json"]).output)
    assert (row["status"], row["success_rate"]) == ("ungraded", 0.6667)


# -- runs killed hard: a summary.json that no longer fits results.jsonl ----------------------

def _start(tmp_path, data, run_id: str, *extra: str) -> subprocess.Popen:
    """The CLI as a real main process, one env loop: a run of `data` under tmp_path/out."""
    return subprocess.Popen([sys.executable, str(ROOT / "run_parallel_rollout.py"), "--mode", "shell", "--data",
                             str(data), "--num-rollouts", "1", "--output-dir", str(tmp_path / "out"), "--run-id",
                             run_id, "--no-progress", *extra],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)


def _lines(run_dir) -> int:
    path = run_dir / "results.jsonl"
    return path.read_text().count("\n") if path.exists() else 0


def _stop_after(proc: subprocess.Popen, run_dir, lines: int, sig: int) -> None:
    """Send `sig` to the run's main process once its results.jsonl holds `lines` lines, and
    wait for its processes (workers, pool manager) to be gone."""
    import psutil

    deadline = time.monotonic() + 60
    while _lines(run_dir) < lines:
        assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
        time.sleep(0.05)
    family = [psutil.Process(proc.pid), *psutil.Process(proc.pid).children(recursive=True)]
    os.kill(proc.pid, sig)
    proc.communicate(timeout=60)
    psutil.wait_procs(family, timeout=20)


@pytest.mark.parametrize("how", ["resume-with-a-higher-limit", "resume-of-an-interrupted-run", "first-session"])
def test_a_run_killed_hard_is_partial_of_its_whole_total_everywhere(tmp_path, how):
    """A resume SIGKILLed left the summary.json of the session before it, stamped with the
    results.jsonl that session counted: it was trusted, so a run resumed with --limit 8 from
    --limit 2 was listed `4/2 complete` and `compare --check` judged against it (exit 0), and
    a resumed interrupted run stayed `interrupted`. A run killed in its first session (no
    summary) was `4/?`. Now runs list, compare, --compare-to and the report call each
    `partial`, out of the total config.json keeps (exit 5 against it)."""
    out = tmp_path / "out"
    data = write_tasks(tmp_path / "slow.jsonl",
                       [shell_task(f"s{i}", reference=["sleep 0.5", f"touch ~/s{i}.done"]) for i in range(8)])
    base = _start(tmp_path, data, "base", "--limit", "2")
    assert base.communicate(timeout=120) and base.returncode == 0
    run_dir = out / "run"
    if how == "resume-with-a-higher-limit":
        first = _start(tmp_path, data, "run", "--limit", "2")
        assert first.communicate(timeout=120) and first.returncode == 0
        resumed = _start(tmp_path, data, "run", "--resume", "--limit", "8")
        _stop_after(resumed, run_dir, 3, signal.SIGKILL)
    elif how == "resume-of-an-interrupted-run":
        first = _start(tmp_path, data, "run")
        _stop_after(first, run_dir, 1, signal.SIGINT)
        assert first.returncode == exit_codes.EXIT_INTERRUPTED
        assert json.loads((run_dir / "summary.json").read_text())["interrupted"]
        resumed = _start(tmp_path, data, "run", "--resume")
        _stop_after(resumed, run_dir, _lines(run_dir) + 1, signal.SIGKILL)
    else:
        first = _start(tmp_path, data, "run")
        _stop_after(first, run_dir, 2, signal.SIGKILL)
        assert not (run_dir / "summary.json").exists()
    finished = len({json.loads(line)["key"] for line in (run_dir / "results.jsonl").read_text().splitlines()})
    assert finished < 8

    rows = {row["run_id"]: row for row in map(json.loads, CliRunner().invoke(
        main, ["runs", "list", "--output-dir", str(out), "--json"]).output.splitlines())}
    assert (rows["run"]["status"], rows["run"]["finished"], rows["run"]["total"]) == ("partial", finished, 8)
    assert f" {finished}/8 " in CliRunner().invoke(main, ["runs", "list", "--output-dir", str(out)]).output
    unfinished = f"the baseline A is unfinished (partial: {finished} of 8 samples final)"
    check = CliRunner().invoke(main, ["compare", "run", "base", "--output-dir", str(out), "--check"])
    assert check.exit_code == exit_codes.EXIT_NO_VERDICT and f"no verdict: {unfinished}" in check.output, check.output
    gated = CliRunner().invoke(main, ["run", "--mode", "shell", "--data", str(data), "--limit", "2", "--output-dir",
                                      str(out), "--run-id", "gated", "--no-progress", "--compare-to", "run"])
    assert gated.exit_code == exit_codes.EXIT_NO_VERDICT and unfinished in gated.output, gated.output
    report = CliRunner().invoke(main, ["report", str(run_dir)])
    assert report.exit_code == 0, report.output
    page = (run_dir / "report.html").read_text()
    assert "status partial" in page and f"{finished}/8" in page


def test_a_run_signalled_as_it_closed_with_every_sample_final_is_complete_and_a_baseline(tmp_path):
    """A scheduler's SIGTERM that lands once the last sample's record is stored, as the run
    stops its workers and VMs: it cut nothing, and the run ends as it would have without it.
    It exited 130 ("interrupted", resume) with its gates skipped, so a night below
    --fail-under (or a regression) went unreported; `runs list` called it interrupted ("8 of
    8 samples final"), and the next night's `--compare-to` refused it as an unfinished
    baseline (exit 5, no verdict)."""
    from process_tree import signal_at

    out = tmp_path / "out"
    tasks = [failing("t0")] + [shell_task(f"t{i}") for i in range(1, 8)]
    data = write_tasks(tmp_path / "tasks.jsonl", tasks)
    results, summary = out / "a" / "results.jsonl", out / "a" / "summary.json"
    for attempt in range(10):  # until the signal lands before the run's finish (its summary)
        shutil.rmtree(out / "a", ignore_errors=True)
        proc = subprocess.Popen([sys.executable, str(ROOT / "run_parallel_rollout.py"), "--mode", "shell", "--data",
                                 str(data), "--num-rollouts", "2", "--output-dir", str(out), "--run-id", "a",
                                 "--no-progress", "--fail-under", "0.9"],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        landed = signal_at(proc, lambda: results.exists() and results.read_text().count("\n") >= 8,
                           signal.SIGTERM, still=lambda: not summary.exists())
        stdout, stderr = proc.communicate(timeout=60)
        if landed:
            break
    assert landed, "the signal never landed before the run's summary"
    assert proc.returncode == exit_codes.EXIT_BELOW_THRESHOLD, stderr  # its gate decides, not the signal
    assert "resume with" not in stderr and "signal 15 came once every sample had ended" in stderr, stderr
    written = json.loads(summary.read_text())
    assert not written["interrupted"] and written["signal_after_end"] == signal.SIGTERM  # a signal came: said

    listed = CliRunner().invoke(main, ["runs", "list", "--output-dir", str(out), "--json"])
    assert [json.loads(line)["status"] for line in listed.output.splitlines()] == ["complete"], listed.output
    assert real_run(tmp_path, "b", tasks).exit_code == 0
    compared = CliRunner().invoke(main, ["compare", "a", "b", "--output-dir", str(out), "--check"])
    assert compared.exit_code == 0, compared.output
    assert "unfinished" not in compared.output


def test_compare_says_a_missing_time_as_a_dash_without_a_unit(tmp_path):
    """A run without a summary.json (killed before it wrote one) has no wall time: compare
    printed "wall: 1.2s -> -s"."""
    tasks = [shell_task(f"t{i}") for i in range(3)]
    assert real_run(tmp_path, "a", tasks).exit_code == 0
    assert real_run(tmp_path, "b", tasks).exit_code == 0
    (tmp_path / "out" / "b" / "summary.json").unlink()
    compared = CliRunner().invoke(main, ["compare", "a", "b", "--output-dir", str(tmp_path / "out")])
    assert compared.exit_code == 0, compared.output
    speed = next(line for line in compared.output.splitlines() if line.startswith("rollout time p50:"))
    assert "-s" not in speed and speed.endswith("s -> -"), speed
