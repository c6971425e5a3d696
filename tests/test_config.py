"""RunConfig: TOML files, flag precedence, range checks, flags a run cannot honour, --help."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from conftest import ROOT, SHELL_TASKS, shell_task, write_tasks
from parallel_rollout.cli import main
from parallel_rollout.pool.providers import provider_names
from parallel_rollout.config import RunConfig, build_config, load_toml
from parallel_rollout.envs.registry import mode_names
from parallel_rollout.errors import ConfigError


def invoke(tmp_path: Path, *args: str, data: Path | None = SHELL_TASKS):
    """Run the CLI in-process with an output folder under tmp_path."""
    argv = ["--output-dir", str(tmp_path / "out"), "--no-progress", *args]
    if data is not None:
        argv = ["--data", str(data), *argv]
    return CliRunner().invoke(main, argv)


def assert_usage_error(result, tmp_path: Path, *parts: str) -> None:
    """Exit 2, every part in the message, and nothing written."""
    assert result.exit_code == 2, (result.exit_code, result.output, result.exception)
    flat = " ".join(result.output.split())
    for part in parts:
        assert part in flat, f"{part!r} not in {flat!r}"
    assert not (tmp_path / "out").exists(), "a run folder was created before the error"


# -- TOML files -----------------------------------------------------------------------------


def test_toml_keys_take_dashes_or_underscores(tmp_path):
    path = tmp_path / "run.toml"
    path.write_text('num-rollouts = 2\nnum_vms = 4\nuse-vm-pool = true\ntask-timeout = 30\n'
                    'max_concurrent_rollouts = 3\nmode = "shell"\nlease_timeout_s = 1.5\n')
    cfg = build_config({}, str(path))
    assert (cfg.num_rollouts, cfg.num_vms, cfg.use_vm_pool, cfg.max_concurrent_rollouts) == (2, 4, True, 3)
    assert cfg.task_timeout == 30.0 and isinstance(cfg.task_timeout, float)
    assert cfg.lease_timeout_s == 1.5
    assert {"num_rollouts", "num_vms", "use_vm_pool", "task_timeout"} <= cfg.explicit
    assert cfg.max_turns == 100 and "max_turns" not in cfg.explicit


def test_flags_win_over_the_file(tmp_path):
    path = tmp_path / "run.toml"
    path.write_text("num-rollouts = 7\nmax-turns = 9\n")
    cfg = build_config({"num_rollouts": 2}, str(path))
    assert (cfg.num_rollouts, cfg.max_turns) == (2, 9)


@pytest.mark.parametrize("text, parts", [
    ("num-vmz = 2\n", ["unknown key 'num-vmz'"]),
    ("explicit = []\n", ["unknown key 'explicit'"]),
    ("[pool]\nsize = 2\n", ["unknown key 'pool'"]),
    ("num-vms = 2\nnum_vms = 3\n", ["num_vms", "twice"]),
    ('num-rollouts = "4"\n', ["num-rollouts must be an integer", "'4'"]),
    ("num-rollouts = 2.5\n", ["num-rollouts must be an integer"]),
    ("num-rollouts = true\n", ["num-rollouts must be an integer"]),
    ('use-vm-pool = "yes"\n', ["use-vm-pool must be true or false"]),
    ('task-timeout = "10"\n', ["task-timeout must be a number"]),
    ("mode = 3\n", ["mode must be a string"]),
    ("num-rollouts = \n", ["invalid TOML"]),
], ids=["unknown", "explicit", "table", "twice", "int as string", "int as float", "int as bool",
        "bool as string", "float as string", "string as int", "bad syntax"])
def test_bad_config_file_is_rejected_naming_the_key(tmp_path, text, parts):
    path = tmp_path / "run.toml"
    path.write_text(text)
    with pytest.raises(ConfigError) as info:
        load_toml(path)
    assert str(info.value).startswith(str(path))
    for part in parts:
        assert part in str(info.value)


def test_missing_config_file(tmp_path):
    with pytest.raises(ConfigError, match="config file not found"):
        load_toml(tmp_path / "nope.toml")


def test_config_error_is_the_core_own_and_every_command_maps_it_to_exit_2(tmp_path):
    """The Python API raises ConfigError, no click exception; each CLI command exits 2 on it."""
    import click

    assert not issubclass(ConfigError, click.ClickException)
    with pytest.raises(ConfigError, match="config file not found"):
        build_config({}, str(tmp_path / "nope.toml"))
    for args, message in [
        (["run", "--config", str(tmp_path / "nope.toml")], "config file not found"),
        (["report", str(tmp_path)], "not a run folder"),
        (["compare", str(tmp_path), str(tmp_path)], "not a run folder"),
        (["runs", "list", "--output-dir", str(tmp_path / "none")], "no such output folder"),
        (["vms", "sweep", "--ray-address", "auto"], "--ray-address needs --backend ray"),
    ]:
        result = CliRunner().invoke(main, args)
        assert result.exit_code == 2 and message in result.output, (args, result.output)


def test_cli_config_file_errors_exit_2(tmp_path):
    path = tmp_path / "run.toml"
    path.write_text("num-vmz = 2\n")
    assert_usage_error(invoke(tmp_path, "--config", str(path)), tmp_path, "unknown key 'num-vmz'")
    path.write_text('num-rollouts = "many"\n')
    assert_usage_error(invoke(tmp_path, "--config", str(path)), tmp_path, "num-rollouts must be an integer")


# -- ranges and combinations ----------------------------------------------------------------


RANGE_ERRORS = [
    (["--num-rollouts", "0"], "--num-rollouts must be at least 1, got 0"),
    (["--num-rollouts", "-3"], "--num-rollouts must be at least 1, got -3"),
    (["--use-vm-pool", "--num-vms", "0"], "--num-vms must be at least 1, got 0"),
    (["--max-turns", "0"], "--max-turns must be at least 1, got 0"),
    (["--max_steps", "0"], "--max_steps must be at least 1, got 0"),
    (["--max-retries", "-1"], "--max-retries must be 0 or more, got -1"),
    (["--task-timeout", "0"], "--task-timeout must be positive"),
    (["--task-timeout", "nan"], "--task-timeout must be positive"),
    (["--boot-timeout-s", "0"], "--boot-timeout-s must be positive (seconds), got 0"),
    (["--boot-timeout-s", "-5"], "--boot-timeout-s must be positive (seconds), got -5"),
    (["--boot-timeout-s", "nan"], "--boot-timeout-s must be positive (seconds), got nan"),
    (["--use-vm-pool", "--envs-per-worker", "0"], "--envs-per-worker must be at least 1, got 0"),
    (["--max-concurrent-rollouts", "0"], "--max-concurrent-rollouts must be at least 1, got 0"),
    (["--group-size", "0"], "--group-size must be at least 1, got 0"),
    (["--limit", "0"], "--limit must be at least 1, got 0"),
    (["--screen-width", "0"], "--screen-width must be at least 1, got 0"),
    (["--run-id", ".."], "--run-id '..' must be a plain folder name"),
    (["--run-id", "a/b"], "must be a plain folder name"),
    (["--num-rollouts", "two"], "'two' is not a valid integer"),
    (["--agent", "openai", "--base-url", "localhost:8000/v1"],
     "--base-url 'localhost:8000/v1' is not an http(s) URL of a model endpoint: give its scheme and host, "
     "e.g. http://localhost:8000/v1"),
    (["--agent", "openai", "--base-url", "http://127.0.0.1:1/v1", "--base-url", "notaurl"],
     "--base-url 'notaurl' is not an http(s) URL"),
]


@pytest.mark.parametrize("args, message", RANGE_ERRORS, ids=[" ".join(a) for a, _ in RANGE_ERRORS])
def test_out_of_range_values_are_rejected_before_anything_runs(tmp_path, args, message):
    assert_usage_error(invoke(tmp_path, *args), tmp_path, message)


@pytest.mark.parametrize("how", ["run", "dry-run", "config file"])
def test_several_base_urls_in_one_are_refused_saying_how_to_give_them(tmp_path, how):
    """``--base-url URL1,URL2`` passed every check (a dry run said "preflight passed"), then
    every request went to ".../v1,http://.../v1/chat/completions" and failed: one URL a
    --base-url, repeated for several servers; exit 2, nothing written."""
    joined = "http://127.0.0.1:1/v1,http://127.0.0.1:2/v1"
    args = [sys.executable, "-m", "parallel_rollout.cli", "--data", str(SHELL_TASKS), "--agent", "openai",
            "--model", "m", "--output-dir", str(tmp_path / "out"), "--no-progress"]
    if how == "config file":
        (tmp_path / "run.toml").write_text(f'base-url = "{joined}"\n')
        args += ["--config", str(tmp_path / "run.toml")]
    else:
        args += ["--base-url", joined, *(["--dry-run"] if how == "dry-run" else [])]
    proc = subprocess.run(args, capture_output=True, text=True, timeout=60)
    said = " ".join(proc.stderr.split())
    assert proc.returncode == 2, said[-2000:]
    assert f"--base-url '{joined}' holds a comma: it takes one URL; for several servers repeat --base-url " \
           "(--base-url http://127.0.0.1:1/v1 --base-url http://127.0.0.1:2/v1)" in said, said[-2000:]
    assert "preflight passed" not in said and not (tmp_path / "out").exists()


def test_an_openai_base_url_without_a_scheme_is_refused_at_start(tmp_path):
    """OPENAI_BASE_URL=localhost:8000/v1 made 16 requests fail, then a stop "resume once it
    answers", which it never would."""
    result = CliRunner().invoke(main, ["--data", str(SHELL_TASKS), "--agent", "openai", "--output-dir",
                                       str(tmp_path / "out"), "--no-progress"],
                                env={"OPENAI_BASE_URL": "localhost:8000/v1", "OPENAI_API_KEY": None})
    assert_usage_error(result, tmp_path, "OPENAI_BASE_URL 'localhost:8000/v1' is not an http(s) URL")


