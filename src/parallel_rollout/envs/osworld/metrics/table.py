"""Spreadsheet metrics: ``compare_table`` (a sequence of rules over a result and an expected
workbook), ``compare_csv`` and ``compare_conference_city_in_order``.

``compare_table`` rules, each ``{"type": T, ...}``, all of which must hold: ``sheet_name``,
``sheet_data`` (values as pandas reads them, rounded to ``precision``), ``sheet_print`` (the
sheet as LibreOffice prints it to ``<book>-<sheet>.csv`` beside the workbook), ``sheet_fuzzy``,
``sparkline``, ``chart``, ``style``, ``freeze``, ``zoom``, ``data_validation``, ``row_props``,
``col_props``, ``filter``, ``pivot_table``, ``check_cell``. A sheet is named ``0`` / ``RI0``
(the result's first sheet), ``RN<name>``, ``EI<i>`` or ``EN<name>`` (the expected book's).
Needs the ``[osworld]`` extra (openpyxl, pandas, rapidfuzz), imported when called.
"""

from __future__ import annotations

import os

from ..rule_keys import MalformedRule
from . import xlsx
from .rules import match_value

_ENCODINGS = ("utf-8", "utf-8-sig", "latin-1", "windows-1252", "gbk", "cp1251", "iso-8859-1")


def read_lines(path: str) -> list[str]:
    """A text file's lines in the first encoding that decodes it."""
    with open(path, "rb") as handle:
        data = handle.read()
    for encoding in _ENCODINGS:
        try:
            return data.decode(encoding).splitlines()
        except UnicodeDecodeError:
            continue
    return data.decode("utf-8", errors="replace").splitlines()


def compare_csv(result: str | None, expected, **options) -> float:
    """1 when the result file's lines equal those of the expected file (or of any of a list);
    ``strict`` false strips lines, ``ignore_case`` lowers them."""
    if result is None:
        return 0.0
    try:
        mine = read_lines(result)
    except OSError:
        return 0.0

    def shaped(lines):
        if not options.get("strict", True):
            lines = [line.strip() for line in lines]
        if options.get("ignore_case", False):
            lines = [line.lower() for line in lines]
        return list(lines)

    for path in [expected] if isinstance(expected, str) else expected:
        try:
            if shaped(mine) == shaped(read_lines(path)):
                return 1.0
        except OSError:
            continue
    return 0.0


class _Books:
    """The result and expected workbooks in the three forms rules read: file path (printed
    CSV and stored values), pandas ExcelFile and openpyxl Workbook."""

    def __init__(self, result: str):
        import openpyxl
        import pandas as pd

        self.paths = [result, None]
        self.frames = [pd.ExcelFile(result), None]
        self.books = [openpyxl.load_workbook(result), None]
        self.names = [self.frames[0].sheet_names, None]

    def expect(self, expected: str) -> None:
        """Load the expected book (its failure is an error, not a 0)."""
        import openpyxl
        import pandas as pd

        self.paths[1] = expected
        self.books[1] = openpyxl.load_workbook(expected)
        self.frames[1] = pd.ExcelFile(expected)
        self.names[1] = self.frames[1].sheet_names

    def locate(self, index) -> tuple[int, str]:
        """(0 result / 1 expected, sheet name) of a sheet index; "" for one out of range."""
        if isinstance(index, int):
            names = self.names[0]
            return 0, names[index] if names and index < len(names) else ""
        for prefix, side, by_name in (("RI", 0, False), ("RN", 0, True), ("EI", 1, False), ("EN", 1, True)):
            if index.startswith(prefix):
                if by_name:
                    return side, index[2:]
                try:
                    return side, self.names[side][int(index[2:])]
                except (TypeError, ValueError, IndexError):
                    return side, ""
        raise ValueError(f"unrecognized sheet index {index!r}")

    def frame(self, index):
        import pandas as pd

        side, name = self.locate(index)
        try:
            return pd.read_excel(self.frames[side], name)
        except Exception:
            return None

    def sheet(self, index):
        side, name = self.locate(index)
        try:
            return self.books[side][name]
        except Exception:
            return None

    def printed(self, index) -> list[str] | None:
        side, name = self.locate(index)
        csv = f"{os.path.splitext(self.paths[side])[0]}-{name}.csv"
        try:
            lines = [line.strip() for line in read_lines(csv)]
        except OSError:
            return None
        while lines and not lines[-1]:
            lines.pop()
        return lines

    def book(self, index):
        side, name = self.locate(index)
        return self.books[side], name

    def path(self, index):
        side, name = self.locate(index)
        return self.paths[side], name


