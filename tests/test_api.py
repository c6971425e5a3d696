"""``parallel_rollout.api``: a run from Python as the CLI makes it, and a run folder read back."""

from __future__ import annotations

import json

import pytest

from conftest import assert_exactly_once, read_results, shell_task, write_tasks
from parallel_rollout.api import ConfigError, NotARunFolder, load_run, run


def _tasks(tmp_path, count=3):
    return write_tasks(tmp_path / "tasks.jsonl", [shell_task(f"t{i}") for i in range(count)])


def test_a_run_returns_its_outcome_and_reads_back_and_a_resume_runs_nothing_again(tmp_path):
    data, out = _tasks(tmp_path), tmp_path / "out"
    outcome = run(mode="shell", data=str(data), agent="oracle", num_rollouts=2, num_vms=1,
                  use_vm_pool=True, output_dir=str(out), run_id="api", progress=False)
    assert outcome.exit_code == 0 and outcome.run_dir == out / "api", outcome
    assert outcome.summary["successes"] == 3 and outcome.summary["total_samples"] == 3
    finals = assert_exactly_once(out / "api", {"t0#0", "t1#0", "t2#0"})
    loaded = load_run(outcome.run_dir)
    assert loaded.finals.keys() == finals.keys() and loaded.status() == "complete"
    assert {r["reward"] for r in loaded.finals.values()} == {1.0}
    assert loaded.config["num_vms"] == 1 and loaded.summary["run_id"] == "api"
    assert any(e.get("event") for e in loaded.events)
    # a resume from Python names only the run: its other settings come from config.json
    before = len(read_results(out / "api"))
    again = run(resume=True, run_id="api", output_dir=str(out), progress=False)
    assert again.exit_code == 0 and len(read_results(out / "api")) == before


def test_a_config_file_then_the_settings_over_it(tmp_path):
    data, out = _tasks(tmp_path), tmp_path / "out"
    config = tmp_path / "eval.toml"
    config.write_text(f'mode = "shell"\ndata = "{data}"\nagent = "oracle"\nnum-vms = 1\nlimit = 3\n'
                      f'use-vm-pool = true\noutput-dir = "{out}"\n')
    outcome = run(config_file=config, limit=1, run_id="toml", progress=False)
    assert outcome.exit_code == 0
    assert_exactly_once(out / "toml", {"t0#0"})
    stored = json.loads((out / "toml" / "config.json").read_text())["config"]
    assert stored["limit"] == 1 and stored["num_vms"] == 1


@pytest.mark.parametrize("settings, message", [
    ({"num_vm": 2}, r"run\(\): unknown key 'num_vm'; did you mean num_vms\?"),
    ({"flux_capacitor": 2}, r"run\(\): unknown key 'flux_capacitor'; keys are the flag names, e.g. num_vms"),
    ({"num_vms": "two"}, r"num_vms"),
    ({"num_vms": 0, "use_vm_pool": True}, r"^num_vms must be at least 1, got 0 \(num_vms=0 in run\(\)\)"),
    ({"screen_width": 800}, r"^screen_width is not used by this run: .* \(screen_width=800 in run\(\)\)"),
    ({"data": "/nowhere/tasks.jsonl"}, r"/nowhere/tasks\.jsonl"),
])
def test_bad_settings_raise_a_config_error_that_names_them_and_nothing_runs(tmp_path, settings, message):
    out = tmp_path / "out"
    with pytest.raises(ConfigError, match=message):
        run(**{"mode": "shell", "data": str(_tasks(tmp_path)), "agent": "oracle", "output_dir": str(out),
               "progress": False, **settings})
    assert not out.exists() or not any(out.iterdir())


def test_load_run_of_a_folder_that_holds_no_run(tmp_path):
    with pytest.raises(NotARunFolder, match="not a run folder"):
        load_run(tmp_path)


def test_load_run_of_a_file_is_not_a_run_folder(tmp_path):
    """A results.jsonl given for its folder: NotARunFolder, as the README says, not a raw
    NotADirectoryError from reading <file>/config.json."""
    data, out = _tasks(tmp_path, count=1), tmp_path / "out"
    outcome = run(mode="shell", data=str(data), agent="oracle", num_rollouts=1, num_vms=1, use_vm_pool=True,
                  output_dir=str(out), run_id="r1", progress=False)
    with pytest.raises(NotARunFolder, match="not a run folder"):
        load_run(outcome.run_dir / "results.jsonl")


