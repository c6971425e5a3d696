"""A getter paired with a metric that cannot read what it gives (envs/osworld/state_kinds.py):
a rule getter's object where the metric opens a file (``compare_table``'s gold workbook,
``check_presenter_console_disable``'s settings file), a file getter's path where the metric
reads a rule (``exact_match``'s ``rules["expected"]``, ``is_in_vm_clickboard``'s first state)
or compares a value (``exact_match``'s command output, ``literal_match``'s page text). Each
raised at every grading, or scored the path's text, the same whatever the agent did, with the
task's mistake taken for the agent's; the folder is refused as it loads (the dry run, exit 2),
naming the file, the metric (by its index in a list), the getter and what to give instead.
tests/test_osworld_state_roles.py calls each metric with the kinds it cannot read."""

from __future__ import annotations

import copy
from pathlib import Path

from test_osworld_folder_cli import MODEL_AGENT, run_cli, said
from test_osworld_getter_keys import assert_each_refused, changed_folder
from test_osworld_taskset import needs_set

#: OSWorld's task of one compare_table of a vm_file against a cloud_file
TABLE = "libreoffice_calc/0cecd4f3-74de-457b-ba94-29ad6b5dafb6.json"
#: OSWorld's task of three compare_tables, each its own gold file and options, under "or"
TABLES = "multi_apps/3a93cae4-ad3e-403e-8c12-65303b271818.json"
#: OSWorld's task of one metric (exact_match on a command's output against a rule)
SINGLE = "os/28cc3b7e-b194-4bc9-8353-d04c0f4d56d2.json"
#: check_include_exclude on a command (a rule), then compare_csv against a cloud_file
MIXED = "multi_apps/3680a5ee-6870-426a-a997-eba929a0d25c.json"
#: compare_pdfs of a vm_file against a cloud_file
PDFS = "chrome/e1e75309-3ddb-4d09-92ec-de869c928143.json"
#: check_presenter_console_disable of one vm_file, and no expected state
PRESENTER = "libreoffice_impress/0f84bef9-9790-432e-92b7-eece357603fb.json"
#: literal_match of a cell's content against a page's text
LITERAL = "multi_apps/5990457f-2adb-467b-a4af-5c857c92d762.json"
#: is_in_vm_clickboard: its result is the rule, its expected state the clipboard (a command, "shell": "true")
CLIPBOARD = "multi_apps/716a6079-22da-47f1-ba73-c9d58f986a38.json"
#: check_json of Thunderbird's settings file against a rule
JSON = "thunderbird/3f49d2cc-f400-4e7d-90cc-9b18e401cc31.json"

_GOLD = {"type": "cloud_file", "path": "https://example.org/gold.txt", "dest": "gold.txt"}
_RULE = {"type": "rule", "rules": {"expected": "Total"}}
_TO_FILE = "give a getter of the file (vm_file, cloud_file)"
_PATH = "it gives a file's local path, and the metric"
_TO_RULE = f"{_PATH} reads its expected state as a rule: give a 'rule' getter"
_TO_VALUE = "never opening it: give a getter of the value (vm_command_line, content_from_vm_file)"
_OUT = {"type": "vm_file", "path": "/home/user/out.txt", "dest": "out.txt"}


def _set(evaluator: dict, key: str, value) -> None:
    evaluator[key] = copy.deepcopy(value)


