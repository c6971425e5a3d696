"""The command line explains itself: help from the registries, flags from environment
variables, shell completion, ``python -m parallel_rollout``, OSWorld's flag spellings."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from conftest import ROOT, SHELL_TASKS, shell_task, write_tasks
from parallel_rollout import plugins
from parallel_rollout.agents.base import AGENTS
from parallel_rollout.agents.openai_agent import KEEP_IMAGES
from parallel_rollout.cli import main
from parallel_rollout.envs import mode_names
from parallel_rollout.pool.providers import provider_names

needs_bwrap = pytest.mark.skipif(shutil.which("bwrap") is None, reason="needs bubblewrap")
EXAMPLES = Path("/work/shared/osworld/evaluation_examples")


def python_m(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    """``python -m parallel_rollout ARGS`` with this checkout's sources."""
    full_env = dict(os.environ, PYTHONPATH=str(ROOT / "src"), **(env or {}))
    return subprocess.run([sys.executable, "-m", "parallel_rollout", *args], capture_output=True,
                          text=True, env=full_env, timeout=120)


def flat(text: str) -> str:
    """Help text with click's line wrapping undone."""
    return " ".join(text.split())


def test_help_lists_every_registered_name_builtin_and_plugin(monkeypatch):
    found = {"parallel_rollout.modes": {"trivia": "trivia_pkg.env:TriviaEnv"},
             "parallel_rollout.providers": {"firecracker": "fc_pkg:FirecrackerProvider"}}
    monkeypatch.setattr(plugins, "entry_point_targets", lambda group: found.get(group, {}))
    result = CliRunner().invoke(main, ["run", "--help"])
    assert result.exit_code == 0, result.output
    text = flat(result.output)
    for name in [*mode_names(), *AGENTS.names(), *provider_names()]:
        assert f"{name} (" in text, name
    # the names the old, hand-written help left out
    for name in ("osworld (", "web (", "rag (", "vmware (", "virtualbox ("):
        assert name in text
    assert "trivia (plugin: trivia_pkg.env:TriviaEnv)" in text
    assert "firecracker (plugin: fc_pkg:FirecrackerProvider)" in text
    # the named datasets of --data, rag included
    assert "named dataset: frozenlake, humaneval, miniwob, rag, sokoban, sokoban-endless." in text
    # the corrected texts
    assert "Memory limit per VM, in MB: its memory cgroup" in text and "Address-space limit per process" not in text
    assert "Every flag can be set as PARALLEL_ROLLOUT_<FLAG>" in text
    desktop = flat(CliRunner().invoke(main, ["image", "build", "--help"]).output)
    assert "Chromium, GIMP, VLC, Thunderbird" in desktop and "about 1 GB more" not in desktop


def test_python_dash_m_runs_the_cli():
    result = python_m("--version")
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("parallel-rollout, version ")
    assert "Usage: parallel-rollout" in python_m("run", "--help").stdout


@pytest.mark.parametrize("variable, value, flag", [
    ("PARALLEL_ROLLOUT_NUM_VMS", "three", "--num-vms"),
    ("PARALLEL_ROLLOUT_USE_VM_POOL", "maybe", "--use-vm-pool"),
    ("PARALLEL_ROLLOUT_PROGRESS", "sometimes", "--progress"),
    ("PARALLEL_ROLLOUT_TASK_TIMEOUT", "soon", "--task-timeout"),
])
def test_a_bad_value_in_a_variable_names_the_variable(variable, value, flag, tmp_path):
    result = CliRunner().invoke(main, ["--mode", "shell", "--data", str(SHELL_TASKS),
                                       "--output-dir", str(tmp_path)], env={variable: value})
    assert result.exit_code == 2, result.output
    assert f"(from the environment variable {variable})" in result.output
    assert flag in result.output


