"""A config or postconfig step's parameter given a value of a kind its code cannot use
(envs/osworld/setup.py's VALUES, the kinds of step_values.py): ``"seconds": "5"`` (OSWorld's
time.sleep raises on it), a number as a ``download``'s ``url``, a string as a tab step's list
of URLs, an ``until``'s ``"returncode": "0"`` (never the exit status: the command ran again
until its timeout) … failed only as the step ran, the attempt setup_failed after the VM was
leased. The folder is refused as it loads (the dry run, exit 2), naming the file, the step's
number and type, the parameter, what it is and what it must be."""

from __future__ import annotations

import inspect
from pathlib import Path

import pytest

from test_osworld_folder_cli import MODEL_AGENT, run_cli, said
from test_osworld_getter_keys import assert_each_refused, changed_folder
from test_osworld_step_flags import ACTIVATE, CLOSE, DRIVE, EXECUTE, LAUNCH
from test_osworld_taskset import needs_set

from parallel_rollout.envs.osworld import setup as steps

#: config steps 3 chrome_open_tabs and 4 chrome_close_tabs
TABS = "chrome/06fe7178-4491-4589-810f-2e2bc9502122.json"
#: config step 1 an update_browse_history
HISTORY = "chrome/44ee5668-ecd5-4366-a6ce-c1c9b8d4e938.json"

_SECONDS = "give a number of seconds, 0 or more"
_COMMAND = "give a command: a string, or a list of strings (the program and its arguments)"


def _set(index: int, where: str = "config", **params):
    """The change that sets ``params`` in step ``index`` (from 0) of ``where``."""
    def change(task: dict) -> None:
        listed = task["config"] if where == "config" else task["evaluator"]["postconfig"]
        listed[index]["parameters"].update(params)
    return change


def _in_item(index: int, key: str, **item):
    """The change that sets ``item``'s keys in the first object of config step ``index``'s ``key``."""
    return lambda task: task["config"][index]["parameters"][key][0].update(item)


def _upload(files):
    """The change that makes config step 1 an upload_file of ``files`` (no real task has one)."""
    return lambda task: task["config"].__setitem__(0, {"type": "upload_file", "parameters": {"files": files}})


def _pop_in_item(index: int, key: str, name: str):
    return lambda task: task["config"][index]["parameters"][key][0].pop(name)


