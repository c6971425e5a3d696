"""The keys each getter reads from its config (envs/osworld/getter_keys.py's :data:`FIELDS`
and :data:`OPTIONAL`), against each getter's code and OSWorld's real tasks, and a getter key
no getter reads refused at load.

A getter is handed its whole config and reads the keys it knows with a default, so a key it
does not read was silently ignored: ``"mutli": true`` fetched one file of a ``vm_file``'s list,
``"give"`` handed the metric the first file where ``gives`` picked others, and the agent was
scored on the wrong state with nothing saying why. The folder is refused as it loads (the dry
run, exit 2), naming the file, the getter (by its index in a list) and the key it likely means.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path

from test_osworld_folder_cli import MODEL_AGENT, run_cli, said
from test_osworld_options import _keys_read
from test_osworld_taskset import EXAMPLES, needs_set, osworld_folder

from parallel_rollout.envs.osworld.evaluators import normalized
from parallel_rollout.envs.osworld.getters import GETTERS
from parallel_rollout.exit_codes import EXIT_USAGE


def test_the_keys_listed_are_the_ones_each_getters_code_reads():
    """FIELDS and OPTIONAL, which the load checks a getter's config against, list every key a
    getter's code (or a helper of the package it hands its config to) reads, and no other: a
    key they lacked would refuse a right task, one they had beyond the code would let that
    key's typo load."""
    from parallel_rollout.envs.osworld.getter_keys import FIELDS, OPTIONAL, reads

    assert set(FIELDS) | set(OPTIONAL) <= set(GETTERS), (set(FIELDS) | set(OPTIONAL)) - set(GETTERS)
    found = {}
    for kind, getter in GETTERS.items():
        keys: set[str] = set()
        _keys_read(getter, keys, set(), "config")
        if keys:
            found[kind] = keys
    # the walk follows the helpers: vm_file's 'multi' and 'gives' are read by _pairs and _given
    assert {"multi", "gives", "time_suffix"} <= found["vm_file"] and "goto_prefix" in found["url_dashPart"], found
    assert found == {kind: set(reads(kind)) for kind in GETTERS if reads(kind)}
    overlap = {kind: set(FIELDS[kind]) & set(OPTIONAL[kind]) for kind in set(FIELDS) & set(OPTIONAL)}
    assert not any(overlap.values()), overlap


@needs_set
def test_every_key_a_real_tasks_getter_gives_is_read():
    """The 369 real tasks' getters give only keys their getter reads (none is refused)."""
    from parallel_rollout.envs.osworld.getter_keys import key_problem

    given = 0
    for path in sorted((EXAMPLES / "examples").glob("*/*.json")):
        evaluator = json.loads(path.read_text()).get("evaluator") or {}
        if "func" not in evaluator:
            continue
        for _func, result, expected, _options in normalized(evaluator):
            for getter in (result, expected):
                if isinstance(getter, dict) and getter.get("type") in GETTERS:
                    given += len(getter) - 1
                    assert key_problem(getter) is None, (path.name, getter["type"], key_problem(getter))
    assert given > 700  # the tasks give about 1,200 keys besides 'type': a walk that found none proves nothing


#: OSWorld's task of one compare_table of a vm_file against a cloud_file
TABLE = "libreoffice_calc/0cecd4f3-74de-457b-ba94-29ad6b5dafb6.json"
#: OSWorld's task of three compare_tables, each its own gold file and options, under "or"
TABLES = "multi_apps/3a93cae4-ad3e-403e-8c12-65303b271818.json"
#: OSWorld's task of one metric (exact_match on a command's output against a rule)
SINGLE = "os/28cc3b7e-b194-4bc9-8353-d04c0f4d56d2.json"
#: check_include_exclude on a command, then compare_csv against one of a cloud_file's 'multi' files
MULTI = "multi_apps/3680a5ee-6870-426a-a997-eba929a0d25c.json"
#: check_direct_json_object of the page against recreation.gov's, read by 'class'
RECREATION = "chrome/b4f95342-463e-4179-8c3f-193cd7241fb2.json"


def _rename(getter: dict, key: str, typo: str) -> None:
    getter[typo] = getter.pop(key)


