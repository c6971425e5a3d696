"""A setup step's parameter read as a flag (envs/osworld/setup.py's :data:`FLAGS`: ``shell``
of ``execute``, ``command`` and ``launch``, ``strict`` and ``by_class`` of ``activate_window``
and ``close_window``, a ``googledrive`` delete's ``trash``) given a string: any string but ""
reads as true there, as in OSWorld's own SetupController, so ``"shell": "false"`` ran the
command in a shell and ``"strict": "false"`` matched the window's name exactly, and the agent
started from a desktop the task did not mean. A string other than "true" is refused as the
folder loads (the dry run, exit 2), naming the file, the config or postconfig step (its number
and type) and the parameter; OSWorld's own tasks write ``"shell": "true"``, which loads."""

from __future__ import annotations

import inspect
from pathlib import Path

from test_osworld_folder_cli import MODEL_AGENT, run_cli, said
from test_osworld_getter_keys import assert_each_refused, changed_folder
from test_osworld_taskset import needs_set

from parallel_rollout.envs.osworld import setup as steps

#: config step 1 an execute of a shell command ("shell": true)
EXECUTE = "chrome/3299584d-8f11-4457-bf4c-ce98f7600250.json"
#: config step 1 a command, "shell": "true"
COMMAND = "multi_apps/2373b66a-092d-44cb-bfd7-82e86e7a3b4d.json"
#: config step 3 a launch, "shell": true
LAUNCH = "multi_apps/778efd0a-153f-4842-9214-f05fc176b877.json"
#: postconfig step 1 an activate_window, "strict": true
ACTIVATE = "libreoffice_calc/01b269ae-2111-4a07-81fd-3fcd711993b0.json"
#: postconfig step 1 a close_window, "strict" and "by_class" true
CLOSE = "thunderbird/08c73485-7c6d-4681-999d-919f5c32dcfa.json"
#: config step 1 a googledrive delete, "trash": false
DRIVE = "multi_apps/a0b9dc9c-fc07-4a88-8c5d-5e3ecad91bcb.json"
#: postconfig step 3 a command, "shell": "true"
POSTCOMMAND = "multi_apps/9f3bb592-209d-43bc-bb47-d77d9df56504.json"

_READS_TRUE = "a string, which reads as true (any string but \"\" does, as in OSWorld): give true or false"


def _config(index: int, **params):
    return lambda task: task["config"][index]["parameters"].update(params)


def _postconfig(index: int, **params):
    return lambda task: task["evaluator"]["postconfig"][index]["parameters"].update(params)


#: task id -> (the real task it breaks, the break, what the refusal says after "task 'ID': ")
MISTAKES = {
    "execute-shell-false": (EXECUTE, _config(0, shell="false"),
                            f"config step 1 (execute): parameter 'shell' is \"false\", {_READS_TRUE}"),
    "command-shell-no": (COMMAND, _config(0, shell="no"),
                         f"config step 1 (command): parameter 'shell' is \"no\", {_READS_TRUE}"),
    "launch-shell-False": (LAUNCH, _config(2, shell="False"),
                           f"config step 3 (launch): parameter 'shell' is \"False\", {_READS_TRUE}"),
    "activate-strict-false": (ACTIVATE, _postconfig(0, strict="false"),
                              f"evaluator postconfig step 1 (activate_window): parameter 'strict' is \"false\", "
                              f"{_READS_TRUE}"),
    "close-by-class-0": (CLOSE, _postconfig(0, by_class="0"),
                         f"evaluator postconfig step 1 (close_window): parameter 'by_class' is \"0\", {_READS_TRUE}"),
    "drive-trash-false": (DRIVE, lambda task: task["config"][0]["parameters"]["args"][0].update(trash="false"),
                          f"config step 1 (googledrive): parameter 'args'[0] (delete) 'trash' is \"false\", {_READS_TRUE}"),
}


@needs_set
def test_a_string_other_than_true_for_a_steps_flag_is_refused_at_load(tmp_path):
    assert_each_refused(tmp_path, MISTAKES, whole=True)


@needs_set
def test_the_real_tasks_steps_load_with_their_true_strings(tmp_path):
    """The real tasks broken above load as they are, as do OSWorld's "shell": "true" (a config
    and a postconfig command), and "" (false) and "True"."""
    tasks = {Path(source).stem: (source, lambda task: None) for source, _, _ in MISTAKES.values()}
    tasks["postconfig-true"] = (POSTCOMMAND, lambda task: None)
    tasks["shell-empty"] = (EXECUTE, _config(0, shell=""))
    tasks["strict-True"] = (ACTIVATE, _postconfig(0, strict="True"))
    done = run_cli("--data", str(changed_folder(tmp_path, tasks, whole=True)), "--dry-run", *MODEL_AGENT)
    assert done.returncode == 0, said(done)
    assert f"runnable {len(tasks)} of {len(tasks)} tasks" in done.stdout, said(done)


def test_every_flag_a_step_reads_is_listed():
    """Each step's parameter with a true/false default is in FLAGS (else a string there loads),
    and each listed is a parameter of its step."""
    defaults = {(kind, name) for kind, step in steps.STEPS.items()
                for name, parameter in inspect.signature(step).parameters.items()
                if isinstance(parameter.default, bool)}
    listed = {(kind, name) for kind, names in steps.FLAGS.items() for name in names}
    assert defaults == listed, defaults ^ listed
