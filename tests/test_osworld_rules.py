"""A task file's rule that a metric cannot read is the task's error, not the agent's 0: the
metric reads it as ``task_rules`` gives it, whose missing keys raise ``MalformedRule``; the
agent's own file that makes a metric raise still raises something else (scored 0)."""

from __future__ import annotations

import functools
from pathlib import Path

import pytest

from parallel_rollout.envs.osworld.evaluators import check_evaluator
from parallel_rollout.envs.osworld.metrics import METRICS
from parallel_rollout.envs.osworld.rule_keys import MalformedRule, task_rules

PREFS = "check_thunderbird_prefs"


def broken_copy(folder: Path, path: str, change) -> Path:
    """The task file ``path`` of a copied folder, its evaluator changed by ``change``."""
    import json

    task_file = folder / "examples" / path
    task = json.loads(task_file.read_text())
    change(task["evaluator"])
    task_file.write_text(json.dumps(task))
    return task_file


def assert_refused(folder: Path, says: dict[Path, str]) -> None:
    """A dry run of the whole ``folder`` exits 2, naming each broken file with its reason."""
    from parallel_rollout.exit_codes import EXIT_USAGE
    from test_osworld_folder_cli import MODEL_AGENT, run_cli, said

    done = run_cli("--data", str(folder), "--domain", "all", "--dry-run", *MODEL_AGENT)
    text = said(done)
    assert done.returncode == EXIT_USAGE, text
    assert len(says) == 1 or f"{len(says)} bad task records" in text, text  # one is named alone
    for path, reason in says.items():
        assert f"{path}:1: task {path.stem!r}: {reason}" in text, text


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
    evaluator = {"func": "check_direct_json_object", "result": {"type": "active_tab_url_parse", "parse_keys": ["time"]},
                 "expected": {"type": "rule_relativeTime",
                              "rules": {"relativeTime": relative, "expected": {"time": "{Year}"}}}}
    with pytest.raises(ValueError) as refused:
        check_evaluator(evaluator)
    assert str(refused.value) == ("evaluator expected getter 'rule_relativeTime' of metric "
                                  f"'check_direct_json_object': {says}")


def test_a_method_or_table_rule_its_metric_does_not_know_is_refused_at_load(tmp_path):
    """A value rule's method match_value does not know (it raised NotImplementedError at
    every grading), and a compare_table rule of a type it does not read, without a key its
    type reads or naming a bad method: each scored every attempt 0 as the agent's failure.
    The folder is refused as it loads, naming the file, the metric and the key (exit 2)."""
    from test_osworld_folder_cli import copied

    folder = copied(tmp_path)

    def broken(path: str, change) -> Path:
        return broken_copy(folder, path, change)

    def prefs(evaluator):
        evaluator["expected"]["rules"]["expect"]["extensions.activeThemeID"]["method"] = "equals"

    def zoom(evaluator):
        evaluator["options"]["rules"][0]["method"] = "approx"

    def cell(evaluator):
        evaluator["options"]["rules"][0]["props"] = {"value": {"method": "eqq", "ref": 1}}

    def kind(evaluator):
        evaluator["options"]["rules"][0]["type"] = "check_cel"

    def pair(evaluator):
        del evaluator["options"]["rules"][0]["sheet_idx1"]

    says = {broken("thunderbird/10a730d5-d414-4b40-b479-684bed1ae522.json", prefs):
                "evaluator expected getter 'rule' of metric 'check_thunderbird_prefs': its 'rules' "
                "['expect']['extensions.activeThemeID'] method 'equals' is no method the metric knows",
            broken("libreoffice_calc/1334ca3e-f9e3-4db8-9ca7-b4c653be7d17.json", zoom):
                "evaluator metric 'compare_table': its options 'rules'[0] method 'approx' gives no tolerance",
            broken("libreoffice_calc/357ef137-7eeb-4c80-a3bb-0951f26a8aff.json", cell):
                "evaluator metric 'compare_table': its options 'rules'[0]['props']['value'] method 'eqq' is no "
                "method the metric knows",
            broken("libreoffice_calc/1d17d234-e39d-4ed7-b46f-4417922a4e7c.json", kind):
                "evaluator metric 'compare_table': its options 'rules'[0] has the type 'check_cel', which the "
                "metric does not read",
            broken("libreoffice_calc/30e3e107-1cfb-46ee-a755-2cd080d7ba6a.json", pair):
                "evaluator metric 'compare_table': its options 'rules'[0] of type 'pivot_table' needs the key "
                "'sheet_idx1'"}
    assert_refused(folder, says)


