"""The general metrics (values, text, JSON, lists, CSV, SQLite, accessibility tree) give
OSWorld's scores: each case runs OSWorld's function of the same name on the same input."""

from __future__ import annotations

import json
import sqlite3


from osworld_reference import check_all, reference
from parallel_rollout.envs.osworld.metrics import general


def files(tmp_path, **contents):
    paths = {}
    for name, text in contents.items():
        path = tmp_path / name.replace("_", ".")
        path.write_text(text)
        paths[name] = str(path)
    return paths


A11Y = ('<desktop-frame xmlns:st="https://accessibility.ubuntu.example.org/ns/state">'
        '<push-button name="OK" st:enabled="true">OK</push-button><label>Hello world</label></desktop-frame>')

# (metric, result, expected-or-rules, options, score); "@name" is a file made by the test
CASES = [
    ("exact_match", "abc", {"expected": "abc"}, {}, 1.0),
    ("exact_match", "abc", {"expected": "abd"}, {}, 0.0),
    ("match_in_list", "b", {"expected": ["a", "b"]}, {}, 1.0),
    ("match_in_list", "c", {"expected": ["a", "b"]}, {}, 0.0),
    ("is_in_list", ["a", "b"], {"expected": "a"}, {}, 1.0),
    ("is_in_list", ["a", "b"], {"expected": "z"}, {}, 0.0),
    ("literal_match", "Abc", "abc", {"ignore_case": True}, 1.0),
    ("literal_match", "Abc", "abc", {}, 0.0),
    ("literal_match", [1, "x"], ["1", "X"], {"type": "list", "ignore_case": True}, 1.0),
    ("literal_match", [1, "x"], ["1"], {"type": "list"}, 0.0),
    ("fuzzy_match", "kitten", {"expected": "sitting"}, {}, None),
    ("check_include_exclude", "a b c", {"include": ["a", "b"], "exclude": ["d"]}, {}, 1.0),
    ("check_include_exclude", "a b d", {"include": ["a"], "exclude": ["d"]}, {}, 0.0),
    ("check_include_exclude", None, {"include": []}, {}, 0.0),
    ("diff_text_file", "@left_txt", "@right_txt", {}, None),
    ("diff_text_file", None, "@right_txt", {}, 0.0),
    ("check_list", "@left_txt", {"expect": ["^one", "thr"], "unexpect": ["^four"]}, {}, 1.0),
    ("check_list", "@left_txt", {"expect": ["^one"], "unexpect": ["two"]}, {}, 0.0),
    ("check_list", "@left_txt", {"expect": ["five"]}, {}, 0.0),
    ("check_csv", "@table_csv", {"expect": [{"name": "ann", "age": "3"}], "unexpect": [{"name": "bob"}]}, {}, 1.0),
    ("check_csv", "@table_csv", {"expect": [{"name": "ann", "age": "4"}]}, {}, 0.0),
    ("check_json", "@settings_json", {"expect": [{"key": ["editor", "size"], "method": "eq", "ref": 14}]}, {}, 1.0),
    ("check_json", "@settings_json", {"expect": [{"key": ["editor", "font"], "method": "re.I", "ref": "^mono"}],
                                      "unexpect": [{"key": ["editor", "size"], "method": "gt", "ref": 10}]}, {}, 0.0),
    ("check_json", "@settings_json", {"expect": [{"key": ["nope"], "method": "eq", "ref": 1}]}, {}, 0.0),
    ("check_json", "@settings_json", {"unexpect": [{"key": ["nope", "x"], "method": "eq", "ref": 1}]}, {}, 1.0),
    ("check_json", "@broken_json", {"expect": []}, {}, 0.0),
    ("check_json", "@conf_yaml", {"expect": [{"key": ["a", "b"], "method": "eq", "ref": [1, 2]}]}, {"is_yaml": True}, 1.0),
    ("check_direct_json_object", "{'a': 1, 'b': 'x'}", {"expected": {"a": 1}}, {}, 1.0),
    ("check_direct_json_object", {"a": [2, 1]}, {"expected": {"a": [1, 2], "ignore_list_order": True}}, {}, 0.0),
    ("check_direct_json_object", {"a": "hello world"}, {"expected": {"a": "world"}, "expect_in_result": True}, {}, 1.0),
    ("check_direct_json_object", {"a": "x"}, {"expected": {"a": ["y", "x"]}, "expect_in_result": True}, {}, 1.0),
    ("check_direct_json_object", {"a": ["q"]}, {"expected": {"a": ["y", "x"]}, "expect_in_result": True}, {}, 0.0),
    ("check_direct_json_object", {"a": 1}, {"expected": {"a": "__EVALUATION_FAILED__"}}, {}, 0.0),
    ("file_contains", "@left_txt", {"expected": ["one", "three"]}, {}, 1.0),
    ("file_contains", "@left_txt", {"expected": ["six"]}, {}, 0.0),
    ("check_line_number", "@log_txt", {"expected": "2"}, {}, 1.0),
    ("check_line_number", "@log_txt", {"expected": 3}, {}, 0.0),
    ("compare_terminal_and_txt", "@left_txt", "one\ntwo\nthree\n", {}, 1.0),
    ("compare_terminal_and_txt", "@left_txt", "one", {}, 0.0),
    ("compare_python_pure_text", "@a_py", "@b_py", {}, 1.0),
    ("compare_python_pure_text", "@a_py", "@left_txt", {}, 0.0),
    ("run_sqlite3", "@db", {"sql": "select count(*) from t where v > 1"}, {}, 2.0),
    ("check_accessibility_tree", A11Y, [{"selectors": ["push-button[name=OK]"], "text": "OK", "exact": True}], {}, 1.0),
    ("check_accessibility_tree", A11Y, [{"xpath": "//label", "text": "Hello wrld", "exact": False}], {}, None),
    ("check_accessibility_tree", A11Y, [{"xpath": "//menu"}], {}, 0.0),
]


def test_general_metrics_score_as_osworld(tmp_path):
    def run(folder, name, result, expected, options, score):
        made = files(folder, left_txt="one\ntwo\nthree\n", right_txt="one\n2\nthree\nfour\n",
                     table_csv="name,age\nann,3\ncid,5\n",
                     settings_json=json.dumps({"editor": {"size": 14, "font": "Monospace"}}),
                     broken_json="{nope", conf_yaml="a:\n  b: [1, 2]\n",
                     log_txt="12:00:01 start\nnothing\n23:59:59 end\n",
                     a_py="#!/usr/bin/env python\nx = 1\n\n\tif x:\n\t\tprint(x)   \n",
                     b_py="x = 1\n    if x:\n        print(x)\n")
        db = sqlite3.connect(folder / "db")
        db.execute("create table t (v int)")
        db.executemany("insert into t values (?)", [(1,), (2,), (3,)])
        db.commit()
        db.close()
        made["db"] = str(folder / "db")

        def resolve(value):
            return made[value[1:]] if isinstance(value, str) and value.startswith("@") else value

        args = (resolve(result), resolve(expected))
        return (general.METRICS[name](*args, **options),
                getattr(reference("general"), name)(*args, **options), score)

    check_all(CASES, run, tmp_path)