@needs_bwrap
def test_flags_come_from_the_environment_command_line_wins(tmp_path):
    env = {"PARALLEL_ROLLOUT_MODE": "shell", "PARALLEL_ROLLOUT_DATA": str(SHELL_TASKS),
           "PARALLEL_ROLLOUT_USE_VM_POOL": "true", "PARALLEL_ROLLOUT_NUM_VMS": "1",
           "PARALLEL_ROLLOUT_NUM_ROLLOUTS": "2", "PARALLEL_ROLLOUT_LIMIT": "2",
           "PARALLEL_ROLLOUT_PROGRESS": "0", "PARALLEL_ROLLOUT_OUTPUT_DIR": str(tmp_path),
           "PARALLEL_ROLLOUT_RUN_ID": "from-env", "PARALLEL_ROLLOUT_MAX_TURNS": "50"}
    result = CliRunner().invoke(main, ["--max-turns", "7"], env=env)
    assert result.exit_code == 0, result.output
    assert "2/2 samples finished, 2 succeeded" in result.output
    config = json.loads((tmp_path / "from-env" / "config.json").read_text())["config"]
    assert (config["use_vm_pool"], config["num_vms"], config["num_rollouts"], config["limit"]) == (True, 1, 2, 2)
    assert config["max_turns"] == 7  # the command line wins over the environment


def test_a_multiple_flag_splits_its_variable_on_spaces(tmp_path):
    result = CliRunner().invoke(
        main, ["--mode", "shell", "--data", str(SHELL_TASKS), "--provider-name", "remote",
               "--num-rollouts", "3", "--output-dir", str(tmp_path)],
        env={"PARALLEL_ROLLOUT_VM_ADDRESS": "127.0.0.1:5001 127.0.0.1:5002"})
    # read as two addresses, one per VM: too few for three workers' VMs
    assert result.exit_code == 2, result.output
    assert "the remote provider has 2 VM address(es) (--vm-address)" in result.output


def complete(words: str) -> list[str]:
    """What bash completion offers for the command line ``words`` (the last word being typed)."""
    parts = words.split(" ")
    result = python_m(env={"_PARALLEL_ROLLOUT_COMPLETE": "bash_complete", "COMP_WORDS": words,
                           "COMP_CWORD": str(len(parts) - 1)})
    assert result.returncode == 0, result.stderr
    return [line.split(",", 1)[1] for line in result.stdout.splitlines() if "," in line]


def test_completion_offers_commands_flags_and_registry_names():
    assert "osworld" in complete("parallel-rollout --mode o")
    assert set(complete("parallel-rollout run --provider-name v")) == {"virtualbox", "vmware"}
    assert "openai" in complete("parallel-rollout run --agent o")
    assert "--num-vms" in complete("parallel-rollout --num-v")  # run is the default command
    assert "sweep" in complete("parallel-rollout vms s")


@needs_bwrap
def test_osworld_spellings_are_read_as_this_clis_flags(tmp_path):
    out = tmp_path / "out"
    result = CliRunner().invoke(main, [
        "--mode", "shell", "--data", str(SHELL_TASKS), "--limit", "1", "--no-progress", "--run-id", "r",
        "--max_steps", "3", "--result_dir", str(out), "--num_envs", "1", "--sleep_after_execution=0.5"])
    assert result.exit_code != 0  # --sleep-after-execution is a desktop flag: refused for shell
    assert "--sleep_after_execution is not used by this run" in result.output  # as typed
    result = CliRunner().invoke(main, [
        "--mode", "shell", "--data", str(SHELL_TASKS), "--limit", "1", "--no-progress", "--run-id", "r",
        "--max_steps", "3", "--result_dir", str(out), "--num_envs=1"])
    assert result.exit_code == 0, result.output
    config = json.loads((out / "r" / "config.json").read_text())["config"]
    assert (config["max_turns"], config["num_rollouts"], config["output_dir"]) == (3, 1, str(out))


@needs_bwrap
@pytest.mark.parametrize("args, says", [
    (["--observation_type", "foo"], "Invalid value for '--observation_type': 'foo' is not one of"),
    (["--screen_width", "abc"], "Invalid value for '--screen_width': 'abc' is not a valid integer"),
    (["--screen_width"], "Option '--screen_width' requires an argument"),
    (["--screen_width", "0"], "--screen_width must be at least 1"),
    (["--max_steps", "0"], "--max_steps must be at least 1"),
    (["--sleep_after_execution", "-1"], "--sleep_after_execution must be 0 or more"),
    (["--base_url", "nohost"], "--base_url 'nohost' is not an http(s) URL"),
    (["--screen_height", "720"], "--screen_height is not used by this run: it only applies to desktop modes"),
    (["--num_envs", "3"], "--num_envs 3 without --use-vm-pool boots a VM per worker: 1 sample needs 1 worker"),
], ids=lambda v: v[0] if isinstance(v, list) else None)
def test_an_osworld_spelling_is_named_as_typed(tmp_path, args, says):
    """A script written for OSWorld's run.py gave --observation_type, --max_steps …; its errors,
    refusals and warnings named --observation-type, --max-turns, flags it never typed. Each
    is said as typed, and this CLI's own spelling still as its own."""
    data = write_tasks(tmp_path / "tasks.jsonl", [shell_task("a")])
    ours = {"--max_steps": "--max-turns", "--num_envs": "--num-rollouts"}.get(args[0], args[0].replace("_", "-"))
    for flags, name, other in ((args, args[0], ours), ([ours, *args[1:]], ours, args[0])):
        result = CliRunner().invoke(main, ["--mode", "shell", "--data", str(data), "--dry-run", "--output-dir",
                                           str(tmp_path / "out"), *flags])
        said = flat(result.output)
        assert says.replace(args[0], name) in said, said
        assert other not in said, said


