"""A remote machine list's settings refused naming where they came from, and a machine that
never answers named with the flags to check, through the CLI. Apart from
test_remote_boot_settings.py, whose real agents on this host make it one of the tests that
need the machine to themselves (conftest's EXCLUSIVE): these start no guest agent, and no
shell check runs."""

from __future__ import annotations

import json
import re

import pytest
from click.testing import CliRunner

from parallel_rollout.cli import main
from providers.test_remote import _free_port
from providers.test_remote_boot_settings import _shell_tasks


@pytest.mark.parametrize("dry_run", [False, True], ids=["run", "dry-run"])
@pytest.mark.parametrize("toml, flags, env, said", [
    ('vm-address = ["127.0.0.1:5000", "127.0.0.1:50O1"]\n', ["--use-vm-pool", "--num-vms", "2"], {},
     "--vm-address '127.0.0.1:50O1' must be HOST, HOST:PORT or http://HOST:PORT with a port from 1 to 65535 "
     "(vm-address = [\"127.0.0.1:5000\", \"127.0.0.1:50O1\"] in CONFIG)"),
    ('vm-address = "127.0.0.1:5000"\nreset-command = "ssh vmhost vmrun revertToSnapshot /vms/{hots}.vmx s"\n',
     [], {}, "--reset-command: unknown placeholder {hots} (did you mean {host}?)"),
    ("", ["--reset-command", "true"], {"PARALLEL_ROLLOUT_VM_ADDRESS": "127.0.0.1:5000 user@127.0.0.1"},
     "--vm-address 'user@127.0.0.1' must be HOST, HOST:PORT or http://HOST:PORT (vm-address = "
     "\"127.0.0.1:5000 user@127.0.0.1\" from the environment variable PARALLEL_ROLLOUT_VM_ADDRESS)"),
    ("", ["--reset-command", "true", "--num-rollouts", "3"], {"PARALLEL_ROLLOUT_VM_ADDRESS": "127.0.0.1:5000,127.0.0.1:5001"},
     "give one address per VM, or fewer VMs (vm-address = \"127.0.0.1:5000,127.0.0.1:5001\" from the environment "
     "variable PARALLEL_ROLLOUT_VM_ADDRESS)"),
    ('vm-address = ["127.0.0.1", "127.0.0.1:5000"]\n', ["--reset-command", "true", "--use-vm-pool", "--num-vms", "2"],
     {}, "--vm-address names http://127.0.0.1:5000 more than once; two VMs on one machine would reset each other "
     "(vm-address = [\"127.0.0.1\", \"127.0.0.1:5000\"] in CONFIG)"),
], ids=["address-in-config", "placeholder-in-config", "address-in-environment", "too-few-in-environment",
        "one-machine-twice-in-config"])
def test_a_remote_setting_given_off_the_command_line_is_refused_naming_where(tmp_path, toml, flags, env, said,
                                                                             dry_run):
    """A machine list in a --config file (or the environment) with an entry that is no address,
    a reset command there with a typo'd placeholder: refused before anything starts (exit 2,
    no run folder), naming the file or variable it came from as the other settings' errors do;
    the message named only the flag, which the command line never gave. A variable's list is
    quoted as its text, as typed (it was said as a list, ["127.0.0.1:5000", "user@127.0.0.1"]).
    One machine listed twice was refused by the provider, without saying where."""
    (tmp_path / "machines.toml").write_text(toml)
    result = CliRunner().invoke(main, [
        "--mode", "shell", "--data", str(_shell_tasks(tmp_path, 1)), "--agent", "oracle",
        "--provider-name", "remote", "--config", str(tmp_path / "machines.toml"), "--num-rollouts", "1",
        "--output-dir", str(tmp_path / "out"), "--run-id", "r", "--no-progress", *flags,
        *(["--dry-run"] if dry_run else [])], env=env)
    assert result.exit_code == 2, result.output
    said = said.replace("CONFIG", str(tmp_path / "machines.toml"))
    assert said in " ".join(result.output.split()), result.output
    if "placeholder" in said:
        assert f"(reset-command = \"ssh vmhost vmrun revertToSnapshot /vms/{{hots}}.vmx s\" in {tmp_path}/machines.toml)" \
            in result.output, result.output
    assert not (tmp_path / "out" / "r").exists()


@pytest.mark.parametrize("reset, in_file, said", [
    ("none", False, "no guest agent answered at that address (--vm-address) within 2s (--boot-timeout-s 2), and --reset-command "
                    "none starts none: start its agent"),
    ("true", False, "no guest agent answered at that address (--vm-address) within 2s (--boot-timeout-s 2) after the reset command "
                    "(--reset-command) ran"),
    ("none", True, "no guest agent answered at that address (vm-address in CONFIG) within 2s (boot-timeout-s in "
                   "CONFIG), and none (reset-command in CONFIG) starts none: start its agent"),
], ids=["none", "true", "none-in-config"])
def test_a_machine_that_does_not_answer_is_named_with_the_flags_to_check(tmp_path, reset, in_file, said):
    """A --vm-address where nothing listens: each boot waits --boot-timeout-s (a reset may be
    bringing it up), the budget is spent and the run stops (exit 1), its attempts left to a
    resume; the message says which flags to look at. It said only 'guest agent at … not ready
    after 2s (GET /platform; last error: ConnectionRefusedError…)'. The settings a --config
    file gave are said as its keys, where it is: the flags were named, which no one typed."""
    port = _free_port()
    settings = {"vm-address": f"127.0.0.1:{port}", "reset-command": reset, "boot-timeout-s": "2"}
    config = tmp_path / "machines.toml"
    config.write_text("".join(f"{key} = {json.dumps(value)}\n" for key, value in settings.items()).replace('"2"', "2"))
    given = ["--config", str(config)] if in_file else [f"--{key}={value}" for key, value in settings.items()]
    said = said.replace("CONFIG", str(config))
    result = CliRunner().invoke(main, [
        "--mode", "shell", "--data", str(_shell_tasks(tmp_path, 1)), "--agent", "oracle", "--provider-name", "remote",
        *given, "--num-rollouts", "1", "--output-dir", str(tmp_path / "out"), "--run-id", "r", "--no-progress"])
    assert result.exit_code == 1, result.output
    assert f"vm-2: boot failed: GuestUnreachable: VM vm-2: guest agent at http://127.0.0.1:{port} not ready after 2s" \
        in result.output, result.output
    assert said in " ".join(result.output.split()), result.output
    assert "resume with:" in result.output


