"""Hostile agents of the osworld mode: an agent's actions are Python run in the desktop VM
(``--action-space pyautogui``), and its score comes from getters that read the VM and from
gold files the host holds. Each row is a task whose check passes only if the attack on the
check worked (``desktop_support.ScriptAgent`` replays the task's ``script``); an honest task
beside them must still pass."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from conftest import assert_exactly_once, read_results, write_tasks
from desktop_support import HEIGHT, WIDTH
from parallel_rollout.config import build_config
from parallel_rollout.envs.osworld import downloads, rule_keys
from parallel_rollout.exit_codes import EXIT_ABORTED
from parallel_rollout.runner import Runner

pytestmark = pytest.mark.skipif(
    not all(shutil.which(p) for p in ("bwrap", "Xvfb", "openbox", "xterm", "dbus-daemon", "xdotool")),
    reason="the desktop packages are missing (./dev installs them)")

IS_ROOT = os.geteuid() == 0


def copy_to_answer(pattern: str) -> str:
    """An action that copies the first file matching ``pattern`` to ~/answer.txt."""
    return ("import glob, os, shutil; "
            f"shutil.copyfile(sorted(glob.glob({pattern!r}))[0], os.path.expanduser('~/answer.txt'))")


def gold_task(task_id: str, gold: str, script: list[str]) -> dict:
    """A task graded by comparing ~/answer.txt with the gold file ``gold`` (a path, a URL)."""
    return {"id": task_id, "mode": "osworld", "instruction": "write the secret word to ~/answer.txt",
            "config": [], "script": script,
            "evaluator": {"func": "compare_text_file",
                          "result": {"type": "vm_file", "path": "/home/user/answer.txt", "dest": "answer.txt"},
                          "expected": {"type": "cloud_file", "path": gold, "dest": "gold.txt"}}}


def run_tasks(tmp_path, tasks: list[dict], run_id: str):
    """The run's outcome: ``tasks`` replayed by the script agent, no retry."""
    data = write_tasks(tmp_path / "tasks.jsonl", tasks)
    config = build_config(dict(mode="osworld", data=str(data), agent="desktop_support:ScriptAgent",
                               num_rollouts=2, num_vms=1, use_vm_pool=True, output_dir=str(tmp_path / "out"),
                               run_id=run_id, progress=False, screen_width=WIDTH, screen_height=HEIGHT,
                               action_space="pyautogui", max_turns=3, max_retries=0))
    return Runner(config).run()


def run(tmp_path, tasks: list[dict], run_id: str):
    outcome = run_tasks(tmp_path, tasks, run_id)
    return assert_exactly_once(outcome.run_dir, {f"{t['id']}#0" for t in tasks}), outcome


@pytest.mark.skipif(not IS_ROOT, reason="writes gold files under the host's /usr, as a shared OSWorld install is")
def test_gold_files_in_a_system_folder_are_not_the_agents_to_read(tmp_path, monkeypatch):
    """The process sandbox binds the host's system folders read-only: an OSWorld checkout or
    its gold files kept there (/usr/local/share), and the download cache when
    $PARALLEL_ROLLOUT_OSWORLD_CACHE names a folder there, were read by the agent's code,
    which copied the gold file to where the check looks and scored 1. Each is an empty file
    (folder) in the VM now; the host's getters still read them, so an honest task passes."""
    top = "/usr/local/share" if os.path.isdir("/usr/local/share") else "/usr/share"
    folder = Path(tempfile.mkdtemp(prefix="pr-hostile-gold-", dir=top))
    try:
        folder.chmod(0o755)  # as an install's folders are: every user reads them
        (folder / "gold.txt").write_text("pr-gold-4217\n")
        (folder / "honest.txt").write_text("pr-honest\n")
        monkeypatch.setenv(downloads.CACHE_ENV, str(folder / "cache"))
        url = "https://files.invalid/pr-cached-gold.txt"
        cached = downloads.cache_path(url)
        cached.parent.mkdir(parents=True)
        cached.write_text("pr-gold-cached-77\n")
        for path in [folder / "cache", *(folder / "cache").rglob("*")]:
            path.chmod(0o755 if path.is_dir() else 0o644)
        tasks = [gold_task("read_the_gold_file", str(folder / "gold.txt"), [copy_to_answer(str(folder / "gold.txt"))]),
                 gold_task("read_the_download_cache", url,
                           [copy_to_answer(f"{folder}/cache/urls/*/pr-cached-gold.txt")]),
                 gold_task("honest", str(folder / "honest.txt"),
                           ["open(__import__('os').path.expanduser('~/answer.txt'), 'w').write('pr-honest\\n')"])]
        finals, outcome = run(tmp_path, tasks, "gold")
    finally:
        shutil.rmtree(folder)
    assert finals["honest#0"]["status"] == "success", finals["honest#0"]
    for key in ("read_the_gold_file#0", "read_the_download_cache#0"):
        assert finals[key]["reward"] == 0.0, finals[key]
    assert outcome.exit_code == 0, outcome.message