@pytest.mark.parametrize("flag, equivalent", [
    ("--top_p", "--sampling top_p="),
    ("--max_trajectory_length", f"the openai agent keeps the {KEEP_IMAGES} newest screenshots in its conversation"),
    ("--log_level", "-v"), ("--region", "--provider-name remote")])
def test_osworld_flags_without_an_equivalent_say_what_to_use(flag, equivalent):
    result = CliRunner().invoke(main, ["--mode", "osworld", flag, "1"])
    assert result.exit_code == 2
    assert f"{flag} (OSWorld's run.py) has no equivalent here" in result.output
    assert equivalent in result.output


@pytest.mark.parametrize("args", [["--observation_type", "som"], ["--observation_type=som"],
                                  ["--observation-type", "som"]], ids=lambda v: " ".join(v))
def test_osworlds_som_observation_is_refused_saying_what_it_is_and_what_to_give(args):
    """OSWorld's run.py takes --observation_type som (its set-of-marks agents); click said only
    "'som' is not one of 'screenshot', 'a11y_tree', 'screenshot_a11y_tree'", as of a typo."""
    result = CliRunner().invoke(main, ["run", "--mode", "osworld", *args, "--dry-run"])
    assert result.exit_code == 2, result.output
    flag = args[0].split("=")[0]
    assert (f"{flag} som (OSWorld's set-of-marks: numbered boxes drawn on the screenshot) is not supported here: "
            "give screenshot, a11y_tree or screenshot_a11y_tree") in flat(result.output), result.output


@pytest.mark.parametrize("typed, meant", [
    ("--max_step", "Did you mean '--max_steps'?"),  # it said: Did you mean '--max-tokens'?
    ("--observation_typ", "Did you mean '--observation_type'?"),  # it said --observation-type
    ("--test_config_base", "Did you mean '--test_config_base_dir'?"),  # it said --config
    ("--num-vm", "Did you mean '--num-vms'?"),  # this CLI's own, as before
    # OSWorld's flag with '-' for its '_': none was told, or another flag
    ("--test-all-meta-path", "Did you mean '--test_all_meta_path'?"),  # it said nothing
    ("--test-config-base-dir", "Did you mean '--test_config_base_dir'?"),  # it said nothing
    ("--specific-task-id", "Did you mean '--specific_task_id'?"),  # it said nothing
    ("--num-envs", "Did you mean '--num_envs'?"),  # it said --max-tokens, --num-vms, --num-workers
    ("--task_id", "Did you mean '--specific_task_id'?"),  # it said --task-timeout
    ("--example-id", "Did you mean '--example_id'?"),  # it said --sampling
])
def test_a_misspelt_osworld_flag_is_told_its_spelling(typed, meant):
    """A script in OSWorld's spellings with one misspelt was pointed at another flag of this
    CLI (--max-tokens for --max_step): a flag typed with '_' is matched to OSWorld's spellings,
    and one of OSWorld's typed with '-' for its '_' (--test-all-meta-path) is told it."""
    result = CliRunner().invoke(main, ["run", typed, "3"])
    assert result.exit_code == 2, result.output
    assert f"No such option {typed!r}. {meant}" in result.output, result.output