@pytest.mark.parametrize("line, message", [
    ("lease-timeout-s = 0", "lease-timeout-s must be positive (seconds), got 0 (lease-timeout-s = 0 in"),
    ("ack-timeout-s = -1", "ack-timeout-s must be positive (seconds), got -1"),
    ("api-timeout-s = nan", "api-timeout-s must be positive (seconds), got nan"),
    ("boot-timeout-s = 0", "--boot-timeout-s must be positive (seconds), got 0"),
    ("shutdown-grace-s = -1", "shutdown-grace-s must be 0 or more, got -1"),
    ("max-vm-replacements = -1", "max-vm-replacements must be 0 or more, got -1"),
    ("min-free-disk-mb = -1", "min-free-disk-mb must be 0 or more, got -1"),
])
def test_out_of_range_tunables_of_a_config_file_are_rejected(tmp_path, line, message):
    """The settings without a flag of their own (a config file's) are held to ranges too:
    a 0 boot timeout made every VM 'not boot' and the run die, its resume command too."""
    path = tmp_path / "run.toml"
    path.write_text(line + "\n")
    assert_usage_error(invoke(tmp_path, "--config", str(path), "--dry-run"), tmp_path, message, f"in {path}")


@pytest.mark.parametrize("where, setting, message", [
    ("flag", ["--task-timeout", "inf"], "--task-timeout must be a finite number, got inf"),
    ("flag", ["--server-cooldown", "inf"], "--server-cooldown must be a finite number, got inf"),
    ("flag", ["--sleep-after-execution", "1e999"], "--sleep-after-execution must be a finite number, got inf"),
    ("flag", ["--sampling", "top_p=NaN"], "--sampling top_p must be a finite number, got nan"),
    ("file", "task-timeout = inf", "--task-timeout must be a finite number, got inf (task-timeout = inf in"),
    ("file", "shutdown-grace-s = inf", "shutdown-grace-s must be a finite number, got inf"),
    ("file", "lease_timeout_s = inf", "lease_timeout_s must be a finite number, got inf"),  # as written
    ("file", "[extra_body]\ntop_k = nan", "extra_body top_k must be a finite number, got nan"),
    ("variable", "PARALLEL_ROLLOUT_TASK_TIMEOUT", "--task-timeout must be a finite number, got inf (task-timeout = "
                                                  "inf from the environment variable PARALLEL_ROLLOUT_TASK_TIMEOUT)"),
])
def test_a_float_setting_that_is_not_finite_is_refused_wherever_it_is_set(tmp_path, monkeypatch, where, setting,
                                                                          message):
    """inf passed the range checks (an infinite --task-timeout is > 0) and was kept in
    config.json as ``Infinity``, which is not JSON; nan was refused only where a range caught it."""
    args = ["--agent", "openai", "--base-url", "http://127.0.0.1:9/v1", "--dry-run"]
    if where == "flag":
        args += setting
    elif where == "file":
        (tmp_path / "run.toml").write_text(setting + "\n")
        args += ["--config", str(tmp_path / "run.toml")]
    else:
        monkeypatch.setenv(setting, "inf")
    assert_usage_error(invoke(tmp_path, *args), tmp_path, message)