def command_task(task_id: str, script: list[str], command: str, **evaluator) -> dict:
    """A task graded by a command the getter runs in the VM, whose output must be 'yes'."""
    return {"id": task_id, "mode": "osworld", "instruction": "count the files and write the count to ~/count.txt",
            "config": [], "script": script,
            "evaluator": {"func": "exact_match", "result": {"type": "vm_command_line", "command": command, "shell": True},
                          "expected": {"type": "rule", "rules": {"expected": "yes\n"}}, **evaluator}}


def test_a_command_check_does_not_run_over_a_link_into_proc(tmp_path):
    """A getter's command that reads a file the agent made a link to /proc/self/cmdline reads
    its own arguments: ``grep -qx 4217 ~/count.txt`` passed with nothing counted (as a shell
    task's check did before it refused such links). The getter is refused now (0); a link
    elsewhere (~/cpu to /proc/cpuinfo) beside an honest answer is read as ever."""
    check = "grep -qx 4217 ~/count.txt && echo yes || echo no"
    link = "import os; os.symlink('/proc/self/cmdline', os.path.expanduser('~/count.txt'))"
    honest = ("import os; os.symlink('/proc/cpuinfo', os.path.expanduser('~/cpu')); "
              "open(os.path.expanduser('~/count.txt'), 'w').write('4217\\n')")
    finals, outcome = run(tmp_path, [command_task("link_to_own_arguments", [link], check),
                                     command_task("honest_count", [honest], check)], "links")
    assert finals["honest_count#0"]["status"] == "success", finals["honest_count#0"]
    assert finals["link_to_own_arguments#0"]["reward"] == 0.0, finals["link_to_own_arguments#0"]
    assert outcome.exit_code == 0, outcome.message


def test_a_command_check_starts_a_login_shell_that_reads_none_of_the_homes_startup_files(tmp_path):
    """A getter's command that starts a login or interactive shell of its own (``bash -lc 'which
    spotify'``, by name and by path) read the startup files the agent wrote in the home, whose
    ``~/bin`` first on the PATH held a fake program: it scored 1. Those shells read none now (0);
    an honest login shell still runs, in the home."""
    from hostile_shells import FAKE_IN_HOME_BIN
    rig = f"import subprocess; subprocess.run({FAKE_IN_HOME_BIN!r}, shell=True, check=True)"
    check = ("bash -lc 'which spotify' || /bin/bash --login -c 'which spotify' || bash -ic 'which spotify' 2>/dev/null"
             " || sh -lc 'which spotify' || /usr/bin/bash -lc 'which spotify'")
    honest = "open(__import__('os').path.expanduser('~/ok'), 'w').close()"
    finals, outcome = run(tmp_path, [command_task("login_shell_reads_the_home", [rig], f"({check}) >/dev/null && echo yes"),
                                     command_task("honest_login_shell", [honest], "bash -lc 'cd && test -e ok' && echo yes")],
                          "login-shells")
    assert finals["honest_login_shell#0"]["status"] == "success", finals["honest_login_shell#0"]
    assert finals["login_shell_reads_the_home#0"]["reward"] == 0.0, finals["login_shell_reads_the_home#0"]
    assert outcome.exit_code == 0, outcome.message


def prefs_task(task_id: str, line: str, rule: dict) -> dict:
    """A task graded by check_thunderbird_prefs on ~/prefs.js, which the agent writes as ``line``."""
    write = f"open(__import__('os').path.expanduser('~/prefs.js'), 'w').write({line + chr(10)!r})"
    return {"id": task_id, "mode": "osworld", "instruction": "set mail.check to 1 in ~/prefs.js",
            "config": [], "script": [write],
            "evaluator": {"func": "check_thunderbird_prefs",
                          "result": {"type": "vm_file", "path": "/home/user/prefs.js", "dest": "prefs.js"},
                          "expected": {"type": "rule", "rules": {"expect": {"mail.check": rule}}}}}


def search_task(task_id: str) -> dict:
    """A task whose is_expected_search_query rule has its ``expect`` without the ``pattern`` the
    metric reads in it: graded on what the agent wrote to a file, the rule read whatever it holds. The
    load refuses it (``rule_keys``); these tests take that check away in the run's own process
    (:data:`LOAD_SKIPS_NESTED`), as for a nested rule the load does not know, to see what
    grading does with a rule it cannot read."""
    write = "open(__import__('os').path.expanduser('~/url.txt'), 'w').write('https://example.com/?q=x')"
    return {"id": task_id, "mode": "osworld", "instruction": "search for x", "config": [], "script": [write],
            "evaluator": {"func": "is_expected_search_query",
                          "result": {"type": "vm_command_line", "command": ["cat", "/home/user/url.txt"]},
                          "expected": {"type": "rule", "rules": {"expect": {"patern": "q=x"}}}}}