@pytest.mark.parametrize("given, command, code, said", [
    ("file", "echo reverting; exit 3", 1, "the reset command (reset-command in CONFIG) exited with 3: reverting"),
    ("environment", "vmrunn-not-installed revertToSnapshot {host} s", 2,
     "the reset command (the environment variable PARALLEL_ROLLOUT_RESET_COMMAND) exited with 127, a program it "
     "runs was not found: /bin/sh: 1: vmrunn-not-installed: not found; fix the environment variable "
     "PARALLEL_ROLLOUT_RESET_COMMAND (a resume may give another)"),
    ("file", "echo reverting; exec sleep 30", 1, "the reset command (reset-command in CONFIG) did not finish within "
     "1s (killed; boot-timeout-s in CONFIG allows more); output: reverting"),
    ("flag", "echo reverting; exit 3", 1, "the reset command (--reset-command) exited with 3: reverting"),
    ("flag", "echo no such machine {hostname}; exit 3", 1, "the reset command (--reset-command) exited with 3: no "
     "such machine {hostname} ({hostname} is no placeholder and ran as typed; the placeholders are {address}, "
     "{host}, {port}, {vm_id}, {run_id})"),
], ids=["exit-in-config", "not-found-in-environment", "timeout-in-config", "exit-on-the-command-line",
        "no-placeholder"])
def test_a_reset_command_that_fails_is_named_as_it_was_given(tmp_path, given, command, code, said):
    """The reset command's own failures (an exit status, a command past --boot-timeout-s, a
    program not found) name the setting as the user gave it: a config file's key, the
    variable, the flag. They said "the reset command", and "fix --reset-command" to whoever
    set it in a file or the environment. One whose {name} is no placeholder, nor close enough to
    one to be refused at the start, says it ran as typed. The command fails before any agent is asked."""
    config = tmp_path / "machines.toml"
    config.write_text(f"vm-address = \"127.0.0.1:{_free_port()}\"\nboot-timeout-s = 1\n"
                      + (f"reset-command = {json.dumps(command)}\n" if given == "file" else ""))
    result = CliRunner().invoke(main, [
        "--mode", "shell", "--data", str(_shell_tasks(tmp_path, 1)), "--agent", "oracle", "--provider-name", "remote",
        "--config", str(config), "--num-rollouts", "1", "--output-dir", str(tmp_path / "out"), "--run-id", "r",
        "--no-progress", *(["--reset-command", command] if given == "flag" else [])],
        env={"PARALLEL_ROLLOUT_RESET_COMMAND": command} if given == "environment" else {})
    assert result.exit_code == code, result.output
    stopped = " ".join(re.search(r"run stopped: (.*)", result.output).group(1).split())
    assert said.replace("CONFIG", str(config)) in stopped, stopped


@pytest.mark.parametrize("toml, flags, env, said", [
    ('verify-reset = "fast"\nreset-command = "none"\n', [], {}, '(verify-reset = "fast" in CONFIG)'),
    ("", ["--verify-reset", "fast"], {"PARALLEL_ROLLOUT_RESET_COMMAND": "none"},
     '(reset-command = "none" from the environment variable PARALLEL_ROLLOUT_RESET_COMMAND)'),
], ids=["both-in-config", "reset-command-in-environment"])
def test_a_provider_that_refuses_its_settings_says_where_they_were_given(tmp_path, toml, flags, env, said):
    """A provider refuses settings it cannot work with as it is made (--verify-reset with
    --reset-command none, which resets nothing: every check would fail): set in a --config
    file or the environment, the refusal says where, as the range checks' do (the first setting
    it names that came from there); it named the flags only, which no one typed. Exit 2, no run folder."""
    config = tmp_path / "machines.toml"
    config.write_text(f'vm-address = "127.0.0.1:{_free_port()}"\n' + toml)
    result = CliRunner().invoke(main, [
        "--mode", "shell", "--data", str(_shell_tasks(tmp_path, 1)), "--agent", "oracle", "--provider-name", "remote",
        "--config", str(config), "--num-rollouts", "1", "--output-dir", str(tmp_path / "out"), "--run-id", "r",
        "--no-progress", *flags], env=env)
    assert result.exit_code == 2, result.output
    message = " ".join(result.output.split())
    assert "--verify-reset fast checks each reset against the machine's first boot, and --reset-command none " \
        "resets nothing" in message, message
    assert message.endswith("or --verify-reset off " + said.replace("CONFIG", str(config))), message
    assert not (tmp_path / "out" / "r").exists()