NOT_HONOURED = [
    (["--screen-width", "800"], "--screen-width is not used by this run", "osworld"),
    (["--screen-height", "600"], "--screen-height is not used by this run", "osworld"),
    (["--action-space", "computer_13"], "--action-space is not used by this run", "osworld"),
    (["--client-password", "hunter2"], "--client-password is not used by this run", "osworld"),
    (["--observation-type", "a11y_tree"], "--observation-type is not used by this run", "osworld"),
    (["--sleep-after-execution", "1"], "--sleep-after-execution is not used by this run", "osworld"),
    (["--record"], "--record is not used by this run", "osworld"),
    (["--model", "x"], "--model is not used by this run", "agents that call a model"),
    (["--num-vms", "2"], "--num-vms sizes the shared pool and needs --use-vm-pool", "VM of its own"),
    (["--envs-per-worker", "2"], "--envs-per-worker > 1", "add --use-vm-pool"),
    (["--path-to-vm", "/images/ubuntu.vmx"], "process provider has no VM image",
     "--path-to-vm cannot be honoured (give a snapshot folder with --snapshot-name,"),
]


@pytest.mark.parametrize("args, message, why", NOT_HONOURED, ids=[a[0] for a, _, _ in NOT_HONOURED])
def test_flags_the_run_cannot_honour_are_rejected(tmp_path, args, message, why):
    """shell mode + oracle agent + process provider: these flags would be silently ignored."""
    result = invoke(tmp_path, "--mode", "shell", "--agent", "oracle", *args)
    assert_usage_error(result, tmp_path, message, why)


