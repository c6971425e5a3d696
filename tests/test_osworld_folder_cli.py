"""OSWorld's own task folder as its users point the CLI at it (through the CLI, on the real
files of /work/shared/osworld, copied where a case breaks them):

* the folder, or OSWorld's flags, imply ``--mode osworld`` (as ``run.py``'s scripts give no
  --mode); a conflicting ``--mode`` is refused naming both;
* a malformed folder is reported whole: every bad file and record at once, a JSON error with
  its column, a step or metric name that reads as a typo of a supported one refused with the
  name it means (not skipped as 'unsupported' and scored 0);
* ``--data`` at the wrong level (``examples/``, one task file, an index) says what to give;
  ``--osworld-index`` given as a path from the current folder is read as that path, and the
  indexes a missing one lists are every index of the folder, the user's own too.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from parallel_rollout.exit_codes import EXIT_USAGE
from test_osworld_taskset import EXAMPLES, MODEL_AGENT, index_of, needs_set

pytestmark = needs_set


def run_cli(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    """``python -m parallel_rollout run ARGS`` as a user types it: no --mode unless given."""
    return subprocess.run([sys.executable, "-m", "parallel_rollout", "run", *args], capture_output=True,
                          text=True, timeout=120, cwd=cwd, env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})


def said(done: subprocess.CompletedProcess) -> str:
    return " ".join((done.stdout + done.stderr).split())


def copied(tmp_path: Path) -> Path:
    """A copy of OSWorld's evaluation_examples to break."""
    target = tmp_path / "evaluation_examples"
    shutil.copytree(EXAMPLES, target)
    return target


SMALL = sum(len(ids) for ids in index_of("test_small.json").values())


@pytest.mark.parametrize("args", [
    # OSWorld's run.py command line, which names no mode
    ("--test_config_base_dir", str(EXAMPLES), "--test_all_meta_path", str(EXAMPLES / "test_small.json"),
     "--max_steps", "15", "--observation_type", "screenshot", "--action_space", "pyautogui"),
    ("--data", str(EXAMPLES), "--osworld-index", "test_small.json"),
    ("--test_all_meta_path", str(EXAMPLES / "test_small.json")),
], ids=["run.py flags", "folder and index", "index alone"])
def test_an_osworld_folder_or_its_flags_imply_the_osworld_mode(args):
    done = run_cli(*args, "--dry-run", *MODEL_AGENT)
    assert done.returncode == 0, said(done)
    assert done.stdout.strip().splitlines()[-1] == f"runnable {SMALL} of {SMALL} tasks"
    shown = run_cli(*args, "--print-config")
    assert json.loads(shown.stdout)["mode"] == "osworld"


@pytest.mark.parametrize("args, says", [
    (("--mode", "shell", "--data", str(EXAMPLES)),
     f"--data {EXAMPLES} holds an OSWorld task set, which --mode shell cannot run: leave --mode out, "
     "or give --mode osworld"),
    (("--mode", "py", "--data", "humaneval", "--osworld-index", "test_small.json"),
     "--osworld-index (an OSWorld task set's) and --mode py conflict"),
])
def test_a_mode_that_conflicts_with_the_osworld_folder_is_refused_naming_both(args, says):
    done = run_cli(*args, "--dry-run")
    assert done.returncode == EXIT_USAGE and says in said(done), said(done)


