"""A getter key or a metric option read as a flag (``if config.get("multi"):``, ``if
options.get("ignore_case"):``) given a string (getter_keys.FLAGS, option_keys.FLAGS): any
string but "" reads as true there, as in OSWorld, so ``"multi": "false"`` fetched the list it
meant not to and ``"ignore_case": "false"`` folded the case, and the agent was scored on what
the task did not mean. A string other than "true" is refused as the folder loads (the dry
run, exit 2), naming the file, the getter or metric and the key; OSWorld's own tasks write
``"multi": "true"`` and ``"shell": "true"``, which mean what they read as, and load."""

from __future__ import annotations

import json
from pathlib import Path

from test_osworld_folder_cli import MODEL_AGENT, run_cli, said
from test_osworld_getter_keys import assert_each_refused, changed_folder
from test_osworld_taskset import EXAMPLES, needs_set

from parallel_rollout.envs.osworld.getters import GETTERS
from parallel_rollout.envs.osworld.metrics import METRICS

#: compare_image_list of four vm_files against four cloud_files, each getter "multi": "true"
IMAGES = "multi_apps/82e3c869-49f6-4305-a7ce-f3e64a0618e7.json"
#: exact_match of a script's output, its vm_command_line "shell": "true"
SCRIPT = "multi_apps/9f3bb592-209d-43bc-bb47-d77d9df56504.json"
#: literal_match of a cell's content against a page's text, "ignore_case": true
LITERAL = "multi_apps/5990457f-2adb-467b-a4af-5c857c92d762.json"
#: compare_pptx_files with five examine_ options false
SLIDES = "libreoffice_impress/b8adbc24-cef2-4b15-99d5-ecbe7ff445eb.json"

_READS_TRUE = "a string, which reads as true (any string but \"\" does, as in OSWorld): give true or false"

#: task id -> (the real task it breaks, the break, what the refusal says after "task 'ID': ")
MISTAKES = {
    "multi-false": (IMAGES, lambda ev: ev["expected"].update(multi="false"),
                    f"evaluator expected getter 'cloud_file' of metric 'compare_image_list' has 'multi' \"false\", "
                    f"{_READS_TRUE}"),
    "shell-no": (SCRIPT, lambda ev: ev["result"].update(shell="no"),
                 f"evaluator result getter 'vm_command_line' of metric 'exact_match' has 'shell' \"no\", {_READS_TRUE}"),
    "ignore-case-false": (LITERAL, lambda ev: ev["options"].update(ignore_case="false"),
                          f"evaluator metric 'literal_match': its option 'ignore_case' is \"false\", {_READS_TRUE}"),
    "examine-shape-false": (SLIDES, lambda ev: ev["options"].update(examine_shape="False"),
                            "evaluator metric 'compare_pptx_files': its option 'examine_shape' is \"False\", "
                            f"{_READS_TRUE}"),
}


@needs_set
def test_a_string_other_than_true_for_a_flag_is_refused_at_load(tmp_path):
    assert_each_refused(tmp_path, MISTAKES)


#: a getter's flag given what surely is no flag, though it reads as one in OSWorld too
OF_ANOTHER_KIND = {
    "multi-list": (IMAGES, lambda ev: ev["expected"].update(multi=[False]),
                   "evaluator expected getter 'cloud_file' of metric 'compare_image_list' has 'multi' [false], a list, "
                   "which reads as true (a list or an object reads as true unless empty, as in OSWorld): give true or "
                   "false"),
    "shell-2": (SCRIPT, lambda ev: ev["result"].update(shell=2),
                "evaluator result getter 'vm_command_line' of metric 'exact_match' has 'shell' 2, a number, which reads "
                "as true (any number but 0 does, as in OSWorld): give true or false"),
}


@needs_set
def test_a_getters_flag_of_a_list_or_a_number_but_0_or_1_is_refused_at_load(tmp_path):
    """As a step's flag and a metric's (test_osworld_step_truthiness, test_osworld_option_values);
    1 loads (test_the_real_tasks_true_strings_and_a_flags_true_load)."""
    assert_each_refused(tmp_path, OF_ANOTHER_KIND)


@needs_set
def test_the_real_tasks_true_strings_and_a_flags_true_load(tmp_path):
    """The real tasks broken above load as they are ("multi": "true", "shell": "true"), as does
    "True" for an option, which reads as meant."""
    tasks = {Path(source).stem: (source, lambda ev: None) for source, _, _ in MISTAKES.values()}
    tasks["ignore-case-True"] = (LITERAL, lambda ev: ev["options"].update(ignore_case="True"))
    tasks["shell-1"] = (SCRIPT, lambda ev: ev["result"].update(shell=1))
    done = run_cli("--data", str(changed_folder(tmp_path, tasks)), "--dry-run", *MODEL_AGENT)
    assert done.returncode == 0, said(done)
    assert f"runnable {len(tasks)} of {len(tasks)} tasks" in done.stdout, said(done)
    real = json.loads((EXAMPLES / "examples" / IMAGES).read_text())["evaluator"]
    assert real["result"]["multi"] == real["expected"]["multi"] == "true"  # what loaded is the string


def test_each_flag_listed_is_a_key_its_getter_or_metric_reads():
    """A flag listed that the getter or metric does not read would refuse a string it ignores."""
    from parallel_rollout.envs.osworld import getter_keys, option_keys

    assert set(getter_keys.FLAGS) <= set(GETTERS) and set(option_keys.FLAGS) <= set(METRICS)
    assert {(kind, key) for kind, keys in getter_keys.FLAGS.items() for key in keys
            if key not in getter_keys.reads(kind)} == set()
    assert {(func, key) for func, keys in option_keys.FLAGS.items() for key in keys
            if not option_keys.reads_option(func, key)} == set()


def test_a_flag_reads_a_string_as_true(tmp_path):
    """Why "false" is refused: literal_match given "ignore_case": "false" folds the case."""
    assert METRICS["literal_match"]("Total", "TOTAL", ignore_case="false") == 1
    assert METRICS["literal_match"]("Total", "TOTAL", ignore_case=False) == 0
