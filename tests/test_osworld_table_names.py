"""compare_table's names checked against the code that reads them: the cell styles, chart,
pivot and row/column properties a task file may name (``xlsx.CELL_STYLES``, ``CHART_PROPS``,
``PIVOT_PROPS``, ``DIMENSION_PROPS``) are the ones the load lets through and the ones grading
reads, on real openpyxl workbooks, so the load's refusal and grading cannot drift apart: a name
the load refuses that grading reads refuses a good task, and one the load lets through that
grading does not read scores the agent 0 or compares nothing."""

from __future__ import annotations

import ast
import inspect
import textwrap

import pytest

from parallel_rollout.envs.osworld.metrics import xlsx
from parallel_rollout.envs.osworld.rule_methods import table_rules_problem

openpyxl = pytest.importorskip("openpyxl")

PAIR = {"sheet_idx0": 0, "sheet_idx1": 1}


def load_problem(rule: dict) -> str | None:
    """What the load says of a compare_table task with this one rule."""
    return table_rules_problem("compare_table", {"rules": [rule]})


@pytest.fixture
def book(tmp_path):
    """A saved and reloaded workbook: a styled, linked, merged sheet, a hidden row, a wide
    column and a 3D bar chart with its titles (grading reads books as loaded from a file)."""
    from openpyxl.chart import BarChart3D, Reference
    from openpyxl.drawing.spreadsheet_drawing import AnchorMarker, TwoCellAnchor
    from openpyxl.styles import Font, PatternFill

    wb = openpyxl.Workbook()
    sheet = wb.active
    for row in (["Name", "Price"], ["apple", 1.25], ["pear", 2.5]):
        sheet.append(row)
    sheet["B2"].font = Font(name="Arial", bold=True, color="FFFF0000")
    sheet["B2"].fill = PatternFill("solid", fgColor="FF00FF00")
    sheet["B2"].number_format = "0.00"
    sheet["A2"].hyperlink = "https://example.invalid/apple"
    sheet["D1"] = "merged"
    sheet.merge_cells("D1:E1")
    sheet.row_dimensions[2].hidden = True
    sheet.column_dimensions["B"].width = 30
    chart = BarChart3D()  # a 2D chart has no z axis: its ztitle raises, as in OSWorld
    chart.title, chart.x_axis.title, chart.y_axis.title, chart.z_axis.title = "Prices", "Fruit", "Euro", "Series"
    chart.add_data(Reference(sheet, min_col=2, min_row=1, max_row=3), titles_from_data=True)
    chart.set_categories(Reference(sheet, min_col=1, min_row=2, max_row=3))
    sheet.add_chart(chart, TwoCellAnchor(editAs="oneCell", _from=AnchorMarker(col=6, row=1),
                                         to=AnchorMarker(col=12, row=15)))  # as LibreOffice saves one
    path = tmp_path / "book.xlsx"
    wb.save(path)
    return openpyxl.load_workbook(path)


def test_each_cell_style_the_load_lets_through_is_one_cell_style_reads(book):
    sheet = book.active
    read = {name: xlsx.cell_style(name, sheet["B2"]) for name in xlsx.CELL_STYLES}  # none raises
    assert (read["font_name"], read["font_bold"], read["font_color"]) == ("Arial", True, "FFFF0000")
    assert (read["number_format"], read["fill_type"], read["fgcolor"]) == ("0.00", "patternFill", "FF00FF00")
    assert xlsx.cell_style("hyperlink", sheet["A2"]).target == "https://example.invalid/apple"
    assert xlsx.cell_style("merge", sheet["E1"]) is True and read["merge"] is False
    assert load_problem({"type": "style", **PAIR, "props": list(xlsx.CELL_STYLES)}) is None
    assert load_problem({"type": "check_cell", "sheet_idx": 0, "coordinate": "B2",
                         "props": {name: {"method": "eq", "ref": 1} for name in xlsx.CELL_STYLES}}) is None
    with pytest.raises(NotImplementedError):  # grading raised on it (a 0): the load refuses it
        xlsx.cell_style("font_colour", sheet["B2"])
    assert "names 'font_colour', which the metric does not read" in load_problem(
        {"type": "style", **PAIR, "props": ["font_colour"]})


def test_each_chart_property_the_load_lets_through_is_one_charts_reads(book):
    (info,) = xlsx.charts(book, "Sheet", xlsx.CHART_PROPS).values()
    assert set(info) == set(xlsx.CHART_PROPS)
    assert (info["title"], info["xtitle"], info["ytitle"], info["ztitle"], info["type"], info["direction"]) == \
        ("Prices", "Fruit", "Euro", "Series", "bar3DChart", "col")
    assert info["anchor"] == ["oneCell", 6, 15, 12, 15]
    assert load_problem({"type": "chart", **PAIR, "chart_props": list(xlsx.CHART_PROPS)}) is None
    (unread,) = xlsx.charts(book, "Sheet", ["titel"]).values()
    assert unread == {}  # compared nothing: the load refuses it
    assert "names 'titel', which the metric does not read" in load_problem(
        {"type": "chart", **PAIR, "chart_props": ["titel"]})


def _tested_in_props(func) -> set[str]:
    """The names ``func``'s source tests with ``"name" in props``."""
    tree = ast.parse(textwrap.dedent(inspect.getsource(func)))
    return {node.left.value for node in ast.walk(tree)
            if isinstance(node, ast.Compare) and isinstance(node.left, ast.Constant)
            and isinstance(node.ops[0], ast.In) and isinstance(node.comparators[0], ast.Name)
            and node.comparators[0].id == "props"}


def test_each_pivot_property_the_load_lets_through_is_one_pivot_tables_reads():
    from openpyxl.pivot.table import TableDefinition

    tested = _tested_in_props(xlsx.pivot_tables)
    assert tested and set(xlsx.PIVOT_PROPS) == tested | set(xlsx._PIVOT_ATTRS)
    missing = [attr for attr in xlsx._PIVOT_ATTRS.values() if not hasattr(TableDefinition, attr)]
    assert not missing, f"openpyxl's pivot table has no {missing}"
    assert load_problem({"type": "pivot_table", **PAIR, "pivot_props": list(xlsx.PIVOT_PROPS)}) is None
    assert "names 'show_totals', which" in load_problem({"type": "pivot_table", **PAIR, "pivot_props": ["show_totals"]})


#: a dimension's public attributes that the metric does not compare: its worksheet (never equal
#: across two books) and a column's range (it raises on a column without min and max)
NOT_COMPARED = {"parent", "range"}


@pytest.mark.parametrize("obj, kind, key", [("row", "row_props", 2), ("column", "col_props", "B")])
def test_each_dimension_property_is_one_openpyxls_dimension_has_and_the_load_lets_through(book, obj, kind, key):
    dimension = getattr(book.active, f"{obj}_dimensions")[key]
    readable = {name for name in dir(dimension) if not name.startswith("_") and name not in NOT_COMPARED
                and not callable(getattr(dimension, name))}
    assert readable == set(xlsx.DIMENSION_PROPS[obj])
    read = xlsx.dimensions(book, "Sheet", obj, xlsx.DIMENSION_PROPS[obj])[key]
    assert read["hidden"] if obj == "row" else read["width"] == 30
    assert load_problem({"type": kind, **PAIR, "props": list(xlsx.DIMENSION_PROPS[obj])}) is None
    with pytest.raises(AttributeError):  # grading raised on it (a 0): the load refuses it
        xlsx.dimensions(book, "Sheet", obj, ["hiden"])
    assert "names 'hiden', which the metric does not read" in load_problem({"type": kind, **PAIR, "props": ["hiden"]})