def test_a_setting_the_provider_cannot_honour_is_said_as_the_call_spells_it(tmp_path):
    """The provider's refusal said the option's inner name ('path_to_vm cannot be honoured
    (give ... snapshot_name)') on the CLI, which has --path-to-vm; run() says its keywords."""
    from parallel_rollout.api import run

    with pytest.raises(ConfigError, match=r"no VM image: path_to_vm cannot be honoured \(give a snapshot "
                                          r"folder with snapshot_name, or use the qemu provider\)"):
        run(mode="shell", data=str(SHELL_TASKS), agent="oracle", path_to_vm="/images/ubuntu.vmx",
            output_dir=str(tmp_path / "out"), progress=False)


def test_vm_settings_of_a_mode_that_runs_in_no_vm_are_warned_of(tmp_path):
    """--spare-vms, --verify-reset, --boot-timeout-s, max_vm_replacements in a mode without a
    VM (gym) were taken in silence, where --num-vms is refused; warned of now, each named,
    not refused: one config file may serve every mode of a nightly job."""
    (tmp_path / "run.toml").write_text("max_vm_replacements = 2\n")
    result = invoke(tmp_path, "--mode", "gym", "--data", "frozenlake", "--limit", "1", "--spare-vms", "1",
                    "--verify-reset", "fast", "--boot-timeout-s", "30", "--config", str(tmp_path / "run.toml"),
                    "--dry-run", data=None)
    said = " ".join(result.output.split())
    assert result.exit_code == 0, result.output
    for name in ("--boot-timeout-s", "max_vm_replacements", "--spare-vms", "--verify-reset"):  # the key as written
        assert f"{name} is not used by this run: the gym mode runs in no VM" in said, said
    assert f"(max_vm_replacements = 2 in {tmp_path / 'run.toml'}); it is ignored" in said, said
    shell = invoke(tmp_path, "--mode", "shell", "--use-vm-pool", "--num-vms", "1", "--spare-vms", "1", "--dry-run")
    assert shell.exit_code == 0 and "is not used" not in shell.output, shell.output