def test_a_metric_call_that_cannot_bind_is_refused_at_load(tmp_path):
    """Grading calls a metric with the result's state, the expected state when the task gives
    one, and its options as keywords: a call its signature cannot take (an expected state given
    to a metric of the result alone, none given to one that compares two) raised TypeError at
    every grading, scored 0 whatever the agent did. The folder is refused as it loads, naming
    the file, the metric and why (exit 2); the 369 real tasks all bind
    (test_no_rule_of_osworlds_own_tasks_is_refused)."""
    import json

    from test_osworld_folder_cli import copied

    folder = copied(tmp_path)
    given = folder / "examples" / "libreoffice_impress" / "ce88f674-ab7a-43da-9201-468d38539e4a.json"
    task = json.loads(given.read_text())  # check_slide_orientation_Portrait reads the result alone
    assert task["evaluator"]["func"] == "check_slide_orientation_Portrait", task["evaluator"]
    task["evaluator"]["expected"] = {"type": "rule", "rules": {"expected": "portrait"}}
    given.write_text(json.dumps(task))
    missing = folder / "examples" / "libreoffice_writer" / "0810415c-bde4-4443-9047-d5f70165a697.json"
    task = json.loads(missing.read_text())  # compare_line_spacing twice, each file with a gold one
    evaluator = task["evaluator"]
    assert evaluator["func"] == ["compare_line_spacing", "compare_line_spacing"], evaluator
    evaluator["expected"][1] = None  # the second metric of the list given no gold file
    missing.write_text(json.dumps(task))
    assert_refused(folder, {
        given: "evaluator metric 'check_slide_orientation_Portrait': cannot be called with a result and an expected "
               "state: too many positional arguments (it takes result, **options)",
        missing: "evaluator.func[1] (compare_line_spacing): cannot be called with a result and no expected state: "
                 "missing a required argument: 'expected' (it takes result, expected, **options)"})


def test_a_getter_field_both_osworlds_getter_and_ours_read_is_needed_at_load(tmp_path):
    """The browser, VLC and slide getters read fields of their config without a default, as
    OSWorld's own getters do (active_tab_url_parse's parse_keys, vlc_config's dest,
    audio_in_slide's slide_index): a task file without one loaded, and every grading raised
    KeyError, scored 0. It is refused as the folder loads, naming the file, getter and field."""
    import json

    from test_osworld_folder_cli import copied

    folder = copied(tmp_path)
    cases = {"chrome/1704f00f-79e6-43a7-961b-cedd3724d5fd.json": ("result", 1, "active_tab_url_parse",
                                                                  "check_direct_json_object", "parse_keys"),
             "vlc/215dfd39-f493-4bc3-a027-8a97d72c61bf.json": ("result", None, "vlc_config", "check_qt_bgcone", "dest"),
             "libreoffice_impress/c59742c0-4323-4b9d-8a02-723c251deaa0.json": ("result", None, "audio_in_slide",
                                                                               "compare_audios", "slide_index")}
    says = {}
    for path, (role, index, getter, metric, field) in cases.items():
        task_file = folder / "examples" / path
        task = json.loads(task_file.read_text())
        config = task["evaluator"][role] if index is None else task["evaluator"][role][index]
        assert config["type"] == getter, config
        del config[field]
        task_file.write_text(json.dumps(task))
        says[task_file] = f"evaluator {role} getter {getter!r} of metric {metric!r} needs the field {field!r}" \
            if index is None else f"evaluator.{role}[{index}] getter {getter!r} of evaluator.func[{index}] ({metric}) " \
                                  f"needs the field {field!r}"
    assert_refused(folder, says)


