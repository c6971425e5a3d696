"""Errors name a setting as the user gave it: a flag's other name as typed (``--num-workers``,
``--provider``), a config file's key, an environment variable, a Python call's keyword; and
a provider that cannot be loaded names the setting that asked for it."""

from __future__ import annotations

import shutil

import pytest
from click.testing import CliRunner

from conftest import shell_task, write_tasks
from parallel_rollout.cli import main
from parallel_rollout.config import build_config

needs_bwrap = pytest.mark.skipif(shutil.which("bwrap") is None, reason="needs bubblewrap")


def flat(text: str) -> str:
    return " ".join(text.split())


def invoke(tmp_path, *flags: str, env: dict | None = None, mode: tuple[str, ...] = ("--mode", "shell")) -> str:
    """A shell run of one task's output, its exit status 2 (a usage error) checked."""
    data = write_tasks(tmp_path / "tasks.jsonl", [shell_task("a")])
    result = CliRunner().invoke(main, [*mode, "--data", str(data), "--no-progress",
                                       "--output-dir", str(tmp_path / "out"), *flags], env=env)
    assert result.exit_code == 2, (result.output, result.exception)
    return flat(result.output)


@pytest.mark.parametrize("flags, says, never", [
    (["--num-workers", "0"], "--num-workers must be at least 1", "--num-rollouts"),
    (["--num-workers", "x"], "Invalid value for '--num-workers': 'x' is not a valid integer", "--num-rollouts"),
    # of a flag given twice, click keeps the last: the error names that one, as typed
    (["--num-rollouts", "2", "--num-workers", "0"], "--num-workers must be at least 1", "--num-rollouts"),
    (["--num_envs", "2", "--num-workers", "0"], "--num-workers must be at least 1", "--num_envs"),
    (["--num-workers", "2", "--num-rollouts", "0"], "--num-rollouts must be at least 1", "--num-workers"),
    (["--num-workers", "3", "--num-vms", "2"], "without it each worker owns one VM of its own (--num-workers VMs)",
     "--num-rollouts"),
    (["--provider", "remote", "--vm-address", "127.0.0.1:9", "--num-workers", "3"],
     "but the pool needs 3 VMs (--num-vms with --use-vm-pool, else --num-workers, plus --spare-vms)",
     "--num-rollouts"),
], ids=lambda v: " ".join(v) if isinstance(v, list) else None)
def test_a_flags_other_name_is_named_as_typed(tmp_path, flags, says, never):
    """--num-workers is another name of --num-rollouts; an error about the value typed after it
    named --num-rollouts, a flag the user never typed."""
    said = invoke(tmp_path, "--dry-run", *flags)
    assert says in said, said
    assert never not in said, said


@pytest.mark.parametrize("flags, says, never", [
    (["--provider", "remote", "--vm-address", "127.0.0.1:9", "--num-rollouts", "1", "--path_to_vm", "x.qcow2"],
     "the remote provider cannot honour --path_to_vm", "--path-to-vm"),
    (["--provider", "remote", "--vm-address", "127.0.0.1:9", "--num-rollouts", "1", "--snapshot_name", "init_state"],
     "the remote provider cannot honour --snapshot_name", "--snapshot-name"),
    (["--provider_name", "virtualbox", "--path_to_vm", "/vms/a.vbox", "--num-rollouts", "3"],
     "1 VM file(s) (--path_to_vm) but the pool needs 3 VMs", "--path-to-vm"),
    (["--provider_name", "virtualbox", "--path_to_vm", "/vms/a.vbox", "--num-rollouts", "3", "--dry-run"],
     "1 VM file(s) (--path_to_vm) but the pool needs 3 VMs", "--path-to-vm"),
], ids=lambda v: " ".join(v) if isinstance(v, list) else None)
def test_osworlds_vm_flags_are_named_as_typed(tmp_path, flags, says, never):
    """OSWorld's scripts pass --path_to_vm and --snapshot_name; the providers' refusals of them
    named --path-to-vm and --snapshot-name, flags the user never typed."""
    said = invoke(tmp_path, *flags)
    assert says in said, said
    assert never not in said, said


@needs_bwrap
@pytest.mark.parametrize("flags, says", [
    (["--path_to_vm", "ubuntu.vmx"], "the process provider has no VM image: --path_to_vm cannot be honoured "
                                     "(give a snapshot folder with --snapshot-name"),
    (["--snapshot_name", "init_state"], "--snapshot_name 'init_state': no such folder"),
], ids=lambda v: " ".join(v) if isinstance(v, list) else None)
def test_the_process_providers_refusal_of_osworlds_vm_flags_names_them_as_typed(tmp_path, flags, says):
    said = invoke(tmp_path, "--dry-run", *flags)
    assert says in said, said


@needs_bwrap
def test_a_worker_count_cut_to_the_samples_is_said_as_typed(tmp_path):
    """The warning of a count cut to the samples names it with its value, as typed."""
    data = write_tasks(tmp_path / "tasks.jsonl", [shell_task("a")])
    result = CliRunner().invoke(main, ["--mode", "shell", "--data", str(data), "--no-progress", "--dry-run",
                                       "--output-dir", str(tmp_path / "out"), "--num-workers", "3"])
    said = flat(result.output)
    assert "--num-workers 3 without --use-vm-pool boots a VM per worker: 1 sample needs 1 worker" in said, said
    assert "--num-rollouts" not in said, said