def test_headless_where_no_vm_opens_a_window_is_warned_of(tmp_path):
    """--headless (OSWorld's run.py habit) was taken in silence by every mode and provider,
    though only vmware's and virtualbox's VMs open a window: warned of now, as the VMs'
    other tunables are, where it is ignored (a mode with no VM, a provider with no window)."""
    gym = invoke(tmp_path, "--mode", "gym", "--data", "frozenlake", "--limit", "1", "--headless", "--dry-run", data=None)
    assert gym.exit_code == 0 and "--headless is not used by this run: the gym mode runs in no VM; it is ignored" in (
        " ".join(gym.output.split())), gym.output
    shell = invoke(tmp_path, "--mode", "shell", "--limit", "1", "--headless", "--dry-run")
    said = " ".join(shell.output.split())
    assert shell.exit_code == 0 and "--headless is not used by this run: the process provider's VMs open no window" in (
        said), shell.output
    # the hypervisors' VMs open one (their preflight stops before the run's preparation here)
    from parallel_rollout.pool_sizing import ignored_vm_settings
    from parallel_rollout.pool.providers import PROVIDERS, get_provider

    given = RunConfig(mode="shell", headless=True, explicit=frozenset({"headless"}))
    assert [name for name in sorted(PROVIDERS.builtin) if ignored_vm_settings(given, get_provider(name))] == [
        "docker", "process", "qemu", "remote"]


@pytest.mark.parametrize("extra", [[], ["--dry-run"]], ids=["run", "dry-run"])
def test_a_vm_memory_too_small_for_the_guest_agent_is_refused(tmp_path, extra):
    """--vm-memory-mb 4 starved each sandbox's own agent: every task, even an echo, was graded
    the task's sandbox_violation, with nothing said of memory; 1 failed every boot."""
    result = invoke(tmp_path, "--use-vm-pool", "--num-vms", "1", "--vm-memory-mb", "4", *extra)
    assert_usage_error(result, tmp_path, "--vm-memory-mb 4 is too little for a sandbox", "give at least 16")
    assert invoke(tmp_path, "--use-vm-pool", "--num-vms", "1", "--vm-memory-mb", "16", "--limit", "1").exit_code == 0


def test_a_model_setting_without_an_agent_says_the_agent_is_the_default_one(tmp_path):
    """--model with no --agent (OSWorld's run.py takes --model, and its agent is the model's):
    the refusal says the run's agent is the default oracle and which agent calls the model; it
    said only that --model applies to agents that call a model."""
    assert_usage_error(invoke(tmp_path, "--mode", "shell", "--model", "gpt-4o"), tmp_path,
                       "--model is not used by this run", "this run's agent is oracle, the default: "
                       "--agent openai calls the model")
    chosen = invoke(tmp_path, "--mode", "shell", "--agent", "oracle", "--model", "gpt-4o")
    assert "the default" not in chosen.output, chosen.output  # an agent chosen is not the default's
    assert "this run's agent is oracle: --agent openai calls the model" in " ".join(chosen.output.split()), \
        chosen.output


def test_unhonoured_key_in_config_file_is_rejected_too(tmp_path):
    path = tmp_path / "run.toml"
    path.write_text("screen-width = 800\n")
    assert_usage_error(invoke(tmp_path, "--config", str(path)), tmp_path, "--screen-width is not used by this run",
                       f"(screen-width = 800 in {path})")


@pytest.mark.parametrize("key, value, agent", [
    ("tokenizer", '"/models/qwen"', "oracle"), ("max_model_len", "4096", "oracle"),
    ("api_timeout_s", "30", "oracle"), ("partial_rollout", "true", "oracle"),
    ("abort_url", '"/abort_request"', "oracle"), ("on_length", '"end"', "command")])
