"""Reading what a spreadsheet metric compares out of an ``.xlsx``: stored cell values straight
from the sheet XML, cell styles (and the styles conditional formatting gives a cell), charts,
pivot tables, row/column dimensions, auto-filters and sparklines.

Stored values are read the way OSWorld reads them (not through openpyxl's typed values): a
number is a float, a shared or inline string is its text, a formula string or an error is its
cached text, a boolean is ``None``; sheets are found by their ``sheetId`` as
``xl/worksheets/sheet<id>.xml``. Needs the ``[osworld]`` extra (openpyxl; ``formulas`` for
conditional formatting), imported when used.
"""

from __future__ import annotations

import re
import zipfile
import xml.etree.ElementTree as ET
from typing import Any

_MAIN = "{http://schemas.openxmlformats.org/spreadsheetml/2006/main}"
_X14 = "{http://schemas.microsoft.com/office/spreadsheetml/2009/9/main}"
_XM = "{http://schemas.microsoft.com/office/excel/2006/main}"


def _shared_strings(archive: zipfile.ZipFile) -> list[str]:
    try:
        root = ET.fromstring(archive.read("xl/sharedStrings.xml"))
        return ["".join(t.text for t in item.iter(_MAIN + "t")) for item in root.findall(_MAIN + "si")]
    except Exception:  # missing part, or a run without text: OSWorld then knows no strings
        return []


def _sheet_ids(archive: zipfile.ZipFile) -> dict[str, str]:
    root = ET.fromstring(archive.read("xl/workbook.xml"))
    sheets = root.find(_MAIN + "sheets")
    return {s.get("name"): s.get("sheetId") for s in (sheets if sheets is not None else [])
            if s.tag == _MAIN + "sheet"}


def _as_parsed(node) -> Any:
    """A leaf element as OSWorld's XML-to-dict reading gives it: its text stripped of outer
    blanks (None when empty), or, when it has attributes, a dict of ``@<attribute>`` (the
    namespace URI spelled out) and ``#text``."""
    text = (node.text or "").strip() or None
    if not node.attrib:
        return text
    parsed: dict[str, Any] = {}
    for key, val in node.attrib.items():
        if key.startswith("{"):
            uri, local = key[1:].split("}", 1)
            key = f"{uri}:{local}"
        parsed["@" + key] = val
    if text is not None:
        parsed["#text"] = text
    return parsed


def read_cell_value(path: str, sheet: str, coordinate: str) -> Any:
    """The stored value of one cell (see the module doc), ``None`` when absent or unreadable."""
    try:
        with zipfile.ZipFile(path) as archive:
            strings = _shared_strings(archive)
            sheet_id = _sheet_ids(archive)[sheet]
            root = ET.fromstring(archive.read(f"xl/worksheets/sheet{sheet_id}.xml"))
    except Exception:
        return None
    cell = next((c for row in root.iter(_MAIN + "row") for c in row.findall(_MAIN + "c")
                 if c.get("r") == coordinate), None)
    if cell is None:
        return None
    kind = cell.get("t")
    value = cell.find(_MAIN + "v")
    text = value.text if value is not None else None
    try:
        if kind in (None, "n"):
            if value is None:
                return None
            return float(text)
        if kind == "s":
            if value is None:
                return None
            return strings[int(text)]
        if kind in ("str", "e"):
            return _as_parsed(value) if value is not None else None
        if kind == "inlineStr":
            inline = cell.find(_MAIN + "is")
            node = inline.find(_MAIN + "t") if inline is not None else None
            return _as_parsed(node) if node is not None else None
    except ValueError:
        return None
    return None


#: the attributes of openpyxl's row and column dimensions that ``dimensions`` reads by name: each
#: public one they have but their worksheet, their methods and a column's range (it raises without
#: min and max); tests/test_osworld_table_names.py checks the list against real dimensions
_DIMENSION = ("hidden", "collapsed", "outlineLevel", "outline_level", "style", "style_id", "has_style", "index",
              "number_format", "font", "fill", "border", "alignment", "protection", "pivotButton", "quotePrefix")
