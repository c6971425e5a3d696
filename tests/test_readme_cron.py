"""The README's nightly cron line, run as printed under sh from / with a `date` shim: two nights
gated and compared, a missed night, a locked folder (exit 75, logged); and the report, compare
and runs list lines on what those nights left."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import filelock
import pytest

from conftest import assert_exactly_once, shell_task, write_tasks
from readme_support import INSTALLED, bash, readme_lines

NIGHTS = ("2026-11-22", "2026-11-23")

DATE_SHIM = """#!/bin/sh
# `date +%F` says $NIGHT, `date -d yesterday +%F` the night before; nothing else is asked
case "$*" in
  "+%F") echo "$NIGHT" ;;
  "-d yesterday +%F") echo "$EVE" ;;
  *) echo "date shim: unexpected arguments: $*" >&2; exit 2 ;;
esac
"""


def cron_nights(evals: Path):
    """/srv/evals for the README's cron line (nightly.toml and its tasks, a `date` shim) and
    ``night(day, eve, first=False)``, which runs the line on ``day`` with ``eve`` as yesterday."""
    shim = evals / "bin"
    shim.mkdir()
    (shim / "date").write_text(DATE_SHIM)
    (shim / "date").chmod(0o755)
    write_tasks(evals / "tasks.jsonl", [shell_task(f"t{i}") for i in range(3)])
    (evals / "nightly.toml").write_text('mode = "shell"\ndata = "tasks.jsonl"\nnum-rollouts = 2\n')
    [cron] = readme_lines("Reports, comparisons, nightly jobs", "cron", "15 2 * * *")
    line = cron.split(None, 5)[5].replace("\\%", "%")  # cron passes the rest to sh, \% as %
    assert line.startswith("cd /srv/evals && parallel-rollout run --config nightly.toml")
    line = line.replace("cd /srv/evals", f"cd {evals}", 1)

    def night(day: str, eve: str, first: bool = False, exit_code: bool = False) -> subprocess.CompletedProcess:
        text = re.sub(r" --compare-to \S*\$\([^)]*\)", "", line) if first else line  # the README: not the first night
        if exit_code:  # the run's exit status, logged after what it said
            text = text.replace(" 2>&1;", ' 2>&1; echo "exit $?" >> nightly.log;', 1)
        env = {**INSTALLED, "PATH": f"{shim}:{INSTALLED['PATH']}", "NIGHT": day, "EVE": eve}
        return subprocess.run(["sh", "-c", text], cwd="/", env=env, stdin=subprocess.DEVNULL,
                              capture_output=True, text=True, timeout=300)

    return night


@pytest.fixture(scope="module")
def nightly(tmp_path_factory):
    """/srv/evals after two nights of the README's cron line."""
    evals = tmp_path_factory.mktemp("evals")
    night = cron_nights(evals)
    first = night(NIGHTS[0], "2026-11-21", first=True)
    second = night(NIGHTS[1], NIGHTS[0])
    return evals, night, (first, second)


def test_the_cron_line_runs_two_nights_gated_and_compared(nightly):
    evals, _, runs = nightly
    for proc in runs:  # the line's own status: its `[ $? -eq 75 ]` is false
        assert (proc.returncode, proc.stdout, proc.stderr) == (1, "", "")
    log = (evals / "nightly.log").read_text()
    assert log.count("3/3 samples finished, 3 succeeded") == 2, log
    assert "below --fail-under" not in log and "significant regression" not in log and "folder locked" not in log
    # three shared samples: the comparison says they are too few to find one (a warning, exit 0)
    assert "only 3 shared samples: too few for the test to find a regression" in log
    for day in NIGHTS:
        run_dir = evals / "results" / f"nightly-{day}"
        assert_exactly_once(run_dir, {"t0#0", "t1#0", "t2#0"})
        config = json.loads((run_dir / "config.json").read_text())["config"]
        assert config["fail_under"] == 0.8
        junit = (evals / "junit" / f"nightly-{day}.xml").read_text()
        assert 'tests="3"' in junit and 'failures="0"' in junit
    second = evals / "results" / f"nightly-{NIGHTS[1]}"
    assert "pass -> fail: 0" in (second / f"compare-nightly-{NIGHTS[0]}.txt").read_text()
    assert (second / f"compare-nightly-{NIGHTS[0]}.html").is_file()


