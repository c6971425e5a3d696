"""A rule's value that a metric compares with a command's output (a ``vm_command_line`` or
``vm_command_error`` getter's state, a string) given as another kind (state_kinds'
:func:`output_problem`): ``exact_match``'s ``"expected": 100`` never equals the output
``"100\\n"`` (nor does ``["100\\n"]``), ``check_include_exclude``'s ``"include": [1]``
raised (``1 in output``): each attempt scored 0 whatever the agent did. The folder is refused
as it loads (the dry run, exit 2), naming the file, the metric, the rule's key and what to
give."""

from __future__ import annotations

from pathlib import Path

from test_osworld_folder_cli import MODEL_AGENT, run_cli, said
from test_osworld_getter_keys import MULTI, SINGLE, assert_each_refused, changed_folder
from test_osworld_taskset import needs_set

_OUTPUT = "gives a command's output, a string, which the metric compares it with (never a match)"


def _rules(**rules):
    """The change that sets ``rules`` in the (first) expected rule getter's rules."""
    def change(evaluator: dict) -> None:
        expected = evaluator["expected"]
        (expected[0] if isinstance(expected, list) else expected)["rules"].update(rules)
    return change


#: task id -> (the real task it breaks, the break, what the refusal says after "task 'ID': ")
MISTAKES = {
    "exact-match-number": (SINGLE, _rules(expected=100),
                           "evaluator metric 'exact_match': its rule's 'expected' is 100, a number, and its result "
                           f"getter 'vm_command_line' {_OUTPUT}: give a string"),
    "exact-match-list": (SINGLE, _rules(expected=["100\n"]),
                         "evaluator metric 'exact_match': its rule's 'expected' is [\"100\\n\"], a list, and its "
                         f"result getter 'vm_command_line' {_OUTPUT}: give a string"),
    # the value as the task file writes it, JSON: it said Python's "True, a boolean", "None, null"
    "exact-match-true": (SINGLE, _rules(expected=True),
                         "evaluator metric 'exact_match': its rule's 'expected' is true, a boolean, and its result "
                         f"getter 'vm_command_line' {_OUTPUT}: give a string"),
    "exact-match-null": (SINGLE, _rules(expected=None),
                         "evaluator metric 'exact_match': its rule's 'expected' is null, and its result "
                         f"getter 'vm_command_line' {_OUTPUT}: give a string"),
    "include-a-number": (MULTI, _rules(include=[1]),
                         "evaluator.func[0] (check_include_exclude): its rule's 'include' is [1], a list, and its "
                         f"result getter 'vm_command_line' {_OUTPUT}: give a list of strings"),
}


@needs_set
def test_a_rule_value_compared_with_a_commands_output_that_is_no_string_is_refused_at_load(tmp_path):
    assert_each_refused(tmp_path, MISTAKES)


@needs_set
def test_rules_of_strings_compared_with_a_commands_output_load(tmp_path):
    """The real tasks broken above load as they are, as does an exclude of strings."""
    tasks = {Path(source).stem: (source, lambda evaluator: None) for source, _, _ in MISTAKES.values()}
    tasks["exclude-strings"] = (MULTI, _rules(exclude=["use no terminal"]))
    done = run_cli("--data", str(changed_folder(tmp_path, tasks)), "--dry-run", *MODEL_AGENT)
    assert done.returncode == 0, said(done)
    assert f"runnable {len(tasks)} of {len(tasks)} tasks" in done.stdout, said(done)