def test_every_bad_file_and_record_of_a_folder_is_said_at_once(tmp_path):
    folder = copied(tmp_path)
    ids = index_of("test_all.json")["os"][:5]
    paths = [folder / "examples" / "os" / f"{task_id}.json" for task_id in ids]
    for path in paths[:2]:  # truncated
        text = path.read_text()
        path.write_text(text[: len(text) // 2])
    tasks = [json.loads(path.read_text()) for path in paths[2:]]
    del tasks[0]["evaluator"]
    tasks[1]["evaluator"]["func"] = "exact_mtach"
    tasks[2]["config"] = [*(tasks[2].get("config") or []), {"type": "lanuch", "parameters": {"command": ["x"]}}]
    for path, task in zip(paths[2:], tasks):
        path.write_text(json.dumps(task, indent=2))
    for extra in ((), ("--skip-unsupported",)):  # a typo is refused, never skipped as unsupported
        done = run_cli("--data", str(folder), "--domain", "os", "--dry-run", *MODEL_AGENT, *extra)
        assert done.returncode == EXIT_USAGE
        text = said(done)
        assert "5 bad task records" in text, text
        for path in paths[:2]:
            line, column = _json_error_position(path.read_text())
            assert f"{path}:{line}: invalid JSON: " in text and f"(column {column})" in text
        assert f"{paths[2]}:1: task {ids[2]!r}: missing field 'evaluator'" in text
        assert f"{paths[3]}:1: task {ids[3]!r}: unknown metric 'exact_mtach' (did you mean 'exact_match'?)" in text
        assert f"{paths[4]}:1: task {ids[4]!r}: unknown step 'lanuch' (did you mean 'launch'?)" in text


def dry_run_here(*args: str):
    """``run ARGS --dry-run`` with the openai agent, in this process (click's runner): what a
    user sees, without an interpreter's start."""
    from click.testing import CliRunner

    from parallel_rollout.cli import main

    return CliRunner().invoke(main, ["run", *args, "--dry-run", *MODEL_AGENT])


def test_a_getter_without_a_field_it_needs_is_refused_naming_the_file_and_field(tmp_path):
    """A getter config that lacks what the getter reads (vm_command_line's 'command', vm_file's
    'path') is the task file's error: it loaded, and every attempt's grading raised a KeyError
    that was scored as the agent's failure (reward 0, the run's exit 0)."""
    from test_osworld_taskset import osworld_folder

    rule = {"type": "rule", "rules": {"expected": "hi"}}
    tasks = {"no-command": {"func": "exact_match", "result": {"type": "vm_command_line"}, "expected": rule},
             "no-path": {"func": ["exact_match", "exact_match"], "expected": [rule, rule],
                         "result": [{"type": "vm_command_line", "command": "echo hi"}, {"type": "vm_file", "dest": "x"}]}}
    folder = osworld_folder(tmp_path, {task_id: {"domain": "os", "instruction": "x", "config": [], "evaluator": evaluator}
                                       for task_id, evaluator in tasks.items()}) / "evaluation_examples"
    done = dry_run_here("--data", str(folder))
    assert done.exit_code == EXIT_USAGE, done.output
    text = " ".join(done.output.split())
    assert "2 bad task records" in text, text
    assert (f"{folder / 'examples' / 'os' / 'no-command.json'}:1: task 'no-command': evaluator result getter "
            "'vm_command_line' of metric 'exact_match' needs the field 'command'") in text, text
    assert (f"{folder / 'examples' / 'os' / 'no-path.json'}:1: task 'no-path': evaluator.result[1] getter 'vm_file' "
            "of evaluator.func[1] (exact_match) needs the field 'path'") in text, text


def test_a_func_list_item_that_is_no_name_is_named_by_its_path(tmp_path):
    """A ``func`` list with an item that is no metric name (a null left by an edit) was refused
    as "must be a metric name or a non-empty list of names", naming no item of a long list."""
    from test_osworld_taskset import osworld_folder

    rule = {"type": "rule", "rules": {"expected": "hi"}}
    evaluator = {"func": ["exact_match", None], "expected": [rule, rule],
                 "result": [{"type": "vm_command_line", "command": "echo hi"}] * 2}
    folder = osworld_folder(tmp_path, {"null-func": {"domain": "os", "instruction": "x", "config": [],
                                                     "evaluator": evaluator}}) / "evaluation_examples"
    done = dry_run_here("--data", str(folder))
    assert done.exit_code == EXIT_USAGE, done.output
    text = " ".join(done.output.split())
    assert (f"{folder / 'examples' / 'os' / 'null-func.json'}:1: task 'null-func': evaluator 'func' must be a "
            "metric name or a non-empty list of names: evaluator.func[1] is null") in text, text


def test_a_rule_its_metric_cannot_read_is_refused_naming_the_file_metric_and_key(tmp_path):
    """A rule getter's ``rules`` that lack a key the metric reads, or are of the wrong type,
    are the task file's mistake: they loaded, and every attempt's grading raised a KeyError
    (or iterated a string's letters) that was scored as the agent's failure, reward 0."""
    folder = copied(tmp_path)
    broken = {"28cc3b7e-b194-4bc9-8353-d04c0f4d56d2": {"expect": "100\n"},           # exact_match
              "13584542-872b-42d8-b299-866967b5c3ef": {"include": "43 132"},          # a string, not a list
              "37887e8c-da15-4192-923c-08fa390a176d": ["SUCCESS"]}                    # a list, not an object
    paths = {}
    for task_id, rules in broken.items():
        paths[task_id] = folder / "examples" / "os" / f"{task_id}.json"
        task = json.loads(paths[task_id].read_text())
        task["evaluator"]["expected"]["rules"] = rules
        paths[task_id].write_text(json.dumps(task))
    done = run_cli("--data", str(folder), "--domain", "os", "--dry-run", *MODEL_AGENT)
    assert done.returncode == EXIT_USAGE, said(done)
    text = said(done)
    assert "3 bad task records" in text, text
    says = {"28cc3b7e-b194-4bc9-8353-d04c0f4d56d2": "'exact_match': its 'rules' needs the key 'expected'",
            "13584542-872b-42d8-b299-866967b5c3ef":
                "'check_include_exclude': its 'rules' key 'include' must be a list, not a string",
            "37887e8c-da15-4192-923c-08fa390a176d": "'check_include_exclude': its 'rules' must be an object, not a list"}
    for task_id, reason in says.items():
        assert f"{paths[task_id]}:1: task {task_id!r}: evaluator expected getter 'rule' of metric {reason}" in text, text


def test_no_rule_of_osworlds_own_tasks_is_refused():
    """Every rule of the 369 real tasks is one its metric reads, and every relative date one the
    getter fills (the dry run of test_all loads them all too:
    test_dry_run_counts_every_task_of_test_all_per_domain)."""
    from parallel_rollout.envs.osworld.evaluators import check_evaluator, normalized
    from parallel_rollout.envs.osworld.rule_keys import RULE_GETTERS, RULE_SHAPES

    checked, problems = set(), []
    paths = sorted((EXAMPLES / "examples").glob("*/*.json"))
    for path in paths:
        evaluator = json.loads(path.read_text())["evaluator"]
        try:
            check_evaluator(evaluator)
        except ValueError as exc:
            if not str(exc).startswith("unsupported"):  # what this version lacks is counted, not refused
                problems.append(f"{path}: {exc}")
        checked.update(func for func, _, expected, _ in normalized(evaluator)
                       if isinstance(expected, dict) and expected.get("type") in RULE_GETTERS and func in RULE_SHAPES)
    assert len(paths) == 369 and not problems, problems
    assert len(checked) >= 50, sorted(checked)  # the shapes were checked against real rules


def _json_error_position(text: str) -> tuple[int, int]:
    try:
        json.loads(text)
    except json.JSONDecodeError as exc:
        return exc.lineno, exc.colno
    raise AssertionError("the file was meant to be broken")


def test_a_wrong_level_data_says_what_to_give():
    task_id = index_of("test_all.json")["os"][0]
    cases = [
        (("--data", str(EXAMPLES / "examples")),
         f"this is the examples/ folder of an OSWorld task set; give the folder that holds it and its "
         f"indexes as --data: --data {EXAMPLES}"),
        (("--data", str(EXAMPLES / "examples"), "--osworld-index", str(EXAMPLES / "test_small.json")),
         f"--data: --data {EXAMPLES}"),
        (("--data", str(EXAMPLES / "examples" / "os" / f"{task_id}.json")),
         f"this is one OSWorld task: give the task set's folder (--data {EXAMPLES}), and to run only this "
         f'task an index of your own, {{"os": ["{task_id}"]}} in a .json file, as --osworld-index'),
        (("--data", str(EXAMPLES / "test_small.json")),
         f"test_small.json is an OSWorld index: give its folder as --data and it as --osworld-index: "
         f"--data {EXAMPLES} --osworld-index test_small.json"),
    ]
    for args, says in cases:
        done = run_cli("--mode", "osworld", *args, "--dry-run")
        assert done.returncode == EXIT_USAGE and says in said(done), (args, said(done))


def test_run_py_flags_from_a_folder_without_the_task_set_say_no_such_folder(tmp_path):
    """OSWorld's run.py line started from another folder: its --test_config_base_dir names no
    folder, said as that (not as a task file the folder flags do not apply to)."""
    lines = [("--test_config_base_dir", "evaluation_examples", "--test_all_meta_path",
              "evaluation_examples/test_all.json", "--domain", "os"),
             ("--test_config_base_dir", "evaluation_examples", "--domain", "os"),
             ("--mode", "osworld", "--data", "evaluation_examples")]
    for args in lines:
        done = run_cli(*args, "--dry-run", *MODEL_AGENT, cwd=tmp_path)
        assert done.returncode == EXIT_USAGE, (args, said(done))
        assert f"{tmp_path / 'evaluation_examples'}: no such folder" in said(done), (args, said(done))
        assert "not to a task file" not in said(done) and "task file not found" not in said(done)


def test_run_py_flags_without_a_task_set_name_the_one_osworld_reads_untold(tmp_path):
    """OSWorld's README runs run.py with no --test_config_base_dir (./evaluation_examples by
    default): here --data is asked for, naming the one of the current folder."""
    args = ("--observation_type", "screenshot", "--max_steps", "15", "--domain", "os", "--dry-run", *MODEL_AGENT)
    bare = run_cli(*args, cwd=tmp_path)
    assert bare.returncode == EXIT_USAGE and "--data is required" in said(bare), said(bare)
    assert "evaluation_examples" not in said(bare)
    copied(tmp_path)
    done = run_cli(*args, cwd=tmp_path)
    assert done.returncode == EXIT_USAGE, said(done)
    assert ("OSWorld's run.py reads ./evaluation_examples when not told: here, --data evaluation_examples"
            in said(done)), said(done)


def test_an_index_path_from_the_current_folder_is_read_as_that_path(tmp_path):
    folder = copied(tmp_path)
    done = run_cli("--data", "evaluation_examples", "--osworld-index", "evaluation_examples/test_small.json",
                   "--dry-run", *MODEL_AGENT, cwd=tmp_path)
    assert done.returncode == 0, said(done)
    assert done.stdout.strip().splitlines()[-1] == f"runnable {SMALL} of {SMALL} tasks"
    # a missing index lists every index of the folder, the user's own among them
    (folder / "mine.json").write_text(json.dumps({"os": index_of("test_all.json")["os"][:1]}))
    (folder / "notes.json").write_text(json.dumps({"not": "an index"}))
    missing = run_cli("--data", str(folder), "--osworld-index", "nope.json", "--dry-run")
    assert missing.returncode == EXIT_USAGE
    assert ("indexes here: mine.json, test_all.json, test_infeasible.json, test_nogdrive.json, "
            "test_small.json)") in said(missing)


def _launches(task: dict, program: str) -> bool:
    steps = list(task.get("config") or []) + list(task["evaluator"].get("postconfig") or [])
    return any(s.get("type") == "launch" and program in json.dumps(s["parameters"]["command"]) for s in steps)


@pytest.mark.parametrize("provider", ["process", "docker"])
def test_the_dry_run_notes_uncached_downloads_and_apps_the_vms_lack(tmp_path, provider):
    """Information, not a problem: which tasks will end setup_failed without internet (files
    not in the download cache) or on these VMs (an app they lack: VS Code's code everywhere),
    found from the task files alone, with no network."""
    from parallel_rollout.envs.osworld import downloads
    from parallel_rollout.envs.osworld.sources import task_sources

    if provider == "process" and shutil.which("code"):
        pytest.skip("this host has VS Code")
    small = index_of("test_small.json")
    tasks = {(d, i): json.loads((EXAMPLES / "examples" / d / f"{i}.json").read_text()) for d, ids in small.items()
             for i in ids}
    fetching = [key for key, task in tasks.items() if any(map(downloads.is_remote, task_sources(task)))]
    cache = tmp_path / "cache"
    first = tasks[fetching[0]]  # its files put in the cache: no longer counted
    for url in filter(downloads.is_remote, task_sources(first)):
        downloads.cache_path(url, cache).parent.mkdir(parents=True, exist_ok=True)
        downloads.cache_path(url, cache).write_bytes(b"x")
    done = subprocess.run([sys.executable, "-m", "parallel_rollout", "run", "--data", str(EXAMPLES), "--osworld-index",
                           "test_small.json", "--provider-name", provider, "--dry-run", *MODEL_AGENT],
                          capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path),
                               downloads.CACHE_ENV: str(cache)})
    lines = done.stdout.strip().splitlines()
    assert lines[-1] == f"runnable {SMALL} of {SMALL} tasks", said(done)  # still the last line
    notes = [line for line in lines if line.startswith("note: ")]
    assert (f"note: {len(fetching) - 1} tasks fetch files not in the download cache ({cache})" in notes[0])
    code = [i for (d, i), task in tasks.items() if _launches(task, "code")]
    assert code and any(n.startswith(f"note: {len(code)} tasks launch code, which ") and "setup_failed" in n
                        for n in notes), notes
    if provider == "process":  # a note is no problem: the preflight passes
        assert done.returncode == 0, said(done)