@pytest.mark.parametrize("flag", ["--provider", "--provider-name"])
@pytest.mark.parametrize("dry_run", [False, True], ids=["run", "dry-run"])
def test_an_unknown_provider_names_the_flag_as_typed(tmp_path, flag, dry_run):
    said = invoke(tmp_path, flag, "procss", *(["--dry-run"] if dry_run else []))
    assert f"unknown provider 'procss' ({flag}; did you mean 'process'?); known providers:" in said, said


def test_a_provider_that_does_not_import_names_the_flag(tmp_path):
    said = invoke(tmp_path, "--provider", "os:path")
    assert "provider 'os:path' (--provider): 'path' in os is not a Provider subclass" in said, said


def test_a_provider_set_off_the_command_line_names_where(tmp_path):
    (tmp_path / "run.toml").write_text('provider-name = "nosuch"\n')
    said = invoke(tmp_path, "--config", str(tmp_path / "run.toml"))
    assert f"unknown provider 'nosuch' (provider-name in {tmp_path / 'run.toml'}); known providers:" in said, said
    said = invoke(tmp_path, env={"PARALLEL_ROLLOUT_PROVIDER_NAME": "nosuch"})
    assert "unknown provider 'nosuch' (the environment variable PARALLEL_ROLLOUT_PROVIDER_NAME)" in said, said


def test_a_provider_of_a_python_call_names_the_keyword(tmp_path):
    from parallel_rollout.api import run
    from parallel_rollout.errors import ConfigError

    data = write_tasks(tmp_path / "tasks.jsonl", [shell_task("a")])
    with pytest.raises(ConfigError, match=r"unknown provider 'nosuch' \(provider_name in run\(\)\)"):
        run(mode="shell", data=str(data), output_dir=str(tmp_path / "out"), provider_name="nosuch")


def test_as_given_says_a_setting_with_its_value_as_its_source_spells_it(tmp_path):
    """One function says where a setting came from, with its value or without."""
    from parallel_rollout.setting_names import as_given

    (tmp_path / "run.toml").write_text("num-rollouts = 5\n")
    cases = [
        (build_config({"num_rollouts": 5}, None, {"num_rollouts": "typed --num-workers"}),
         "--num-workers", "--num-workers 5"),
        (build_config({}, str(tmp_path / "run.toml")), f"num-rollouts in {tmp_path / 'run.toml'}",
         f"num-rollouts = 5 in {tmp_path / 'run.toml'}"),
        (build_config({"num_rollouts": 5}, None, {"num_rollouts": "from the environment variable X"}),
         "the environment variable X", "num-rollouts = 5 from the environment variable X"),
        (build_config({"num_rollouts": 5}, None, {"num_rollouts": "in run()"}),
         "num_rollouts in run()", "num_rollouts=5 in run()"),
        (build_config({"num_vms": 2, "use_vm_pool": True}, None, {"num_vms": "in run()"}),
         "num_rollouts", "num_rollouts=5"),  # a keyword the call left out: its default
    ]
    for cfg, bare, valued in cases:
        assert (as_given(cfg, "num_rollouts"), as_given(cfg, "num_rollouts", with_value=True)) == (bare, valued)


@pytest.mark.parametrize("variable, own", [("PARALLEL_ROLLOUT_NUM_WORKERS", "--num-rollouts"),
                                           ("PARALLEL_ROLLOUT_PROVIDER", "--provider-name")])
def test_the_variable_of_a_flags_other_name_says_the_one_read(tmp_path, variable, own):
    """A flag's variable is named after its first name; the other name's was ignored with a hint
    at another flag's (PARALLEL_ROLLOUT_NUM_WORKERS: 'did you mean PARALLEL_ROLLOUT_NUM_VMS?')."""
    data = write_tasks(tmp_path / "tasks.jsonl", [shell_task("a")])
    result = CliRunner().invoke(main, ["--mode", "shell", "--data", str(data), "--print-config"],
                                env={variable: "2"})
    said = flat(result.output)
    wanted = "PARALLEL_ROLLOUT_" + own[2:].upper().replace("-", "_")
    assert (f"Warning: {variable} is set but is not read: --{variable[17:].lower().replace('_', '-')} is "
            f"another name of {own}, whose variable is {wanted}; ignored") in said, said
    assert "did you mean" not in said, said


