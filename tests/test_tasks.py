"""Task files: every malformed file is rejected with a ``file:line:`` message before anything runs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from conftest import OSWORLD_EXAMPLES, shell_task, write_tasks
from parallel_rollout.cli import main
from parallel_rollout.envs import task_validators
from parallel_rollout.envs.registry import mode_names
from parallel_rollout.errors import ConfigError, TaskFileError
from parallel_rollout.tasks import Sample, Task, expand, load_tasks, sample_key


def _load(path: Path, default_mode: str | None = "shell") -> list[Task]:
    return load_tasks(path, default_mode=default_mode, validators=task_validators())


def _line(task: dict) -> str:
    return json.dumps(task) + "\n"


def _good_lines(count: int) -> str:
    return "".join(_line(shell_task(f"t{i}")) for i in range(count))


# (name, file name, file content, substrings the message must hold)
MALFORMED = [
    ("bad json on line 7", "tasks.jsonl", _good_lines(6) + '{"id": "t6", "mode": \n',
     ["tasks.jsonl:7:", "invalid JSON"]),
    ("not an object", "tasks.jsonl", _good_lines(1) + "[1, 2]\n", ["tasks.jsonl:2:", "JSON object", "list"]),
    ("missing id", "tasks.jsonl",
     _good_lines(2) + _line({k: v for k, v in shell_task("x").items() if k != "id"}),
     ["tasks.jsonl:3:", "missing field 'id'"]),
    ("id is a list", "tasks.jsonl", _line(shell_task("x", id=["a"])), ["tasks.jsonl:1:", "'id'", "string"]),
    ("id is a bool", "tasks.jsonl", _line(shell_task("x", id=True)), ["tasks.jsonl:1:", "'id'", "string"]),
    ("id is a float", "tasks.jsonl", _line(shell_task("x", id=1.5)), ["tasks.jsonl:1:", "'id'", "string"]),
    ("id is blank", "tasks.jsonl", _line(shell_task("x", id="  ")), ["tasks.jsonl:1:", "'id'"]),
    ("id has a backslash", "tasks.jsonl", _line(shell_task("x", id="a\\b")), ["tasks.jsonl:1:", "'id'"]),
    # The id names a folder under trajectories/: '..' would write outside it.
    ("id is ..", "tasks.jsonl", _line(shell_task("x", id="..")), ["tasks.jsonl:1:", "'id'"]),
    ("id is .", "tasks.jsonl", _line(shell_task("x", id=".")), ["tasks.jsonl:1:", "'id'"]),
    ("unknown mode", "tasks.jsonl", _line(shell_task("x", mode="nosuchmode")),
     ["tasks.jsonl:1:", "unknown mode 'nosuchmode'", "known modes: " + ", ".join(mode_names())]),
    ("mode is a typo", "tasks.jsonl", _line(shell_task("x", mode="shel")),
     ["tasks.jsonl:1:", "unknown mode 'shel' in task 'x' (did you mean 'shell'?); known modes: "]),
    ("a field given as null", "tasks.jsonl", _line(shell_task("x", instruction=None)),
     ["tasks.jsonl:1:", "task 'x': field 'instruction' must be a string, got null"]),
    ("mode is not a string", "tasks.jsonl", _line(shell_task("x", mode=3)), ["tasks.jsonl:1:", "unknown mode"]),
    ("tags not a list", "tasks.jsonl", _line(shell_task("x", tags="files")), ["tasks.jsonl:1:", "task 'x': field 'tags' must be a list of strings, got a string"]),
    ("tags hold a number", "tasks.jsonl", _line(shell_task("x", tags=["a", 1])), ["tasks.jsonl:1:", "task 'x': field 'tags' must be a list of strings; its item 2 is 1"]),
    ("seed is a string", "tasks.jsonl", _line(shell_task("x", seed="7")), ["tasks.jsonl:1:", "task 'x': field 'seed'", "a whole number, got a string"]),
    ("seed is a float", "tasks.jsonl", _line(shell_task("x", seed=1.5)), ["tasks.jsonl:1:", "task 'x': field 'seed'", "a whole number, got 1.5"]),
    ("seed is a bool", "tasks.jsonl", _line(shell_task("x", seed=True)), ["tasks.jsonl:1:", "task 'x': field 'seed'", "a whole number, got true"]),
    ("shell check missing", "tasks.jsonl",
     _good_lines(1) + _line({k: v for k, v in shell_task("x").items() if k != "check"}),
     ["tasks.jsonl:2:", "task 'x'", "missing field 'check'"]),
    ("shell check not a string", "tasks.jsonl", _line(shell_task("x", check=["test 1"])),
     ["tasks.jsonl:1:", "'check'"]),
    ("shell check empty", "tasks.jsonl", _good_lines(2) + _line(shell_task("x", check="")),
     ["tasks.jsonl:3:", "task 'x'", "field 'check' is empty"]),
    ("shell check blank", "tasks.jsonl", _line(shell_task("x", check=" \n\t")),
     ["tasks.jsonl:1:", "field 'check' is empty"]),
    ("shell setup is a string", "tasks.jsonl", _line(shell_task("x", setup="echo hi")),
     ["tasks.jsonl:1:", "'setup'", "list"]),
    ("shell setup holds a number", "tasks.jsonl", _line(shell_task("x", setup=["echo hi", 3])),
     ["tasks.jsonl:1:", "'setup'", "list of strings"]),
    ("shell reference not a list", "tasks.jsonl", _line(shell_task("x", reference="touch f")),
     ["tasks.jsonl:1:", "'reference'"]),
    ("shell timeout not positive", "tasks.jsonl", _line(shell_task("x", timeout=0)),
     ["tasks.jsonl:1:", "'timeout'"]),
    ("empty file", "tasks.jsonl", "", ["tasks.jsonl:", "no tasks"]),
    ("only blank lines", "tasks.jsonl", "\n   \n\n", ["tasks.jsonl:", "no tasks"]),
    ("non-UTF-8 on line 3", "tasks.jsonl", None, ["tasks.jsonl:3:", "UTF-8"]),
    ("json file not a list", "tasks.json", json.dumps(shell_task("x")), ["tasks.json:1:", "list"]),
    ("json file bad syntax", "tasks.json", '[\n{"id": "a",\n}\n]', ["tasks.json:3:", "invalid JSON"]),
    ("json item 2 bad", "tasks.json", json.dumps([shell_task("a"), shell_task("b", seed="x")], indent=2),
     ["tasks.json: item 2:", "'seed'"]),
    ("json item missing id", "tasks.json", json.dumps([{"mode": "shell"}]), ["tasks.json: item 1:", "'id'"]),
    # What results.jsonl cannot store: refused at load, not at the first write of a result.
    ("lone surrogate in the id", "tasks.jsonl", _good_lines(2) + _line(shell_task("x", id="b\ud800")),
     ["tasks.jsonl:3:", "field 'id'", "lone surrogate, \\ud800"]),
    ("lone low surrogate deep in the payload", "tasks.jsonl",
     _line(shell_task("x", setup=["echo ok", "echo \udc01 caf\u00e9"])),
     ["tasks.jsonl:1:", "field 'setup'", "\\udc01"]),
    ("lone surrogate in a field name", "tasks.jsonl", _good_lines(1) + _line({**shell_task("x"), "k\ud83d": 1}),
     ["tasks.jsonl:2:", "field name", "\\ud83d"]),
    ("NaN", "tasks.jsonl", _good_lines(3) + '{"id": "x", "mode": "shell", "check": "true", "timeout": NaN}\n',
     ["tasks.jsonl:4:", "NaN is not a JSON number"]),
    ("Infinity", "tasks.jsonl", _line(shell_task("x"))[:-2] + ', "seed": Infinity}\n',
     ["tasks.jsonl:1:", "Infinity is not a JSON number"]),
    ("-Infinity in a json file, after the word inside strings", "tasks.json",
     '[\n {"id": "a", "mode": "shell", "check": "echo NaN Infinity"},\n {"id": "b", "mode": "shell",\n'
     '  "check": "true", "timeout": -Infinity}\n]\n', ["tasks.json:4:", "-Infinity is not a JSON number"]),
    ("a float beyond the largest (reads as infinity)", "tasks.jsonl",
     _good_lines(1) + _line(shell_task("x"))[:-2] + ', "timeout": -1e400}\n',
     ["tasks.jsonl:2:", "-1e400", "too large"]),
    ("an integer of 5000 digits", "tasks.jsonl", _line(shell_task("x"))[:-2] + ', "seed": ' + "7" * 5000 + "}\n",
     ["tasks.jsonl:1:", "5000 characters", "too large"]),
    ("lone surrogate escape in upper case in a json file", "tasks.json",
     '[{"id": "a", "mode": "shell", "check": "true"},\n\n {"id": "b", "mode": "shell", "check": "\\uD800"}]',
     ["tasks.json:3:", "field 'check'", "\\ud800"]),
]


@pytest.mark.parametrize("name, filename, content, expected", MALFORMED, ids=[m[0] for m in MALFORMED])
def test_malformed_task_file_is_rejected_with_its_location(tmp_path, name, filename, content, expected):
    """One body, one row per defect: TaskFileError (a ConfigError) whose message says where."""
    path = tmp_path / filename
    if content is None:  # a Latin-1 byte on line 3
        path.write_bytes(_good_lines(2).encode() + b'{"id": "caf\xe9", "mode": "shell"}\n')
    else:
        path.write_text(content, encoding="utf-8")
    with pytest.raises(TaskFileError) as info:
        _load(path)
    assert isinstance(info.value, ConfigError)
    message = str(info.value)
    assert message.startswith(str(path)), message
    for part in expected:
        assert part in message, f"{part!r} not in {message!r}"


def test_duplicate_id_names_both_lines(tmp_path):
    path = write_tasks(tmp_path / "tasks.jsonl", [shell_task("a"), shell_task("b"), shell_task("a")])
    with pytest.raises(TaskFileError) as info:
        _load(path)
    message = str(info.value)
    assert f"{path}:3:" in message and f"{path}:1" in message and "duplicate task id 'a'" in message


def test_duplicate_id_in_json_list_names_both_items(tmp_path):
    path = tmp_path / "tasks.json"
    path.write_text(json.dumps([shell_task("a"), shell_task("a")]))
    with pytest.raises(TaskFileError, match=r"item 2: duplicate task id 'a' \(first at .*item 1\)"):
        _load(path)


def test_missing_file(tmp_path):
    with pytest.raises(TaskFileError, match="task file not found"):
        _load(tmp_path / "nope.jsonl")


def test_task_mode_differing_from_run_mode_is_rejected(tmp_path):
    path = write_tasks(tmp_path / "tasks.jsonl", [shell_task("a")])
    validators = {"shell": lambda payload: None, "other": lambda payload: None}
    with pytest.raises(TaskFileError, match=r"tasks.jsonl:1: .*mode 'shell' but the run is --mode other"):
        load_tasks(path, default_mode="other", validators=validators)


def test_a_task_of_another_mode_beside_a_mistyped_one_says_no_mode_was_given(tmp_path):
    """A file whose first task names a mode with a typo ('shel') and another names py: with
    no --mode, the second was refused as 'the run is --mode shell', a flag nobody gave."""
    path = write_tasks(tmp_path / "tasks.jsonl", [shell_task("a", mode="shel"), shell_task("b", mode="py")])
    result = CliRunner().invoke(main, ["--data", str(path), "--output-dir", str(tmp_path / "out"), "--dry-run"])
    said = " ".join(result.output.split())
    assert result.exit_code == 2 and f"{path}:1: unknown mode 'shel' in task 'a'" in said, said
    assert f"{path}:2: task 'b' has mode 'py' but the run is shell, the default (no --mode was given)" in said, said


def test_a_resume_whose_task_file_is_gone_says_it_read_the_path_from_the_runs_config(tmp_path):
    """A nightly --resume of a run whose task file was moved since: 'task file not found' named
    a path the command line never held; it says now that --resume read it from config.json."""
    path = write_tasks(tmp_path / "tasks.jsonl", [shell_task("a")])
    out = str(tmp_path / "out")
    first = CliRunner().invoke(main, ["--data", str(path), "--output-dir", out, "--run-id", "r", "--no-progress"])
    assert first.exit_code == 0, first.output
    path.rename(tmp_path / "moved.jsonl")
    for extra in ([], ["--dry-run"]):
        result = CliRunner().invoke(main, ["--output-dir", out, "--run-id", "r", "--resume", "--no-progress", *extra])
        said = " ".join(result.output.split())
        assert result.exit_code == 2 and f"{path}: task file not found" in said, said
        assert f'(data = "{path}" in {out}/r/config.json, which --resume reads)' in said, said


def test_a_run_an_earlier_version_started_with_the_default_osworld_index_still_resumes(tmp_path):
    """A run of a task file given --osworld-index test_all.json, which an earlier version took
    in silence: its config.json has the flag, which no flag of a resume takes back; the
    resume reads it as the default it is and finishes, where it was refused (exit 2)."""
    path = write_tasks(tmp_path / "tasks.jsonl", [shell_task("a")])
    out = str(tmp_path / "out")
    first = CliRunner().invoke(main, ["--data", str(path), "--output-dir", out, "--run-id", "r", "--no-progress"])
    assert first.exit_code == 0, first.output
    stored = json.loads((tmp_path / "out" / "r" / "config.json").read_text())
    stored["config"]["explicit"].append("osworld_index")
    (tmp_path / "out" / "r" / "config.json").write_text(json.dumps(stored))
    resumed = CliRunner().invoke(main, ["--output-dir", out, "--run-id", "r", "--resume", "--no-progress"])
    assert resumed.exit_code == 0, resumed.output


def test_no_mode_anywhere_is_rejected(tmp_path):
    task = shell_task("a")
    del task["mode"]
    path = write_tasks(tmp_path / "tasks.jsonl", [task])
    with pytest.raises(TaskFileError, match=r"tasks.jsonl:1: .*no 'mode'"):
        _load(path, default_mode=None)


def test_blank_lines_are_skipped_and_line_numbers_stay_true(tmp_path):
    path = tmp_path / "tasks.jsonl"
    path.write_text("\n" + _line(shell_task("a")) + "   \n\n" + _line(shell_task("b")) + "\n")
    tasks = _load(path)
    assert [t.id for t in tasks] == ["a", "b"]
    assert [t.source for t in tasks] == [f"{path}:2", f"{path}:5"]


def test_crlf_and_utf8_bom_are_accepted(tmp_path):
    """Files written on Windows: a byte-order mark and CRLF line ends."""
    path = tmp_path / "tasks.jsonl"
    path.write_bytes(b"\xef\xbb\xbf" + _line(shell_task("a")).replace("\n", "\r\n").encode()
                     + _line(shell_task("b")).replace("\n", "\r\n").encode())
    assert [t.id for t in _load(path)] == ["a", "b"]


def test_unicode_line_separator_inside_a_string_is_not_a_line_break(tmp_path):
    """U+2028/U+2029/U+0085 are legal raw inside a JSON string; only newlines end a JSONL record."""
    instruction = "one\u2028two\u2029three\x85four"
    path = tmp_path / "tasks.jsonl"
    path.write_text(json.dumps(shell_task("a", instruction=instruction), ensure_ascii=False) + "\n"
                    + _line(shell_task("b")), encoding="utf-8")
    assert "\u2028" in path.read_text(encoding="utf-8")  # written raw, as ensure_ascii=False does
    tasks = _load(path)
    assert [t.id for t in tasks] == ["a", "b"]
    assert tasks[0].get("instruction") == instruction
    assert tasks[1].source == f"{path}:2"


def test_task_model_fields(tmp_path):
    path = write_tasks(tmp_path / "tasks.jsonl", [
        shell_task("a", seed=7, tags=["x", "y"]),
        {**shell_task("b"), "id": 12},  # a numeric id is taken as its string
        {k: v for k, v in shell_task("c").items() if k != "mode"},  # mode from --mode
    ])
    a, b, c = _load(path)
    assert (a.id, a.mode, a.seed, a.tags) == ("a", "shell", 7, ("x", "y"))
    assert a.get("check") == "test -e ~/a.done" and "id" not in a.payload and "seed" not in a.payload
    assert b.id == "12" and b.seed is None and b.tags == ()
    assert c.mode == "shell"


def test_json_list_and_tasks_object(tmp_path):
    listed = tmp_path / "list.json"
    listed.write_text(json.dumps([shell_task("a"), shell_task("b")]))
    wrapped = tmp_path / "wrapped.json"
    wrapped.write_text(json.dumps({"tasks": [shell_task("c")]}))
    assert [t.id for t in _load(listed)] == ["a", "b"]
    assert _load(listed)[1].source == f"{listed}: item 2"
    assert [t.id for t in _load(wrapped)] == ["c"]


def test_shipped_benchmark_loads():
    from conftest import SHELL_TASKS

    tasks = _load(SHELL_TASKS)
    assert len(tasks) == 25 and len({t.id for t in tasks}) == 25


@pytest.mark.parametrize("group_size", [1, 3])
def test_expand_keys_samples_by_task_and_index(group_size):
    tasks = [Task("a", "shell", seed=5), Task("b", "shell")]
    samples = expand(tasks, group_size)
    assert [s.key for s in samples] == [f"{t}#{i}" for t in ("a", "b") for i in range(group_size)]
    assert all(isinstance(s, Sample) for s in samples)
    # a group shares its task, hence its seed
    assert {s.task.seed for s in samples if s.task.id == "a"} == {5}
    assert sample_key("a", 2) == "a#2"


def test_cli_rejects_malformed_file_before_anything_runs(tmp_path):
    """Exit code 2 (usage error), the file:line message, and no run folder at all."""
    data = tmp_path / "tasks.jsonl"
    data.write_text(_good_lines(6) + "{not json\n")
    out = tmp_path / "out"
    result = CliRunner().invoke(main, [
        "--mode", "shell", "--data", str(data), "--num-rollouts", "2",
        "--output-dir", str(out), "--run-id", "r", "--no-progress",
    ])
    assert result.exit_code == 2, result.output
    assert "tasks.jsonl:7:" in result.output and "invalid JSON" in result.output
    assert not out.exists(), f"a run folder was created: {list(out.rglob('*'))}"


def test_every_bad_record_is_named_at_once(tmp_path):
    """A file with several bad records names each (line and why), not only the first: a
    fix-and-rerun per line is slow on a big file. --dry-run says the same; past twenty the
    count says how many more."""
    data = tmp_path / "tasks.jsonl"
    data.write_text(_good_lines(2) + "{not json\n" + _line({"command": "true"}) + _line(shell_task("x1"))
                    + _line(shell_task("t0")))
    for extra in ([], ["--dry-run"]):
        result = CliRunner().invoke(main, ["--mode", "shell", "--data", str(data), "--output-dir",
                                           str(tmp_path / "out"), "--no-progress", *extra])
        assert result.exit_code == 2, result.output
        assert f"{data}: 3 bad task records:" in result.output
        for line in (f"{data}:3: invalid JSON", f"{data}:4: missing field 'id'",
                     f"{data}:6: duplicate task id 't0' (first at {data}:1)"):
            assert line in result.output, (line, result.output)
        assert not (tmp_path / "out").exists()
    data.write_text("{not json\n" * 25)
    with pytest.raises(TaskFileError) as caught:
        load_tasks(data, default_mode="shell", validators=task_validators())
    lines = str(caught.value).splitlines()
    assert lines[0] == f"{data}: 25 bad task records:" and lines[-1] == "  … and 5 more" and len(lines) == 22


def test_every_task_the_oracle_cannot_replay_is_named_at_once(tmp_path):
    """--agent oracle on tasks without references named only the first one (a census of 39
    OSWorld tasks said 'runnable 39 of 39', then one task): each is named, run or --dry-run."""
    plain = [{k: v for k, v in shell_task(f"n{i}").items() if k != "reference"} for i in range(3)]
    data = write_tasks(tmp_path / "tasks.jsonl", [shell_task("t0"), *plain])
    for extra in ([], ["--dry-run"]):
        result = CliRunner().invoke(main, ["--mode", "shell", "--data", str(data), "--agent", "oracle",
                                           "--output-dir", str(tmp_path / "out"), "--no-progress", *extra])
        assert result.exit_code == 2, result.output
        assert f"{data}: 3 tasks --agent oracle cannot run:" in result.output
        for i in range(3):
            assert f"task 'n{i}' has no 'reference' commands" in result.output
        assert not (tmp_path / "out").exists()
        assert "is the default" not in result.output, result.output
    # the oracle by default, on a task file of one's own: said to be the default, and what to give
    done = CliRunner().invoke(main, ["--data", str(write_tasks(tmp_path / "mine.jsonl", plain[:1])),
                                     "--output-dir", str(tmp_path / "out"), "--no-progress"])
    assert done.exit_code == 2 and "task 'n0' has no 'reference' commands" in done.output, done.output
    assert "--agent oracle is the default (no --agent was given): give the agent to run them with: " \
           "--agent openai with --model, --agent command with --agent-cmd" in " ".join(done.output.split()), done.output



def test_the_oracle_is_checked_on_the_tasks_limit_takes(tmp_path):
    """--limit N runs the first N tasks, and only those need the agent's references: --limit 1
    of a set whose later tasks have none was refused naming every one of them (OSWorld's 369
    tasks with --limit 3: "298 tasks --agent oracle cannot run")."""
    plain = [{k: v for k, v in shell_task(f"n{i}").items() if k != "reference"} for i in range(3)]
    data = write_tasks(tmp_path / "tasks.jsonl", [shell_task("t0"), *plain])
    base = ["--mode", "shell", "--data", str(data), "--agent", "oracle", "--output-dir", str(tmp_path / "out"),
            "--no-progress", "--dry-run"]
    taken = CliRunner().invoke(main, [*base, "--limit", "1"])
    assert taken.exit_code == 0, taken.output
    refused = CliRunner().invoke(main, [*base, "--limit", "2"])
    assert refused.exit_code == 2 and "task 'n0' has no 'reference' commands" in refused.output, refused.output
    assert "'n1'" not in refused.output and "'n2'" not in refused.output, refused.output


def test_skip_unsupported_skips_the_tasks_the_agent_cannot_run(tmp_path):
    """--skip-unsupported skipped the tasks the mode lacks features for, not those the agent
    cannot run: the oracle (the default agent) on tasks without a reference was refused with
    the flag as without it. Each such task gets one final 'unsupported' record naming why,
    counted in the summary as one that never ran, and a resume neither reruns nor recounts it."""
    plain = [{k: v for k, v in shell_task(f"n{i}").items() if k != "reference"} for i in range(2)]
    data = write_tasks(tmp_path / "tasks.jsonl", [shell_task("t0"), *plain])
    out = tmp_path / "out"
    base = ["--mode", "shell", "--data", str(data), "--output-dir", str(out), "--run-id", "r", "--no-progress"]
    refused = CliRunner().invoke(main, base)
    assert refused.exit_code == 2 and "add --skip-unsupported to run the rest" in refused.output, refused.output
    assert not out.exists()
    dry = CliRunner().invoke(main, [*base, "--skip-unsupported", "--dry-run"])
    assert dry.exit_code == 0, dry.output
    for _ in range(2):  # the run, then its resume
        done = CliRunner().invoke(main, [*base, "--skip-unsupported", "--group-size", "2", "--resume"])
        assert done.exit_code == 0, done.output
        records = [json.loads(line) for line in (out / "r" / "results.jsonl").read_text().splitlines()]
        assert sorted(r["key"] for r in records) == ["n0#0", "n0#1", "n1#0", "n1#1", "t0#0", "t0#1"]
        skipped = [r for r in records if r["task_id"] != "t0"]
        assert all(r["status"] == "unsupported" and r["final"] and r["reward"] == 0.0 for r in skipped)
        assert "unsupported: --agent oracle: task 'n1' has no 'reference' commands" in skipped[-1]["failure"]["message"]
        summary = json.loads((out / "r" / "summary.json").read_text())
        assert (summary["finished"], summary["attempts"], summary["success_rate"]) == (6, 2, 0.3333)


def test_the_dry_run_counts_the_tasks_the_agent_cannot_run_as_not_runnable(tmp_path):
    """--dry-run's census counted as runnable the tasks the agent refuses (the oracle's without
    a reference), which --skip-unsupported then skips: it said 'runnable 3 of 3 tasks' of a run
    that runs 1. Each domain's count is of the tasks the run runs, the others named with why,
    and --limit says how many of the tasks it takes are skipped."""
    plain = [{k: v for k, v in shell_task(f"n{i}").items() if k != "reference"} for i in range(2)]
    data = write_tasks(tmp_path / "tasks.jsonl", [*plain, shell_task("t0"), shell_task("t1")])
    base = ["--mode", "shell", "--data", str(data), "--output-dir", str(tmp_path / "out"), "--no-progress",
            "--skip-unsupported", "--dry-run"]
    dry = CliRunner().invoke(main, base)
    assert dry.exit_code == 0, dry.output
    lines = dry.output.splitlines()
    assert lines[-1] == "runnable 2 of 4 tasks", dry.output
    assert ": 4 tasks, 2 runnable" in dry.output, dry.output
    assert "  --agent oracle cannot run (has no 'reference' commands): 2 tasks" in lines, dry.output
    limited = CliRunner().invoke(main, [*base, "--limit", "3"])
    assert limited.exit_code == 0, limited.output
    assert ("--limit 3: the run takes the first 3 runnable tasks, of which --agent oracle cannot run 2 "
            "(an 'unsupported' record each)") in limited.output.splitlines(), limited.output


@pytest.mark.skipif(OSWORLD_EXAMPLES is None, reason="OSWorld's task files are not at shared/osworld")
def test_osworld_skip_unsupported_takes_the_tasks_without_a_reference(tmp_path):
    """OSWorld's run.py flags, the oracle by default: one task of test_small.json's os domain has
    no reference, and --skip-unsupported skips it (it was refused all the same)."""
    result = CliRunner().invoke(main, ["run", "--test_config_base_dir", str(OSWORLD_EXAMPLES), "--test_all_meta_path",
                                       str(OSWORLD_EXAMPLES / "test_small.json"), "--domain", "os", "--skip-unsupported",
                                       "--result_dir", str(tmp_path / "out"), "--dry-run"])
    assert result.exit_code == 0, result.output
    assert "os: 2 tasks, 1 runnable" in result.output.splitlines(), result.output
    assert result.output.splitlines()[-1] == "runnable 1 of 2 tasks", result.output


@pytest.mark.skipif(OSWORLD_EXAMPLES is None, reason="OSWorld's task files are not at shared/osworld")
def test_an_osworld_limit_needs_references_of_its_tasks_only(tmp_path):
    """OSWorld's run.py flags with the default agent (the oracle) and --limit 3: of the first
    three tasks of test_all.json one has no reference, and it alone is named."""
    index = json.loads((OSWORLD_EXAMPLES / "test_all.json").read_text())
    ids = [task_id for domain in index.values() for task_id in domain]
    result = CliRunner().invoke(main, ["run", "--test_config_base_dir", str(OSWORLD_EXAMPLES), "--domain", "all",
                                       "--limit", "3", "--result_dir", str(tmp_path / "out"), "--dry-run"])
    assert result.exit_code == 2 and "has no 'reference' actions" in result.output, result.output
    assert any(task_id in result.output for task_id in ids[:3]), result.output
    assert not [task_id for task_id in ids[3:] if task_id in result.output], result.output

def _raw(task_id: str, extra: str) -> str:
    """A good shell task's line with raw JSON text (``"k": v``) added inside its object."""
    return _line(shell_task(task_id))[:-2] + ", " + extra + "}\n"