def test_the_dry_run_notes_local_files_a_task_reads_that_are_not_there(tmp_path):
    """A gold file beside the task file (a cloud_file path, a file:// URL) or a download
    step's local input that is not there ends the task setup_failed before the agent acts,
    and can be seen from the task files alone: the dry run said 'runnable 3 of 3 tasks' and
    nothing else, and the run that followed ended every one setup_failed."""
    from test_osworld_taskset import osworld_folder

    check = {"func": "exact_match", "result": {"type": "vm_command_line", "command": "echo hi"},
             "expected": {"type": "rule", "rules": {"expected": "hi"}}}

    def gold(path: str) -> dict:
        return {"func": "compare_text_file", "result": {"type": "vm_file", "path": "/tmp/a", "dest": "a"},
                "expected": {"type": "cloud_file", "path": path, "dest": "gold.txt"}}

    tasks = {"there": {"evaluator": gold("there.txt")},
             "gold-beside": {"evaluator": gold("gold.txt")},
             "gold-url": {"evaluator": gold(f"file://{tmp_path}/nowhere/gold.txt")},
             "input": {"config": [{"type": "download", "parameters": {"files": [
                 {"url": "input.txt", "path": "/tmp/in.txt"}]}}], "evaluator": check}}
    folder = osworld_folder(tmp_path, {task_id: {"domain": "os", "instruction": "x", "config": [], **task}
                                       for task_id, task in tasks.items()}) / "evaluation_examples"
    (folder / "examples" / "os" / "there.txt").write_text("hi\n")
    done = dry_run_here("--data", str(folder))
    assert done.exit_code == 0, done.output  # a note, not a problem
    lines = done.stdout.strip().splitlines()
    assert lines[-1] == "runnable 4 of 4 tasks", done.output
    assert (f"note: 3 tasks read a local file that is not there: they will end setup_failed (e.g. gold-beside: "
            f"{folder / 'examples' / 'os' / 'gold.txt'})") in lines, done.output
    # --limit: the notes are of the tasks the run takes (the first runnable ones), no others
    done = dry_run_here("--data", str(folder), "--limit", "2")
    lines = done.stdout.strip().splitlines()
    assert "--limit 2: the run takes the first 2 runnable tasks" in lines, done.output
    assert "note: 1 task reads a local file that is not there: it will end setup_failed (e.g. gold-beside: " \
        f"{folder / 'examples' / 'os' / 'gold.txt'})" in lines, done.output