DIMENSION_PROPS = {"row": (*_DIMENSION, "height", "ht", "customHeight", "customFormat", "r", "s", "thickBot",
                           "thickTop"),
                   "column": (*_DIMENSION, "width", "customWidth", "bestFit", "auto_size", "min", "max")}
#: the pivot properties ``pivot_tables`` reads: these attributes, and the names it tests itself
_PIVOT_ATTRS = {"name": "name", "show_total": "visualTotals", "show_empty_row": "showEmptyRow",
                "show_empty_col": "showEmptyCol", "show_headers": "showHeaders", "location": "location"}
PIVOT_PROPS = (*_PIVOT_ATTRS, "filter", "selection", "ordered", "col_fields", "row_fields", "data_fields",
               "data_fields_name")


def _title(holder) -> Any:
    try:
        return holder.title.tx.rich.p[0].r[0].t
    except Exception:
        return None


def _number_format(cell, source, differential, empty: bool) -> Any:
    if empty or cell.data_type != "n":
        return None
    return cell.number_format if differential is None else differential.numFmt.formatCode


def _font(attr: str):
    return lambda cell, source, differential, empty: None if empty else getattr(source.font, attr)


def _fill_type(cell, source, differential, empty: bool) -> Any:
    try:
        return source.fill.tagname
    except Exception:
        return None


def _fill_color(cell, source, differential, empty: bool) -> Any:
    try:
        return differential.fill.bgColor.rgb if differential is not None else cell.fill.fgColor.rgb
    except Exception:
        return None


def _merged(cell, source, differential, empty: bool) -> bool:
    from openpyxl.cell.cell import MergedCell

    return isinstance(cell, MergedCell)


#: cell style name -> its reader (cell, the cell or differential style read, that style, empty?)
_CELL_STYLE = {
    "number_format": _number_format,
    **{f"font_{attr}": _font(attr) for attr in ("name", "family", "bold", "italic", "underline", "size")},
    "font_color": lambda cell, source, differential, empty: None if empty else source.font.color.rgb,
    "fill_type": _fill_type, "bgcolor": _fill_color, "fgcolor": _fill_color,
    "hyperlink": lambda cell, source, differential, empty: None if empty else (cell.hyperlink or ""),
    "merge": _merged}
#: the names ``cell_style`` reads (it raises on another): a task file's other name is refused at load
CELL_STYLES = tuple(_CELL_STYLE)


def cell_style(prop: str, cell, differential=None) -> Any:
    """One style property of an openpyxl cell, or the one a conditional format's
    differential style gives it; ``None`` for an empty cell."""
    read = _CELL_STYLE.get(prop)
    if read is None:
        raise NotImplementedError(f"unsupported cell style {prop!r}")
    return read(cell, differential or cell, differential, cell.value is None)


def _anchor(chart) -> list:
    """As OSWorld records it: the start column, then the end row twice."""
    anchor = chart.anchor
    return [anchor.editAs, anchor._from.col, anchor.to.row, anchor.to.col, anchor.to.row]


def _axis_title(axis: str):
    return lambda chart: _title(getattr(chart, f"{axis}_axis"))


#: chart property -> its reader; a name ``charts`` does not read compared nothing, refused at load
_CHART = {"title": _title, "legend": lambda chart: chart.legend.position if chart.legend is not None else None,
          "anchor": _anchor, "width": lambda chart: chart.width, "height": lambda chart: chart.height,
          "type": lambda chart: chart.tagname, "direction": lambda chart: chart.barDir,
          **{f"{axis}title": _axis_title(axis) for axis in ("x", "y", "z")}}
CHART_PROPS = tuple(_CHART)


def _ref(data) -> str:
    for kind in ("numRef", "strRef"):
        ref = getattr(data, kind, None)
        if ref is not None and hasattr(ref, "f"):
            return ref.f
    return ""


def charts(book, sheet: str, chart_props=()) -> dict[str, dict]:
    """The sheet's charts keyed by their series references, with the asked properties."""
    try:
        worksheet = book[sheet]
    except KeyError:
        return {}
    props = set(chart_props or ())
    found: dict[str, dict] = {}
    for chart in worksheet._charts:
        key = ";".join(f"{_ref(s.val)},{_ref(s.cat)}" for s in chart.series)
        info: dict[str, Any] = {name: read(chart) for name, read in _CHART.items() if name in props}
        found[key] = info
    return found