def test_a_misspelt_option_of_the_program_is_told_its_name():
    """`parallel-rollout --verison` went to run, the default command, which said 'Did you mean
    one of: --verbose, --verify-reset?'; `run --verison` has no --version to be told of."""
    result = CliRunner().invoke(main, ["--verison"])
    assert result.exit_code == 2, result.output
    assert "No such option '--verison'. Did you mean '--version'?" in result.output, result.output
    assert "--version" not in CliRunner().invoke(main, ["run", "--verison"]).output


@pytest.mark.skipif(not (EXAMPLES / "test_small.json").is_file(), reason="OSWorld's task set is not here")
def test_test_all_meta_path_is_the_index_and_its_folder_the_data(tmp_path, monkeypatch):
    monkeypatch.chdir(EXAMPLES.parent)
    ours = CliRunner().invoke(main, ["--mode", "osworld", "--data", str(EXAMPLES),
                                     "--osworld-index", "test_small.json", "--dry-run"])
    theirs = CliRunner().invoke(main, ["--mode", "osworld", "--test_all_meta_path",
                                       "evaluation_examples/test_small.json", "--observation_type",
                                       "screenshot", "--dry-run"])
    assert (theirs.exit_code, theirs.output) == (ours.exit_code, ours.output)
    assert "runnable" in ours.output


def test_run_help_is_in_sections_each_flag_under_its_own():
    from parallel_rollout.cli_options import HELP_SECTIONS

    text = CliRunner().invoke(main, ["run", "--help"]).output
    headings = [f"{heading}:" for heading in HELP_SECTIONS]
    assert [line for line in text.splitlines() if line in headings] == headings  # each once, in order
    assert "Other options:" not in text  # every flag of run has its section
    # a flag is listed under its own heading, before the next one
    for heading, flag, next_heading in [("Desktop (osworld)", "--observation-type", "Run folder"),
                                        ("Agent and model", "--sampling KEY=VALUE", "Workers and VMs"),
                                        ("Console", "-v, --verbose", "Environment")]:
        section = text.split(f"\n{heading}:\n", 1)[1].split(f"\n{next_heading}", 1)[0]
        assert f"  {flag}" in section, (heading, flag)
    # the default command's help (parallel-rollout --help) shows run's flags in the same sections
    group = CliRunner().invoke(main, ["--help"]).output
    assert "\nDesktop (osworld) (run, the default command):\n  --observation-type" in group


@needs_bwrap
def test_num_workers_is_another_name_of_num_rollouts(tmp_path):
    result = CliRunner().invoke(main, ["--mode", "shell", "--data", str(SHELL_TASKS), "--limit", "1",
                                       "--no-progress", "--output-dir", str(tmp_path), "--run-id", "w",
                                       "--num-workers", "2"])
    assert result.exit_code == 0, result.output
    assert json.loads((tmp_path / "w" / "config.json").read_text())["config"]["num_rollouts"] == 2
    assert "--num-rollouts, --num-workers INTEGER" in CliRunner().invoke(main, ["run", "--help"]).output


def test_every_flag_of_run_has_its_variable(monkeypatch):
    """PARALLEL_ROLLOUT_<FLAG> for every flag (its first long name, upper case, '-' as '_'):
    a value there is what the flag reads (run's own context settings, as the CLI makes it)."""
    import click

    run = main.commands["run"]
    ctx = run.make_context("run", [], resilient_parsing=True)
    help_option = run.get_help_option(ctx)
    for param in run.get_params(ctx):
        if param is help_option:
            continue
        flag = next(o for o in param.opts if o.startswith("--"))
        variable = "PARALLEL_ROLLOUT_" + flag[2:].upper().replace("-", "_")
        numeric = isinstance(param.type, (click.types.IntParamType, click.types.FloatParamType))
        value = ("2" if param.count or numeric else "true" if param.is_flag
                 else param.type.choices[0] if isinstance(param.type, click.Choice) else "x")
        monkeypatch.setenv(variable, value)
        assert param.value_from_envvar(ctx) not in (None, ()), variable
        monkeypatch.delenv(variable)


