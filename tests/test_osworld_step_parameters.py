"""A config or postconfig step's parameter that the step does not read, or one it needs that
is missing (envs/osworld/setup.py's check_steps, against each step's own parameters): an
``execute``'s ``"shel": true`` was ignored and the command ran without a shell, an ``open``
without its ``path`` failed only as the step ran, after the VM was leased and the earlier
steps done; an ``execute``'s ``until`` key other than ``returncode``, ``stdout`` or
``stderr`` (a condition never met). The folder is refused as it loads (the dry run, exit 2), naming the file, the
step's number and type, the parameter and the nearest one the step reads."""

from __future__ import annotations

from test_osworld_getter_keys import assert_each_refused
from test_osworld_step_flags import ACTIVATE, DRIVE, EXECUTE, LAUNCH
from test_osworld_taskset import needs_set


def _rename(where: str, index: int, key: str, typo: str):
    def change(task: dict) -> None:
        steps = task["config"] if where == "config" else task["evaluator"]["postconfig"]
        params = steps[index]["parameters"]
        params[typo] = params.pop(key)
    return change


#: task id -> (the real task it breaks, the break, what the refusal says after "task 'ID': ")
MISTAKES = {
    "execute-shel": (EXECUTE, _rename("config", 0, "shell", "shel"),
                     "config step 1 (execute): has the parameter 'shel', which the step does not read (did you "
                     "mean 'shell'?)"),
    "launch-commands": (LAUNCH, _rename("config", 2, "command", "commands"),
                        "config step 3 (launch): has the parameter 'commands', which the step does not read (did you "
                        "mean 'command'?)"),
    "activate-window-no-name": (ACTIVATE, lambda task: task["evaluator"]["postconfig"][0]["parameters"].pop(
        "window_name"), "evaluator postconfig step 1 (activate_window): needs the parameter 'window_name'"),
    "execute-until-returncod": (EXECUTE, lambda task: task["config"][0]["parameters"].update(until={"returncod": 0}),
                                "config step 1 (execute): has the key 'returncod' in 'until', which the step does not "
                                "read (did you mean 'returncode'?)"),
    "login-settings": (DRIVE, _rename("config", 4, "settings_file", "settings"),
                       "config step 5 (login): has the parameter 'settings', which the step does not read (did you "
                       "mean 'settings_file'?)"),
}


@needs_set
def test_a_steps_parameter_it_does_not_read_or_one_missing_is_refused_at_load(tmp_path):
    assert_each_refused(tmp_path, MISTAKES, whole=True)