UNSTORABLE = {
    "surrogate id": (_good_lines(2) + _line(shell_task("x", id="b\ud800")), "tasks.jsonl:3:"),
    "surrogate instruction": (_good_lines(1) + _line(shell_task("x", instruction="a\udfff")), "tasks.jsonl:2:"),
    "NaN": (_good_lines(4) + _raw("x", '"timeout": NaN'), "tasks.jsonl:5:"),
    "Infinity": (_raw("x", '"timeout": Infinity'), "tasks.jsonl:1:"),
    "-Infinity": (_good_lines(1) + _raw("x", '"note": -Infinity'), "tasks.jsonl:2:"),
    # valid JSON, but no result could hold it: infinity once read, or a traceback at load
    "1e400": (_good_lines(2) + _raw("x", '"timeout": 1e400'), "tasks.jsonl:3:"),
    "5000 digits": (_raw("x", '"seed": ' + "9" * 5000), "tasks.jsonl:1:"),
}


@pytest.mark.parametrize("name", sorted(UNSTORABLE))
def test_cli_refuses_what_results_cannot_store(tmp_path, name):
    """A lone surrogate (once: a traceback and exit 1 at the first result, no results.jsonl)
    or a non-JSON number (once: every such task failed at run time) is a usage error naming
    file:line; nothing runs."""
    content, where = UNSTORABLE[name]
    data = tmp_path / "tasks.jsonl"
    data.write_text(content, encoding="utf-8")
    out = tmp_path / "out"
    result = CliRunner().invoke(main, [
        "--mode", "shell", "--data", str(data), "--output-dir", str(out), "--run-id", "r", "--no-progress",
    ])
    assert result.exit_code == 2, result.output
    assert f"{data.parent}/{where}" in result.output, result.output
    assert "Traceback" not in result.output and result.exception is None or isinstance(result.exception, SystemExit)
    assert not out.exists(), f"a run folder was created: {list(out.rglob('*'))}"