def test_every_flag_of_the_other_commands_has_its_variable(monkeypatch, tmp_path):
    """PARALLEL_ROLLOUT_<COMMAND>_<FLAG> (README: PARALLEL_ROLLOUT_VMS_SWEEP_PROVIDER_NAME): a flag
    whose value has another name in the code read a variable of that name instead, so
    PARALLEL_ROLLOUT_RUNS_LIST_JSON=1 printed the table (..._AS_JSON), and compare --html and
    image build --provider had ..._HTML_PATH and ..._PROVIDER_NAME."""
    import click

    result = CliRunner().invoke(main, ["runs", "list", "--output-dir", str(tmp_path)],
                                env={"PARALLEL_ROLLOUT_RUNS_LIST_JSON": "1"})
    assert result.exit_code == 0 and result.output == "", result.output  # no runs: no JSON line, no header
    root = main.make_context("parallel-rollout", ["runs", "list"], resilient_parsing=True)

    def leaves(group, parent):
        for name, command in group.commands.items():
            ctx = command.make_context(name, [], parent=parent, resilient_parsing=True)
            if isinstance(command, click.Group):
                yield from leaves(command, ctx)
            elif name != "run":  # run's are PARALLEL_ROLLOUT_<FLAG> (above)
                yield ctx

    checked = []
    for ctx in leaves(main, root):
        for param in ctx.command.get_params(ctx):
            flag = next((o for o in param.opts if o.startswith("--")), None)
            if not isinstance(param, click.Option) or flag in (None, "--help"):
                continue
            variable = f"{ctx.auto_envvar_prefix}_{flag[2:].upper().replace('-', '_')}"
            numeric = isinstance(param.type, (click.types.IntParamType, click.types.FloatParamType))
            value = ("2" if numeric else "true" if param.is_flag
                     else param.type.choices[0] if isinstance(param.type, click.Choice) else "x")
            monkeypatch.setenv(variable, value)
            assert param.value_from_envvar(ctx) not in (None, ()), variable
            monkeypatch.delenv(variable)
            checked.append(variable)
    assert {"PARALLEL_ROLLOUT_VMS_SWEEP_PROVIDER_NAME", "PARALLEL_ROLLOUT_COMPARE_HTML",
            "PARALLEL_ROLLOUT_IMAGE_BUILD_PROVIDER"} <= set(checked)


@pytest.mark.skipif(not (EXAMPLES / "test_small.json").is_file(), reason="OSWorld's task set is not here")
def test_an_osworld_run_py_command_line_is_read_as_ours(tmp_path):
    """OSWorld's run.py command line, every spelling as its README has it, gives the same
    preflight as this CLI's own flags (here: the vmware provider's vmrun is missing)."""
    vmx, out, index = str(tmp_path / "Ubuntu.vmx"), str(tmp_path / "results"), str(EXAMPLES / "test_small.json")
    theirs = ["--path_to_vm", vmx, "--provider_name", "vmware", "--headless", "--observation_type", "screenshot",
              "--action_space", "pyautogui", "--model", "gpt-4o", "--result_dir", out, "--test_all_meta_path", index,
              "--domain", "os", "--max_steps", "15", "--screen_width", "1920", "--screen_height", "1080",
              "--sleep_after_execution", "0", "--temperature", "1.0", "--max_tokens", "1500",
              "--base_url", "http://127.0.0.1:9/v1", "--client_password", "password", "--num_envs", "1"]
    ours = ["--path-to-vm", vmx, "--provider-name", "vmware", "--headless", "--observation-type", "screenshot",
            "--action-space", "pyautogui", "--model", "gpt-4o", "--output-dir", out, "--osworld-index", index,
            "--data", str(EXAMPLES), "--domain", "os", "--max-turns", "15", "--screen-width", "1920",
            "--screen-height", "1080", "--sleep-after-execution", "0", "--temperature", "1.0",
            "--max-tokens", "1500", "--base-url", "http://127.0.0.1:9/v1", "--client-password", "password",
            "--num-rollouts", "1"]
    common = ["--mode", "osworld", "--agent", "openai", "--dry-run"]
    a = python_m(*common, *theirs, env={"PATH": str(tmp_path)})  # no vmrun
    b = python_m(*common, *ours, env={"PATH": str(tmp_path)})
    assert (a.returncode, a.stdout, a.stderr) == (b.returncode, b.stdout, b.stderr)
    assert a.returncode == 2 and "provider: the vmware provider needs vmrun on PATH" in a.stderr, a.stderr
    assert a.stdout.strip().endswith("runnable 2 of 2 tasks")