def test_vms_sweeps_variable_of_its_provider_flags_other_name_says_the_one_read(tmp_path):
    """`vms sweep --provider` is another name of --provider-name: its variable
    PARALLEL_ROLLOUT_VMS_SWEEP_PROVIDER was ignored in silence (the process provider's VMs
    swept, not docker's), where run's PARALLEL_ROLLOUT_PROVIDER is warned of. `image build`
    reads both of its names' variables, so says nothing."""
    env = {"PARALLEL_ROLLOUT_VMS_SWEEP_PROVIDER": "docker", "PARALLEL_ROLLOUT_PROCESS_DIR": str(tmp_path)}
    result = CliRunner().invoke(main, ["vms", "sweep", "--run-id", "pr-none"], env=env)
    said = flat(result.output)
    assert result.exit_code == 0, (said, result.exception)
    assert ("Warning: PARALLEL_ROLLOUT_VMS_SWEEP_PROVIDER is set but is not read: --provider is another name "
            "of --provider-name, whose variable is PARALLEL_ROLLOUT_VMS_SWEEP_PROVIDER_NAME; ignored") in said, said
    assert "removed 0 process VM(s)" in said, said
    built = CliRunner().invoke(main, ["image", "build"], env={"PARALLEL_ROLLOUT_IMAGE_BUILD_PROVIDER_NAME": "nosuch"})
    assert "unknown provider 'nosuch'" in built.output and "Warning" not in built.output, built.output


def test_run_help_says_which_name_a_flags_variable_takes():
    said = flat(CliRunner().invoke(main, ["run", "--help"]).output)
    assert "PARALLEL_ROLLOUT_<FLAG> (its first name, upper case, '-' as '_'; PARALLEL_ROLLOUT_NUM_ROLLOUTS for " \
           "--num-rollouts," in said, said


def test_check_endpoints_help_says_what_it_asks():
    """--check-endpoint asks the route the run's requests take too (a POST without messages);
    its help said GET /models alone."""
    from parallel_rollout.agents.openai_request import PROBE_TIMEOUT_S

    said = flat(CliRunner().invoke(main, ["run", "--help"]).output).replace("- ", "-")  # click's wrap at a hyphen
    check = said.split("--check-endpoint", 1)[1].split("Agent and model:", 1)[0]
    for asked in ("GET /models", "/chat/completions", "/completions with tokenizer=", "POST without messages",
                  f"{PROBE_TIMEOUT_S:g} s timeout each", "a route it lacks is a problem"):
        assert asked in check, (asked, check)


@pytest.mark.parametrize("setting", ["mode", "agent"])
def test_an_unknown_mode_or_agent_names_where_it_was_set(tmp_path, setting):
    """A nightly job's stale PARALLEL_ROLLOUT_AGENT, or a config file's mode, was refused as
    'unknown agent ...' with no word of where the name came from."""
    kind = {"mode": "modes", "agent": "agents"}[setting]
    (tmp_path / "run.toml").write_text(f'{setting} = "nosuch"\n')
    mode = () if setting == "mode" else ("--mode", "shell")
    for dry_run in ([], ["--dry-run"]):
        said = invoke(tmp_path, "--config", str(tmp_path / "run.toml"), *dry_run, mode=mode)
        assert f"unknown {setting} 'nosuch' ({setting} in {tmp_path / 'run.toml'}); known {kind}:" in said, said
        variable = f"PARALLEL_ROLLOUT_{setting.upper()}"
        said = invoke(tmp_path, *dry_run, env={variable: "nosuch"}, mode=mode)
        assert f"unknown {setting} 'nosuch' (the environment variable {variable}); known {kind}:" in said, said
        said = invoke(tmp_path, f"--{setting}", "nosuch", *dry_run, mode=mode)
        assert f"unknown {setting} 'nosuch' (--{setting}); known {kind}:" in said, said


@pytest.mark.parametrize("args, env, said", [
    (["image", "build", "--provider", "nosuch"], {}, "(--provider)"),
    (["image", "build", "--provider-name=nosuch"], {}, "(--provider-name)"),
    (["image", "build"], {"PARALLEL_ROLLOUT_IMAGE_BUILD_PROVIDER_NAME": "nosuch"},
     "(the environment variable PARALLEL_ROLLOUT_IMAGE_BUILD_PROVIDER_NAME)"),
    (["vms", "sweep", "--provider", "nosuch"], {}, "(--provider)"),
    (["vms", "sweep", "--provider-name", "nosuch", "--run-id", "pr-none"], {}, "(--provider-name)"),
    (["vms", "sweep"], {"PARALLEL_ROLLOUT_VMS_SWEEP_PROVIDER_NAME": "nosuch"},
     "(the environment variable PARALLEL_ROLLOUT_VMS_SWEEP_PROVIDER_NAME)"),
], ids=lambda v: " ".join(v) if isinstance(v, list) else None)
def test_image_build_and_vms_sweep_name_an_unknown_provider_as_typed(args, env, said):
    """`image build --provider nosuch` and `vms sweep --provider nosuch` said "unknown provider
    'nosuch'" without the flag, where `run --provider nosuch` names it: now as run does, with
    the known providers, exit 2."""
    result = CliRunner().invoke(main, args, env=env)
    assert result.exit_code == 2, (result.output, result.exception)
    out = flat(result.output)
    assert f"unknown provider 'nosuch' {said}; known providers: docker, process" in out, out
    ran = CliRunner().invoke(main, ["run", "--mode", "shell", "--data", "x.jsonl", "--provider", "nosuch"])
    assert ran.exit_code == result.exit_code, ran.output