def test_ids_with_slashes_load_and_get_distinct_safe_folders(tmp_path):
    """HumanEval's ids look like HumanEval/0; their trajectory folders must stay inside."""
    from parallel_rollout.tasks import safe_name

    path = tmp_path / "tasks.jsonl"
    path.write_text(_line(shell_task("x", id="HumanEval/0")) + _line(shell_task("y", id="HumanEval_0")))
    tasks = load_tasks(path, default_mode="shell", validators=task_validators())
    assert [t.id for t in tasks] == ["HumanEval/0", "HumanEval_0"]
    names = {safe_name(t.id) for t in tasks}
    assert len(names) == 2 and not any("/" in n or n.startswith(".") for n in names)
    assert safe_name("plain-id_1.x") == "plain-id_1.x"


def _osworld_folder(tmp_path):
    """An OSWorld-layout folder made from the shipped desktop tasks: two domains."""
    shipped = [json.loads(line) for line in
               (Path(__file__).parent.parent / "benchmarks" / "osworld_tasks.jsonl").read_text().splitlines()]
    folder = tmp_path / "evaluation_examples"
    index = {"os": [], "editor": []}
    for n, task in enumerate(shipped[:4]):
        domain = "os" if n % 2 == 0 else "editor"
        task.pop("mode", None)
        index[domain].append(task["id"])
        path = folder / "examples" / domain / f"{task['id']}.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(task, indent=2))
    (folder / "test_all.json").write_text(json.dumps(index))
    return folder, index