#: task id -> (the real task it breaks, the break, what the refusal says after "task 'ID': ")
MISTAKES = {
    "table-rule": (TABLE, lambda ev: _set(ev, "expected", _RULE),
                   "evaluator expected getter 'rule' of metric 'compare_table': it gives the task's 'rules', an "
                   f"object, and the metric opens its expected state as a file: {_TO_FILE}"),
    "table-result-rule": (TABLE, lambda ev: _set(ev, "result", {"type": "rule", "rules": [{"sheet": 1}]}),
                          "evaluator result getter 'rule' of metric 'compare_table': it gives the task's 'rules', a "
                          f"list, and the metric opens its result state as a file: {_TO_FILE}"),
    "second-table-rule": (TABLES, lambda ev: ev["expected"].__setitem__(1, copy.deepcopy(_RULE)),
                          "evaluator.expected[1] getter 'rule' of evaluator.func[1] (compare_table): it gives the "
                          f"task's 'rules', an object, and the metric opens its expected state as a file: {_TO_FILE}"),
    "exact-file": (SINGLE, lambda ev: _set(ev, "expected", _GOLD),
                   f"evaluator expected getter 'cloud_file' of metric 'exact_match': {_TO_RULE}"),
    "include-file": (MIXED, lambda ev: ev["expected"].__setitem__(0, copy.deepcopy(_GOLD)),
                     f"evaluator.expected[0] getter 'cloud_file' of evaluator.func[0] (check_include_exclude): {_TO_RULE}"),
    # a metric's result state, and the metrics of one state, or of a value
    "presenter-rule": (PRESENTER, lambda ev: _set(ev, "result", {"type": "rule", "rules": {"path": "settings.xcu"}}),
                       "evaluator result getter 'rule' of metric 'check_presenter_console_disable': it gives the "
                       f"task's 'rules', an object, and the metric opens its result state as a file: {_TO_FILE}"),
    "json-result-rule": (JSON, lambda ev: _set(ev, "result", {"type": "rule", "rules": [{"mode": "smart"}]}),
                         "evaluator result getter 'rule' of metric 'check_json': it gives the task's 'rules', a "
                         f"list, and the metric opens its result state as a file: {_TO_FILE}"),
    "exact-result-file": (SINGLE, lambda ev: _set(ev, "result", _OUT),
                          f"evaluator result getter 'vm_file' of metric 'exact_match': {_PATH} compares its result "
                          f"state as a value, {_TO_VALUE}"),
    "literal-expected-file": (LITERAL, lambda ev: _set(ev, "expected", _GOLD),
                              f"evaluator expected getter 'cloud_file' of metric 'literal_match': {_PATH} compares "
                              f"its expected state as a value, {_TO_VALUE}"),
    "clipboard-result-file": (CLIPBOARD, lambda ev: _set(ev, "result", _GOLD),
                              f"evaluator result getter 'cloud_file' of metric 'is_in_vm_clickboard': {_PATH} reads "
                              "its result state as a rule: give a 'rule' getter"),
    # a rule's paths (on the host) where the metric opens one file: open() of a list raised
    "table-rule-paths": (TABLE, lambda ev: _set(ev, "expected", {"type": "rule", "rules": ["/srv/a.xlsx", "/srv/b.xlsx"]}),
                         "evaluator expected getter 'rule' of metric 'compare_table': it gives the task's 'rules', a "
                         "list of paths, and the metric opens its expected state as one file: give the one path, or "
                         "a getter of the file (vm_file, cloud_file)"),
    # a rule read as the result: its keys are checked as an expected rule's are
    "clipboard-rule-key": (CLIPBOARD, lambda ev: _set(ev, "result", {"type": "rule", "rules": {"expect": "a.docx"}}),
                           "evaluator result getter 'rule' of metric 'is_in_vm_clickboard': its 'rules' needs the key "
                           "'expected'"),
}


@needs_set
def test_a_getter_its_metric_cannot_read_is_refused_at_load(tmp_path):
    assert_each_refused(tmp_path, MISTAKES)


@needs_set
def test_a_metric_that_takes_either_and_a_rules_path_load(tmp_path):
    """contains_page_break reads its rule's page count in a ``try``: a file there is ignored,
    and loads; a rule's string may be a path on the host, and loads where a file is opened, a
    list of them where the metric opens a list (compare_pdfs)."""
    def pdf_lists(ev):  # a list of paths against the agent's list of as many (tests/test_osworld_file_lists.py)
        mine = ev["result"]["path"]
        ev["result"].update(multi=True, path=[mine, mine + ".2"], dest=["1.pdf", "2.pdf"], gives=[0, 1])
        _set(ev, "expected", {"type": "rule", "rules": ["/srv/gold.pdf", "/srv/gold-2.pdf"]})

    def page_break(ev):
        ev.update(func="contains_page_break", expected=copy.deepcopy(_GOLD))
        ev.pop("options", None)  # compare_table's
    tasks = {"page-break-file": (TABLE, page_break),
             "table-rule-path": (TABLE, lambda ev: _set(ev, "expected", {"type": "rule", "rules": "/srv/gold.xlsx"})),
             "pdfs-rule-paths": (PDFS, pdf_lists)}
    tasks.update({Path(source).stem: (source, lambda ev: None) for source, _, _ in MISTAKES.values()})
    done = run_cli("--data", str(changed_folder(tmp_path, tasks)), "--dry-run", *MODEL_AGENT)
    assert done.returncode == 0, said(done)
    assert f"runnable {len(tasks)} of {len(tasks)} tasks" in done.stdout, said(done)