def test_a_value_rule_without_its_method_and_a_fuzzy_check_it_cannot_read_are_refused_at_load(tmp_path):
    """A value rule without its ``method`` (a Thunderbird pref's, an MP3 tag's, a compare_table
    cell's) was found only at grading: the task's error after the agent's whole episode, or, in
    compare_table, a 0 as the agent's failure; so was a sheet_fuzzy check without its ``range``,
    or of a ``type`` it does not read (it compared nothing). Each is refused as the folder loads,
    naming the file, the metric and the rule's place (exit 2), on copies of real tasks."""
    import json

    from test_osworld_folder_cli import copied

    folder = copied(tmp_path)

    def broken(path: str, change) -> Path:
        return broken_copy(folder, path, change)

    def fuzzy(evaluator) -> dict:
        return next(rule for rule in evaluator["options"]["rules"] if rule["type"] == "sheet_fuzzy")

    where = "evaluator metric 'compare_table': its options 'rules'"
    index = next(n for n, rule in enumerate(json.loads(
        (folder / "examples" / "multi_apps" / "8e116af7-7db7-4e35-a68b-b0939c066c78.json").read_text()
    )["evaluator"]["options"]["rules"]) if rule["type"] == "sheet_fuzzy")
    assert_refused(folder, {
        broken("thunderbird/10a730d5-d414-4b40-b479-684bed1ae522.json",
               lambda ev: ev["expected"]["rules"]["expect"]["extensions.activeThemeID"].pop("method")):
            "evaluator expected getter 'rule' of metric 'check_thunderbird_prefs': its 'rules' "
            "['expect']['extensions.activeThemeID'] needs the key 'method'",
        broken("multi_apps/3f05f3b9-29ba-4b6b-95aa-2204697ffc06.json",
               lambda ev: ev["expected"][0]["rules"]["title"].pop("method")):
            "evaluator.expected[0] getter 'rule' of evaluator.func[0] (check_mp3_meta): its 'rules' ['title'] needs "
            "the key 'method'",
        broken("libreoffice_calc/1d17d234-e39d-4ed7-b46f-4417922a4e7c.json",
               lambda ev: ev["options"]["rules"][0]["props"]["value"].pop("method")):
            f"{where}[0]['props']['value'] needs the key 'method'",
        broken("multi_apps/8e116af7-7db7-4e35-a68b-b0939c066c78.json", lambda ev: fuzzy(ev)["rules"][0].pop("range")):
            f"{where}[{index}] ['rules'][0] needs the key 'range'",
        broken("multi_apps/b5062e3e-641c-4e3a-907b-ac864d2e7652.json",
               lambda ev: fuzzy(ev)["rules"][1].update(type="exact")):
            f"{where}[0] ['rules'][1] has the type 'exact', which sheet_fuzzy does not read (it reads 'includes', "
            "'included_by', 'fuzzy_match', 'exact_match')"})


def test_a_check_json_rule_without_its_key_is_refused_at_load(tmp_path):
    """check_json walks each rule's ``key`` path in the file inside a try that turns any error
    into a 0, so a rule without one scored every attempt 0 as the agent's failure, even a file
    that holds every expected value. The folder is refused as it loads (a real task's copy)."""
    from test_osworld_folder_cli import copied

    settings = tmp_path / "settings.json"
    settings.write_text('{"name": "Test Account"}')
    keyless = {"expect": [{"key": ["name"], "method": "eq", "ref": "Test Account"}, {"method": "eq", "ref": 1}]}
    assert METRICS["check_json"](str(settings), task_rules(keyless)) == 0.0  # what grading made of it
    folder = copied(tmp_path)
    assert_refused(folder, {
        broken_copy(folder, "multi_apps/e2392362-125e-4f76-a2ee-524b183a3412.json",
                    lambda ev: ev["expected"]["rules"]["expect"][1].pop("key")):
            "evaluator expected getter 'rule' of metric 'check_json': its 'rules' ['expect'][1] needs the key 'key'"})