def test_osworld_folder_loads_every_domain_or_one(tmp_path):
    folder, index = _osworld_folder(tmp_path)
    every = load_tasks(folder, default_mode="osworld", validators=task_validators())
    assert sorted(t.id for t in every) == sorted(index["os"] + index["editor"])
    editor = load_tasks(folder, default_mode="osworld", validators=task_validators(), domain="editor")
    assert [t.id for t in editor] == index["editor"] and all("editor" in t.tags for t in editor)
    with pytest.raises(TaskFileError, match="--domain 'chrome': .* has no such domain; domains: editor, os"):
        load_tasks(folder, default_mode="osworld", validators=task_validators(), domain="chrome")


@pytest.mark.parametrize("breakage,expected", [
    ("no index", "no index test_all.json"),
    ("missing task file", "has no file"),
    ("bad task json", "invalid JSON"),
])
def test_osworld_folder_errors_name_the_file(tmp_path, breakage, expected):
    folder, index = _osworld_folder(tmp_path)
    if breakage == "no index":
        (folder / "test_all.json").unlink()
    elif breakage == "missing task file":
        (folder / "examples" / "os" / f"{index['os'][0]}.json").unlink()
    else:
        (folder / "examples" / "os" / f"{index['os'][0]}.json").write_text("{oops")
    with pytest.raises(TaskFileError, match=expected):
        load_tasks(folder, default_mode="osworld", validators=task_validators())


