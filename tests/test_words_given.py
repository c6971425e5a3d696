"""An error says what the user gave in the user's words, and once: a fleet's abort URL in the
config file's key and the --base-url flag typed, an unknown provider in one problem, a path
that Python may give as a ``pathlib.Path``, a misspelt RunConfig field with the one meant, one
task as one. tests/test_setting_words.py holds the range errors' words."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from conftest import SHELL_TASKS, shell_task, write_tasks
from parallel_rollout.api import run
from parallel_rollout.cli import main
from parallel_rollout.config import RunConfig
from parallel_rollout.errors import ConfigError

#: the first of two servers, and an abort URL on it: every abort would be told there
FLEET = ("http://127.0.0.1:9/v1", "http://127.0.0.2:9/v1")
ON_THE_FIRST = "http://127.0.0.1:9/abort_request"


def cli_output(tmp_path, *args: str, toml: str | None = None, exit_code: int = 2) -> str:
    """What the CLI prints for a run given ``args`` and a config file of ``toml``, which must
    exit ``exit_code``, one line; ``tmp_path`` (which holds the test's name) said as TMP."""
    argv = ["--output-dir", str(tmp_path / "out"), "--no-progress", *args]
    if toml is not None:
        (tmp_path / "run.toml").write_text(toml + "\n")
        argv += ["--config", str(tmp_path / "run.toml")]
    result = CliRunner().invoke(main, argv)
    assert result.exit_code == exit_code, (result.output, result.exception)
    return " ".join(result.output.split()).replace(str(tmp_path), "TMP")


def test_an_abort_url_on_one_server_of_the_fleet_is_said_in_the_words_given(tmp_path):
    """It said ``abort_url … tell each server of base_url its own``, Python's words, to a
    config file's user, and of the fleet that --base-url gave on the command line."""
    flags = [arg for url in FLEET for arg in ("--base-url", url)]
    said = cli_output(tmp_path, "--data", str(SHELL_TASKS), *flags, toml=f'abort-url = "{ON_THE_FIRST}"')
    assert said.startswith(f"Error: abort-url '{ON_THE_FIRST}' is on one server of the fleet"), said
    assert "to tell each server of the fleet (--base-url) its own" in said, said
    assert f'(abort-url = "{ON_THE_FIRST}" in TMP/run.toml)' in said, said  # where it was set
    assert "_url" not in said, said
    both = cli_output(tmp_path, "--data", str(SHELL_TASKS),
                      toml=f'abort-url = "{ON_THE_FIRST}"\nbase-url = ["{FLEET[0]}", "{FLEET[1]}"]')
    assert "to tell each server of the fleet (base-url in TMP/run.toml) its own" in both, both
    with pytest.raises(ConfigError) as caught:  # a call's keywords: held already, a guard
        run(data=str(SHELL_TASKS), output_dir=str(tmp_path / "out"), base_url=list(FLEET), abort_url=ON_THE_FIRST)
    assert str(caught.value).startswith(f"abort_url '{ON_THE_FIRST}'") and "(base_url in run())" in str(caught.value)


def test_an_abort_url_that_is_no_url_is_said_as_the_config_file_writes_it(tmp_path):
    """``abort_url must be an http(s) URL``, then ``(abort-url = … in run.toml)``."""
    said = cli_output(tmp_path, "--data", str(SHELL_TASKS), toml='abort-url = "ftp://x/abort"')
    assert said.startswith("Error: abort-url must be an http(s) URL") and "abort_url" not in said, said


def test_an_unknown_provider_is_one_problem_of_the_dry_run(tmp_path):
    """A web run's guest check looked the provider up again and listed the same unknown
    provider a second time, as its ``guest:`` problem."""
    said = cli_output(tmp_path, "--mode", "web", "--data", "miniwob", "--limit", "1", "--provider", "nosuch",
                      "--dry-run")
    assert "preflight found 1 problem(s): - provider: unknown provider 'nosuch' (--provider)" in said, said
    assert said.count("unknown provider 'nosuch'") == 1 and "guest:" not in said, said


def test_a_path_setting_of_the_wrong_type_says_what_a_call_may_give(tmp_path):
    """run(data=5) said ``data must be a string``, though a pathlib.Path is taken as well; a
    config file has no paths but strings (a guard: it said so already)."""
    with pytest.raises(ConfigError, match=r"^run\(\): data must be a path or a string, got 5$"):
        run(data=5, output_dir=str(tmp_path / "out"))
    said = cli_output(tmp_path, toml="data = 5")
    assert "TMP/run.toml: data must be a string, got 5" in said, said


def test_a_misspelt_run_config_field_names_the_one_meant():
    """RunConfig(num_vm=2) raised Python's bare TypeError (unexpected keyword argument), where
    run(num_vm=2) and a config file's num-vm name num_vms. Still a TypeError."""
    with pytest.raises(TypeError, match=r"^RunConfig\(\) got an unexpected keyword argument 'num_vm'; "
                                        r"did you mean num_vms\?$") as caught:
        RunConfig(num_vm=2)
    assert isinstance(caught.value, ConfigError)
    with pytest.raises(TypeError, match=r"keyword argument 'zzz'$"):  # nothing close: no guess
        RunConfig(zzz=2)
    assert RunConfig(num_vms=2).num_vms == 2


def test_one_task_is_said_as_one(tmp_path):
    """``--limit 1: the run takes the first 1 runnable tasks``, and ``all: 1 tasks``."""
    tasks = write_tasks(tmp_path / "tasks.jsonl", [shell_task("a"), shell_task("b")])
    said = cli_output(tmp_path, "--data", str(tasks), "--limit", "1", "--dry-run", exit_code=0)
    assert "--limit 1: the run takes the first runnable task " in said and "1 runnable tasks" not in said, said
    one = write_tasks(tmp_path / "one.jsonl", [shell_task("a")])
    said = cli_output(tmp_path, "--data", str(one), "--dry-run", exit_code=0)
    assert ": 1 task, 1 runnable" in said and "1 tasks," not in said, said


def test_a_key_a_config_file_writes_with_underscores_is_said_as_written(tmp_path):
    """A key with no flag, written ``min_free_disk_mb`` (as the README's Python does, and as
    the keys may be), was said ``min-free-disk-mb``, a word the file does not hold; where a
    flag's value was set, ``(num-vms = 0 in run.toml)`` for ``num_vms = 0``, likewise. Dashes
    stay dashes."""
    said = cli_output(tmp_path, "--data", str(SHELL_TASKS), toml="min_free_disk_mb = -1")
    assert said.startswith("Error: min_free_disk_mb must be 0 or more, got -1 (min_free_disk_mb = -1 in "
                           "TMP/run.toml)"), said
    said = cli_output(tmp_path, "--data", str(SHELL_TASKS), "--use-vm-pool", toml="num_vms = 0")
    assert said.startswith("Error: --num-vms must be at least 1, got 0 (num_vms = 0 in TMP/run.toml)"), said
    said = cli_output(tmp_path, "--data", str(SHELL_TASKS), "--agent", "oracle", "--dry-run",
                      toml="[extra_body]\ntop_k = 1")
    assert "the setting extra_body is not used by this run" in said and "extra-body" not in said, said
    said = cli_output(tmp_path, "--data", str(SHELL_TASKS), toml="min-free-disk-mb = -1")
    assert said.startswith("Error: min-free-disk-mb must be 0 or more, got -1 (min-free-disk-mb = -1 in "), said


def test_a_misspelt_env_manager_field_names_the_one_meant():
    """EnvManagerConfig(num_env_group=8), a trainer's other dataclass, raised the same bare
    TypeError."""
    from parallel_rollout.rl import EnvManagerConfig

    with pytest.raises(TypeError, match=r"^EnvManagerConfig\(\) got an unexpected keyword argument 'num_env_group'; "
                                        r"did you mean num_env_groups\?$"):
        EnvManagerConfig(num_env_group=8, group_size=2)
    assert EnvManagerConfig(num_env_groups=8, group_size=2).num_env_groups == 8


def test_a_misspelt_scheduler_keyword_names_the_one_meant(tmp_path):
    """RolloutScheduler(run_config, async_ratio=1) (async_generation_ratio misspelt) raised
    Python's bare TypeError, where RunConfig's and EnvManagerConfig's misspelt fields are named
    with the one meant; TaskSet(dat=...), the other settings a trainer writes, likewise. Refused
    before anything starts; a keyword no setting is close to gets no guess."""
    from parallel_rollout.rl import RolloutScheduler, TaskSet

    config = RunConfig(mode="gym", agent="oracle", output_dir=str(tmp_path / "out"))
    with pytest.raises(TypeError, match=r"^RolloutScheduler\(\) got an unexpected keyword argument 'async_ratio'; "
                                        r"did you mean async_generation_ratio\?$") as caught:
        RolloutScheduler(config, async_ratio=1)
    assert isinstance(caught.value, ConfigError)
    with pytest.raises(TypeError, match=r"keyword argument 'threshold'$"):  # no gate of a run here
        RolloutScheduler(config, threshold=1)
    with pytest.raises(TypeError, match=r"^TaskSet\(\) got an unexpected keyword argument 'dat'; did you mean data\?$"):
        TaskSet("gym", dat="tiny.jsonl")
    assert TaskSet("gym", data="tiny.jsonl").data == "tiny.jsonl"
    assert not (tmp_path / "out").exists()
