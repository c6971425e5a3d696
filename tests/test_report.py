"""report.html of real runs, opened in headless Chromium (Debian's package) through Playwright.

The page is checked as a person would read it: the headline numbers are summary.json's, the
VM timeline has one row per VM of events.jsonl, a trajectory link opens that attempt's turns,
the sample table pages, and nothing is logged to the console. A screenshot of the page is
kept in the test's tmp folder (its path is printed).
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from conftest import ROOT, shell_task, write_tasks
from parallel_rollout.cli import main
from parallel_rollout.config import build_config
from parallel_rollout.report import charts
from parallel_rollout.runner import Runner

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking",
                  "--disable-component-update", "--disable-sync"]


@pytest.fixture(scope="module")
def shell_run(tmp_path_factory):
    """A real pooled shell run: 26 tasks × 2 samples, some failing, one printing </script>."""
    tmp = tmp_path_factory.mktemp("report-run")
    tasks = [shell_task(f"t{i:02d}", tags=["even" if i % 2 == 0 else "odd"]) for i in range(23)]
    tasks += [shell_task(f"bad{i}", reference=["echo '</script><script>alert(1)</script>'"]) for i in range(3)]
    data = write_tasks(tmp / "tasks.jsonl", tasks)
    outcome = Runner(build_config(dict(mode="shell", data=str(data), output_dir=str(tmp / "out"), run_id="r",
                                       num_rollouts=2, num_vms=2, use_vm_pool=True, group_size=2,
                                       progress=False))).run()
    assert outcome.exit_code == 0, outcome.message
    return outcome.run_dir


@pytest.fixture
def page(tmp_path):
    """A page of a fresh headless Chromium; console errors and page errors collected in
    ``page.errors``. One browser per test: the leak check after each test wants every
    process it started gone."""
    playwright_api = pytest.importorskip("playwright.sync_api")
    assert Path(CHROMIUM).exists(), "Debian's chromium is missing: ./dev test installs it"
    with playwright_api.sync_playwright() as pw:
        context = pw.chromium.launch_persistent_context(
            str(tmp_path / "chromium-profile"), executable_path=CHROMIUM, headless=True, args=CHROMIUM_FLAGS,
            viewport={"width": 1300, "height": 900})
        try:
            pg = context.new_page()
            pg.errors = []
            pg.on("console", lambda m: pg.errors.append(m.text) if m.type == "error" else None)
            pg.on("pageerror", lambda e: pg.errors.append(str(e)))
            yield pg
        finally:
            context.close()


def open_report(page, run_dir: Path):
    page.goto((run_dir / "report.html").as_uri())
    page.wait_for_selector("body[data-ready='1']", timeout=15000)


def test_report_of_a_real_run_in_chromium(shell_run, page, tmp_path):
    run_dir = shell_run
    summary = json.loads((run_dir / "summary.json").read_text())
    open_report(page, run_dir)
    shot = tmp_path / "report.png"
    page.screenshot(path=str(shot), full_page=True)
    print(f"\n[report] screenshot: {shot}")

    # headline numbers are summary.json's
    def metric(name):
        return json.loads(page.get_attribute(f"[data-metric='{name}']", "data-value"))
    assert metric("success_rate") == summary["success_rate"] == round(46 / 52, 4)
    assert metric("mean_reward") == summary["mean_reward"]
    assert metric("pass@1") == summary["pass@1"] and metric("pass@2") == summary["pass@2"]
    assert page.text_content("[data-metric='success_rate']") == f"{summary['success_rate']:.1%}"
    assert "95% CI" in page.text_content("#headline")
    assert json.loads(page.get_attribute("tr[data-tag='even'] td[data-value]", "data-value")) == \
        summary["per_tag"]["even"]["success_rate"]
    # pass@k per mode: one mode, so the run's own figure
    assert page.text_content("tr[data-mode='shell'] td[data-k='pass@2']") == f"{summary['pass@2']:g}"
    assert page.locator("details.fail[data-type='failure']").count() == 1
    assert "6 samples" in page.text_content("details.fail[data-type='failure'] summary")

    # one timeline row per VM of events.jsonl, one per worker
    events = [json.loads(line) for line in (run_dir / "events.jsonl").read_text().splitlines()]
    vms = sorted({e["vm"] for e in events if e.get("event") == "vm"})
    rows = page.eval_on_selector_all("svg[data-kind='vm'] g.row", "els => els.map(e => e.dataset.row)")
    assert sorted(rows) == vms == ["vm-0", "vm-1"]
    assert page.locator("svg[data-kind='vm'] rect.s-leased").count() > 0
    assert page.locator("svg[data-kind='worker'] g.row").count() == 2

    # the table pages: 52 samples, 50 a page
    assert page.text_content("#page-info").startswith("page 1 of 2 (52 of 52")
    assert page.locator("#samples-body tr").count() == 50
    page.click("#next")
    assert page.locator("#samples-body tr").count() == 2
    page.select_option("#f-outcome", "failure")
    assert page.locator("#samples-body tr").count() == 6

    # a trajectory link opens its turns
    page.click("#samples-body tr[data-key='bad1#1'] a.traj-link")
    page.wait_for_selector("#traj.open")
    turns = [json.loads(line) for line in
             (run_dir / "trajectories" / "bad1" / "1" / "attempt-0.jsonl").read_text().splitlines()]
    text = page.text_content("#traj-content")
    assert f"{len(turns)} turns" in text and "turn 1" in text
    assert "</script><script>alert(1)</script>" in text  # shown as text, not run
    page.click("#traj-close")
    assert not page.is_visible("#traj")
    assert page.errors == []


def test_report_is_self_contained(shell_run):
    html = (shell_run / "report.html").read_text()
    assert not re.search(r"<(script|link|img)[^>]+(src|href)=\"?https?:", html)
    assert "@import" not in html and "url(http" not in html
    assert re.findall(r"https?://[^\s\"'<]+", html) == ["http://www.w3.org/2000/svg"] * html.count(
        "http://www.w3.org/2000/svg")


def test_report_command_on_a_run_without_vms(tmp_path):
    """math mode needs no VM: the page says so, and ``report`` rewrites it on demand."""
    result = CliRunner().invoke(main, ["run", "--mode", "math", "--data", str(ROOT / "benchmarks" / "math_tasks.jsonl"),
                                       "--limit", "3", "--num-rollouts", "1", "--output-dir", str(tmp_path),
                                       "--run-id", "m", "--no-progress"])
    assert result.exit_code == 0, result.output
    report = tmp_path / "m" / "report.html"
    report.unlink()
    again = CliRunner().invoke(main, ["report", str(tmp_path / "m")])
    assert again.exit_code == 0 and again.output.strip() == str(report)
    assert "this mode runs without VMs" in report.read_text()
    missing = CliRunner().invoke(main, ["report", str(tmp_path / "nothing")])
    assert missing.exit_code == 2 and "no such run folder" in missing.output
    # its results.jsonl given for the folder: the folder is named (it said 'no such run folder')
    for command in (["report", str(tmp_path / "m" / "results.jsonl")],
                    ["compare", str(tmp_path / "m" / "results.jsonl"), str(tmp_path / "m")]):
        a_file = CliRunner().invoke(main, command)
        assert a_file.exit_code == 2, a_file.output
        assert f"a file, not a run folder: give the folder that holds it ({tmp_path / 'm'})" in \
            " ".join(a_file.output.split()), a_file.output
    # a run id under --output-dir, as compare and export-osworld take it
    report.unlink()
    by_id = CliRunner().invoke(main, ["report", "m", "--output-dir", str(tmp_path)])
    assert by_id.exit_code == 0 and by_id.output.strip() == str(report) and report.exists()


DESKTOP_TOOLS = ("Xvfb", "openbox", "xterm", "xdotool", "wmctrl")


@pytest.mark.skipif(not all(shutil.which(p) for p in DESKTOP_TOOLS),
                    reason="the desktop packages are missing (./dev installs them)")
def test_a_desktop_attempt_shows_its_screenshots(tmp_path, page):
    """osworld on the process provider: each turn's screenshot (step_N.png) shows under it."""
    task = next(line for line in (ROOT / "benchmarks" / "osworld_tasks.jsonl").read_text().splitlines()
                if '"terminal-echo-file"' in line)
    data = tmp_path / "one.jsonl"
    data.write_text(task + "\n")
    outcome = Runner(build_config(dict(mode="osworld", data=str(data), num_rollouts=1, output_dir=str(tmp_path / "out"),
                                       run_id="desk", progress=False, screen_width=800, screen_height=600,
                                       action_space="computer_13"))).run()
    assert outcome.exit_code == 0 and outcome.summary["successes"] == 1, outcome.message
    open_report(page, outcome.run_dir)
    page.click("a.traj-link")
    page.wait_for_selector("#traj.open")
    assert "3 turns" in page.text_content("#traj-content")
    sources = page.eval_on_selector_all(".turn img", "els => els.map(e => e.getAttribute('src'))")
    assert sources == [f"trajectories/terminal-echo-file/0/attempt-0/step_{n}.png" for n in (1, 2, 3)]
    page.wait_for_function("[...document.querySelectorAll('#traj img')].every(i => i.complete)")
    widths = page.eval_on_selector_all("#traj img", "els => els.map(e => e.naturalWidth)")
    assert widths == [800] * 4  # the three turns' and step_0, loaded from the run folder
    shot = tmp_path / "desktop-trajectory.png"
    page.screenshot(path=str(shot))
    print(f"\n[report] screenshot: {shot}")
    assert page.errors == []
    # a page written elsewhere (report -o) links the screenshots where they are, in the run
    # folder (it linked them beside itself, and showed none)
    elsewhere = tmp_path / "pages" / "desk.html"
    elsewhere.parent.mkdir()
    assert CliRunner().invoke(main, ["report", str(outcome.run_dir), "-o", str(elsewhere)]).exit_code == 0
    page.goto(elsewhere.as_uri())
    page.wait_for_selector("body[data-ready='1']", timeout=15000)
    page.click("a.traj-link")
    page.wait_for_selector("#traj.open")
    page.wait_for_function("[...document.querySelectorAll('#traj img')].every(i => i.complete)")
    assert page.eval_on_selector_all("#traj img", "els => els.map(e => e.naturalWidth)") == [800] * 4


