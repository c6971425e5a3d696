"""A setup step's flag (``shell``, ``strict``, ``by_class``, a googledrive delete's
``trash``) given a value other than true or false. OSWorld's SetupController hands the value
to its guest as it is, which reads it as Python does (``subprocess.run(shell=value)``, ``if
strict:``): ``"shell": "true"`` and ``"shell": 1`` run the command in a shell, ``null`` and
``0`` do not. Its own tasks write ``"shell": "true"``: here the guest refused a string or a
number for ``shell`` (400, the step failed after the VM was leased), so a step flag reaches
the guest as the boolean it reads as. A value whose meaning is surely a mistake is refused
as the folder loads (the dry run, exit 2), naming the file, the step and the parameter: a
list or an object (``[false]`` reads as true, ``[]`` as false) and a number other than 0 or
1."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from test_guest import agent  # noqa: F401  (the fixture: a running agent, no desktop)
from test_osworld_folder_cli import MODEL_AGENT, run_cli, said
from test_osworld_getter_keys import assert_each_refused, changed_folder
from test_osworld_step_flags import ACTIVATE, CLOSE, DRIVE, EXECUTE, LAUNCH
from test_osworld_step_values import _set
from test_osworld_taskset import needs_set

from parallel_rollout.envs.osworld import setup as steps
from parallel_rollout.tasks import Task


def _env(client, tmp_path) -> SimpleNamespace:
    """What a step reads of its env: the task, the guest, the attempt's cache folder."""
    return SimpleNamespace(task=Task(id="t1", mode="osworld", payload={}), vm=client,
                           cache_dir=str(tmp_path / "attempt"), placeholders={})


@pytest.mark.parametrize("shell", ["true", 1, True])
def test_an_execute_step_read_as_osworld_reads_its_shell_flag_runs_a_shell(agent, tmp_path, shell):  # noqa: F811
    """``"shell": "true"`` (as OSWorld's tasks write it) and ``1`` run the command in a
    shell, as OSWorld's guest does: the redirection writes the file."""
    client, home = agent
    steps.run_steps(_env(client, tmp_path), [{"type": "execute", "parameters": {
        "command": f"echo ran > {home / 'out.txt'}", "shell": shell}}], "config")
    assert (home / "out.txt").read_text() == "ran\n"


@pytest.mark.parametrize("shell", [None, 0])
def test_an_execute_step_whose_shell_flag_reads_as_false_runs_no_shell(agent, tmp_path, shell):  # noqa: F811
    """``null`` and ``0`` read as false, as in OSWorld: the words are the program and its
    arguments, the ``>`` one of them."""
    client, home = agent
    steps.run_steps(_env(client, tmp_path), [{"type": "execute", "parameters": {
        "command": f"echo ran > {home / 'out.txt'}", "shell": shell, "stdout": "said.txt"}}], "config")
    assert not (home / "out.txt").exists()
    assert (tmp_path / "attempt" / "said.txt").read_text() == f"ran > {home / 'out.txt'}\n"


_LIST = "(a list or an object reads as true unless empty, as in OSWorld): give true or false"
_NUMBER = "which reads as true (any number but 0 does, as in OSWorld): give true or false"

#: task id -> (the real task it breaks, the break, what the refusal says after "task 'ID': ")
MISTAKES = {
    "execute-shell-empty-list": (
        EXECUTE, _set(0, shell=[]),
        f"config step 1 (execute): parameter 'shell' is [], a list, which reads as false {_LIST}"),
    "launch-shell-list-of-false": (
        LAUNCH, _set(2, shell=[False]),
        f"config step 3 (launch): parameter 'shell' is [false], a list, which reads as true {_LIST}"),
    "activate-strict-object": (
        ACTIVATE, _set(0, "postconfig", strict={"value": False}),
        f"evaluator postconfig step 1 (activate_window): parameter 'strict' is {{\"value\": false}}, an object, which "
        f"reads as true {_LIST}"),
    "close-by-class-2": (CLOSE, _set(0, "postconfig", by_class=2),
                         f"evaluator postconfig step 1 (close_window): parameter 'by_class' is 2, a number, {_NUMBER}"),
    "execute-shell-minus-1": (EXECUTE, _set(0, shell=-1),
                              f"config step 1 (execute): parameter 'shell' is -1, a number, {_NUMBER}"),
    "drive-trash-list": (DRIVE, lambda task: task["config"][0]["parameters"]["args"][0].update(trash=[True]),
                         f"config step 1 (googledrive): parameter 'args'[0] (delete) 'trash' is [true], a list, which reads as "
                         f"true {_LIST}"),
}


@needs_set
def test_a_steps_flag_of_a_surely_mistaken_value_is_refused_at_load(tmp_path):
    assert_each_refused(tmp_path, MISTAKES, whole=True)


@needs_set
def test_a_steps_flag_of_0_1_or_null_loads(tmp_path):
    """0, 1 and null read as OSWorld reads them (false, true, the default false): they load."""
    tasks = {"shell-1": (EXECUTE, _set(0, shell=1)), "shell-null": (LAUNCH, _set(2, shell=None)),
             "strict-0": (ACTIVATE, _set(0, "postconfig", strict=0)),
             "by-class-1": (CLOSE, _set(0, "postconfig", by_class=1.0)),
             "trash-null": (DRIVE, lambda task: task["config"][0]["parameters"]["args"][0].update(trash=None))}
    done = run_cli("--data", str(changed_folder(tmp_path, tasks, whole=True)), "--dry-run", *MODEL_AGENT)
    assert done.returncode == 0, said(done)
    assert f"runnable {len(tasks)} of {len(tasks)} tasks" in done.stdout, said(done)
