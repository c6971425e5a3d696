"""compare_table and compare_csv give OSWorld's scores on generated workbooks, passing and
failing cases alike (OSWorld's functions from desktop-env run on the same files)."""

from __future__ import annotations

import pytest

from osworld_reference import check_all, reference
from parallel_rollout.envs.osworld.metrics import table

openpyxl = pytest.importorskip("openpyxl")


def book(path, rows, *, sheets=("Sheet1",), edit=None):
    wb = openpyxl.Workbook()
    wb.active.title = sheets[0]
    for name in sheets[1:]:
        wb.create_sheet(name)
    for name in sheets:
        for row in rows:
            wb[name].append(row)
    if edit:
        edit(wb)
    wb.save(path)
    return str(path)


ROWS = [["Name", "Price", "Qty"], ["apple", 1.25, 3], ["pear", 2.5, 1], ["plum", 0.333333, 7]]


def bold_b2(wb):
    wb.active["B2"].font = openpyxl.styles.Font(bold=True, name="Arial", size=12)
    wb.active["B2"].number_format = "0.00"


def freeze_zoom(wb):
    wb.active.freeze_panes = "B2"
    wb.active.sheet_view.zoomScale = 150


def validate(wb):
    dv = openpyxl.worksheet.datavalidation.DataValidation(type="list", formula1='"a,b,c"')
    dv.add("D2:D9")
    wb.active.add_data_validation(dv)


def rows_cols(wb):
    wb.active.row_dimensions[2].hidden = True
    wb.active.column_dimensions["B"].width = 30


def auto_filter(wb):
    wb.active.auto_filter.ref = "A1:C4"
    wb.active.auto_filter.add_filter_column(0, ["apple", "pear"])


def chart(wb):
    from openpyxl.chart import BarChart, Reference

    c = BarChart()
    c.title = "Prices"
    c.add_data(Reference(wb.active, min_col=2, min_row=1, max_row=4), titles_from_data=True)
    c.set_categories(Reference(wb.active, min_col=1, min_row=2, max_row=4))
    wb.active.add_chart(c, "E2")


def conditional(wb):
    from openpyxl.formatting.rule import CellIsRule
    from openpyxl.styles import PatternFill

    fill = PatternFill(start_color="FFFF0000", end_color="FFFF0000", fill_type="solid")
    wb.active.conditional_formatting.add("B2:B4", CellIsRule(operator="greaterThan", formula=["2"], fill=fill))


def changed(cell, value):
    def edit(wb):
        wb.active[cell] = value
    return edit


def both(*edits):
    def edit(wb):
        for e in edits:
            e(wb)
    return edit


DATA = [{"type": "sheet_data", "sheet_idx0": 0, "sheet_idx1": "EI0"}]
CASES = [
    # (name, result edit, expected edit, rules, OSWorld's score)
    ("same data", None, None, DATA, 1.0),
    ("one value differs", changed("B3", 2.6), None, DATA, 0.0),
    ("within precision", changed("D4", 0.3333331), changed("D4", 0.3333334), DATA, 1.0),
    ("beyond precision 2", changed("B2", 1.251), None,
     [{"type": "sheet_data", "sheet_idx0": "RNSheet1", "sheet_idx1": "ENSheet1", "precision": 2}], 1.0),
    ("missing sheet", None, None, [{"type": "sheet_data", "sheet_idx0": "RNNope", "sheet_idx1": "EI0"}], 0.0),
    ("sheet names", None, None, [{"type": "sheet_name"}], 1.0),
    ("check_cell value", None, None, [{"type": "check_cell", "sheet_idx": 0, "coordinate": "A3",
                                       "props": {"value": {"method": "eq", "ref": "pear"}}}], 1.0),
    ("check_cell number", None, None, [{"type": "check_cell", "sheet_idx": 0, "coordinate": "C4",
                                        "props": {"value": {"method": "approx:0.1", "ref": 7}}}], 1.0),
    ("check_cell regex fails", None, None, [{"type": "check_cell", "sheet_idx": 0, "coordinate": "A2",
                                             "props": {"value": {"method": "re.I", "ref": "^PEAR"}}}], 0.0),
    ("check_cell style", bold_b2, None, [{"type": "check_cell", "sheet_idx": 0, "coordinate": "B2", "props": {
        "font_bold": {"method": "eq", "ref": True}, "font_name": {"method": "eq", "ref": "Arial"},
        "number_format": {"method": "eq", "ref": "0.00"}}}], 1.0),
    ("check_cell style missing", None, None, [{"type": "check_cell", "sheet_idx": 0, "coordinate": "B2",
                                               "props": {"font_bold": {"method": "eq", "ref": True}}}], 0.0),
    ("fuzzy", changed("A2", "APPLE"), None, [{"type": "sheet_fuzzy", "sheet_idx0": "RI0", "sheet_idx1": "EI0",
                                              "rules": [{"range": ["A2:A4"], "type": "exact_match",
                                                         "ignore_case": True}]}], 1.0),
    # a string with outer blanks is stored inline with xml:space, which OSWorld reads as a dict
    ("fuzzy inline string", changed("A2", "apple "), None, [{"type": "sheet_fuzzy", "sheet_idx0": "RI0",
                                                            "sheet_idx1": "EI0", "rules": [{"range": ["A2:A4"],
                                                            "type": "exact_match", "trim_trailings": " "}]}], 0.0),
    ("fuzzy fails", changed("A2", "banana"), None, [{"type": "sheet_fuzzy", "sheet_idx0": "RI0", "sheet_idx1": "EI0",
                                                     "rules": [{"range": ["A2:A4"], "type": "fuzzy_match"}]}], 0.0),
    ("freeze and zoom", freeze_zoom, freeze_zoom, [{"type": "freeze", "sheet_idx0": 0, "sheet_idx1": "EI0"},
                                                   {"type": "zoom", "sheet_idx": 0, "method": "ge", "ref": 140}], 1.0),
    ("freeze differs", freeze_zoom, None, [{"type": "freeze", "sheet_idx0": 0, "sheet_idx1": "EI0"}], 0.0),
    ("data validation", validate, None, [{"type": "data_validation", "sheet_idx": 0, "dv_props": [
        {"type": {"method": "eq", "ref": "list"}, "formula1": {"method": "str_set_eq", "ref": ["a", "b", "c"]}}]}], 1.0),
    ("data validation absent", None, None, [{"type": "data_validation", "sheet_idx": 0, "dv_props": [
        {"type": {"method": "eq", "ref": "list"}}]}], 0.0),
    ("row and column props", rows_cols, rows_cols, [
        {"type": "row_props", "sheet_idx0": 0, "sheet_idx1": "EI0", "props": ["hidden"]},
        {"type": "col_props", "sheet_idx0": 0, "sheet_idx1": "EI0", "props": ["width"]}], 1.0),
    ("row props differ", rows_cols, None, [
        {"type": "row_props", "sheet_idx0": 0, "sheet_idx1": "EI0", "props": ["hidden"]}], 0.0),
    ("filter", auto_filter, auto_filter, [{"type": "filter", "sheet_idx0": 0, "sheet_idx1": "EI0"}], 1.0),
    ("filter differs", auto_filter, None, [{"type": "filter", "sheet_idx0": 0, "sheet_idx1": "EI0"}], 0.0),
    ("chart", chart, chart, [{"type": "chart", "sheet_idx0": 0, "sheet_idx1": "EI0",
                              "chart_props": ["type", "title", "legend", "direction"]}], 1.0),
    ("chart missing", None, chart, [{"type": "chart", "sheet_idx0": 0, "sheet_idx1": "EI0",
                                     "chart_props": ["type"]}], 0.0),
    ("style", bold_b2, bold_b2, [{"type": "style", "sheet_idx0": 0, "sheet_idx1": "EI0",
                                  "props": ["font_bold", "font_name", "number_format", "bgcolor"]}], 1.0),
    ("conditional style", conditional, conditional, [{"type": "style", "sheet_idx0": 0, "sheet_idx1": "EI0",
                                                      "props": ["bgcolor"]}], 1.0),
    ("conditional style missing", None, conditional, [{"type": "style", "sheet_idx0": 0, "sheet_idx1": "EI0",
                                                       "props": ["bgcolor", "fill_type"]}], 0.0),
    ("two sheets", None, None, [{"type": "sheet_data", "sheet_idx0": "RI1", "sheet_idx1": "EI1"}], 1.0),
    ("rules stop at the first failure", changed("B3", 9), None,
     DATA + [{"type": "sheet_name"}], 0.0),
]