def test_pass_at_k_per_tag_is_the_unbiased_estimator_over_that_tags_tasks():
    from parallel_rollout.report.model import headline
    from parallel_rollout.report.run_data import RunData
    from parallel_rollout.results import pass_at_k, summarize

    def rec(task, idx, success, tags):
        return {"key": f"{task}#{idx}", "task_id": task, "sample_idx": idx, "attempt": 0, "mode": "shell",
                "tags": tags, "status": "success" if success else "failure", "reward": float(success),
                "success": success, "final": True}
    records = [rec("a", i, i == 0, ["x"]) for i in range(3)] + [rec("b", i, i < 2, ["x", "y"]) for i in range(3)]
    summary = summarize(records, total_samples=6, pool_stats=None, started_at=0)
    head = headline(RunData(Path("."), "r", {}, summary, records))
    assert head["per_tag"]["x"]["pass_at_k"] == {"pass@1": round((1 / 3 + 2 / 3) / 2, 4),
                                                 "pass@3": round((pass_at_k(3, 1, 3) + pass_at_k(3, 2, 3)) / 2, 4)}
    assert head["per_tag"]["y"]["pass_at_k"]["pass@1"] == round(2 / 3, 4)
    assert head["per_mode"]["shell"]["pass_at_k"]["pass@3"] == summary["pass@3"] == 1.0


