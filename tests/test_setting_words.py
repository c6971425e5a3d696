"""A bad setting's error names it in the words of the user who gave it: a flag on the command
line (``--max-retries``), a key of a config file (``min-free-disk-mb``, a setting with no
flag), a keyword of a Python call (``min_free_disk_mb``), a field of a pool's options."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from conftest import SHELL_TASKS
from parallel_rollout.api import run
from parallel_rollout.cli import main
from parallel_rollout.errors import ConfigError
from parallel_rollout.pool.manager import VMPoolManager
from parallel_rollout.pool.providers.base import ProviderOptions


def cli_error(tmp_path, *args: str, toml: str | None = None) -> str:
    """The usage error (exit 2) of a shell run given ``args`` and a config file of ``toml``."""
    argv = ["--data", str(SHELL_TASKS), "--output-dir", str(tmp_path / "out"), "--no-progress", *args]
    if toml is not None:
        (tmp_path / "run.toml").write_text(toml + "\n")
        argv += ["--config", str(tmp_path / "run.toml")]
    result = CliRunner().invoke(main, argv)
    assert result.exit_code == 2, (result.output, result.exception)
    return " ".join(result.output.split())


def call_error(tmp_path, **settings) -> str:
    """The ConfigError of ``run()`` given ``settings`` for a shell run."""
    with pytest.raises(ConfigError) as caught:
        run(data=str(SHELL_TASKS), output_dir=str(tmp_path / "out"), progress=False, **settings)
    return str(caught.value)


#: (the config file's line, run()'s keyword and value, what the CLI says, what run() says)
RANGES = [
    ("min-free-disk-mb = -1", {"min_free_disk_mb": -1}, "min-free-disk-mb must be 0 or more, got -1",
     "min_free_disk_mb must be 0 or more, got -1"),
    ("shutdown_grace_s = -1.0", {"shutdown_grace_s": -1.0}, "shutdown_grace_s must be 0 or more",
     "shutdown_grace_s must be 0 or more"),
    ("max-vm-replacements = -1", {"max_vm_replacements": -1}, "max-vm-replacements must be 0 or more",
     "max_vm_replacements must be 0 or more"),
    ("lease-timeout-s = 0", {"lease_timeout_s": 0.0}, "lease-timeout-s must be positive (seconds)",
     "lease_timeout_s must be positive (seconds)"),
    ("api-timeout-s = inf", {"api_timeout_s": float("inf")}, "api-timeout-s must be a finite number",
     "api_timeout_s must be a finite number"),
    ("on-length = \"cut\"", {"on_length": "cut"}, "on-length must be 'parse' or 'end'",
     "on_length must be 'parse' or 'end'"),
    ("max-retries = -1", {"max_retries": -1}, "--max-retries must be 0 or more", "max_retries must be 0 or more"),
    ("spare-vms = -1", {"spare_vms": -1}, "--spare-vms must be 0 or more, got -1", "spare_vms must be 0 or more"),
    ("server-cooldown = -1.0", {"server_cooldown": -1.0}, "--server-cooldown must be 0 or more (seconds)",
     "server_cooldown must be 0 or more (seconds)"),
]


@pytest.mark.parametrize("line, keyword, cli_says, call_says", RANGES, ids=[row[0].split()[0] for row in RANGES])
def test_a_range_error_names_the_setting_as_the_cli_and_a_python_call_spell_it(tmp_path, line, keyword, cli_says,
                                                                                call_says):
    """A config file's key with no flag was said as Python's field (``min_free_disk_mb must be
    0 or more``, then ``(min-free-disk-mb = -1 in run.toml)``): no word the CLI's user typed or
    can find in ``--help``. A flag's error said as run()'s keyword held already (a guard)."""
    said = cli_error(tmp_path, toml=line)
    assert cli_says in said and f"in {tmp_path / 'run.toml'}" in said, said
    if "_" not in line.split()[0]:  # a key written with underscores is said as written (shutdown_grace_s)
        assert "_" not in said.split(" must ")[0], said
    called = call_error(tmp_path, **keyword)
    assert called.startswith(call_says) and "--" not in called, called


def test_a_setting_an_error_names_beside_the_one_it_is_of_is_in_the_same_words(tmp_path):
    """max_model_len without a tokenizer for the openai agent: a config file's user was told
    ``max_model_len=4096 … set tokenizer=``, a Python call's words."""
    said = cli_error(tmp_path, "--agent", "openai", "--base-url", "http://127.0.0.1:9/v1", toml="max-model-len = 4096")
    assert "max-model-len bounds token-id prompts (to 4096)" in said and "set tokenizer or leave max-model-len out" \
        in said and "max_model_len" not in said and "tokenizer=" not in said, said
    called = call_error(tmp_path, agent="openai", base_url="http://127.0.0.1:9/v1", max_model_len=4096)
    assert "set tokenizer or leave max_model_len out" in called, called


def test_the_flags_range_errors_name_the_flag_typed(tmp_path):
    """On the command line: the flag, as typed (OSWorld's spelling too)."""
    assert "Error: --server-cooldown must be 0 or more (seconds)" in cli_error(tmp_path, "--server-cooldown", "-1")
    assert "Error: --num_envs must be at least 1" in cli_error(tmp_path, "--num_envs", "0")


def test_a_model_setting_with_no_flag_is_not_said_as_a_flag(tmp_path):
    """extra_body (a config file's table) given to an agent that calls no model was refused as
    ``--extra-body``, a flag there is not."""
    said = cli_error(tmp_path, "--agent", "oracle", "--dry-run", toml="[extra-body]\ntop_k = 1")
    assert "the setting extra-body is not used by this run" in said and "--extra-body" not in said, said
    called = call_error(tmp_path, agent="oracle", extra_body={"top_k": 1})
    assert "the setting extra_body is not used by this run" in called, called


def test_a_pool_made_in_python_names_its_options_field(tmp_path):
    """A VMPoolManager is given ProviderOptions, no flag: a negative spare_vms there said
    ``--spare-vms``, which its user never typed (a run's is refused before any pool)."""
    with pytest.raises(ConfigError, match=r"^ProviderOptions\.spare_vms must be 0 or more, got -1$"):
        VMPoolManager("process", "words", 1, options=ProviderOptions(spare_vms=-1))