def test_a_model_clients_setting_with_an_agent_that_calls_no_model_is_rejected(tmp_path, key, value, agent):
    """The model client's settings that have no flag (a config file's keys, run()'s keywords)
    are refused for an agent that calls no model, as --model is, named as the key: they were
    taken in silence, a nightly job's tokenizer read by nobody."""
    path = tmp_path / "run.toml"
    path.write_text(f"{key} = {value}\n")
    extra = ["--agent-cmd", "true"] if agent == "command" else []
    assert_usage_error(invoke(tmp_path, "--agent", agent, *extra, "--config", str(path)), tmp_path,
                       f"the setting {key} is not used by this run",  # the key as the file writes it
                       "it only applies to agents that call a model")


def test_a_bad_value_off_the_command_line_says_where_it_was_set(tmp_path, monkeypatch):
    """A range error names the file, the variable or the run's config.json the value came
    from (it named the flag only, which the user never typed); one on the command line
    stays as it was."""
    path = tmp_path / "run.toml"
    path.write_text("resume = true\n")
    assert_usage_error(invoke(tmp_path, "--config", str(path)), tmp_path,
                       f"--resume needs the --run-id of the run to continue (a new run's id is new) "
                       f"(resume = true in {path})")
    path.write_text("use-vm-pool = true\nnum-vms = 0\n")
    assert_usage_error(invoke(tmp_path, "--config", str(path), "--run-id", "r"), tmp_path,
                       f"--num-vms must be at least 1, got 0 (num-vms = 0 in {path})")
    monkeypatch.setenv("PARALLEL_ROLLOUT_FAIL_UNDER", "80")
    assert_usage_error(invoke(tmp_path), tmp_path, "(fail-under = 80 from the environment variable "
                                                   "PARALLEL_ROLLOUT_FAIL_UNDER)")
    monkeypatch.delenv("PARALLEL_ROLLOUT_FAIL_UNDER")
    result = invoke(tmp_path, "--use-vm-pool", "--num-vms", "0", "--config", str(path), "--run-id", "r")
    assert_usage_error(result, tmp_path, "--num-vms must be at least 1")
    assert "(num-vms" not in result.output
    # a run's config.json edited by hand: its resume names that file, and the key as the file writes it
    stored = tmp_path / "out" / "r" / "config.json"
    stored.parent.mkdir(parents=True)
    stored.write_text(json.dumps({"config": {"max_turns": 0, "explicit": ["max_turns"]}}))
    result = CliRunner().invoke(main, ["--output-dir", str(tmp_path / "out"), "--run-id", "r", "--resume"])
    assert result.exit_code == 2, result.output
    assert f"--max-turns must be at least 1, got 0 (max_turns = 0 in {stored}, which --resume reads)" in \
        " ".join(result.output.split())


@pytest.mark.parametrize("args, parts", [
    (["--mode", "nosuch"], ["unknown mode 'nosuch'", "known modes: " + ", ".join(mode_names())]),
    (["--agent", "nosuch"], ["unknown agent 'nosuch'", "oracle"]),
    (["--agent", "no_such_module_xyz:Agent"], ["cannot import module 'no_such_module_xyz'"]),
    (["--agent", "json:JSONDecoder"], ["not an Agent subclass"]),
    (["--provider-name", "nosuch"], ["unknown provider 'nosuch'", "known providers: " + ", ".join(provider_names())]),
    (["--mode", "shel"], ["unknown mode 'shel' (--mode; did you mean 'shell'?); known modes"]),
    (["--agent", "orcale"], ["unknown agent 'orcale' (--agent; did you mean 'oracle'?)"]),
    (["--provider-name", "dokcer"], ["unknown provider 'dokcer' (--provider-name; did you mean 'docker'?)"]),
], ids=["mode", "agent", "agent module", "agent class", "provider", "mode typo", "agent typo", "provider typo"])
def test_unknown_names_list_the_known_ones(tmp_path, args, parts):
    assert_usage_error(invoke(tmp_path, *args), tmp_path, *parts)


def test_data_is_required(tmp_path):
    assert_usage_error(invoke(tmp_path, data=None), tmp_path, "--data is required")


# -- defaults and --help --------------------------------------------------------------------