def test_the_cron_line_survives_a_missed_night(tmp_path):
    """A night whose baseline never ran (the machine was off) runs all the same: a warning at
    its start names the missing run, its gate gives no verdict (exit 5), and the night after
    it compares again; a missing baseline was exit 2 with nothing run, every night after."""
    night = cron_nights(tmp_path)
    assert night("2026-11-22", "2026-11-21", first=True).returncode == 1  # not 75
    # 2026-11-23 missed: the cron line of 2026-11-24 names it
    missed = night("2026-11-24", "2026-11-23", exit_code=True)
    log = " ".join((tmp_path / "nightly.log").read_text().split())
    assert missed.returncode == 1 and log.count("3/3 samples finished, 3 succeeded") == 2, log
    missing = ("--compare-to nightly-2026-11-23: results/nightly-2026-11-23: no such run folder in --output-dir "
               "(the nearest by name: nightly-2026-11-22)")
    assert missing + "; the run goes on; its gate will give no verdict (exit 5)" in log, log
    assert log.endswith(missing.replace(": ", ": no verdict: ", 1) + " exit 5"), log
    assert_exactly_once(tmp_path / "results" / "nightly-2026-11-24", {"t0#0", "t1#0", "t2#0"})
    night("2026-11-25", "2026-11-24", exit_code=True)
    log = (tmp_path / "nightly.log").read_text()
    assert log.count("3/3 samples finished, 3 succeeded") == 3 and log.rstrip().endswith("exit 0"), log
    assert (tmp_path / "results" / "nightly-2026-11-25" / "compare-nightly-2026-11-24.txt").is_file()


def test_the_cron_line_on_a_locked_folder_exits_75_and_logs_it(nightly):
    evals, night, _ = nightly
    with filelock.FileLock(str(evals / "results" / f"nightly-{NIGHTS[1]}" / ".lock"), timeout=0):
        proc = night(NIGHTS[1], NIGHTS[0])
    assert proc.returncode == 0, proc.stderr  # the echo ran: the run exited 75
    log = (evals / "nightly.log").read_text()
    assert log.rstrip().endswith("folder locked: still running, retry later")


def test_the_report_compare_and_list_commands(nightly):
    evals = nightly[0]
    env = INSTALLED
    report, compare, runs_list = (readme_lines("Reports, comparisons, nightly jobs", "bash", f"parallel-rollout {c}")[0]
                                  for c in ("report", "compare", "runs list"))
    for day in NIGHTS:
        assert f"nightly-{day}" in report + compare
    second = evals / "results" / f"nightly-{NIGHTS[1]}"
    (second / "report.html").unlink()
    proc = bash(report, evals, env=env)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip().endswith("report.html") and (second / "report.html").stat().st_size > 1000

    for name in ("txt", "html"):
        (second / f"compare-nightly-{NIGHTS[0]}.{name}").unlink()
    proc = bash(compare, evals, env=env)
    assert proc.returncode == 0, proc.stderr
    assert "written: " in proc.stdout and (second / f"compare-nightly-{NIGHTS[0]}.txt").is_file()
    assert (second / f"compare-nightly-{NIGHTS[0]}.html").is_file()

    proc = bash(runs_list, evals, env=env)
    assert proc.returncode == 0, proc.stderr
    rows = [l for l in proc.stdout.splitlines() if "nightly-" in l]
    assert len(rows) == 2 and all("shell" in r and "complete" in r and "100" in r for r in rows), proc.stdout