def test_domain_with_a_task_file_is_refused(tmp_path):
    path = write_tasks(tmp_path / "t.jsonl", [shell_task("a")])
    with pytest.raises(TaskFileError, match="--domain os applies to an OSWorld folder"):
        load_tasks(path, default_mode="shell", validators=task_validators(), domain="os")


@pytest.mark.parametrize("declared, flag, extra", [
    (True, ["--osworld-index", "test_all.json"], []), (False, ["--osworld-index", "test_all.json"], []),
    (False, ["--osworld-index", "test_all.json"], ["--dry-run"]), (False, ["--domain", "all"], []),
], ids=["index-mode-run", "index-no-mode-run", "index-no-mode-dry-run", "domain-no-mode-run"])
def test_the_default_osworld_index_named_with_a_task_file_is_refused_as_another_is(tmp_path, declared, flag, extra):
    """--osworld-index test_all.json, --domain all (the defaults, named: OSWorld's run.py
    habit) beside a task file: its records that name their mode ran, the flag ignored in
    silence; those that do not were read as OSWorld tasks, every one refused, and the hint
    said 'add --mode shell', which is then refused as a conflict with the flag. Refused as
    --osworld-index test_small.json and --domain os are."""
    task = shell_task("a")
    if not declared:
        del task["mode"]
    data = write_tasks(tmp_path / "t.jsonl", [task])
    result = CliRunner().invoke(main, ["--data", str(data), *flag, "--output-dir", str(tmp_path / "out"),
                                       "--no-progress", *extra])
    said = " ".join(result.output.split())
    assert result.exit_code == 2, result.output
    assert f"{data}: {' '.join(flag)} applies to an OSWorld folder given as --data" in said, said
    assert "add --mode shell" not in said and not (tmp_path / "out").exists()


@pytest.mark.parametrize("check", ["", "   "])
def test_an_empty_shell_check_is_refused_before_the_run(tmp_path, check):
    """An empty check exits 0 for every answer (the shell runs nothing): it used to grade
    every attempt a success; the run is refused (exit 2, file:line) and nothing starts."""
    data = write_tasks(tmp_path / "tasks.jsonl", [shell_task("ok"), shell_task("empty", check=check)])
    result = CliRunner().invoke(main, ["--mode", "shell", "--data", str(data), "--output-dir",
                                       str(tmp_path / "out"), "--run-id", "r", "--no-progress"])
    assert result.exit_code == 2, result.output
    assert f"{data}:2: task 'empty'" in result.output and "field 'check' is empty" in result.output, result.output
    assert not (tmp_path / "out").exists()