def _fuzzy_cells(books: _Books, rule: dict) -> bool:
    from openpyxl.utils import get_column_letter
    from openpyxl.worksheet.cell_range import MultiCellRange
    from rapidfuzz import fuzz

    first, second = books.path(rule["sheet_idx0"]), books.path(rule["sheet_idx1"])
    ok = True
    for check in rule["rules"]:
        for cell_range in MultiCellRange(check["range"]):
            for row, col in cell_range.cells:
                coordinate = f"{get_column_letter(col)}{row}"
                a = str(xlsx.read_cell_value(*first, coordinate))
                b = str(xlsx.read_cell_value(*second, coordinate))
                for old, new in check.get("normalization", []):
                    a, b = a.replace(old, new), b.replace(old, new)
                if "trim_leadings" in check:
                    a, b = a.lstrip(check["trim_leadings"]), b.lstrip(check["trim_leadings"])
                if "trim_trailings" in check:
                    a, b = a.rstrip(check["trim_trailings"]), b.rstrip(check["trim_trailings"])
                if "ignore_chars" in check:
                    drop = set(check["ignore_chars"])
                    a = "".join(ch for ch in a if ch not in drop)
                    b = "".join(ch for ch in b if ch not in drop)
                if check.get("ignore_case", False):
                    a, b = a.lower(), b.lower()
                kind = check["type"]
                if kind == "includes":
                    ok = ok and b in a
                elif kind == "included_by":
                    ok = ok and a in b
                elif kind == "fuzzy_match":
                    ok = ok and fuzz.ratio(a, b) >= check.get("threshold", 85.0)
                elif kind == "exact_match":
                    ok = ok and a == b
    return ok


def _data_validation(sheet, rule: dict) -> bool:
    validators = sheet.data_validations.dataValidation
    ok = len(validators) >= len(rule["dv_props"])
    for validator in validators:
        ok = ok and any(all(match_value(getattr(validator, attr), check) for attr, check in props.items())
                        for props in rule["dv_props"])
        if not ok:
            break
    return ok


def _check_cell(books: _Books, rule: dict) -> bool | None:
    """None: the sheet is missing (the metric is 0)."""
    sheet = books.sheet(rule["sheet_idx"])
    if sheet is None:
        return None
    cell = sheet[rule["coordinate"]]
    ok = True
    for prop, check in rule["props"].items():
        try:
            value = (xlsx.read_cell_value(*books.path(rule["sheet_idx"]), rule["coordinate"])
                     if prop == "value" else xlsx.cell_style(prop, cell))
        except Exception:
            value = None
        ok = ok and match_value(value, check)
    return ok