def test_compare_table_scores_as_osworld(tmp_path):
    def run(folder, name, edit_result, edit_expected, rules, score):
        sheets = ("Sheet1", "Other") if name == "two sheets" else ("Sheet1",)
        result = book(folder / "result.xlsx", ROWS, sheets=sheets, edit=edit_result)
        expected = book(folder / "expected.xlsx", ROWS, sheets=sheets, edit=edit_expected)
        return (table.compare_table(result, expected, rules=rules),
                reference("table").compare_table(result, expected, rules=rules), score)

    check_all(CASES, run, tmp_path)


def test_compare_table_without_a_result_file_is_zero(tmp_path):
    expected = book(tmp_path / "expected.xlsx", ROWS)
    for path in (None, str(tmp_path / "missing.xlsx")):
        assert table.compare_table(path, expected, rules=DATA) == 0.0
        assert reference("table").compare_table(path, expected, rules=DATA) == 0.0


@pytest.mark.parametrize("result_lines, expected_lines, ignore_case, score", [
    (["a,b", "1,2", ""], ["a,b", "1,2"], False, 1.0),
    (["A,b", "1,2"], ["a,b", "1,2"], False, 0.0),
    (["A,b", "1,2"], ["a,b", "1,2"], True, 1.0),
])
def test_sheet_print_reads_the_printed_csv_beside_each_book(tmp_path, result_lines, expected_lines,
                                                             ignore_case, score):
    result = book(tmp_path / "result.xlsx", ROWS)
    expected = book(tmp_path / "expected.xlsx", ROWS)
    (tmp_path / "result-Sheet1.csv").write_text("\n".join(result_lines))
    (tmp_path / "expected-Sheet1.csv").write_text("\n".join(expected_lines))
    rules = [{"type": "sheet_print", "sheet_idx0": "RNSheet1", "sheet_idx1": "ENSheet1", "ignore_case": ignore_case}]
    assert table.compare_table(result, expected, rules=rules) == score
    assert reference("table").compare_table(result, expected, rules=rules) == score


@pytest.mark.parametrize("options, score", [({}, 0.0), ({"strict": False}, 1.0),
                                            ({"strict": False, "ignore_case": True}, 1.0)])
def test_compare_csv(tmp_path, options, score):
    (tmp_path / "r.csv").write_text("a, b \nc,d\n")
    (tmp_path / "e.csv").write_text("a, b\nc,d\n")
    (tmp_path / "other.csv").write_text("x\n")
    expected = [str(tmp_path / "other.csv"), str(tmp_path / "e.csv")]
    assert table.compare_csv(str(tmp_path / "r.csv"), expected, **options) == score
    assert reference("table").compare_csv(str(tmp_path / "r.csv"), expected, **options) == score