def test_web_pages_a_task_opens_are_no_files_to_cache(tmp_path):
    """A chrome task that opens amazon.com in a tab (and a rule that names it) downloads
    nothing: the dry run's note counts, and osworld_cache.py missing lists, only the files a
    run downloads (os: its postconfig's eval.sh), never web pages no cache can hold."""
    from parallel_rollout.envs.osworld import downloads

    opens_pages, downloads_a_file = "7b6c7e24-c58a-49fc-a5bb-d57b80e5b4c3", "5ced85fc-fa1a-4217-95fd-0fb530545ce2"
    index = tmp_path / "two.json"
    index.write_text(json.dumps({"chrome": [opens_pages], "os": [downloads_a_file]}))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path), downloads.CACHE_ENV: str(tmp_path / "cache")}
    done = subprocess.run([sys.executable, "-m", "parallel_rollout", "run", "--data", str(EXAMPLES),
                           "--osworld-index", str(index), "--dry-run", *MODEL_AGENT],
                          capture_output=True, text=True, timeout=120, env=env)
    # the note's verb agrees with its count: it said "1 task fetch files … they end setup_failed"
    assert "note: 1 task fetches files not in the download cache" in said(done), said(done)
    assert "without internet it ends setup_failed" in said(done), said(done)
    listed = subprocess.run([sys.executable, str(Path(__file__).parents[1] / "scripts" / "osworld_cache.py"),
                             "missing", str(EXAMPLES), "--index", str(index)],
                            capture_output=True, text=True, timeout=60, env=env)
    assert listed.returncode == 0, listed.stderr
    assert [line.split("\t")[0] for line in listed.stdout.splitlines()] == [f"os/{downloads_a_file}"]
    assert listed.stdout.split("\t")[1].strip().endswith("/eval.sh"), listed.stdout


