"""A getter whose state no metric reading it could score right (envs/osworld/state_kinds.py):
a value getter (a command's output, a page's text, the accessibility tree: none gives a path
on the host) where the metric opens a file, which raised at every grading (``open`` of the
text, of a dict), and a rule getter as the result of a metric that reads its result as the
agent's (``exact_match``'s command output, ``compare_table``'s workbook), which scored the task's
own text, the same whatever the agent did. The folder is refused as it loads (the dry run,
exit 2), naming the file, the metric (by its index in a list), the getter and what to give;
tests/test_osworld_state_roles.py calls each metric opening a file with a command's output."""

from __future__ import annotations

import copy

from test_osworld_getter_keys import assert_each_refused
from test_osworld_state_kinds import PDFS, PRESENTER, SINGLE, TABLE, TABLES
from test_osworld_taskset import needs_set

from parallel_rollout.envs.osworld.getters import GETTERS
from parallel_rollout.envs.osworld.rule_keys import RULE_GETTERS

_VALUE = "it gives a value read from the VM (a command's output, a page's text), no file's path, and the metric"
_TO_FILE = "as a file: give a getter of the file (vm_file, cloud_file)"
_RULE = ("it gives the task's 'rules', the same whatever the agent did, and the metric reads its result state as "
         "the agent's: give a getter of what the agent made (vm_file, vm_command_line)")


def _set(key: str, value, index: int | None = None):
    def change(evaluator: dict) -> None:
        if index is None:
            evaluator[key] = copy.deepcopy(value)
        else:
            evaluator[key][index] = copy.deepcopy(value)
    return change


#: task id -> (the real task it breaks, the break, what the refusal says after "task 'ID': ")
MISTAKES = {
    "table-command": (TABLE, _set("result", {"type": "vm_command_line", "command": ["cat", "/home/user/a.xlsx"]}),
                      f"evaluator result getter 'vm_command_line' of metric 'compare_table': {_VALUE} opens its "
                      f"result state {_TO_FILE}"),
    "pdfs-tree": (PDFS, _set("expected", {"type": "accessibility_tree"}),
                  f"evaluator expected getter 'accessibility_tree' of metric 'compare_pdfs': {_VALUE} opens its "
                  f"expected state {_TO_FILE}"),
    "second-table-page": (TABLES, _set("expected", {"type": "page_info", "url": "https://example.org/"}, 1),
                          f"evaluator.expected[1] getter 'page_info' of evaluator.func[1] (compare_table): {_VALUE} "
                          f"opens its expected state {_TO_FILE}"),
    "presenter-terminal": (PRESENTER, _set("result", {"type": "vm_terminal_output"}),
                           f"evaluator result getter 'vm_terminal_output' of metric 'check_presenter_console_disable': "
                           f"{_VALUE} opens its result state {_TO_FILE}"),
    # the task's own rule as what the agent made
    "exact-result-rule": (SINGLE, _set("result", {"type": "rule", "rules": {"expected": "Total"}}),
                          f"evaluator result getter 'rule' of metric 'exact_match': {_RULE}"),
    "table-result-rule-path": (TABLE, _set("result", {"type": "rule", "rules": "/srv/mine.xlsx"}),
                               f"evaluator result getter 'rule' of metric 'compare_table': {_RULE}"),
}


@needs_set
def test_a_value_where_a_file_is_opened_or_a_rule_as_the_agents_result_is_refused_at_load(tmp_path):
    assert_each_refused(tmp_path, MISTAKES)


def test_each_getter_gives_a_file_a_rule_or_a_value():
    """Every getter is of one kind, so the load knows what each gives (a new getter in none
    would pass every pairing unchecked)."""
    from parallel_rollout.envs.osworld.state_kinds import FILE_GETTERS, VALUE_GETTERS

    kinds = (FILE_GETTERS, frozenset(RULE_GETTERS), VALUE_GETTERS)
    assert frozenset().union(*kinds) == set(GETTERS), set(GETTERS) ^ frozenset().union(*kinds)
    assert sum(len(kind) for kind in kinds) == len(GETTERS)  # no getter in two


def test_each_metric_reading_its_result_as_a_rule_has_its_rules_keys_checked_at_load():
    """A rule reaches a metric as its result only where the metric reads its result as a rule
    (the load refuses it elsewhere), and grading hands it over as the task file gives it (only
    the expected rule is wrapped to raise MalformedRule): so each such metric's keys must be
    the load's to check (rule_keys.RESULT_RULE_SHAPES), is_in_vm_clickboard's 'expected'."""
    from parallel_rollout.envs.osworld.rule_keys import RESULT_RULE_SHAPES
    from parallel_rollout.envs.osworld.state_kinds import RESULT_KINDS

    assert {func for func, kind in RESULT_KINDS.items() if kind == "rule"} == set(RESULT_RULE_SHAPES)
