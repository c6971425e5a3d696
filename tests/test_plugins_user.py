"""A user's own ``module:Class`` plugins (``--mode myenv:DoubleEnv``, ``--agent
myagent:Class``), through the CLI and the Python API as a user runs them: the settings they
may take, classes that cannot run, modules that fail at import or take long to import."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from conftest import ROOT, assert_exactly_once, write_tasks
from llm_server import first_user_message, llm_server, reply_with_counts  # noqa: F401 - a fixture
from parallel_rollout.cli import main
from test_config import assert_usage_error
from test_runner import stop_signals_ignoring

DOUBLE = "user_plugins:DoubleEnv"


def double_tasks(tmp_path: Path, numbers=(2, 5, 7)) -> Path:
    return write_tasks(tmp_path / "tasks.jsonl", [{"id": f"d{n}", "n": n} for n in numbers])


def invoke(tmp_path: Path, *args: str):
    """The CLI in-process, its run folder under tmp_path/out."""
    return CliRunner().invoke(main, ["--output-dir", str(tmp_path / "out"), "--no-progress", *args])


def test_a_plugin_agent_takes_the_model_settings_of_its_model_client(tmp_path, llm_server):
    """Every agent has ``self.model``: a module:Class agent that calls it is given --model,
    --base-url and --temperature (they were refused unless the class declared ``options``)."""

    def twice(body):
        n = int(re.search(r"twice (\d+)", first_user_message(body)).group(1))
        return reply_with_counts(body, str(2 * n))

    server = llm_server(policy=twice)
    server.models.append("my-model")  # the model the run gives
    data = double_tasks(tmp_path)
    result = invoke(tmp_path, "--mode", DOUBLE, "--agent", "user_plugins:ModelAgent", "--data", str(data),
                    "--model", "my-model", "--base-url", server.url, "--temperature", "0.25",
                    "--run-id", "model")
    assert result.exit_code == 0, (result.output, result.exception)
    finals = assert_exactly_once(tmp_path / "out" / "model", {"d2#0", "d5#0", "d7#0"})
    assert {r["reward"] for r in finals.values()} == {1.0}
    assert len(server.requests) == 3
    assert {(r["body"]["model"], r["body"]["temperature"]) for r in server.requests} == {("my-model", 0.25)}


def test_an_agent_whose_init_skips_super_init_still_has_its_model_client(tmp_path, llm_server):
    """``def __init__(self, config): self.asked = 0`` without ``super().__init__(config)``:
    every attempt was the agent's error, "'NoSuperAgent' object has no attribute 'config'",
    raised inside ``self.model``, which every agent is told it has."""
    server = llm_server(policy=lambda body: reply_with_counts(
        body, str(2 * int(re.search(r"twice (\d+)", first_user_message(body)).group(1)))))
    result = invoke(tmp_path, "--mode", DOUBLE, "--agent", "user_plugins:NoSuperAgent", "--data",
                    str(double_tasks(tmp_path)), "--model", "m", "--base-url", server.url, "--run-id", "nosuper")
    assert result.exit_code == 0, (result.output, result.exception)
    finals = assert_exactly_once(tmp_path / "out" / "nosuper", {"d2#0", "d5#0", "d7#0"})
    assert {(r["status"], r["reward"]) for r in finals.values()} == {("success", 1.0)}, finals
    assert len(server.requests) == 3 and all(r["usage"]["requests"] == 1 for r in finals.values())


def test_agents_that_call_no_model_still_refuse_the_model_settings(tmp_path):
    data = double_tasks(tmp_path)
    assert_usage_error(invoke(tmp_path, "--mode", DOUBLE, "--agent", "oracle", "--data", str(data), "--model", "x"),
                   tmp_path, "--model is not used by this run", "agents that call a model")
    assert_usage_error(invoke(tmp_path, "--mode", DOUBLE, "--agent", "command", "--agent-cmd", "cat", "--data",
                          str(data), "--base-url", "http://127.0.0.1:9/v1"),
                   tmp_path, "--base-url is not used by this run")
    # the openai agent's own: a plugin agent's model client sends no tools
    assert_usage_error(invoke(tmp_path, "--mode", DOUBLE, "--agent", "user_plugins:ModelAgent", "--data", str(data),
                          "--tool-calls"), tmp_path, "--tool-calls is not used by this run", "openai agent")


def test_a_plugin_modes_own_missing_field_refusal_says_the_file_gives_it_as_null(tmp_path):
    """A plugin's validate_task sees the task without its null fields (null reads as not given,
    README "A field given as `null`"): its own "missing field 'n'" of a line that has ``"n": null``
    read as false, with nothing saying the file's null was taken for no field."""
    data = write_tasks(tmp_path / "tasks.jsonl", [{"id": "d1", "n": 1}, {"id": "d2", "n": None}])
    assert_usage_error(invoke(tmp_path, "--mode", "user_plugins:OwnWordsEnv", "--agent", "oracle", "--data", str(data)),
                       tmp_path, f"{data}:2: task 'd2': missing field 'n' (the file gives 'n' as null, and null "
                       "reads as not given)")


