"""A task file's rule that a metric cannot read is the task's error, not the agent's 0: the
metric reads it as ``task_rules`` gives it, whose missing keys raise ``MalformedRule``; the
agent's own file that makes a metric raise still raises something else (scored 0)."""

from __future__ import annotations

import pytest

from parallel_rollout.envs.osworld.evaluators import check_evaluator
from parallel_rollout.envs.osworld.metrics import METRICS
from parallel_rollout.envs.osworld.rule_keys import MalformedRule, task_rules

PREFS = "check_thunderbird_prefs"


def test_a_key_the_rule_lacks_is_the_rules_error_and_a_garbage_file_is_not(tmp_path):
    prefs = tmp_path / "prefs.js"
    prefs.write_text('user_pref("mail.check", 1);\n')
    no_method = task_rules({"expect": {"mail.check": {"ref": 1}}})
    with pytest.raises(MalformedRule) as raised:
        METRICS[PREFS](str(prefs), no_method)
    assert str(raised.value) == "the task file's rule has no key 'method'"
    # the agent's garbage in the file it controls: an error of the file, never the rule's
    prefs.write_text('user_pref("mail.check", nonsense);\n')
    with pytest.raises(Exception) as raised:
        METRICS[PREFS](str(prefs), task_rules({"expect": {"mail.check": {"method": "eq", "ref": 1}}}))
    assert not isinstance(raised.value, MalformedRule), raised.value
    prefs.write_text('user_pref("mail.check", 1);\n')
    assert METRICS[PREFS](str(prefs), task_rules({"expect": {"mail.check": {"method": "eq", "ref": 1}}})) == 1.0


def test_task_rules_keep_optional_keys_optional():
    rules = task_rules({"include": ["a"], "nested": [{"x": 1}]})
    assert rules == {"include": ["a"], "nested": [{"x": 1}]}
    assert rules.get("exclude", []) == [] and "exclude" not in rules
    assert METRICS["check_include_exclude"]("a b", rules) == 1.0
    with pytest.raises(MalformedRule):
        rules["nested"][0]["y"]


@pytest.mark.parametrize("relative, says", [
    ({"from": "in a fortnight"}, "rule_relativeTime: no date for ('time',)"),
    ({"to": "next Friday"}, "the task file's rule has no key 'from'"),
])
def test_a_relative_date_the_getter_cannot_fill_is_refused_at_load(relative, says):
    """The rule_relativeTime getter reads the task's rules alone: one it cannot fill raised at
    every grading (scored 0); it is run as the task loads, and refused there."""
    evaluator = {"func": "check_direct_json_object", "result": {"type": "active_tab_url_parse"},
                 "expected": {"type": "rule_relativeTime",
                              "rules": {"relativeTime": relative, "expected": {"time": "{Year}"}}}}
    with pytest.raises(ValueError) as refused:
        check_evaluator(evaluator)
    assert str(refused.value) == ("evaluator expected getter 'rule_relativeTime' of metric "
                                  f"'check_direct_json_object': {says}")