def test_an_accessibility_rule_without_exact_and_a_search_rule_without_its_pattern_are_refused_at_load(tmp_path):
    """check_accessibility_tree reads each rule's ``exact`` when it matches a ``text``, and
    is_expected_search_query ``rules["expect"]["pattern"]``: a task file without one (or with a
    rule of neither ``xpath`` nor ``selectors``) loaded and raised only at grading, after the
    agent's whole episode. Each is refused as the folder loads,
    naming the file, the metric and the rule's place (exit 2), on copies of real tasks."""
    from test_osworld_folder_cli import copied

    folder = copied(tmp_path)
    where = "evaluator expected getter 'rule' of metric"
    assert_refused(folder, {
        broken_copy(folder, "thunderbird/7b1e1ff9-bb85-49be-b01d-d6424be18cd0.json",
                    lambda ev: ev["expected"]["rules"][0].update(text="Password")):
            f"{where} 'check_accessibility_tree': its 'rules' [0] gives 'text' and needs the key 'exact' "
            "(true, or false for a fuzzy match)",
        broken_copy(folder, "thunderbird/15c3b339-88f7-4a86-ab16-e71c58dcb01e.json",
                    lambda ev: ev["expected"]["rules"].__setitem__(0, {"xpaths": ev["expected"]["rules"][0]["xpath"]})):
            f"{where} 'check_accessibility_tree': its 'rules' [0] needs the key 'xpath' or 'selectors'",
        broken_copy(folder, "multi_apps/f8cfa149-d1c1-4215-8dac-4a0932bad3c2.json",
                    lambda ev: ev["expected"]["rules"].update(expect={"patern": "nereida"})):
            f"{where} 'is_expected_search_query': its 'rules' ['expect'] needs the key 'pattern'",
        # a metric no real task uses, whose rule the load did not know: it raised at grading
        broken_copy(folder, "vs_code/0ed39f63-6049-43d4-ba4d-5fa2fe04a951.json",
                    lambda ev: ev.update(func="check_html_background_image",
                                         expected={"type": "rule", "rules": {"url": "bg.png"}})):
            f"{where} 'check_html_background_image': its 'rules' needs the key 'value'"})


def test_a_compare_table_rule_of_the_wrong_shape_or_a_name_it_does_not_read_is_refused_at_load(tmp_path):
    """compare_table's ``options["rules"]`` nest more than keys: a check_cell rule's ``props``
    (an object of value rules) given as a list raised at grading, caught into a 0; a style
    name cell_style does not know, or a row dimension's, raised (a 0); a chart_props string
    was read a letter at a time and a chart property the metric does not know compared
    nothing (a wrong score).
    Each loaded and was the agent's 0; each is refused as the folder loads (exit 2), naming
    the file, the metric, the rule and the name, on copies of real Calc tasks."""
    from test_osworld_folder_cli import copied

    folder = copied(tmp_path)

    def broken(path: str, change) -> Path:
        return broken_copy(folder, "libreoffice_calc/" + path, change)

    def rule(evaluator, kind: str) -> dict:
        return next(r for r in evaluator["options"]["rules"] if r["type"] == kind)

    where = "evaluator metric 'compare_table': its options 'rules'"
    assert_refused(folder, {
        broken("357ef137-7eeb-4c80-a3bb-0951f26a8aff.json",
               lambda ev: rule(ev, "check_cell").update(props=[{"method": "eq", "ref": True}])):
            f"{where}[0] of type 'check_cell' key 'props' must be an object, not a list",
        broken("1d17d234-e39d-4ed7-b46f-4417922a4e7c.json",
               lambda ev: rule(ev, "check_cell")["props"].update(value="eq 1")):
            f"{where}[0] ['props']['value'] must be an object (a value rule: method, ref), not str",
        broken("8b1ce5f2-59d2-4dcc-b0b0-666a714b9a14.json", lambda ev: rule(ev, "style").update(props=["font_colour"])):
            f"{where}[1] key 'props' names 'font_colour', which the metric does not read (it reads 'number_format'",
        broken("12382c62-0cd1-4bf2-bdc8-1d20bf9b2371.json", lambda ev: rule(ev, "chart").update(chart_props="type")):
            f"{where}[0] of type 'chart' key 'chart_props' must be a list, not a string",
        broken("3a7c8185-25c1-4941-bd7b-96e823c9f21f.json", lambda ev: rule(ev, "chart").update(chart_props=["titel"])):
            f"{where}[1] key 'chart_props' names 'titel', which the metric does not read (it reads 'title', ",
        broken("6054afcb-5bab-4702-90a0-b259b5d3217c.json", lambda ev: rule(ev, "row_props").update(props=["hiden"])):
            f"{where}[1] key 'props' names 'hiden', which the metric does not read (it reads 'hidden', "})