def pivot_tables(book, sheet: str, pivot_props=()) -> dict[str, dict]:
    """The sheet's pivot tables keyed by their source range, with the asked properties."""
    from openpyxl.utils import coordinate_to_tuple

    try:
        worksheet = book[sheet]
    except KeyError:
        return {}
    props = set(pivot_props or ())
    found: dict[str, dict] = {}
    for pivot in worksheet._pivots:
        per_field = [[(item.h, item.x) for item in field.items if item.x is not None]
                     for field in pivot.pivotFields]
        first = next((i for i, items in enumerate(per_field) if items), len(per_field))
        last = next((i for i in range(len(per_field) - 1, -1, -1) if per_field[i]), first - 1)
        selection = per_field[first:last + 1]
        left, right = first, len(per_field) - 1 - last if last >= first else 0
        source = pivot.cache.cacheSource
        start, end = source.worksheetSource.ref.split(":")
        (r1, c1), (r2, c2) = coordinate_to_tuple(start), coordinate_to_tuple(end)
        key = f"{source.type};{(r1, c1 + left)}:{(r2, c2 - right)};{source.worksheetSource.sheet}"
        info: dict[str, Any] = {name: getattr(pivot, attr) for name, attr in _PIVOT_ATTRS.items() if name in props}
        if "filter" in props or "selection" in props:
            info["selection"] = selection if "ordered" in props else [set(s) for s in selection]
        if "filter" in props:
            info["filter_fields"] = {f.fld for f in pivot.pageFields}
        if "col_fields" in props:
            info["col_fields"] = [f.x - left for f in pivot.colFields]
        if "row_fields" in props:
            info["row_fields"] = [f.x - left for f in pivot.rowFields]
        if "data_fields" in props:
            named = "data_fields_name" in props
            info["data_fields"] = [f"{f.fld - left:d};{f.name if named else ''};{f.subtotal};{f.showDataAs}"
                                   for f in pivot.dataFields]
        found[key] = info
    return found


def dimensions(book, sheet: str, obj: str, props=()) -> dict:
    """Row (``obj="row"``) or column dimensions: {index: {prop: value}}."""
    try:
        worksheet = book[sheet]
    except KeyError:
        return {}
    holder = getattr(worksheet, f"{obj}_dimensions")
    return {key: {p: getattr(dim, p) for p in set(props or ())} for key, dim in holder.items()}


def filters(book, sheet: str) -> dict:
    """The sheet's auto-filter: range, filtered columns, sort state."""
    try:
        worksheet = book[sheet]
    except KeyError:
        return {}
    auto = worksheet.auto_filter
    columns = []
    for column in auto.filterColumn:
        entry: dict[str, Any] = {"col_id": column.colId, "hidden_button": column.hiddenButton,
                                 "show_button": column.showButton}
        if column.filters is not None:
            entry["filters_blank"] = column.filters.blank
            entry["filters"] = set(column.filters.filter)
        if column.customFilters is not None:
            entry["custom_filters_op"] = column.customFilters._and
            entry["custom_filters"] = {(f.operator, f.val) for f in column.customFilters.customFilter}
        columns.append(entry)
    result: dict[str, Any] = {"ref": auto.ref, "filter_column": sorted(columns, key=lambda e: e["col_id"])}
    state = auto.sortState
    if state is not None:
        result["sort_state"] = {
            "sort": state.columnSort, "case": state.caseSensitive, "method": state.sortMethod,
            "ref": state.ref,
            "condition": [{"descending": c.descending, "key": c.sortBy, "ref": c.ref,
                           "custom_list": c.customList, "dxf_id": c.dxfId, "icon": c.iconSet,
                           "iconid": c.iconId} for c in state.sortCondition]}
    return result