#: task id -> (the real task it breaks, the break, what the refusal says after "task 'ID': ")
MISTAKES = {
    "sleep-string": (ACTIVATE, _set(1, "postconfig", seconds="5"),
                     f"evaluator postconfig step 2 (sleep): parameter 'seconds' is \"5\", a string: {_SECONDS}"),
    "sleep-negative": (ACTIVATE, _set(3, "postconfig", seconds=-1),
                       f"evaluator postconfig step 4 (sleep): parameter 'seconds' is -1, a number: {_SECONDS}"),
    "sleep-past-a-wait": (ACTIVATE, _set(3, "postconfig", seconds=1e300),
                          f"evaluator postconfig step 4 (sleep): parameter 'seconds' is 1e+300, a number: {_SECONDS}"),
    "execute-timeout-string": (EXECUTE, _set(0, timeout="30"),
                               f"config step 1 (execute): parameter 'timeout' is \"30\", a string: {_SECONDS}"),
    "execute-command-number": (EXECUTE, _set(1, command=5),
                               f"config step 2 (execute): parameter 'command' is 5, a number: {_COMMAND}"),
    "execute-command-list-of-number": (
        ACTIVATE, _set(2, "postconfig", command=["sleep", 3]),
        f"evaluator postconfig step 3 (execute): parameter 'command' is [\"sleep\", 3], a list: {_COMMAND}"),
    "launch-command-empty": (LAUNCH, _set(2, command=[]),
                             f"config step 3 (launch): parameter 'command' is [], a list: {_COMMAND}"),
    "execute-stdout-true": (EXECUTE, _set(0, stdout=True),
                            "config step 1 (execute): parameter 'stdout' is true, a boolean: give a string"),
    "execute-until-string": (EXECUTE, _set(0, until="done"),
                             "config step 1 (execute): parameter 'until' is \"done\", a string: give an object with "
                             "'returncode', 'stdout' or 'stderr'"),
    "execute-until-returncode-string": (
        EXECUTE, _set(0, until={"returncode": "0"}),
        "config step 1 (execute): parameter 'until' 'returncode' is \"0\", a string: give a whole number"),
    "open-path-list": (ACTIVATE, _set(1, path=["/home/user/a.xlsx"]),
                       "config step 2 (open): parameter 'path' is [\"/home/user/a.xlsx\"], a list: give a string"),
    "open-timeout-null": (ACTIVATE, _set(1, timeout=None),
                          f"config step 2 (open): parameter 'timeout' is null: {_SECONDS}"),
    "download-files-object": (ACTIVATE, _set(0, files={"url": "a.xlsx", "path": "/home/user/a.xlsx"}),
                              "config step 1 (download): parameter 'files' is {\"url\": \"a.xlsx\", \"path\": "
                              "\"/home/user/a.xlsx\"}, an object: give a list of objects, each with 'url' and 'path'"),
    "download-url-number": (ACTIVATE, _in_item(0, "files", url=3),
                            "config step 1 (download): parameter 'files'[0] 'url' is 3, a number: give a string"),
    "download-no-path": (ACTIVATE, _pop_in_item(0, "files", "path"),
                         "config step 1 (download): parameter 'files'[0] needs the key 'path'"),
    "upload-local-path-list": (ACTIVATE, _upload([{"local_path": ["a.xlsx"], "path": "/home/user/a.xlsx"}]),
                               "config step 1 (upload_file): parameter 'files'[0] 'local_path' is [\"a.xlsx\"], a list: "
                               "give a string"),
    "upload-file-string": (ACTIVATE, _upload(["a.xlsx"]),
                           "config step 1 (upload_file): parameter 'files'[0] is \"a.xlsx\", a string: give an object "
                           "with 'local_path' and 'path'"),
    "open-tabs-string": (TABS, _set(2, urls_to_open="https://www.airbnb.com"),
                         "config step 3 (chrome_open_tabs): parameter 'urls_to_open' is \"https://www.airbnb.com\", a "
                         "string: give a list of strings"),
    "close-tabs-null": (TABS, _set(3, urls_to_close=[None]),
                        "config step 4 (chrome_close_tabs): parameter 'urls_to_close' is [null], a list: give a list "
                        "of strings"),
    "history-time-string": (HISTORY, _in_item(0, "history", visit_time_from_now_in_seconds="3600"),
                            "config step 1 (update_browse_history): parameter 'history'[0] "
                            "'visit_time_from_now_in_seconds' is \"3600\", a string: give a number"),
    "activate-name-list": (ACTIVATE, _set(0, "postconfig", window_name=["a.xlsx"]),
                           "evaluator postconfig step 1 (activate_window): parameter 'window_name' is [\"a.xlsx\"], a "
                           "list: give a string"),
    "close-name-number": (CLOSE, _set(0, "postconfig", window_name=1),
                          "evaluator postconfig step 1 (close_window): parameter 'window_name' is 1, a number: give a "
                          "string"),
    "drive-operation-remove": (DRIVE, _set(0, operation=["remove"]),
                               "config step 1 (googledrive): parameter 'operation' is [\"remove\"], a list: give a list "
                               "of 'delete', 'mkdirs' or 'upload'"),
    "drive-query-number": (DRIVE, _in_item(0, "args", query=1),
                           "config step 1 (googledrive): parameter 'args'[0] (delete) 'query' is 1, a number: give a string"),
    "login-platform-gmail": (DRIVE, _set(4, platform="gmail"),
                             "config step 5 (login): parameter 'platform' is \"gmail\", a string: give 'googledrive'"),
}


#: the dry run lists 20 bad tasks (then "… and N more"): the mistakes are run in parts of 20
_PART = 20


@needs_set
@pytest.mark.parametrize("start", range(0, len(MISTAKES), _PART))
def test_a_steps_parameter_of_a_kind_its_code_cannot_use_is_refused_at_load(tmp_path, start):
    assert_each_refused(tmp_path, dict(list(MISTAKES.items())[start:start + _PART]), whole=True)


@needs_set
def test_values_of_the_kinds_the_steps_read_load(tmp_path):
    """What the code reads loads: a whole or a fractional number of seconds, 0 too, a command
    as a string, an until of a text or no until (null), a Drive path as one name."""
    tasks = {
        "whole-timeout": (EXECUTE, _set(0, timeout=30, until={"returncode": 0, "stdout": "ok"})),
        "no-until": (EXECUTE, _set(1, until=None, timeout=0.5)),
        "zero-sleep": (ACTIVATE, _set(1, "postconfig", seconds=0)),
        "open-timeout": (ACTIVATE, _set(1, timeout=120)),
        "string-command": (LAUNCH, _set(2, command="google-chrome --remote-debugging-port=1337")),
        "drive-mkdirs": (DRIVE, _set(0, operation=["mkdirs"], args=[{"path": "Reports"}])),
        **{Path(source).stem: (source, lambda task: None) for source in (TABS, HISTORY, CLOSE)},
    }
    done = run_cli("--data", str(changed_folder(tmp_path, tasks, whole=True)), "--dry-run", *MODEL_AGENT)
    assert done.returncode == 0, said(done)
    assert f"runnable {len(tasks)} of {len(tasks)} tasks" in done.stdout, said(done)


def test_every_parameter_of_every_step_has_its_kind():
    """VALUES names a kind for each parameter each step's function takes, and no other."""
    for kind, step in steps.STEPS.items():
        taken = set(list(inspect.signature(step).parameters)[1:])  # after the env
        assert set(steps.VALUES[kind]) == taken, (kind, set(steps.VALUES[kind]) ^ taken)
    assert set(steps.VALUES) == set(steps.STEPS)