def test_a_compare_table_rule_key_its_type_does_not_read_is_refused_at_load(tmp_path):
    """A compare_table rule's key that its type does not read, a typo of one it reads with a
    default (``precison``, ``chart_prop``, a fuzzy check's ``ignore_cse``), was ignored: the
    check it meant to switch ran as if unset and the score was wrong with nothing saying why;
    a zoom rule without its ``ref`` compared the zoom with None (OSWorld's raised). Each is
    refused as the folder loads (exit 2), naming the key and the nearest one the type reads,
    on copies of real Calc tasks (the 369 real ones still load: tests/test_osworld_taskset)."""
    from test_osworld_folder_cli import copied

    folder = copied(tmp_path)

    def broken(path: str, change) -> Path:
        return broken_copy(folder, path, change)

    def rule(evaluator, kind: str) -> dict:
        return next(r for r in evaluator["options"]["rules"] if r["type"] == kind)

    where = "evaluator metric 'compare_table': its options 'rules'"
    calc = "libreoffice_calc/"
    assert_refused(folder, {
        broken(calc + "8b1ce5f2-59d2-4dcc-b0b0-666a714b9a14.json", lambda ev: rule(ev, "sheet_data").update(precison=2)):
            f"{where}[0] of type 'sheet_data' has the key 'precison', which the metric does not read "
            "(did you mean 'precision'?)",
        broken(calc + "12382c62-0cd1-4bf2-bdc8-1d20bf9b2371.json",
               lambda ev: rule(ev, "chart").update(chart_prop=rule(ev, "chart").pop("chart_props"))):
            f"{where}[0] of type 'chart' has the key 'chart_prop', which the metric does not read "
            "(did you mean 'chart_props'?)",
        broken(calc + "1334ca3e-f9e3-4db8-9ca7-b4c653be7d17.json", lambda ev: rule(ev, "zoom").pop("ref")):
            f"{where}[0] of type 'zoom' needs the key 'ref'",
        broken("multi_apps/b5062e3e-641c-4e3a-907b-ac864d2e7652.json",
               lambda ev: rule(ev, "sheet_fuzzy")["rules"][1].update(ignore_cse=True)):
            f"{where}[0] ['rules'][1] has the key 'ignore_cse', which the metric does not read "
            "(did you mean 'ignore_case'?)"})


def test_a_value_rule_whose_ref_its_method_cannot_compare_is_refused_at_load(tmp_path):
    """A compare_table value rule's ``ref`` that its method cannot compare (``approx`` with a
    string, a string where ``str_set_eq`` reads a list: its letters were the set) raised at
    grading or compared a letter at a time: the agent's 0 for the task file's mistake. Each
    is refused as the folder loads (exit 2), naming the rule's place, the method and the ref,
    on copies of real tasks."""
    from test_osworld_folder_cli import copied

    folder = copied(tmp_path)
    where = "evaluator metric 'compare_table': its options 'rules'"

    def rule(evaluator, index: int) -> dict:
        return evaluator["options"]["rules"][index]

    assert_refused(folder, {
        broken_copy(folder, "multi_apps/8e116af7-7db7-4e35-a68b-b0939c066c78.json",
                    lambda ev: rule(ev, 2)["props"]["value"].update(ref="-186.93")):
            f"{where}[2]['props']['value'] method 'approx:0.1' needs a 'ref' number, not str '-186.93'",
        broken_copy(folder, "libreoffice_calc/ecb0df7a-4e8d-4a03-b162-053391d3afaf.json",
                    lambda ev: rule(ev, 1)["dv_props"][0]["formula1"].update(ref="Pass,Fail,Held")):
            f"{where}[1]['dv_props'][0]['formula1'] method 'str_set_eq' needs a 'ref' list of strings, "
            "not str 'Pass,Fail,Held'"})