#: the run's process, loading search_task, does not look into the rules nested in a rule
LOAD_SKIPS_NESTED = "from parallel_rollout.envs.osworld import rule_keys; rule_keys._nested_problem = lambda func, rules: None"

#: what a run says of search_task's rule
NO_PATTERN = "evaluator metric 'is_expected_search_query': the task file's rule has no key 'pattern'"


def test_a_rule_the_metric_cannot_read_is_the_tasks_error_not_the_agents_garbage(tmp_path, monkeypatch):
    """A rule without a key its metric reads, which only grading finds (search_task's), scored
    the agent 0 with the error in eval.errors; it is the task's error now (setup_failed, no
    score), as OSWorld's run errs on it. The agent's garbage that makes the metric raise (a
    pref value that is no JSON) still scores 0: it is not the task's."""
    good = {"method": "eq", "ref": 1}
    tasks = [search_task("rule_without_pattern"),
             prefs_task("garbage_value", 'user_pref("mail.check", nonsense);', good),
             prefs_task("honest_prefs", 'user_pref("mail.check", 1);', good)]
    monkeypatch.setattr(rule_keys, "_nested_problem", lambda func, rules: None)  # LOAD_SKIPS_NESTED
    outcome = run_tasks(tmp_path, tasks, "rules")  # a never-graded sample has no final record
    records = {r["task_id"]: r for r in read_results(outcome.run_dir)}
    assert records["honest_prefs"]["status"] == "success", records["honest_prefs"]
    garbage = records["garbage_value"]
    assert (garbage["status"], garbage["reward"], garbage["final"]) == ("failure", 0.0, True), garbage
    broken = records["rule_without_pattern"]
    assert broken["status"] == "setup_failed" and broken["never_graded"], broken
    assert NO_PATTERN in broken["failure"]["message"], broken
    # the run says so as it ends (the sample never graded, named with the cause), not exit 0
    assert outcome.exit_code != 0 and "rule_without_pattern#0" in outcome.message and NO_PATTERN in outcome.message, \
        (outcome.exit_code, outcome.message)