def test_the_intervals_are_over_the_graded_samples_as_their_rates(tmp_path):
    """A run whose samples partly were never graded (infrastructure failures): each success
    rate is over the graded samples, and so is the interval beside it (a never-graded sample
    is no failure), overall, per mode and per tag."""
    from parallel_rollout.report.model import headline
    from parallel_rollout.report.run_data import RunData
    from parallel_rollout.results import summarize

    records = []
    for i in range(10):
        lost = i >= 7
        records.append({"key": f"t{i}#0", "task_id": f"t{i}", "sample_idx": 0, "attempt": 0, "mode": "shell",
                        "tags": ["x"], "status": "vm_error" if lost else "success", "reward": 0.0 if lost else 1.0,
                        "success": not lost, "infrastructure": lost, "final": not lost, "started_at": 1.0,
                        "ended_at": 2.0, "duration_s": 1.0, **({"never_graded": True} if lost else {})})
    run_dir = tmp_path / "r"
    run_dir.mkdir()
    (run_dir / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    summary = summarize(records, total_samples=10, pool_stats=None, started_at=1.0)
    (run_dir / "summary.json").write_text(json.dumps(summary))
    (run_dir / "config.json").write_text(json.dumps({"config": {"mode": "shell"}}))
    result = CliRunner().invoke(main, ["report", str(run_dir)])
    assert result.exit_code == 0, result.output
    head = headline(RunData.load(run_dir))
    assert head["success_rate"] == 1.0 and head["ungraded"] == 3
    for rate, ci in [(head["success_rate"], head["success_ci"]),
                     (head["per_mode"]["shell"]["success_rate"], head["per_mode"]["shell"]["ci"]),
                     (head["per_tag"]["x"]["success_rate"], head["per_tag"]["x"]["ci"])]:
        assert ci[0] <= rate <= ci[1], (rate, ci)


def test_rollout_times_leave_out_the_attempts_that_never_got_a_vm(tmp_path, monkeypatch):
    """A pool exhausted after one attempt ran: the rollout-time histogram counted the
    attempts whose lease failed too, under "N attempts", beside a lease-wait histogram of
    fewer. Each plots the attempts its figure names, and those left out are said."""
    monkeypatch.setenv("PR_CHAOS_DIR", str(tmp_path))
    data = write_tasks(tmp_path / "tasks.jsonl", [shell_task(f"t{i}") for i in range(3)])
    done = CliRunner().invoke(main, ["run", "--mode", "shell", "--data", str(data), "--num-rollouts", "1",
                                     "--num-vms", "1", "--use-vm-pool", "--provider-name",
                                     "chaos_plugins:BootsOnceProvider", "--output-dir", str(tmp_path / "out"),
                                     "--run-id", "r", "--no-progress"])
    records = [json.loads(line) for line in (tmp_path / "out" / "r" / "results.jsonl").read_text().splitlines()]
    ran = [r for r in records if r.get("vm")]
    never = [r for r in records if not r.get("vm") and r.get("duration_s") is not None]
    assert ran and never and {r["status"] for r in never} == {"pool_exhausted"}, (done.output, records)
    html = (tmp_path / "out" / "r" / "report.html").read_text()
    section = html[html.index('<section id="distributions">'):]
    for label, counted in (("rollout time", len(ran)), ("lease wait", len(ran))):
        chart = section[section.index(f'data-label="{label}"'):]
        chart, said = chart[:chart.index("</svg>")], chart[chart.index('<div class="muted"'):]
        said = said[:said.index("</div>")]
        assert sum(int(n) for n in re.findall(r": (\d+)</title>", chart)) == counted, chart
        assert f'data-counted="{counted}">{counted} attempts that' in said, said
    assert f"; {len(never)} that never ran left out (pool_exhausted {len(never)})" in section
    # the same figures in summary.json, the end-of-run summary and a comparison
    rollout = json.loads((tmp_path / "out" / "r" / "summary.json").read_text())["timing_s"]["rollout"]
    assert rollout["count"] == len(ran) and f"p50 {charts.fmt_s(rollout['p50'])}" in section, (rollout, section)
    assert f"rollout time p50 {rollout['p50']}s p90 {rollout['p90']}s" in done.output, done.output
    shutil.copytree(tmp_path / "out" / "r", tmp_path / "out" / "r-copy")  # not itself: refused
    compared = CliRunner().invoke(main, ["compare", "r", "r-copy", "--output-dir", str(tmp_path / "out")])
    assert f"rollout time p50: {rollout['p50']}s -> {rollout['p50']}s" in compared.output, compared.output


def test_samples_skipped_as_unsupported_are_no_attempt_and_have_no_rollout_time(tmp_path):
    """--skip-unsupported's final records (no VM, no time) were the run's 'rollout time p50
    0.0s', in the console, summary.json and the report's histogram, and its attempts (a task
    never run), in summary.json's ``attempts``, the console's and the report's card."""
    from test_osworld_taskset import osworld_folder

    lacking = {"func": "no_such_metric", "result": {"type": "vm_file", "path": "/tmp/x", "dest": "x"}}
    folder = osworld_folder(tmp_path / "set", {"a": {"domain": "os", "instruction": "a", "config": [],
                                                    "evaluator": lacking}})
    done = CliRunner().invoke(main, ["run", "--mode", "osworld", "--data", str(folder), "--skip-unsupported",
                                     "--run-id", "u", "--output-dir", str(tmp_path / "out"), "--no-progress"])
    assert done.exit_code == 0 and "statuses: unsupported 1" in done.output, done.output
    assert "rollout time" not in done.output, done.output
    assert json.loads((tmp_path / "out" / "u" / "summary.json").read_text())["timing_s"]["rollout"] is None
    html = (tmp_path / "out" / "u" / "report.html").read_text()
    assert "0 attempts that ran; 1 that never ran left out (unsupported 1)" in html
    assert json.loads((tmp_path / "out" / "u" / "summary.json").read_text())["attempts"] == 0
    assert "attempts: 0 (0 retried)" in done.output, done.output
    assert 'data-metric="attempts" data-value="0"' in html