def test_a_rule_getters_value_rule_whose_ref_its_method_cannot_compare_is_refused_at_load(tmp_path):
    """A Thunderbird pref's, a check_json or a check_mp3_meta value rule whose ``ref`` its method
    cannot compare (``approx`` with a string, ``re`` with a pattern Python cannot read,
    ``str_list_eq`` with a string, ``range.ee`` with one bound) raised at every grading or compared
    a string's letters: the agent's 0 for the task file's mistake. Each is refused as the folder
    loads (exit 2), naming the file, the metric, the rule and its ref, on copies of real tasks."""
    from test_osworld_folder_cli import copied

    folder = copied(tmp_path)
    getter = "evaluator expected getter 'rule' of metric"
    assert_refused(folder, {
        broken_copy(folder, "thunderbird/08c73485-7c6d-4681-999d-919f5c32dcfa.json",
                    lambda ev: ev["expected"]["rules"]["expect"]["mail.server.default.applyIncomingFilters"].update(
                        method="approx:0.1", ref="true")):
            f"{getter} {PREFS!r}: its 'rules' ['expect']['mail.server.default.applyIncomingFilters'] "
            "method 'approx:0.1' needs a 'ref' number, not str 'true'",
        broken_copy(folder, "thunderbird/3f49d2cc-f400-4e7d-90cc-9b18e401cc31.json",
                    lambda ev: ev["expected"]["rules"]["expect"][0].update(ref="(smart")):
            f"{getter} 'check_json': its 'rules' ['expect'][0] method 're' 'ref' '(smart' is no regular "
            "expression Python's re reads (missing ), unterminated subpattern at position 0)",
        broken_copy(folder, "multi_apps/74d5859f-ed66-4d3e-aa0e-93d7a592ce41.json",
                    lambda ev: ev["expected"][0]["rules"]["expect"][2].update(method="str_list_eq",
                                                                              ref="background_script.js")):
            "evaluator.expected[0] getter 'rule' of evaluator.func[0] (check_json): its 'rules' ['expect'][2] "
            "method 'str_list_eq' needs a 'ref' list of "
            "strings, not str 'background_script.js'",
        broken_copy(folder, "multi_apps/3f05f3b9-29ba-4b6b-95aa-2204697ffc06.json",
                    lambda ev: ev["expected"][1]["rules"]["title"].update(method="range.ee", ref=[1])):
            "evaluator.expected[1] getter 'rule' of evaluator.func[1] (check_mp3_meta): its 'rules' ['title'] "
            "method 'range.ee' needs a 'ref' list of two "
            "bounds, not list [1]"})


#: where a refusal of compare_table's rules names them
_TABLE_RULES = "evaluator metric 'compare_table': its options 'rules'"


def _fuzzy_check(folder: Path, path: str, rule: int, index: int, **change) -> Path:
    """The multi_apps task file ``path`` of a copied folder, its sheet_fuzzy check ``index``
    of compare_table's rule ``rule`` changed by ``change``."""
    return broken_copy(folder, "multi_apps/" + path,
                       lambda ev: ev["options"]["rules"][rule]["rules"][index].update(change))


def test_a_sheet_fuzzy_checks_option_of_the_wrong_kind_is_refused_at_load(tmp_path):
    """A sheet_fuzzy check's optional keys are read with defaults: ``ignore_case: "false"`` was
    true, a ``threshold`` string raised comparing with the ratio, a ``normalization`` pair of one
    string and a ``trim_leadings`` list raised at every grading, each the agent's 0 or a wrong
    score. Each is refused as the folder loads (exit 2), naming the check, the key and the value,
    on copies of real tasks."""
    from test_osworld_folder_cli import copied

    folder = copied(tmp_path)
    where = _TABLE_RULES
    check = functools.partial(_fuzzy_check, folder)
    assert_refused(folder, {
        check("8e116af7-7db7-4e35-a68b-b0939c066c78.json", 1, 0, ignore_case="false"):
            f"{where}[1] ['rules'][0] key 'ignore_case' must be true or false, not a string \"false\"",
        check("deec51c9-3b1e-4b9e-993c-4776f20e8bb2.json", 0, 1, threshold="90"):
            f"{where}[0] ['rules'][1] key 'threshold' must be a number, not a string \"90\"",
        check("d1acdb87-bb67-4f30-84aa-990e56a09c92.json", 0, 1, normalization=[["Rd", "Road"], ["St"]]):
            f"{where}[0] ['rules'][1] key 'normalization' must be a list of [old, new] string pairs, "
            'not a list [["Rd", "Road"], ["St"]]',
        check("b5062e3e-641c-4e3a-907b-ac864d2e7652.json", 0, 1, trim_leadings=[" "]):
            f"{where}[0] ['rules'][1] key 'trim_leadings' must be a string, not a list [\" \"]"})