def test_paths_are_taken_as_paths(tmp_path):
    """``data`` and ``output_dir`` may be pathlib.Path (os.PathLike), as ``config_file`` may."""
    data, out = _tasks(tmp_path, count=2), tmp_path / "out"
    outcome = run(mode="shell", data=data, agent="oracle", num_rollouts=1, num_vms=1, use_vm_pool=True,
                  output_dir=out, run_id="paths", progress=False)
    assert outcome.exit_code == 0 and outcome.run_dir == out / "paths"
    assert_exactly_once(out / "paths", {"t0#0", "t1#0"})
    assert json.loads((out / "paths" / "config.json").read_text())["config"]["data"] == str(data)


def test_default_run_ids_are_new_folders_and_folder_safe(tmp_path, monkeypatch):
    """Two runs without run_id in one second of one process get two folders (the second
    raised 'already holds results'), and a module:Class mode's id holds no ':'."""
    from parallel_rollout import config as config_module

    data = write_tasks(tmp_path / "tasks.jsonl", [{"id": "d1", "n": 2}, {"id": "d2", "n": 5}])
    out = tmp_path / "out"
    monkeypatch.setattr(config_module.time, "strftime", lambda fmt, *rest: "20261130-062909")  # one second
    outcomes = [run(mode="user_plugins:DoubleEnv", data=data, agent="oracle", num_rollouts=1,
                    output_dir=out, progress=False) for _ in range(2)]
    monkeypatch.undo()
    first, second = (o.run_dir.name for o in outcomes)
    assert first != second and second.startswith(first), (first, second)
    assert first.startswith("user_plugins-DoubleEnv-20261130-062909-") and ":" not in first + second
    for outcome in outcomes:
        assert outcome.exit_code == 0 and outcome.summary["successes"] == 2
    assert sorted(p.name for p in out.iterdir()) == sorted([first, second])