def test_a_plugin_modes_own_refusal_of_a_field_of_an_object_says_the_file_gives_it_as_null(tmp_path):
    """An object's optional field given as null (``"given": {"n": null}``) is dropped before the
    mode's validate_task sees it, as a field of the task's own is: its "missing field 'given.n'"
    said nothing of the file's null."""
    data = write_tasks(tmp_path / "tasks.jsonl", [{"id": "d1", "given": {"n": 1}}, {"id": "d2", "given": {"n": None}}])
    assert_usage_error(invoke(tmp_path, "--mode", "user_plugins:NestedWordsEnv", "--agent", "oracle", "--data",
                              str(data)),
                       tmp_path, f"{data}:2: task 'd2': missing field 'given.n' (the file gives 'given.n' as null, "
                       "and null reads as not given)")


# -- classes and modules that cannot run: refused before anything starts --------------------


def test_an_abstract_mode_or_agent_is_refused_naming_what_it_lacks(tmp_path):
    """A class without ``step`` or ``act`` loaded, passed --dry-run ('runnable 4 of 4') and
    failed every task with "Can't instantiate abstract class", exit 0."""
    data = double_tasks(tmp_path)
    assert_usage_error(invoke(tmp_path, "--mode", "user_plugins:NoStepEnv", "--agent", "oracle", "--data", str(data)),
                       tmp_path, "mode 'user_plugins:NoStepEnv'", "does not define step")
    assert_usage_error(invoke(tmp_path, "--mode", DOUBLE, "--agent", "user_plugins:NoActAgent", "--data", str(data)),
                       tmp_path, "agent 'user_plugins:NoActAgent'", "does not define act")
    dry = invoke(tmp_path, "--mode", DOUBLE, "--agent", "user_plugins:NoActAgent", "--data", str(data), "--dry-run")
    assert dry.exit_code == 2 and "does not define act" in dry.output, dry.output


def test_a_class_name_the_module_lacks_is_refused_naming_the_classes_it_has(tmp_path):
    """A misspelt class (`myagent:MyAgnet`) said only "module myagent has no 'MyAgnet'": not
    which file was imported (another module of that name, installed, shadows the folder's)
    nor what it does define."""
    data = double_tasks(tmp_path)
    said = " ".join(invoke(tmp_path, "--mode", DOUBLE, "--agent", "user_plugins:ObservationKeyAgent",
                           "--data", str(data)).output.split())
    assert ("agent 'user_plugins:ObservationKeyAgent' (--agent): module user_plugins has no 'ObservationKeyAgent' "
            "(did you mean 'ObservationKeysAgent'?); the Agent classes it defines: ") in said, said
    assert "NoReturnAgent" in said and "DoubleEnv" not in said and str(ROOT / "tests" / "user_plugins.py") in said
    said = " ".join(invoke(tmp_path, "--mode", "test_plugins_user:Double", "--data", str(data)).output.split())
    assert f"module test_plugins_user has no 'Double'; it defines no Env class ({ROOT / 'tests'}" in said, said