def test_print_config_shows_the_resolved_settings_and_runs_nothing(tmp_path):
    config = tmp_path / "run.toml"
    config.write_text('mode = "shell"\nnum-vms = 4\nuse-vm-pool = true\nmax-turns = 3\nmax-retries = 1\n')
    result = CliRunner().invoke(
        main, ["--config", str(config), "--data", str(SHELL_TASKS), "--max-retries", "2",
               "--output-dir", str(tmp_path / "out"), "--print-config"],
        env={"PARALLEL_ROLLOUT_MAX_TURNS": "8", "PARALLEL_ROLLOUT_MAX_RETRIES": "5"})
    assert result.exit_code == 0, result.output
    settings = json.loads(result.output)
    # defaults, then the file, then the environment, then the command line
    assert (settings["num_vms"], settings["max_turns"], settings["max_retries"], settings["num_rollouts"]) == (4, 8, 2, 5)
    assert settings["data"] == str(SHELL_TASKS) and settings["mode"] == "shell"
    assert not (tmp_path / "out").exists()
    # it is checked as a run's would be
    bad = CliRunner().invoke(main, ["--data", str(SHELL_TASKS), "--num-vms", "2", "--print-config"])
    assert bad.exit_code == 2 and "needs --use-vm-pool" in bad.output


def _print_config_warnings() -> tuple[list[str], dict]:
    """``run --print-config`` in this environment: its warnings' lines and the settings."""
    result = CliRunner().invoke(main, ["run", "--print-config"])
    assert result.exit_code == 0, result.output
    warnings = [line for line in result.output.splitlines() if line.startswith("Warning:")]
    return warnings, json.loads(result.output[result.output.index("{"):])


def test_a_misspelt_variable_is_named_with_the_flag_it_resembles(tmp_path, monkeypatch):
    """PARALLEL_ROLLOUT_NUM_VM (for ..._NUM_VMS) would leave --num-vms at its default in
    silence: the run warns, naming it and the closest name; a setting a provider reads and a
    subcommand's variable are not warned of."""
    monkeypatch.setenv("PARALLEL_ROLLOUT_NUM_VM", "3")
    monkeypatch.setenv("PARALLEL_ROLLOUT_QEMU_DIR", str(tmp_path))
    monkeypatch.setenv("PARALLEL_ROLLOUT_REPORT_OUT", "x")
    warnings, _ = _print_config_warnings()
    assert warnings == ["Warning: PARALLEL_ROLLOUT_NUM_VM is set but is no flag of run nor a setting "
                        "parallel-rollout reads: ignored (did you mean PARALLEL_ROLLOUT_NUM_VMS?)"]


def test_a_variable_named_after_a_config_file_key_without_a_flag_says_where_to_set_it(tmp_path, monkeypatch):
    """min-free-disk-mb is a config-file key with no flag: PARALLEL_ROLLOUT_MIN_FREE_DISK_MB was
    warned of as no setting parallel-rollout reads, 'did you mean PARALLEL_ROLLOUT_NODE_DIR?'."""
    monkeypatch.setenv("PARALLEL_ROLLOUT_MIN_FREE_DISK_MB", "0")
    warnings, settings = _print_config_warnings()
    assert warnings == ["Warning: PARALLEL_ROLLOUT_MIN_FREE_DISK_MB is set but is not read: min-free-disk-mb has no "
                        "flag, so no variable; set it in the --config file (min-free-disk-mb = …); ignored"]
    assert settings["min_free_disk_mb"] == 512


def test_every_variable_the_code_reads_is_known_to_the_warning():
    """Each PARALLEL_ROLLOUT_* name in the sources, ./dev and scripts/ is a flag's variable or
    one of SETTINGS_VARIABLES: a new setting added without it would be warned of as a typo."""
    import re

    from parallel_rollout.cli_options import SETTINGS_VARIABLES, env_var_name

    run = main.commands["run"]
    ctx = run.make_context("run", [], resilient_parsing=True)
    known = {env_var_name(ctx, p) for p in run.get_params(ctx)} | {f"PARALLEL_ROLLOUT_{n}" for n in SETTINGS_VARIABLES}
    files = [ROOT / "dev", *ROOT.joinpath("scripts").rglob("*"), *ROOT.joinpath("src").rglob("*.py")]
    found = {name for path in files if path.is_file()
             for name in re.findall(r"\bPARALLEL_ROLLOUT_[A-Z0-9_]*[A-Z0-9]\b", path.read_text(errors="replace"))}
    assert "PARALLEL_ROLLOUT_SANDBOX_UID" in found and "PARALLEL_ROLLOUT_NUM_VMS" in found
    assert found - known == set()