def sparklines(path: str, sheet: str) -> dict[str, str]:
    """{target cell: source range} of the sheet's sparklines."""
    try:
        with zipfile.ZipFile(path) as archive:
            sheet_id = _sheet_ids(archive)[sheet]
            root = ET.fromstring(archive.read(f"xl/worksheets/sheet{sheet_id}.xml"))
    except Exception:
        return {}
    found = {}
    for line in root.iter(_X14 + "sparkline"):
        source, target = line.find(_XM + "f"), line.find(_XM + "sqref")
        found[target.text if target is not None else None] = source.text if source is not None else None
    return found


_ABSOLUTE = re.compile(r"\$([A-Z]{1,3})\$(\d+)(?::\$([A-Z]{1,3})\$(\d+))?")


def _cf_compare(operator_: str, value: Any, refs: list) -> bool:
    try:
        if operator_ in ("between", "notBetween"):
            low, high = min(refs), max(refs)
            inside = low <= value <= high
            return inside if operator_ == "between" else not inside
        test = {"lessThanOrEqual": lambda a, b: a <= b, "lessThan": lambda a, b: a < b,
                "equal": lambda a, b: a == b, "greaterThanOrEqual": lambda a, b: a >= b,
                "notEqual": lambda a, b: a != b, "greaterThan": lambda a, b: a > b}[operator_]
        return test(value, refs[0])
    except (TypeError, IndexError):
        return False


def _absolute_arguments(text: str, path: str, sheet: str) -> list:
    """The stored values of the absolute ranges a formula names, one list per range. A lone
    absolute cell is an error here, as in OSWorld (its range reading fails)."""
    from openpyxl.utils import get_column_letter
    from openpyxl.worksheet.cell_range import CellRange

    args = []
    for col1, row1, col2, row2 in _ABSOLUTE.findall(text):
        if not col2:
            raise ValueError(f"conditional format formula {text!r}: a lone absolute cell")
        args.append([read_cell_value(path, sheet, f"{get_column_letter(c)}{r}")
                     for r, c in CellRange(f"{col1}{row1}:{col2}{row2}").cells])
    return args


def styles(book, sheet: str, path: str, props=()) -> dict[str, list]:
    """{coordinate: [prop values]} for every cell, with conditional formatting applied to the
    cells its rules hold for (rules of types other than expression-like and ``cellIs`` are
    not evaluated)."""
    import formulas
    from openpyxl.utils import get_column_letter

    try:
        worksheet = book[sheet]
    except KeyError:
        return {}
    props = list(props or ())
    found = {c.coordinate: [cell_style(p, c) for p in props]
             for column in worksheet.iter_cols() for c in column}
    parser = formulas.Parser()
    active = None
    for fmt in worksheet.conditional_formatting:
        for rule in fmt.rules:
            compiled, arguments, unparsed = [], [], False
            for text in rule.formula:
                try:
                    compiled.append(parser.ast("=" + text)[1].compile())
                except Exception:
                    unparsed = True
                    break
                arguments.append(_absolute_arguments(text, path, sheet))
            if unparsed:
                continue
            if rule.type in ("expression", "containsText", "notContainsText", "endsWith",
                             "beginsWith", "containsErrors", "notContainsErrors"):
                def active(v, condition=compiled[0], args=arguments[0]):
                    return condition(v, *args)
            elif rule.type == "cellIs":
                try:
                    refs = [f() for f in compiled]
                except Exception:
                    continue

                def active(v, op=rule.operator, refs=refs):
                    return _cf_compare(op, v, refs)
            elif active is None:
                # OSWorld keeps the previous rule's test for other types; with none it fails
                raise ValueError(f"conditional format type {rule.type!r} is not evaluated")
            blanks = 0
            hits = []
            for cell_range in fmt.cells:
                for row, col in cell_range.cells:
                    value = read_cell_value(path, sheet, f"{get_column_letter(col)}{row}")
                    if value is None:
                        blanks += 1
                        if blanks > 50:
                            break
                        continue
                    try:
                        if active(value):
                            hits.append(worksheet.cell(row=row, column=col))
                    except Exception:
                        pass
            for cell in hits:
                found[cell.coordinate] = [cell_style(p, cell, rule.dxf) for p in props]
    return found