def test_a_class_the_run_cannot_make_with_its_config_is_refused_before_it_starts(tmp_path):
    """An agent's ``__init__(self, config, tokenizer)`` (a mode's ``__init__(self)``) loaded,
    passed --dry-run and made every attempt the agent's ``error``: 'missing 1 required
    positional argument', exit 0. The run makes both as ``cls(config)``: refused, exit 2,
    nothing written; an extra argument with a default is fine."""
    data = double_tasks(tmp_path)
    assert_usage_error(invoke(tmp_path, "--mode", DOUBLE, "--agent", "user_plugins:TokenizerArgAgent",
                              "--data", str(data)),
                       tmp_path, "agent 'user_plugins:TokenizerArgAgent'", "TokenizerArgAgent(config)",
                       "missing a required argument: 'tokenizer'")
    assert_usage_error(invoke(tmp_path, "--mode", "user_plugins:ConfigLessEnv", "--agent", "oracle",
                              "--data", str(data)),
                       tmp_path, "mode 'user_plugins:ConfigLessEnv'", "ConfigLessEnv(config)", "too many")
    dry = invoke(tmp_path, "--mode", DOUBLE, "--agent", "user_plugins:TokenizerArgAgent", "--data", str(data),
                 "--dry-run")
    assert dry.exit_code == 2 and "TokenizerArgAgent(config)" in dry.output, dry.output
    fine = invoke(tmp_path, "--mode", DOUBLE, "--agent", "user_plugins:OptionalArgAgent", "--data", str(data),
                  "--run-id", "fine")
    assert fine.exit_code == 0, fine.output
    assert {r["reward"] for r in assert_exactly_once(tmp_path / "out" / "fine", {"d2#0", "d5#0", "d7#0"}).values()} == {1.0}


def write_module(folder: Path, name: str, source: str) -> Path:
    path = folder / f"{name}.py"
    path.write_text(source)
    return path


BROKEN = {
    "runtime": ("import os\nraise RuntimeError('no GPU here')\n", "RuntimeError: no GPU here", "line 2"),
    "syntax": ("x = 1\n\ndef f(:\n    pass\n", "SyntaxError", "line 3"),
    "imports": ("import os\nimport no_such_dependency_q\n", "ModuleNotFoundError", "line 2"),
}


@pytest.mark.parametrize("kind", sorted(BROKEN))
def test_a_module_that_fails_at_import_is_a_usage_error_naming_file_and_line(tmp_path, monkeypatch, kind):
    """Anything but ImportError at import gave a raw traceback and exit 1 ('aborted,
    --resume continues'): now exit 2, the plugin, its file, the error and its line; nothing
    written."""
    source, error, line = BROKEN[kind]
    name = f"broken_{kind}_mode_q"
    path = write_module(tmp_path, name, source)
    monkeypatch.syspath_prepend(str(tmp_path))
    result = invoke(tmp_path, "--mode", f"{name}:Env", "--data", str(double_tasks(tmp_path)))
    assert_usage_error(result, tmp_path, f"mode '{name}:Env'", str(path), error, line)
    agent = invoke(tmp_path, "--mode", DOUBLE, "--agent", f"{name}:Agent", "--data", str(double_tasks(tmp_path)))
    assert_usage_error(agent, tmp_path, f"agent '{name}:Agent'", str(path), error)


PREPARE_FAILS = '''
from user_plugins import DoubleEnv


class PrepareFailsEnv(DoubleEnv):
    @classmethod
    def prepare_run(cls, tasks):
        raise ValueError("the index is missing")
'''


