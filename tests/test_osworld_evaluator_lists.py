"""An OSWorld evaluator whose ``func`` lists several metrics, with ``result``, ``expected`` and
``options`` lists in its order and a ``conj``, as a task author gets it wrong: each mistake is
refused as the folder loads (the dry run, exit 2), naming the file and the key, and a mistake in
one metric of the list names that metric by its index and name as the file spells them
(``evaluator.func[2] (compare_table)``, ``evaluator.options[2]``): the error said only
``metric 'compare_table'``, which three of 3a93cae4's metrics are."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
from test_osworld_folder_cli import MODEL_AGENT, run_cli, said
from test_osworld_taskset import EXAMPLES, needs_set, osworld_folder

from parallel_rollout.exit_codes import EXIT_USAGE

pytestmark = needs_set

#: OSWorld's task of three compare_tables, each its own gold file and options, under "or"
TABLES = "multi_apps/3a93cae4-ad3e-403e-8c12-65303b271818.json"
#: OSWorld's task of one metric (exact_match on a command's output against a rule)
SINGLE = "os/28cc3b7e-b194-4bc9-8353-d04c0f4d56d2.json"
#: OSWorld's task of one compare_table whose first rule compares the sheets' names
SHEET_NAMES = "libreoffice_calc/0cecd4f3-74de-457b-ba94-29ad6b5dafb6.json"


def _set(evaluator: dict, key: str, value) -> None:
    evaluator[key] = value


#: task id -> (the real task it breaks, the break, what the refusal says after "task 'ID': ")
MISTAKES = {
    "third-table-type": (TABLES, lambda ev: ev["options"][2]["rules"][0].update(type="sheet_dat"),
                         "evaluator.func[2] (compare_table): evaluator.options[2] 'rules'[0] has the type 'sheet_dat', "
                         "which the metric does not read"),
    "second-table-typo": (TABLES, lambda ev: ev["options"][1]["rules"][0].update(precison=2),
                          "evaluator.func[1] (compare_table): evaluator.options[1] 'rules'[0] of type 'sheet_data' has "
                          "the key 'precison', which the metric does not read (did you mean 'precision'?)"),
    "first-table-option": (TABLES, lambda ev: ev["options"][0].update(rulez=[]),
                           "evaluator.func[0] (compare_table): it does not read the option 'rulez' "
                           "(did you mean 'rules'?)"),
    "second-table-no-rules": (TABLES, lambda ev: ev["options"][1].pop("rules"),
                              "evaluator.func[1] (compare_table): evaluator.options[1] 'rules' is missing"),
    "third-getter-field": (TABLES, lambda ev: ev["result"][2].pop("path"),
                           "evaluator.result[2] getter 'vm_file' of evaluator.func[2] (compare_table) "
                           "needs the field 'path'"),
    "second-result-null": (TABLES, lambda ev: ev["result"].__setitem__(1, None),
                           "evaluator.func[1] (compare_table) needs a 'result' getter in evaluator.result[1]"),
    "second-options-list": (TABLES, lambda ev: ev["options"].__setitem__(1, [{"rules": []}]),
                            "evaluator.options[1] must be an object (the options of evaluator.func[1] "
                            "(compare_table)), not a list"),
    "misspelled-metric": (TABLES, lambda ev: ev["func"].__setitem__(1, "compare_tabel"),
                          "unknown metric 'compare_tabel' in evaluator.func[1] (did you mean 'compare_table'?)"),
    "misspelled-getter": (TABLES, lambda ev: ev["expected"][2].update(type="cloud_flie"),
                          "unknown getter 'cloud_flie' in evaluator.expected[2] (did you mean 'cloud_file'?)"),
    "conj-xor": (TABLES, lambda ev: _set(ev, "conj", "xor"), "evaluator 'conj' must be 'and' or 'or', got 'xor'"),
    "fewer-results": (TABLES, lambda ev: ev["result"].pop(),
                      "evaluator 'result' must be a list as long as 'func' (3 metrics), one for each: it has 2"),
    "fewer-options": (TABLES, lambda ev: ev["options"].pop(),
                      "evaluator 'options' must be a list as long as 'func' (3 metrics), one for each: it has 2"),
    "fewer-funcs": (TABLES, lambda ev: ev["func"].pop(),
                    "evaluator 'result' must be a list as long as 'func' (2 metrics), one for each: it has 3"),
    "result-object": (TABLES, lambda ev: _set(ev, "result", ev["result"][0]),
                      "evaluator 'result' must be a list as long as 'func' (3 metrics), one for each, not an object"),
    "expected-object": (TABLES, lambda ev: _set(ev, "expected", ev["expected"][0]),
                        "evaluator 'expected' must be a list as long as 'func' (3 metrics), one for each, "
                        "not an object"),
    "options-object": (TABLES, lambda ev: _set(ev, "options", ev["options"][0]),
                       "evaluator 'options' must be a list as long as 'func' (3 metrics), one for each, not an object"),
    "func-one-of-lists": (TABLES, lambda ev: _set(ev, "func", "compare_table"),
                          "evaluator 'result' is a list, and 'func' is one metric ('compare_table'): give it one "
                          "getter, or 'func' a list of as many metrics"),
    "single-result-list": (SINGLE, lambda ev: _set(ev, "result", [ev["result"]]),
                           "evaluator 'result' is a list, and 'func' is one metric ('exact_match'): give it one "
                           "getter, or 'func' a list of as many metrics"),
    "single-expected-list": (SINGLE, lambda ev: _set(ev, "expected", [ev["expected"]]),
                             "evaluator 'expected' is a list, and 'func' is one metric ('exact_match'): give it one "
                             "getter, or 'func' a list of as many metrics"),
    "single-options-list": (SINGLE, lambda ev: _set(ev, "options", [{}]),
                            "evaluator 'options' is a list, and 'func' is one metric ('exact_match'): give it one "
                            "object, or 'func' a list of as many metrics"),
    # a rule that reads the expected workbook, of a compare_table given none: its sheet was None, a 0
    "second-table-no-expected": (TABLES, lambda ev: ev["expected"].__setitem__(1, None),
                                 "evaluator.func[1] (compare_table): evaluator.options[1] 'rules'[0] key 'sheet_idx1' "
                                 "is 'ENSheet1', a sheet of the expected workbook, and the metric is given no "
                                 "'expected' getter"),
    "sheet-names-no-expected": (SHEET_NAMES, lambda ev: ev.pop("expected"),
                                "evaluator metric 'compare_table': its options 'rules'[0] of type 'sheet_name' "
                                "compares the sheets' names with the expected workbook's, and the metric is given "
                                "no 'expected' getter"),
    # a key nothing reads: "or" was taken for "and", a table ran without its options
    "conj-misspelled": (TABLES, lambda ev: _set(ev, "conjunction", ev.pop("conj")),
                        "evaluator has the key 'conjunction', which nothing reads: did you mean 'conj'? "
                        "(a comment's key starts with '_')"),
    "options-misspelled": (TABLES, lambda ev: _set(ev, "option", ev.pop("options")),
                           "evaluator has the key 'option', which nothing reads: did you mean 'options'?"),
    "func-misspelled": (SINGLE, lambda ev: _set(ev, "fnuc", "exact_match"),
                        "evaluator has the key 'fnuc', which nothing reads: did you mean 'func'?"),
    # a string where the metric iterates a list: match_in_list tested a substring, the others letters
    "first-rule-string": ("chrome/93eabf48-6a27-4cb6-b963-7d5fe1e0d3a9.json",
                          lambda ev: ev["expected"][0]["rules"].update(expected="Bing"),
                          "evaluator.expected[0] getter 'rule' of evaluator.func[0] (match_in_list): its 'rules' "
                          "key 'expected' must be a list, not a string"),
    "favorites-string": ("os/ec4e3f68-9ea4-4c18-a5c9-69f89d1178b3.json",
                         lambda ev: ev["expected"]["rules"].update(expected="google-chrome.desktop"),
                         "evaluator expected getter 'rule' of metric 'check_gnome_favorite_apps': its 'rules' key "
                         "'expected' must be a list, not a string"),
    # one metric is named as it was: no list, no index
    "single-rule-key": (SINGLE, lambda ev: ev["expected"]["rules"].pop("expected"),
                        "evaluator expected getter 'rule' of metric 'exact_match': its 'rules' needs the key "
                        "'expected'"),
}


def broken_folder(root: Path, task_ids: list[str]) -> Path:
    """A folder in OSWorld's layout holding one broken copy of a real task per mistake."""
    tasks = {}
    for task_id in task_ids:
        source, change, _ = MISTAKES[task_id]
        task = copy.deepcopy(json.loads((EXAMPLES / "examples" / source).read_text()))
        change(task["evaluator"])
        tasks[task_id] = {**task, "id": task_id, "domain": source.split("/")[0]}
    return osworld_folder(root, tasks) / "evaluation_examples"