def test_the_resume_hint_is_the_command_as_typed(monkeypatch, tmp_path):
    """What a run prints to resume it starts as the user's command: ./dev's, the script's
    with the interpreter, python -m's, or the entry point by name only when PATH has it."""
    import parallel_rollout.cli_options as options

    monkeypatch.delenv("PARALLEL_ROLLOUT_PROG", raising=False)
    assert options.invoked_as(str(ROOT / "run_parallel_rollout.py")) == \
        f"{sys.executable} {ROOT / 'run_parallel_rollout.py'} run"
    assert options.invoked_as(options.__file__.replace("cli_options.py", "__main__.py")) == \
        f"{sys.executable} -m parallel_rollout run"
    entry = tmp_path / "bin" / "parallel-rollout"
    entry.parent.mkdir()
    entry.write_text("#!/bin/sh\n")
    entry.chmod(0o755)
    monkeypatch.setenv("PATH", "/usr/bin:/bin")
    assert options.invoked_as(str(entry)) == f"{entry} run"
    monkeypatch.setenv("PATH", f"{entry.parent}:/usr/bin:/bin")
    assert options.invoked_as(str(entry)) == "parallel-rollout run"
    monkeypatch.setenv("PARALLEL_ROLLOUT_PROG", "./dev")
    assert options.invoked_as(str(entry)) == "./dev run"
    # ./dev passes it for run, not for the tests (whose runs print their own)
    dev = (ROOT / "dev").read_text()
    tests = dev[dev.index("\n  test)\n"):dev.index('exit "$status" ;;')]
    assert 'PARALLEL_ROLLOUT_PROG="$prog" exec "$venv/bin/parallel-rollout" run' in dev
    assert "-m pytest" in tests and "PARALLEL_ROLLOUT_PROG" not in tests


def test_another_packages_main_that_imports_the_cli_keeps_its_ctrl_c(tmp_path):
    """`python -m pytest` (or any package's __main__.py) importing the CLI keeps Python's own
    Ctrl-C handler; the CLI's early exit (130 while it loads) is for its own programs only."""
    probe = ("import signal, sys; sys.argv[0] = {argv0!r}; import parallel_rollout.cli; "
             "print(signal.getsignal(signal.SIGINT) is signal.default_int_handler)")
    for argv0, keeps in (("/usr/lib/python3/dist-packages/pytest/__main__.py", True),
                         (str(ROOT / "src" / "parallel_rollout" / "__main__.py"), False)):
        out = subprocess.run([sys.executable, "-c", probe.format(argv0=argv0)], capture_output=True,
                             text=True, timeout=60)
        assert out.stdout.strip() == str(keeps), (argv0, out.stdout, out.stderr)


@pytest.mark.parametrize("args, usage", [
    (["run", "--max_steps", "--help"], "Usage: parallel-rollout run "),  # OSWorld's spelling
    (["run", "--max-turns", "--help"], "Usage: parallel-rollout run "),
    (["run", "--data", "-h"], "Usage: parallel-rollout run "),
    (["--mode", "shell", "--num-vms", "--help"], "Usage: parallel-rollout run "),  # run, the default command
    (["runs", "list", "--output-dir", "--help"], "Usage: parallel-rollout runs list "),
    (["report", "--output-dir", "--help"], "Usage: parallel-rollout report "),
    (["vms", "sweep", "--provider-name", "--help"], "Usage: parallel-rollout vms sweep "),
])
def test_help_after_a_flag_that_takes_a_value_shows_the_help(args, usage):
    """A user who types a flag and then --help asks what the flag takes: click read --help as
    its value ("'--help' is not a valid integer", "no such output folder")."""
    result = CliRunner().invoke(main, args, prog_name="parallel-rollout", terminal_width=200)
    assert result.exit_code == 0, result.output
    assert result.output.startswith(usage), result.output


def test_help_after_a_flag_that_takes_a_value_shows_the_help_in_a_subprocess():
    """The same through run_parallel_rollout.py, OSWorld's way of calling its runner."""
    result = subprocess.run([sys.executable, str(ROOT / "run_parallel_rollout.py"), "--max_steps", "--help"],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("Usage: run_parallel_rollout.py run "), result.stdout
    assert "--max-turns" in result.stdout