FLAGS = ("--mode --data --num-rollouts --num-vms --use-vm-pool --output-dir --max-turns --max-retries "
         "--provider-name --snapshot-name --path-to-vm --headless --model --action-space --screen-width "
         "--screen-height --client-password --agent --task-timeout --envs-per-worker "
         "--max-concurrent-rollouts --group-size --run-id --resume --config").split()

DEFAULTS = {"--num-rollouts": "5", "--num-vms": "3", "--max-retries": "3",
            "--max-turns": "(the mode's own (py 1, math 1, web 20, rag 10, osworld 15), else 100)",
            "--output-dir": "results"}


def test_defaults():
    cfg = RunConfig()
    assert (cfg.num_rollouts, cfg.num_vms, cfg.max_turns, cfg.max_retries, cfg.output_dir) == (5, 3, 100, 3, "results")
    assert cfg.concurrency == 5 and cfg.pool_size == 5  # no pool: one VM of its own per worker


def check_help(text: str) -> None:
    """Every flag is listed with an explanation; the documented defaults are shown."""
    flat = " ".join(text.split())
    for flag in FLAGS:
        # the flag, another name of it (--num-rollouts, --num-workers), its metavar (if any),
        # then at least a few words of explanation
        match = re.search(re.escape(flag) + r"(?:, --[a-z-]+)?(?: [A-Z]+)? ((?:[^-\s]\S* ){3})", flat)
        assert match, f"{flag} is not listed with an explanation in --help"
    for flag, default in DEFAULTS.items():
        assert re.search(re.escape(flag) + r"(?:, --[a-z-]+)? \S+ [^\[]*\[default: " + re.escape(default) + r"\]",
                         flat), \
            f"{flag} does not show default {default}"


@pytest.mark.parametrize("argv", [["--help"], ["run", "--help"], ["-h"]])
def test_help_lists_every_flag(argv):
    result = CliRunner().invoke(main, argv)
    assert result.exit_code == 0, result.output
    check_help(result.output)