def _one_rule(books: _Books, rule: dict) -> bool | None:
    """Whether one rule holds; None when a sheet it reads is missing (the metric is 0)."""
    kind = rule["type"]
    if kind == "sheet_name":
        return books.names[0] == books.names[1]
    if kind == "sheet_data":
        first = books.frame(rule["sheet_idx0"])
        if first is None:
            return None
        digits = rule.get("precision", 4)
        second = books.frame(rule["sheet_idx1"])
        return first.round(digits).equals(second.round(digits))
    if kind == "sheet_print":
        first = books.printed(rule["sheet_idx0"])
        if first is None:
            return None
        second = books.printed(rule["sheet_idx1"])
        if rule.get("ignore_case", False):
            first, second = [l.lower() for l in first], [l.lower() for l in second]
        return first == second
    if kind == "sheet_fuzzy":
        return _fuzzy_cells(books, rule)
    if kind == "sparkline":
        return xlsx.sparklines(*books.path(rule["sheet_idx0"])) == xlsx.sparklines(*books.path(rule["sheet_idx1"]))
    if kind == "chart":
        props = rule.get("chart_props", ())
        return xlsx.charts(*books.book(rule["sheet_idx0"]), props) == xlsx.charts(*books.book(rule["sheet_idx1"]), props)
    if kind == "style":
        props = rule.get("props", ())
        return (xlsx.styles(*books.book(rule["sheet_idx0"]), books.path(rule["sheet_idx0"])[0], props)
                == xlsx.styles(*books.book(rule["sheet_idx1"]), books.path(rule["sheet_idx1"])[0], props))
    if kind == "freeze":
        first = books.sheet(rule["sheet_idx0"])
        if first is None:
            return None
        return first.freeze_panes == books.sheet(rule["sheet_idx1"]).freeze_panes
    if kind in ("zoom", "data_validation"):
        sheet = books.sheet(rule["sheet_idx"])
        if sheet is None:
            return None
        if kind == "zoom":
            return match_value(sheet.sheet_view.zoomScale or 100.0, rule)
        return _data_validation(sheet, rule)
    if kind in ("row_props", "col_props"):
        obj, props = ("row" if kind == "row_props" else "column"), rule.get("props", ())
        return (xlsx.dimensions(*books.book(rule["sheet_idx0"]), obj, props)
                == xlsx.dimensions(*books.book(rule["sheet_idx1"]), obj, props))
    if kind == "filter":
        return xlsx.filters(*books.book(rule["sheet_idx0"])) == xlsx.filters(*books.book(rule["sheet_idx1"]))
    if kind == "pivot_table":
        props = rule.get("pivot_props", ())
        return (xlsx.pivot_tables(*books.book(rule["sheet_idx0"]), props)
                == xlsx.pivot_tables(*books.book(rule["sheet_idx1"]), props))
    if kind == "check_cell":
        try:
            return _check_cell(books, rule)
        except MalformedRule:  # the task file's rule lacks a key: its error, not the agent's 0
            raise
        except Exception:
            return None
    raise NotImplementedError(f"unknown compare_table rule type {kind!r}")


def compare_table(result: str | None, expected: str | None = None, **options) -> float:
    """1 when every rule of ``options["rules"]`` holds between the result and expected books."""
    if result is None or not os.path.exists(result):
        return 0.0
    try:
        books = _Books(result)
    except Exception:
        return 0.0
    if expected is not None:
        books.expect(expected)
    for rule in options["rules"]:
        if not _one_rule(books, rule):
            return 0.0
    return 1.0


def compare_conference_city_in_order(result: str, expected: dict, **options) -> float:
    """1 when each of C2:C22 of the result's active sheet contains its expected city (or one
    of a list of spellings), in order."""
    import openpyxl

    wanted = expected["expected"]
    sheet = openpyxl.load_workbook(result).active
    cities = [cell.value for row in sheet["C2:C22"] for cell in row]
    try:
        for index, city in enumerate(cities):
            want = wanted[index]
            if isinstance(want, str):
                if want not in city:
                    return 0.0
            elif isinstance(want, list):
                if not any(w in city for w in want):
                    return 0.0
            else:
                raise TypeError("expected city must be a string or a list of strings")
    except Exception:
        return 0.0
    return 1.0


METRICS = {"compare_table": compare_table, "compare_csv": compare_csv,
           "compare_conference_city_in_order": compare_conference_city_in_order}