def test_a_prepare_run_that_raises_is_a_usage_error(tmp_path, monkeypatch):
    path = write_module(tmp_path, "prepare_fails_q", PREPARE_FAILS)
    monkeypatch.syspath_prepend(str(tmp_path))
    data = double_tasks(tmp_path)
    result = invoke(tmp_path, "--mode", "prepare_fails_q:PrepareFailsEnv", "--agent", "oracle", "--data", str(data))
    assert_usage_error(result, tmp_path, "mode 'prepare_fails_q:PrepareFailsEnv': prepare_run failed",
                       "ValueError: the index is missing", f"{path}, line 8")
    dry = invoke(tmp_path, "--mode", "prepare_fails_q:PrepareFailsEnv", "--data", str(data), "--dry-run")
    assert dry.exit_code == 2 and "ValueError: the index is missing" in dry.output, dry.output


# -- a plugin module in the folder the command runs in ---------------------------------------

MYENV = '''
from parallel_rollout.envs.base import Env, StepResult


class DoubleEnv(Env):
    vm_scope = None
    default_max_turns = 1

    @staticmethod
    def reference_actions(task):
        return [2 * task.get("n")]

    def reset(self, task, vm):
        self.task = task
        return {}

    def step(self, action):
        self.answer = action
        return StepResult({}, done=True)

    def evaluate(self):
        return float(self.answer == 2 * self.task.get("n")), {}
'''


def user_folder(tmp_path: Path) -> Path:
    """A user's folder: myenv.py and tasks.jsonl, nothing on PYTHONPATH."""
    folder = tmp_path / "work"
    folder.mkdir()
    write_module(folder, "myenv", MYENV)
    double_tasks(folder, numbers=(1, 2, 3, 4))
    return folder


def without_pythonpath() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k != "PYTHONPATH" and not k.startswith("PARALLEL_ROLLOUT_")}


def console_script() -> list[str]:
    """``parallel-rollout`` as installed (its sys.path has its bin folder, not the cwd)."""
    script = Path(sys.executable).parent / "parallel-rollout"
    return [str(script)] if script.exists() else [sys.executable, str(ROOT / "run_parallel_rollout.py")]