def test_a_rules_value_of_the_wrong_kind_is_said_as_the_file_has_it(tmp_path):
    """A rule key's value is quoted as the task file writes it, in JSON: a sheet_fuzzy check's
    ``threshold: true`` said Python's "not a boolean True", ``ignore_case: null`` "not null None"."""
    from test_osworld_folder_cli import copied

    folder = copied(tmp_path)
    where = _TABLE_RULES
    check = functools.partial(_fuzzy_check, folder)
    assert_refused(folder, {
        check("8e116af7-7db7-4e35-a68b-b0939c066c78.json", 1, 0, ignore_case=None):
            f"{where}[1] ['rules'][0] key 'ignore_case' must be true or false, not null",
        check("deec51c9-3b1e-4b9e-993c-4776f20e8bb2.json", 0, 1, threshold=True):
            f"{where}[0] ['rules'][1] key 'threshold' must be a number, not a boolean true"})


def test_a_sheet_data_or_sheet_print_option_of_the_wrong_kind_is_refused_at_load(tmp_path):
    """compare_table's sheet_data and sheet_print rules read ``precision`` and ``ignore_case``
    with defaults: a ``precision`` string or 2.0 raised in pandas' round at every grading (the
    agent's 0), a sheet_print ``ignore_case: "false"`` was true. Each is refused as the folder
    loads (exit 2), naming the rule's place, the key and the value, on copies of real tasks
    (3a93cae4's sheet_data ``ignore_case: true`` still loads)."""
    from test_osworld_folder_cli import copied

    folder = copied(tmp_path)
    where = "evaluator metric 'compare_table': its options 'rules'"

    def rule(path: str, **change) -> Path:
        return broken_copy(folder, path, lambda ev: ev["options"]["rules"][0].update(change))

    assert_refused(folder, {
        rule("libreoffice_calc/4172ea6e-6b77-4edb-a9cc-c0014bd1603b.json", precision="2"):
            f"{where}[0] of type 'sheet_data' key 'precision' must be a whole number, not a string \"2\"",
        rule("libreoffice_calc/01b269ae-2111-4a07-81fd-3fcd711993b0.json", precision=2.0):
            f"{where}[0] of type 'sheet_data' key 'precision' must be a whole number, not a number 2.0",
        rule("multi_apps/881deb30-9549-4583-a841-8270c65f2a17.json", ignore_case="false"):
            f"{where}[0] of type 'sheet_print' key 'ignore_case' must be true or false, not a string \"false\"",
        broken_copy(folder, "multi_apps/3a93cae4-ad3e-403e-8c12-65303b271818.json",
                    lambda ev: ev["options"][2]["rules"][0].update(ignore_case="no")):
            "evaluator.func[2] (compare_table): evaluator.options[2] 'rules'[0] of type 'sheet_data' key "
            "'ignore_case' must be true or false, not a string \"no\""})


def test_a_cell_or_range_openpyxl_cannot_read_is_refused_at_load(tmp_path):
    """A check_cell rule's ``coordinate`` that is no one cell (a range: the metric read a row
    of cells and its check raised, caught into a 0) and a sheet_fuzzy check's ``range`` that
    openpyxl cannot read (``A2:A``: it raised at grading, a 0) loaded and were the agent's 0;
    each is refused as the folder loads (exit 2), on copies of real tasks."""
    from test_osworld_folder_cli import copied

    folder = copied(tmp_path)
    where = "evaluator metric 'compare_table': its options 'rules'"
    assert_refused(folder, {
        broken_copy(folder, "libreoffice_calc/357ef137-7eeb-4c80-a3bb-0951f26a8aff.json",
                    lambda ev: ev["options"]["rules"][0].update(coordinate="A1:B2")):
            f"{where}[0] key 'coordinate' is 'A1:B2', no cell (A1)",
        broken_copy(folder, "multi_apps/b5062e3e-641c-4e3a-907b-ac864d2e7652.json",
                    lambda ev: ev["options"]["rules"][0]["rules"][1].update(range=["A2:A"])):
            f"{where}[0] ['rules'][1] key 'range' has 'A2:A', no cell range (A1:C5, or a list of them)"})