def test_a_task_files_own_error_is_run_once_not_retried_nor_resumed(tmp_path):
    """A rule its metric reads a missing key of (found only at grading) and a gold file the
    task names by a path with nothing there are the task's own errors: each attempt ended
    setup_failed, an infrastructure failure, so --max-retries ran it again and again (the
    rule: the agent's whole episode each time). Now each is attempted once, never graded,
    named as the run ends (exit 1). A resume, whose task file is the same, leaves the rule
    be; the gold file put in place, it grades that task. The other task is graded."""
    good = {"method": "eq", "ref": 1}
    gold = tmp_path / "gold_put_later.txt"
    write = "open(__import__('os').path.expanduser('~/answer.txt'), 'w').write('42\\n')"
    tasks = [search_task("rule_without_pattern"),
             gold_task("gold_not_there", str(gold), [write]),
             prefs_task("honest_prefs", 'user_pref("mail.check", 1);', good)]
    data = write_tasks(tmp_path / "tasks.jsonl", tasks)
    out = tmp_path / "out"
    args = ["--mode", "osworld", "--data", str(data), "--agent", "desktop_support:ScriptAgent",
            "--num-rollouts", "2", "--num-vms", "1", "--use-vm-pool", "--output-dir", str(out),
            "--run-id", "faults", "--no-progress", "--screen-width", str(WIDTH), "--screen-height", str(HEIGHT),
            "--action-space", "pyautogui", "--max-turns", "3", "--max-retries", "2"]

    def run_cli(*more: str) -> tuple[int, str, dict[str, list[dict]]]:
        cli = f"{LOAD_SKIPS_NESTED}; from parallel_rollout.cli import main; main(prog_name='parallel-rollout')"
        done = subprocess.run([sys.executable, "-c", cli, "run", *args, *more], capture_output=True,
                              text=True, timeout=300, env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
        attempts: dict[str, list[dict]] = {}
        for record in read_results(out / "faults"):
            attempts.setdefault(record["task_id"], []).append(record)
        return done.returncode, " ".join((done.stdout + done.stderr).split()), attempts

    code, text, attempts = run_cli()
    assert {task_id: [r["attempt"] for r in rs] for task_id, rs in attempts.items()} == {
        "rule_without_pattern": [0], "gold_not_there": [0], "honest_prefs": [0]}, text
    honest = attempts["honest_prefs"][0]
    assert honest["status"] == "success" and honest["final"], honest
    faults = {"rule_without_pattern": ("task_file", NO_PATTERN),
              "gold_not_there": ("file_missing", f"no such local file {gold}")}
    for task_id, (fault, cause) in faults.items():
        end = attempts[task_id][0]
        assert (end["status"], end["never_graded"], end["task_fault"]) == ("setup_failed", True, fault), end
        assert cause in end["failure"]["message"] and f"{task_id}#0" in text, (end, text)
    assert code == EXIT_ABORTED, text
    assert "rule_without_pattern#0; last: evaluator metric 'is_expected_search_query'" in text, text
    assert "each ended on its task file's own error, not retried" in text, text
    assert "a file each task names is not there, not retried" in text, text

    code, text, _ = run_cli("--resume", "--dry-run")  # what a resume would run, said before it runs
    assert code == 0 and ("resumes faults: 1 of 3 samples already final, 1 never graded (infrastructure) to run "
                          "again, 1 never graded for their task file's error (not run again)") in text, text
    gold.write_text("42\n")
    code, text, attempts = run_cli("--resume")
    assert [r["attempt"] for r in attempts["rule_without_pattern"]] == [0], text  # not run again
    again = attempts["gold_not_there"]
    assert [(r["attempt"], r["status"], r.get("final")) for r in again] == [
        (0, "setup_failed", False), (1, "success", True)], text
    assert code == EXIT_ABORTED and "A resume does not run them again" in text, text


def table_task(task_id: str, book: Path, rule: dict) -> dict:
    """A task graded by compare_table's one ``rule`` on ``book`` (the result and the expected
    workbook both: the host's file, whatever the agent does)."""
    def state(name: str) -> dict:
        return {"type": "cloud_file", "path": str(book), "dest": f"{name}.xlsx"}
    return {"id": task_id, "mode": "osworld", "instruction": "keep the workbook", "config": [], "script": ["pass"],
            "evaluator": {"func": "compare_table", "result": state("result"), "expected": state("expected"),
                          "options": {"rules": [rule]}}}


def test_a_compare_table_rule_only_grading_reads_is_the_tasks_error_not_the_agents_0(tmp_path, monkeypatch):
    """compare_table's ``options["rules"]`` are the task file's, as a rule getter's are: a rule
    without a key the metric reads that the load does not know (taken away here, in the run's
    own process) raised at grading, and a check_cell rule's error was caught into a 0: the
    agent scored 0 for the task file's mistake. Each is the task's error now (setup_failed,
    never graded); the honest rule beside them is graded."""
    import openpyxl

    from parallel_rollout.envs.osworld import evaluators

    book = tmp_path / "book.xlsx"
    workbook = openpyxl.Workbook()
    workbook.active["A1"] = 1
    workbook.save(book)
    value = {"value": {"method": "eq", "ref": 1}}
    tasks = [table_task("cell_without_coordinate", book, {"type": "check_cell", "sheet_idx": 0, "props": value}),
             table_task("data_without_second_sheet", book, {"type": "sheet_data", "sheet_idx0": 0}),
             table_task("honest_table", book, {"type": "check_cell", "sheet_idx": 0, "coordinate": "A1", "props": value})]
    # a list of metrics: the first passes (so "and" goes on), the second's rule lacks its key
    second = table_task("second_of_two_tables", book, {"type": "check_cell", "sheet_idx": 0, "props": value})
    first = tasks[2]["evaluator"]
    second["evaluator"] = {"func": ["compare_table"] * 2, "conj": "and", **{
        key: [first[key], second["evaluator"][key]] for key in ("result", "expected", "options")}}
    tasks.append(second)
    monkeypatch.setattr(evaluators, "table_rules_problem", lambda *args: None)
    outcome = run_tasks(tmp_path, tasks, "table")
    records = {r["task_id"]: r for r in read_results(outcome.run_dir)}
    assert records["honest_table"]["status"] == "success", records["honest_table"]
    for task_id, key in (("cell_without_coordinate", "coordinate"), ("data_without_second_sheet", "sheet_idx1")):
        broken = records[task_id]
        assert broken["status"] == "setup_failed" and broken["never_graded"], broken
        assert f"evaluator metric 'compare_table': the task file's rule has no key {key!r}" \
            in broken["failure"]["message"], broken
    listed = records["second_of_two_tables"]  # named by its place in the list, as the file spells it
    assert listed["status"] == "setup_failed" and listed["never_graded"], listed
    assert "evaluator.func[1] (compare_table): the task file's rule has no key 'coordinate'" \
        in listed["failure"]["message"], listed