def test_runs_from_other_threads_run_and_leave_no_log_handler(tmp_path):
    """run() off the main thread (a web server's, a trainer's) runs, without signal handlers
    (only the main thread may set them): it raised 'signal only works in main thread' after
    writing the run folder, and left run.log's handler on the logger. Two at once get two
    default ids."""
    import logging
    import signal
    import threading

    data = write_tasks(tmp_path / "tasks.jsonl", [{"id": "d1", "n": 2}, {"id": "d2", "n": 5}])
    out = tmp_path / "out"
    handlers_before = list(logging.getLogger("parallel_rollout").handlers)
    sigint_before = signal.getsignal(signal.SIGINT)
    outcomes, errors = [], []

    def one_run():
        try:
            outcomes.append(run(mode="user_plugins:DoubleEnv", data=data, agent="oracle", num_rollouts=1,
                                output_dir=out, progress=False))
        except BaseException as exc:  # noqa: BLE001 - reported by the assert below
            errors.append(exc)

    threads = [threading.Thread(target=one_run) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert not errors, errors
    assert [o.exit_code for o in outcomes] == [0, 0] and {o.summary["successes"] for o in outcomes} == {2}
    assert len({o.run_dir for o in outcomes}) == 2
    assert logging.getLogger("parallel_rollout").handlers == handlers_before
    assert signal.getsignal(signal.SIGINT) is sigint_before


def test_a_run_gives_the_package_logger_back_its_level(tmp_path):
    """run.log keeps INFO while a run is open; after it the package's logger has the level the
    script gave it again: left at INFO, a script's logging.basicConfig() handler printed every
    later INFO line of the package (the next run's preparation, a scheduler's)."""
    import logging

    project = logging.getLogger("parallel_rollout")
    data = write_tasks(tmp_path / "tasks.jsonl", [{"id": "d1", "n": 2}])
    was = project.level
    project.setLevel(logging.WARNING)
    try:
        outcome = run(mode="user_plugins:DoubleEnv", data=data, agent="oracle", num_rollouts=1,
                      output_dir=tmp_path / "out", run_id="lvl", progress=False)
        assert project.level == logging.WARNING
    finally:
        project.setLevel(was)
    assert outcome.exit_code == 0 and "run lvl: 1 sample," in (outcome.run_dir / "run.log").read_text()


def test_a_run_log_that_cannot_be_opened_is_a_config_error_that_gives_back_the_signals(tmp_path):
    """A run.log the run cannot open (a folder of that name): a ConfigError naming it, the
    folder unlocked and Ctrl-C the script's again; it raised IsADirectoryError and left
    SIGINT to the dead run's handler, so Ctrl-C no longer stopped the script."""
    import signal

    data = write_tasks(tmp_path / "tasks.jsonl", [{"id": "d1", "n": 2}, {"id": "d2", "n": 5}])
    settings = dict(mode="user_plugins:DoubleEnv", data=data, agent="oracle", num_rollouts=1,
                    output_dir=tmp_path / "out", run_id="log", progress=False)
    run_log = run(**settings, limit=1).run_dir / "run.log"
    run_log.unlink()
    run_log.mkdir()
    sigint = signal.getsignal(signal.SIGINT)
    with pytest.raises(ConfigError, match=r"cannot write in the run folder .*: Is a directory \(.*/run\.log\)"):
        run(**settings, resume=True)
    assert signal.getsignal(signal.SIGINT) is sigint
    run_log.rmdir()
    assert run(**settings, resume=True).exit_code == 0  # the folder was left unlocked


def test_an_aborted_runs_message_says_the_call_that_resumes_it(tmp_path):
    """A run() that ended with samples never graded (exit 1) says how to resume it as the
    script does it, a call, not the CLI's command line, and names its settings as the call
    does; what a task wrote is quoted as it is."""
    data = write_tasks(tmp_path / "tasks.jsonl", [shell_task("a", setup=["echo --max-retries 5 >&2; exit 3"]),
                                                  shell_task("b")])
    out = tmp_path / "out"
    outcome = run(mode="shell", data=data, agent="oracle", num_rollouts=1, output_dir=out, run_id="ab",
                  max_retries=0, progress=False)
    assert outcome.exit_code == 1, outcome
    assert outcome.message.endswith(f"run(output_dir={str(out)!r}, run_id='ab', resume=True)"), outcome.message
    assert "parallel-rollout" not in outcome.message and "with no retry (max_retries=0)" in outcome.message
    assert ": --max-retries 5\n" in outcome.message, outcome.message
    gated = write_tasks(tmp_path / "gated.jsonl", [shell_task("b", check="false"), shell_task("c")])
    outcome = run(mode="shell", data=gated, agent="oracle", num_rollouts=1, output_dir=out, run_id="gate",
                  fail_under=0.9, progress=False)
    assert outcome.exit_code == 3 and outcome.message == "success rate 50.0% is below fail_under=0.9 (90.0%)"


def test_numpy_numbers_and_tuples_are_taken_as_settings(tmp_path):
    """A loop over np.arange gives np.int64 (no int), a tuple is what RunConfig keeps
    vm_address as: each was refused ('num_rollouts must be an integer, got 1'); a numpy
    number in sampling, which goes into every request's JSON body, is a ConfigError naming
    it, not a TypeError that left a locked, empty run folder."""
    import numpy as np

    from parallel_rollout.config import settings

    data = write_tasks(tmp_path / "tasks.jsonl", [{"id": "d1", "n": 2}, {"id": "d2", "n": 5}])
    for n in np.arange(1, 2):
        outcome = run(mode="user_plugins:DoubleEnv", data=data, agent="oracle", num_rollouts=n, limit=n + 1,
                      task_timeout=np.float32(60), output_dir=tmp_path / "out", run_id=f"n{n}", progress=False)
        assert outcome.exit_code == 0 and outcome.summary["successes"] == 2
    assert json.loads((tmp_path / "out" / "n1" / "config.json").read_text())["config"]["num_rollouts"] == 1
    taken = settings({"vm_address": ("127.0.0.1:1", "127.0.0.1:2"), "base_url": ("http://a:1/v1", "http://b:1/v1")},
                     "run()")
    assert taken["vm_address"] == ("127.0.0.1:1", "127.0.0.1:2") and list(taken["base_url"]) == ["http://a:1/v1",
                                                                                                 "http://b:1/v1"]
    with pytest.raises(ConfigError, match=r"^sampling seed must be a JSON value .* got int64"):
        run(mode="shell", data=_tasks(tmp_path), agent="openai", base_url="http://127.0.0.1:9/v1",
            sampling={"seed": np.int64(3)}, output_dir=tmp_path / "out", run_id="samp", progress=False)
    assert not (tmp_path / "out" / "samp").exists()


def test_the_warnings_of_a_run_say_its_settings_as_the_call_does(tmp_path):
    """A run()'s warnings, of the main process and of its workers, name the settings as the
    call spells them (max_concurrent_rollouts, num_rollouts=1, max_turns=3), as its errors do;
    they said the CLI's flags (--max-concurrent-rollouts, --num-rollouts 1, --max-turns 3),
    which a notebook's author never typed. The record factory is the script's again after."""
    import logging

    data = write_tasks(tmp_path / "tasks.jsonl", [{"id": "d1", "n": 2}, {"id": "d2", "n": 5}])
    said: list[str] = []
    handler = logging.Handler(logging.WARNING)
    handler.emit = lambda record: said.append(record.getMessage())
    project, factory = logging.getLogger("parallel_rollout"), logging.getLogRecordFactory()
    project.addHandler(handler)
    try:
        outcome = run(mode="user_plugins:DoubleEnv", data=data, agent="log_plugins:FlagNamingOracle",
                      num_rollouts=1, max_concurrent_rollouts=4, max_turns=3, output_dir=tmp_path / "out",
                      run_id="warn", progress=False)
    finally:
        project.removeHandler(handler)
    assert outcome.exit_code == 0 and outcome.summary["successes"] == 2, outcome
    assert logging.getLogRecordFactory() is factory
    concurrency = [m for m in said if m.startswith("[Concurrency]")]
    assert len(concurrency) == 1 and "(num_rollouts=1 × envs_per_worker=1)" in concurrency[0], said
    assert "asked for by max_concurrent_rollouts (" in concurrency[0], said
    assert sorted(m for m in said if m.startswith("task ")) == ["task d1: max_turns=3", "task d2: max_turns=3"], said
    assert "task d1: max_turns=3" in (outcome.run_dir / "run.log").read_text()


def test_a_dry_run_from_python_is_preflight_and_run_says_so(tmp_path):
    """The CLI's --dry-run from Python: preflight() with run()'s settings checks them and the
    tasks, starts nothing and makes no folder, its problems said as the call spells them;
    run(dry_run=True) was refused as an 'unknown key' whose hint, 'keys are the flag names',
    dry_run is. A config file's dry-run key is said to be the command line's."""
    from parallel_rollout.api import preflight

    data, out = _tasks(tmp_path, 2), tmp_path / "out"
    with pytest.raises(ConfigError, match=r"'dry_run' is no setting of a run .* preflight\(\.\.\.\) of "
                                          r"parallel_rollout\.api"):
        run(mode="shell", data=data, output_dir=out, dry_run=True)
    found = preflight(mode="shell", data=data, output_dir=out, model="x")
    assert not found.ok and found.census[-1] == "runnable 2 of 2 tasks", found
    assert len(found.problems) == 1 and "model is not used by this run" in found.problems[0], found.problems
    # the call it was given to is named: preflight(), not run()
    assert "(model='x' in preflight())" in found.problems[0] and "--" not in found.problems[0], found.problems
    with pytest.raises(ConfigError) as refused:
        preflight(mode="shell", data=data, output_dir=out, fail_under=80)
    assert str(refused.value).endswith("(fail_under=80 in preflight())") and "run()" not in str(refused.value)
    found = preflight(mode="shell", data=data, output_dir=out, check_endpoint=True)
    assert found.problems == ["check_endpoint=True: the oracle agent calls no model endpoint"], found.problems
    assert preflight(mode="shell", data=data, output_dir=out).ok and not out.exists()
    (tmp_path / "run.toml").write_text("dry-run = true\n")
    with pytest.raises(ConfigError, match=r"'dry-run' is no setting of a run .*: give it on the command line"):
        preflight(config_file=tmp_path / "run.toml", data=data)


def test_the_package_face_runs_and_loads_without_importing_the_api_before(tmp_path):
    """``import parallel_rollout; parallel_rollout.run(...)`` raised AttributeError (only
    ``parallel_rollout.api`` had it): ``run`` and ``load_run`` are the package's too, imported
    when first asked for, so ``import parallel_rollout`` (the CLI's start) loads its version alone."""
    import subprocess
    import sys

    import parallel_rollout

    outcome = parallel_rollout.run(mode="shell", data=str(_tasks(tmp_path, 1)), agent="oracle", num_rollouts=1,
                                   output_dir=str(tmp_path / "out"), run_id="face", progress=False)
    assert outcome.exit_code == 0 and parallel_rollout.load_run(outcome.run_dir).status() == "complete"
    assert {"run", "load_run"} <= set(dir(parallel_rollout))
    with pytest.raises(AttributeError, match="module 'parallel_rollout' has no attribute 'rnu'"):
        parallel_rollout.rnu  # noqa: B018
    fresh = subprocess.run([sys.executable, "-c", "import sys, parallel_rollout; "
                            "print(sorted(m for m in sys.modules if m.startswith('parallel_rollout')))"],
                           capture_output=True, text=True, check=True)
    assert fresh.stdout.strip() == "['parallel_rollout', 'parallel_rollout.version']", fresh