@pytest.mark.parametrize("half", [0, 1])  # the refusal lists the first twenty bad records
def test_each_mistake_of_a_metric_list_is_refused_at_load_naming_the_file_and_the_metric(tmp_path, half):
    task_ids = list(MISTAKES)[half::2]
    folder = broken_folder(tmp_path, task_ids)
    done = run_cli("--data", str(folder), "--dry-run", *MODEL_AGENT)
    text = said(done)
    assert done.returncode == EXIT_USAGE, text
    assert f"{len(task_ids)} bad task records" in text, text
    for task_id in task_ids:
        source, _, reason = MISTAKES[task_id]
        path = folder / "examples" / source.split("/")[0] / f"{task_id}.json"
        assert f"{path}:1: task {task_id!r}: {reason}" in text, (task_id, text)


def test_the_real_tasks_broken_here_load_as_they_are(tmp_path):
    """The real tasks the mistakes are made in load unchanged (so each refusal above is the
    mistake's)."""
    sources = {source for source, _, _ in MISTAKES.values()}
    tasks = {Path(source).stem: {**json.loads((EXAMPLES / "examples" / source).read_text()),
                                 "domain": source.split("/")[0]} for source in sources}
    tasks[Path(SINGLE).stem]["evaluator"]["_note"] = "a comment's key, which nothing reads, loads"
    folder = osworld_folder(tmp_path, tasks) / "evaluation_examples"
    done = run_cli("--data", str(folder), "--dry-run", *MODEL_AGENT)
    assert done.returncode == 0, said(done)
    assert f"runnable {len(sources)} of {len(sources)} tasks" in done.stdout, said(done)