def test_the_console_script_finds_a_plugin_module_in_the_current_folder(tmp_path):
    """``parallel-rollout --mode myenv:DoubleEnv`` from the folder holding myenv.py failed
    'cannot import module myenv' while ``python -m parallel_rollout`` ran: the current
    folder is looked in, by the CLI and by the workers."""
    folder = user_folder(tmp_path)
    proc = subprocess.run([*console_script(), "--mode", "myenv:DoubleEnv", "--data", "tasks.jsonl",
                           "--output-dir", "out", "--run-id", "here", "--num-rollouts", "2", "--no-progress"],
                          cwd=folder, env=without_pythonpath(), capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stderr[-3000:]
    finals = assert_exactly_once(folder / "out" / "here", {f"d{n}#0" for n in (1, 2, 3, 4)})
    assert {r["reward"] for r in finals.values()} == {1.0}
    missing = subprocess.run([*console_script(), "--mode", "nosuch_q:Env", "--data", "tasks.jsonl"],
                             cwd=folder, env=without_pythonpath(), capture_output=True, text=True, timeout=120)
    assert missing.returncode == 2
    assert "cannot import module 'nosuch_q'" in missing.stderr and f"current folder ({folder})" in missing.stderr, \
        missing.stderr


def test_dev_run_keeps_the_folder_it_was_run_in(tmp_path):
    """``/path/to/dev run --data tasks.jsonl`` read tasks.jsonl in the repo: dev did ``cd`` to
    itself and ran there. Relative paths are the caller's folder's, as the README says."""
    folder = user_folder(tmp_path)
    (folder / "run.toml").write_text('num-rollouts = 2\nrun-id = "dev"\n')
    proc = subprocess.run(["bash", str(ROOT / "dev"), "run", "--mode", "myenv:DoubleEnv", "--data", "tasks.jsonl",
                           "--config", "run.toml", "--output-dir", "out", "--no-progress"],
                          cwd=folder, env={**without_pythonpath(), "PYTHONPATH": str(folder)},
                          capture_output=True, text=True, timeout=300, stdin=subprocess.DEVNULL)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert_exactly_once(folder / "out" / "dev", {f"d{n}#0" for n in (1, 2, 3, 4)})


# -- plugin imports happen before any attempt's clock starts ---------------------------------

SLOW_IMPORT = '''
import os, time
with open(os.environ["PR_IMPORT_LOG"], "a") as log:
    log.write(f"{os.getpid()}\\n")
time.sleep(float(os.environ.get("PR_IMPORT_SLEEP", "0")))
from user_plugins import DoubleEnv as SlowDoubleEnv
'''

MAIN_ONLY = '''
import os
if os.environ["PR_MAIN_PID"] != str(os.getpid()):
    raise RuntimeError("this module imports only in the main process")
from user_plugins import DoubleEnv
'''


def run_cli(folder: Path, env: dict[str, str], *args: str) -> subprocess.CompletedProcess:
    """The CLI in a process of its own, in ``folder``, with tests/ on PYTHONPATH."""
    pythonpath = os.pathsep.join([str(ROOT / "tests"), str(folder)])
    return subprocess.run([sys.executable, str(ROOT / "run_parallel_rollout.py"), *args, "--no-progress"],
                          cwd=folder, env={**without_pythonpath(), "PYTHONPATH": pythonpath, **env},
                          capture_output=True, text=True, timeout=240, stdin=subprocess.DEVNULL)


def test_a_slow_plugin_import_never_counts_against_a_task(tmp_path):
    """A mode module that sleeps at import longer than --task-timeout made every task
    task_timeout: each worker (each replacement too) imported it inside its first attempt.
    The workers' server imports it once, before it forks them."""
    write_module(tmp_path, "slow_mode_q", SLOW_IMPORT)
    data = double_tasks(tmp_path, numbers=tuple(range(1, 7)))
    log = tmp_path / "imports.log"
    proc = run_cli(tmp_path, {"PR_IMPORT_LOG": str(log), "PR_IMPORT_SLEEP": "3"},
                   "--mode", "slow_mode_q:SlowDoubleEnv", "--data", str(data), "--num-rollouts", "3",
                   "--task-timeout", "2", "--output-dir", str(tmp_path / "out"), "--run-id", "slow")
    assert proc.returncode == 0, proc.stderr[-3000:]
    finals = assert_exactly_once(tmp_path / "out" / "slow", {f"d{n}#0" for n in range(1, 7)})
    assert {r["status"] for r in finals.values()} == {"success"}, {r["status"] for r in finals.values()}
    importers = set(log.read_text().split())
    workers = {str(r["pid"]) for r in finals.values()}
    assert len(importers) == 2 and not importers & workers, (importers, workers)  # the CLI and the server


def test_a_plugin_that_does_not_import_in_the_workers_stops_the_run_saying_so(tmp_path):
    """Not a loop of dead workers, each replaced and dying the same way: the run stops with
    the reason, and run.log holds the worker's error."""
    write_module(tmp_path, "main_only_q", MAIN_ONLY)
    data = double_tasks(tmp_path)
    script = ("import os, sys, runpy; os.environ['PR_MAIN_PID'] = str(os.getpid()); "
              f"sys.argv = ['run_parallel_rollout.py'] + sys.argv[1:]; "
              f"runpy.run_path({str(ROOT / 'run_parallel_rollout.py')!r}, run_name='__main__')")
    pythonpath = os.pathsep.join([str(ROOT / "tests"), str(tmp_path)])
    proc = subprocess.run([sys.executable, "-c", script, "--mode", "main_only_q:DoubleEnv", "--data", str(data),
                           "--num-rollouts", "2", "--output-dir", str(tmp_path / "out"), "--run-id", "nope",
                           "--no-progress"], cwd=tmp_path, env={**without_pythonpath(), "PYTHONPATH": pythonpath},
                          capture_output=True, text=True, timeout=240, stdin=subprocess.DEVNULL)
    assert proc.returncode == 1, (proc.returncode, proc.stderr[-3000:])
    assert "cannot import the run's mode 'main_only_q:DoubleEnv'" in proc.stderr, proc.stderr[-3000:]
    run_log = (tmp_path / "out" / "nope" / "run.log").read_text()
    assert "this module imports only in the main process" in run_log
    assert run_log.count("cannot load the run's mode or agent") <= 2  # one per worker, none replaced


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_an_interrupt_while_the_run_prepares_exits_130_and_writes_nothing(tmp_path, signum):
    """Ctrl-C while a plugin imports (the run's preparation) gave click's 'Aborted!' and exit
    1 ('aborted: --resume continues', with nothing to resume), or a plugin loader's 'failed to
    import'; SIGTERM killed the CLI (143, nothing said). Both are now the interrupt they are."""
    write_module(tmp_path, "slow_mode_i", SLOW_IMPORT)
    data = double_tasks(tmp_path)
    log = tmp_path / "imports.log"
    pythonpath = os.pathsep.join([str(ROOT / "tests"), str(tmp_path)])
    proc = subprocess.Popen(
        [sys.executable, str(ROOT / "run_parallel_rollout.py"), "--mode", "slow_mode_i:SlowDoubleEnv",
         "--data", str(data), "--output-dir", str(tmp_path / "out"), "--run-id", "i", "--no-progress"],
        cwd=tmp_path, env={**without_pythonpath(), "PYTHONPATH": pythonpath, "PR_IMPORT_LOG": str(log),
                           "PR_IMPORT_SLEEP": "30"},
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, stdin=subprocess.DEVNULL,
        preexec_fn=stop_signals_ignoring())
    try:
        deadline = time.monotonic() + 60
        while not (log.exists() and log.read_text().strip()):  # the CLI is importing the mode
            assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
            time.sleep(0.05)
        proc.send_signal(signum)
        _, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, err
    assert err.strip().splitlines()[-1] == f"interrupted by signal {int(signum)} before the run started: nothing ran"
    assert "Traceback" not in err and not (tmp_path / "out").exists()


def test_a_ray_worker_actor_imports_the_run_s_plugins_before_it_says_ready(tmp_path, monkeypatch):
    """On --backend ray a plugin mode was imported inside the actor's first attempt, on that
    attempt's --task-timeout (the local backend's workers import it before they read a task);
    the actor (a plain class here, Ray only wraps it) imports it as it is made, before the
    driver sends it anything."""
    from parallel_rollout.backends import ray_actors
    from parallel_rollout.backends.ray_actors import WorkerActor
    from parallel_rollout.config import RunConfig

    write_module(tmp_path, "actor_mode_q", "from user_plugins import DoubleEnv\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(ray_actors, "_node_id", lambda: "node-1")  # what Ray would say
    # an actor leads its process's group and has a watcher kill it once the process ends:
    # not this test's process
    monkeypatch.setattr(ray_actors, "lead_group", lambda cgroup=None: None)
    monkeypatch.setattr(ray_actors, "watch_group", lambda cgroup=None: None)
    sys.modules.pop("actor_mode_q", None)
    config = RunConfig(mode="actor_mode_q:DoubleEnv", agent="user_plugins:ModelAgent", output_dir=str(tmp_path))
    (tmp_path / "run").mkdir()
    WorkerActor("w0", "holder", None, config, str(tmp_path / "run"))
    assert "actor_mode_q" in sys.modules