def test_run_parallel_rollout_script_help():
    """The entry point with the original runner's name, run from the repo root."""
    proc = subprocess.run([sys.executable, "run_parallel_rollout.py", "--help"], cwd=ROOT,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    check_help(proc.stdout)


# -- a real run: concurrency and the resolved config ----------------------------------------


@pytest.mark.parametrize("extra, expected", [
    ([], 4),  # C = N × K = 2 × 2
    (["--max-concurrent-rollouts", "3"], 3),
    (["--max-concurrent-rollouts", "9"], 4),  # more than the loops: cut, and said
])
def test_concurrency_is_logged_and_flags_beat_the_file(tmp_path, extra, expected):
    data = write_tasks(tmp_path / "tasks.jsonl", [shell_task(f"t{i}") for i in range(4)])
    config = tmp_path / "run.toml"
    config.write_text("num-rollouts = 5\nuse_vm_pool = true\nnum-vms = 2\nenvs-per-worker = 2\n")
    result = invoke(tmp_path, "--config", str(config), "--num-rollouts", "2", "--run-id", "c", *extra, data=data)
    assert result.exit_code == 0, (result.output, result.exception)
    run_dir = tmp_path / "out" / "c"
    log = (run_dir / "run.log").read_text()
    assert f"[Concurrency] Set max concurrent rollouts to {expected}" in log
    resolved = json.loads((run_dir / "config.json").read_text())
    assert resolved["config"]["num_rollouts"] == 2  # the flag, not the file's 5
    assert (resolved["config"]["num_vms"], resolved["config"]["envs_per_worker"]) == (2, 2)
    assert re.fullmatch(r"[0-9a-f]{16}", resolved["identity_hash"])
    # console logging reaches this invocation's stderr, also on the second run in one process
    assert f"[Concurrency] Set max concurrent rollouts to {expected}" in result.stderr
    cut = ("[Concurrency] Set max concurrent rollouts to 4, not the 9 asked for by --max-concurrent-rollouts: "
           "the run has 4 env loops (--num-rollouts 2 × --envs-per-worker 2); raise them for more")
    assert (cut in " ".join(result.stderr.split())) == ("9" in extra)


@pytest.mark.parametrize("source", ["config file", "environment"])
def test_a_tilde_in_a_path_from_the_config_file_or_the_environment_is_the_home(tmp_path, source):
    """As the shell expands ``--data ~/r3.jsonl``: it was read as ./~/r3.jsonl, 'task file not found'."""
    home = tmp_path / "home"
    home.mkdir()
    write_tasks(home / "r3.jsonl", [shell_task("t0")])
    env = {"HOME": str(home)}
    paths = {"data": "~/r3.jsonl", "output-dir": "~/results", "junit-xml": "~/junit/r3.xml"}
    if source == "config file":
        (tmp_path / "run.toml").write_text("".join(f'{key} = "{value}"\n' for key, value in paths.items()))
        args = ["--config", str(tmp_path / "run.toml")]
    else:
        env.update({f"PARALLEL_ROLLOUT_{key.upper().replace('-', '_')}": value for key, value in paths.items()})
        args = []
    result = CliRunner().invoke(main, ["run", *args, "--print-config"], env=env)
    assert result.exit_code == 0, result.output
    resolved = json.loads(result.stdout)
    assert (resolved["data"], resolved["output_dir"], resolved["junit_xml"]) == (
        str(home / "r3.jsonl"), str(home / "results"), str(home / "junit" / "r3.xml"))


def test_a_config_files_wrong_type_names_the_key_as_the_file_spells_it(tmp_path):
    for key, shown in (("num-vms", "num-vms"), ("num_vms", "num_vms"), ("use-vm-pool", "use-vm-pool"),
                       ("sampling", "sampling")):
        path = tmp_path / f"{key}.toml"
        path.write_text(f'{key} = "4"\n')
        result = CliRunner().invoke(main, ["--config", str(path), "--data", "x.jsonl", "--print-config"])
        assert result.exit_code == 2, result.output
        said = " ".join(result.output.split())
        assert f"{path}: {shown} must be" in said, said


def test_boot_timeout_is_a_flag(tmp_path):
    """The remote, vmware and virtualbox sections bound every command by it; only a config
    file could set it (PARALLEL_ROLLOUT_BOOT_TIMEOUT_S was warned of and ignored)."""
    result = invoke(tmp_path, "--boot-timeout-s", "7.5", "--print-config")
    assert result.exit_code == 0, result.output
    assert json.loads(result.output)["boot_timeout_s"] == 7.5
    assert "--boot-timeout-s FLOAT" in CliRunner().invoke(main, ["run", "--help"]).output


@pytest.mark.parametrize("key, meant", [
    ("num-workers", "num-rollouts"),  # --num-workers, another name of --num-rollouts
    ("provider", "provider-name"),
    ("max_steps", "max-turns"),  # OSWorld's run.py names, which run reads as flags
    ("result_dir", "output-dir"),
    ("num_envs", "num-rollouts"),
])
def test_a_key_named_as_another_name_of_a_flag_says_the_key(tmp_path, key, meant):
    """A flag's other name (num-workers = 3) or OSWorld's (max_steps = 4), which run takes on
    its command line, was 'unknown key …; keys are the flag names, e.g. num-vms' in a --config
    file: no word of the key the file takes."""
    from click.testing import CliRunner

    from parallel_rollout.cli import main

    path = tmp_path / "run.toml"
    path.write_text(f"{key} = 3\n")
    result = CliRunner().invoke(main, ["--config", str(path), "--print-config"])
    assert result.exit_code == 2, result.output
    assert f"{path}: unknown key {key!r}; did you mean {meant}?" in " ".join(result.output.split()), result.output


def test_every_other_name_of_a_flag_of_run_has_its_key():
    """The table the config file's hint reads (config_checks, below the CLI) holds every other
    name of run's flags and every OSWorld spelling that names a setting otherwise."""
    from parallel_rollout.cli import main
    from parallel_rollout.cli_aliases import OSWORLD_ALIASES
    from parallel_rollout.cli_options import flag_aliases
    from parallel_rollout.setting_names import KEY_SYNONYMS

    def key(flag: str) -> str:
        return flag.lstrip("-").replace("-", "_")

    names = {**flag_aliases(main.commands["run"]), **OSWORLD_ALIASES}
    wanted = {key(other): key(ours) for other, ours in names.items() if key(other) != key(ours)}
    assert KEY_SYNONYMS == wanted