def test_the_dry_runs_cache_note_names_the_listing_of_the_runs_own_tasks(tmp_path):
    """The note on uncached files names the osworld-cache command for the run's own --data,
    --osworld-index and --domain, which lists the files of the tasks it counted, run from any
    folder, by the interpreter that has the package (./dev run's users have no virtualenv
    active): it said `python scripts/osworld_cache.py missing`, which lists a set of the
    project's own (test_all.json of ../shared/…), elsewhere ends in a traceback, and with the
    shell's python cannot import the package. A domain the index lacks is the loader's
    message, exit 2, not a KeyError."""
    import shlex

    from parallel_rollout.envs.osworld import downloads

    index = tmp_path / "mine.json"
    index.write_text(json.dumps({"chrome": index_of("test_small.json")["chrome"],
                                 "os": index_of("test_small.json")["os"]}))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path), downloads.CACHE_ENV: str(tmp_path / "cache")}
    done = subprocess.run([sys.executable, "-m", "parallel_rollout", "run", "--data", str(EXAMPLES),
                           "--osworld-index", str(index), "--domain", "os", "--dry-run", *MODEL_AGENT],
                          capture_output=True, text=True, timeout=120, env=env, cwd=tmp_path)
    [note] = [line for line in done.stdout.splitlines() if "not in the download cache" in line]
    count = int(note.split("note: ", 1)[1].split()[0])
    command = shlex.split(note.split("setup_failed; ", 1)[1].removesuffix(" lists them"))
    assert command[:6] == [sys.executable, "-m", "parallel_rollout", "osworld-cache", "missing", str(EXAMPLES)], command
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    # as printed, from another folder, in a shell with no virtualenv active (./dev run's users)
    plain = {**{k: v for k, v in env.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")},
             "PYTHONPATH": os.pathsep.join(p for p in sys.path if p.endswith("/src"))}
    listed = subprocess.run(command, capture_output=True, text=True, timeout=60, env=plain, cwd=elsewhere)
    assert listed.returncode == 0, listed.stderr
    tasks = {line.split("\t")[0] for line in listed.stdout.splitlines()}
    assert len(tasks) == count and all(task.startswith("os/") for task in tasks), (note, listed.stdout)
    wrong = subprocess.run([*command[:-1], "OS"], capture_output=True, text=True, timeout=60,
                           env=plain, cwd=elsewhere)
    assert wrong.returncode == 2 and "Traceback" not in wrong.stderr, wrong.stderr
    assert "--domain 'OS': " in wrong.stderr and "(did you mean 'os'?); domains: chrome, os" in wrong.stderr, wrong.stderr


def _one_task_index(tmp_path: Path) -> tuple[str, Path]:
    """(an os task's id, an index of one's own that lists it)."""
    task_id = index_of("test_small.json")["os"][0]
    index = tmp_path / "one.json"
    index.write_text(json.dumps({"os": [task_id]}))
    return task_id, index


@pytest.mark.parametrize("where", ["flag", "variable", "config file"])
def test_an_unknown_action_space_is_refused_before_anything_runs(tmp_path, where):
    """A typo of --action-space was passed on to every worker, whose reset failed each sample
    as an error (exit 0, the benchmark scored 0, nothing left for --resume); it is refused as
    --observation-type is, wherever it is set."""
    _, index = _one_task_index(tmp_path)
    args = ["--data", str(EXAMPLES), "--osworld-index", str(index), *MODEL_AGENT, "--output-dir",
            str(tmp_path / "out"), "--run-id", "r", "--no-progress"]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    if where == "flag":
        args += ["--action-space", "foo"]
        says = "Invalid value for '--action-space': 'foo' is not one of 'computer_13', 'pyautogui'"
    elif where == "variable":
        env["PARALLEL_ROLLOUT_ACTION_SPACE"] = "foo"
        says = "(from the environment variable PARALLEL_ROLLOUT_ACTION_SPACE)"
    else:
        (tmp_path / "run.toml").write_text('action-space = "foo"\n')
        args += ["--config", str(tmp_path / "run.toml")]
        says = f"--action-space must be computer_13 or pyautogui, got 'foo' (action-space = \"foo\" in {tmp_path}"
    for extra in (["--dry-run"], []):  # the preflight, and the run itself
        done = subprocess.run([sys.executable, "-m", "parallel_rollout", "run", *args, *extra],
                              capture_output=True, text=True, timeout=120, env=env)
        assert done.returncode == EXIT_USAGE and says in said(done), said(done)
        assert "preflight passed" not in said(done) and not (tmp_path / "out" / "r").exists()


def test_specific_task_id_says_a_way_that_runs_that_task(tmp_path):
    """OSWorld's --specific_task_id is refused with the index to write; doing what it says
    runs that one task (it said to give the task's file as --data, which is refused), the task
    set's folder named by the flag typed (it said --data to a line of --test_config_base_dir)."""
    task_id = index_of("test_small.json")["os"][0]
    refused = run_cli("--test_config_base_dir", str(EXAMPLES), "--specific_task_id", task_id, "--dry-run")
    assert refused.returncode == EXIT_USAGE
    advice = said(refused)
    assert (f'to run one task, write {{"os": ["{task_id}"]}} to a file one.json and add --osworld-index '
            "./one.json, with the task set's folder as --test_config_base_dir") in advice, advice
    (tmp_path / "one.json").write_text(advice.split("write ", 1)[1].split(" to a file", 1)[0])
    for data in (("--data", str(EXAMPLES)), ("--test_config_base_dir", str(EXAMPLES))):
        done = run_cli(*data, "--osworld-index", "./one.json", "--dry-run", *MODEL_AGENT, cwd=tmp_path)
        assert done.returncode == 0, said(done)
        assert done.stdout.strip().splitlines()[-1] == "runnable 1 of 1 tasks"
    # the domain found wherever --data is given; a placeholder said when it is not
    late = run_cli("--specific_task_id", task_id, "--data", str(EXAMPLES.parent), "--dry-run")
    assert f'write {{"os": ["{task_id}"]}}' in said(late) and "folder as --data;" in said(late), said(late)
    unknown = run_cli("--specific_task_id=nope", "--dry-run")
    assert ('write {"<domain>": ["nope"]} to a file one.json (<domain>: the folder of examples/ that holds '
            "the task's file)") in said(unknown), said(unknown)


def test_example_id_of_osworld_runners_gets_the_same_advice(tmp_path):
    """--example_id (the one task of OSWorld's multi-env runners in forks) was told 'Did you
    mean --sampling?': it gets --specific_task_id's advice, naming itself and the task's domain."""
    task_id = index_of("test_small.json")["os"][0]
    for line in (("--example_id", task_id), (f"--example_id={task_id}",)):
        refused = run_cli("--test_config_base_dir", str(EXAMPLES), *line, "--dry-run")
        assert refused.returncode == EXIT_USAGE, said(refused)
        assert (f'--example_id (OSWorld\'s runners) has no equivalent here: to run one task, write {{"os": ["{task_id}"]}} '
                "to a file one.json") in said(refused), said(refused)
        assert not (tmp_path / "out").exists()


def test_a_task_file_whose_id_is_not_the_index_one_is_named_with_both(tmp_path):
    """OSWorld keys an example and its result folder on the index's id: a file that says
    another was run under its own id, and exported to <model>/all/<that id>/."""
    folder = copied(tmp_path)
    ids = index_of("test_small.json")["os"][:2]
    path = folder / "examples" / "os" / f"{ids[0]}.json"
    task = json.loads(path.read_text())
    path.write_text(json.dumps({**task, "id": "wrong-id"}))
    for extra in (["--dry-run"], []):  # the preflight, and the run itself
        done = run_cli("--data", str(folder), "--osworld-index", "test_small.json", "--domain", "os", *MODEL_AGENT,
                       "--output-dir", str(tmp_path / "out"), "--run-id", "r", "--no-progress", *extra)
        assert done.returncode == EXIT_USAGE
        assert (f"{path}:1: task id 'wrong-id' is not its id in {folder / 'test_small.json'}, {ids[0]!r} of "
                "domain 'os': make the file's 'id' and the index agree") in said(done), said(done)
        assert ids[1] not in said(done) and not (tmp_path / "out" / "r" / "results.jsonl").exists()


@pytest.mark.parametrize("flags, says", [
    (("--osworld-index", "test_small.json"), "--osworld-index test_small.json applies"),
    (("--osworld-index", "test_small.json", "--domain", "os"), "--domain os and --osworld-index test_small.json apply"),
    (("--domain", "os"), "--domain os applies"),
])
def test_a_folder_flag_with_a_task_file_is_refused(tmp_path, flags, says):
    """--osworld-index picks tasks of a folder: with a task file as --data it was ignored,
    and the file's every task ran."""
    from conftest import ROOT

    tasks = ROOT / "benchmarks" / "osworld_tasks.jsonl"
    for extra in (["--dry-run"], []):  # the preflight, and the run itself
        done = run_cli("--mode", "osworld", "--data", str(tasks), *flags, *MODEL_AGENT, "--output-dir",
                       str(tmp_path / "out"), "--run-id", "r", "--no-progress", *extra)
        assert done.returncode == EXIT_USAGE
        assert f"{tasks}: {says} to an OSWorld folder given as --data, not to a task file" in said(done), said(done)
        assert not (tmp_path / "out" / "r" / "results.jsonl").exists()
