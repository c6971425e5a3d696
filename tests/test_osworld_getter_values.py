"""A getter's key given a value of a kind the getter cannot use (envs/osworld/getter_keys.py's
:data:`KINDS` and :func:`files_problem`): a ``vm_file``'s ``path`` as a list without
``"multi": true``, a ``cloud_file``'s ``dest`` as a number, a ``vm_command_line``'s command
as a number or an empty string, a ``vlc_config``'s ``dest`` as a list, a
``googledrive_file``'s ``path`` as a string (a folder a letter) or its ``dest`` one short of
its ``path_list`` … raised as grading fetched the state, or fetched what the task did not
mean, the metric scoring 0 whatever the agent did. The folder is refused as it loads (the
dry run, exit 2), naming the file, the getter, its metric, the key, its value and what to
give."""

from __future__ import annotations

from pathlib import Path

from test_osworld_folder_cli import MODEL_AGENT, run_cli, said
from test_osworld_getter_keys import MULTI, SINGLE, TABLE, assert_each_refused, changed_folder
from test_osworld_taskset import needs_set

from parallel_rollout.envs.osworld import getter_keys

#: check_qt_bgcone of a vlc_config, "dest": "vlcrc"
VLC = "vlc/215dfd39-f493-4bc3-a027-8a97d72c61bf.json"
#: compare_pdfs of a googledrive_file by its path, one dest
DRIVE_PATH = "multi_apps/22a4636f-8179-4357-8e87-d1743ece1f81.json"
#: check_thunderbird_folder of a googledrive_file's path_list of 2, dest a list of 2
DRIVE_LIST = "multi_apps/a0b9dc9c-fc07-4a88-8c5d-5e3ecad91bcb.json"

_ONE = "(without 'multi': true the getter fetches one file)"
_COMMAND = "give a command: a string, or a list of strings (the program and its arguments)"


def _in(role: str, **keys):
    """The change that sets ``keys`` in the evaluator's ``role`` getter."""
    return lambda evaluator: evaluator[role].update(keys)


#: task id -> (the real task it breaks, the break, what the refusal says after "task 'ID': ")
MISTAKES = {
    "vm-file-path-list": (
        TABLE, _in("result", path=["/home/user/a.xlsx", "/home/user/b.xlsx"]),
        "evaluator result getter 'vm_file' of metric 'compare_table' has 'path' [\"/home/user/a.xlsx\", "
        f"\"/home/user/b.xlsx\"], a list: give a string {_ONE}"),
    "cloud-file-dest-number": (
        TABLE, _in("expected", dest=1),
        "evaluator expected getter 'cloud_file' of metric 'compare_table' has 'dest' 1, a number: give a string "
        f"{_ONE}"),
    "multi-path-of-a-number": (
        MULTI, lambda evaluator: evaluator["expected"][1]["path"].__setitem__(2, 3),
        "evaluator.expected[1] getter 'cloud_file' of evaluator.func[1] (compare_csv) has 'multi', and its 'path' and "
        "'dest' must be lists of strings"),
    "command-number": (SINGLE, _in("result", command=5),
                       f"evaluator result getter 'vm_command_line' of metric 'exact_match' has 'command' 5, a number: "
                       f"{_COMMAND}"),
    "command-empty": (SINGLE, _in("result", command=""),
                      f"evaluator result getter 'vm_command_line' of metric 'exact_match' has 'command' \"\", a string: "
                      f"{_COMMAND}"),
    "vlc-config-dest-list": (VLC, _in("result", dest=["vlcrc"]),
                             "evaluator result getter 'vlc_config' of metric 'check_qt_bgcone' has 'dest' [\"vlcrc\"], a "
                             "list: give a string"),
    "drive-path-string": (DRIVE_PATH, _in("result", path="meetings/Meeting-Agenda.pdf"),
                          "evaluator result getter 'googledrive_file' of metric 'compare_pdfs' has 'path' "
                          "\"meetings/Meeting-Agenda.pdf\", a string: give a list of strings"),
    "drive-dest-list": (DRIVE_PATH, _in("result", dest=["Meeting-Agenda.pdf"]),
                        "evaluator result getter 'googledrive_file' of metric 'compare_pdfs' has 'dest' "
                        "[\"Meeting-Agenda.pdf\"], a list: give a string (the one file's name)"),
    "drive-dest-one-short": (DRIVE_LIST, lambda evaluator: evaluator["result"]["dest"].pop(),
                             "evaluator result getter 'googledrive_file' of metric 'check_thunderbird_folder' has "
                             "'dest' [\"pred1.eml\"], and it must be a list of 2 names, one per file of its list"),
    "drive-path-list-flat": (DRIVE_LIST, _in("result", path_list=["emails", "receipt.eml"]),
                             "evaluator result getter 'googledrive_file' of metric 'check_thunderbird_folder' has "
                             "'path_list' [\"emails\", \"receipt.eml\"], a list: give a list of lists of strings, one per "
                             "file"),
}


@needs_set
def test_a_getters_key_of_a_kind_it_cannot_use_is_refused_at_load(tmp_path):
    assert_each_refused(tmp_path, MISTAKES)


@needs_set
def test_getter_values_of_the_kinds_they_read_load(tmp_path):
    """The real tasks broken above load as they are; so do a command as a list and a vm_file
    with no dest (its path's name)."""
    tasks = {Path(source).stem: (source, lambda evaluator: None) for source, _, _ in MISTAKES.values()}
    tasks["command-list"] = (SINGLE, _in("result", command=["pactl", "list", "sinks"]))
    tasks["vm-file-no-dest"] = (TABLE, lambda evaluator: evaluator["result"].pop("dest"))
    done = run_cli("--data", str(changed_folder(tmp_path, tasks)), "--dry-run", *MODEL_AGENT)
    assert done.returncode == 0, said(done)
    assert f"runnable {len(tasks)} of {len(tasks)} tasks" in done.stdout, said(done)


def test_each_kind_listed_is_a_key_its_getter_reads():
    """A kind listed for a key its getter does not read would refuse a value nothing reads."""
    assert {(kind, key) for kind, key in getter_keys.KINDS if key not in getter_keys.reads(kind)} == set()