_COMMENT = "(a comment's key starts with '_')"
#: task id -> (the real task it breaks, the break, what the refusal says after "task 'ID': ")
MISTAKES = {
    "vm-file-mutli": (TABLE, lambda ev: ev["result"].update(mutli=True),
                      "evaluator result getter 'vm_file' of metric 'compare_table' has the key 'mutli', which the "
                      f"getter does not read: did you mean 'multi'? {_COMMENT}"),
    "cloud-file-give": (MULTI, lambda ev: _rename(ev["expected"][1], "gives", "give"),
                        "evaluator.expected[1] getter 'cloud_file' of evaluator.func[1] (compare_csv) has the key "
                        f"'give', which the getter does not read: did you mean 'gives'? {_COMMENT}"),
    "cloud-file-mulit": (MULTI, lambda ev: _rename(ev["expected"][1], "multi", "mulit"),
                         "evaluator.expected[1] getter 'cloud_file' of evaluator.func[1] (compare_csv) has the key "
                         f"'mulit', which the getter does not read: did you mean 'multi'? {_COMMENT}"),
    "third-result-dset": (TABLES, lambda ev: _rename(ev["result"][2], "dest", "dset"),
                          "evaluator.result[2] getter 'vm_file' of evaluator.func[2] (compare_table) has the key "
                          f"'dset', which the getter does not read: did you mean 'dest'? {_COMMENT}"),
    "rule-and-rules": (SINGLE, lambda ev: ev["expected"].update(rule={"expected": "x"}),
                       "evaluator expected getter 'rule' of metric 'exact_match' has the key 'rule', which the "
                       f"getter does not read: did you mean 'rules'? {_COMMENT}"),
    "command-shel": (SINGLE, lambda ev: ev["result"].update(shel=True),
                     "evaluator result getter 'vm_command_line' of metric 'exact_match' has the key 'shel', which "
                     f"the getter does not read: did you mean 'shell'? {_COMMENT}"),
    "prefix-typo": (RECREATION, lambda ev: _rename(ev["result"], "goto_prefix", "goto_prefx"),
                    "evaluator result getter 'active_tab_html_parse' of metric 'check_direct_json_object' has the "
                    f"key 'goto_prefx', which the getter does not read: did you mean 'goto_prefix'? {_COMMENT}"),
    # what 'multi' and 'gives' pick: a 'gives' past the files handed the metric none of them
    "gives-without-multi": (TABLE, lambda ev: ev["result"].update(gives=[1]),
                            "evaluator result getter 'vm_file' of metric 'compare_table' has 'gives', which picks "
                            "among the files of a getter with 'multi': true, and it fetches one file"),
    "time-suffix": (TABLE, lambda ev: ev["result"].update(time_suffix=True),
                    "evaluator result getter 'vm_file' of metric 'compare_table' has 'time_suffix', which this mode "
                    "does not implement"),
    "gives-past-files": (MULTI, lambda ev: ev["expected"][1].update(gives=[0, 3]),
                         "evaluator.expected[1] getter 'cloud_file' of evaluator.func[1] (compare_csv) has 'gives' "
                         "[0, 3], and it must list indexes of its 3 files (0 to 2)"),
    "multi-short-dest": (MULTI, lambda ev: ev["expected"][1]["dest"].pop(),
                         "evaluator.expected[1] getter 'cloud_file' of evaluator.func[1] (compare_csv) has 'multi', "
                         "and its 'path' and 'dest' must be lists of the same length"),
    "selector-id": (RECREATION, lambda ev: ev["expected"].update(selector="id"),
                    "evaluator expected getter 'gotoRecreationPage_and_get_html_content' of metric "
                    "'check_direct_json_object' has 'selector' 'id', which the getter does not read (it reads 'class')"),
}


def changed_folder(root: Path, tasks: dict[str, tuple[str, object]], whole: bool = False) -> Path:
    """A folder in OSWorld's layout holding, per id, a copy of a real task whose evaluator (the
    whole task with ``whole``) its change changed."""
    made = {}
    for task_id, (source, change) in tasks.items():
        task = copy.deepcopy(json.loads((EXAMPLES / "examples" / source).read_text()))
        change(task if whole else task["evaluator"])
        made[task_id] = {**task, "id": task_id, "domain": source.split("/")[0]}
    return osworld_folder(root, made) / "evaluation_examples"


def assert_each_refused(root: Path, mistakes: dict[str, tuple[str, object, str]], whole: bool = False) -> None:
    """A dry run of a folder of the ``mistakes`` (task id -> (real task, change, reason)) exits
    2, naming each task's file and its reason."""
    folder = changed_folder(root, {task_id: (source, change) for task_id, (source, change, _) in mistakes.items()},
                            whole)
    done = run_cli("--data", str(folder), "--dry-run", *MODEL_AGENT)
    text = said(done)
    assert done.returncode == EXIT_USAGE, text
    assert f"{len(mistakes)} bad task records" in text, text
    for task_id, (source, _, reason) in mistakes.items():
        path = folder / "examples" / source.split("/")[0] / f"{task_id}.json"
        assert f"{path}:1: task {task_id!r}: {reason}" in text, (task_id, text)


@needs_set
def test_a_getter_key_the_getter_does_not_read_is_refused_at_load_naming_the_nearest(tmp_path):
    assert_each_refused(tmp_path, MISTAKES)


@needs_set
def test_the_real_tasks_broken_here_load_as_they_are_and_a_comment_key_loads(tmp_path):
    """The real tasks the mistakes are made in load unchanged (so each refusal above is the
    mistake's), and a getter's key starting with '_' is a comment."""
    def comment(ev):
        ev["result"]["_note"] = "the sheet the agent saves"
    tasks = {Path(source).stem: (source, lambda ev: None) for source, _, _ in MISTAKES.values()}
    tasks["commented"] = (TABLE, comment)
    folder = changed_folder(tmp_path, tasks)
    done = run_cli("--data", str(folder), "--dry-run", *MODEL_AGENT)
    assert done.returncode == 0, said(done)
    assert f"runnable {len(tasks)} of {len(tasks)} tasks" in done.stdout, said(done)
