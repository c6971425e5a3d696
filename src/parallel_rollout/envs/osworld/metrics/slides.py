"""``compare_pptx_files``: two presentations are the same deck as OSWorld judges it.

Per slide: background colour (its own solid fill or the master's), speaker notes, the number
of shapes; per shape pair: position and size within ``approximately_tolerance`` (relative,
default 0.005), tables cell by cell, text, paragraph count, alignment (none means left),
indent level, runs and their font name/size/bold/italic/colour/underline/strike-through,
the slide's bullets; and the alignment of every text shape, groups included. ``examine_*``
options switch single checks off (or, for the task-specific position checks, on);
``examine_run_count``, which OSWorld's newer source reads (desktop-env 1.0.2 does not) and two
real tasks set false, lets a paragraph's text be split into runs differently. The score is
1 or 0. Needs python-pptx (the ``[osworld]`` extra), imported when called.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from typing import Any

_ON = ("number_of_slides", "shape", "text", "indent", "font_name", "font_size", "font_bold",
       "font_italic", "color_rgb", "font_underline", "strike_through", "alignment", "bullets",
       "background_color", "note", "run_count")
_OFF = ("title_bottom_position", "table_bottom_position", "right_position", "top_position",
        "shape_for_shift_size", "image_size", "modify_height")
#: the options compare_pptx_files reads: each check's ``examine_<name>`` switch and the tolerance
OPTIONS = ("approximately_tolerance", *(f"examine_{name}" for name in (*_ON, *_OFF)))
_A = "{http://schemas.openxmlformats.org/drawingml/2006/main}"
_PICTURE, _FREEFORM, _TABLE = 13, 5, 19


class _Mismatch(Exception):
    """The decks differ (the score is 0)."""


def _need(condition: bool) -> None:
    if not condition:
        raise _Mismatch


def _close(a, b, tolerance: float) -> bool:
    if a == b:
        return True
    if a == 0 or b == 0:
        return False
    return abs(a - b) / max(abs(a), abs(b)) <= tolerance


def _background(slide):
    fill = slide.background.fill
    if fill.type == 1:
        return fill.fore_color.rgb
    if fill.type == 5:
        master = slide.slide_layout.slide_master.background.fill
        return master.fore_color.rgb if master.type == 1 else None
    return None


def _text_shapes(shapes) -> list:
    found = []
    for shape in shapes:
        if hasattr(shape, "text") and hasattr(shape, "text_frame"):
            found.append(shape)
        if hasattr(shape, "shapes"):
            found.extend(_text_shapes(shape.shapes))
    return found


def _bullets(xml: str) -> list[tuple]:
    """(level, bullet char, text) of every non-blank paragraph of a slide's XML."""
    found = []
    for paragraph in ET.fromstring(xml).iter(_A + "p"):
        props = paragraph.find(_A + "pPr")
        level, char = "No Level", "No Bullet"
        if props is not None:
            level = props.get("lvl")
            bullet = props.find(_A + "buChar")
            char = bullet.get("char") if bullet is not None else "No Bullet"
        text = "".join(t.text for t in paragraph.iter(_A + "t"))
        if text.strip():
            found.append(("0" if level is None else level, char, text))
    return found


def _alignment(paragraph):
    from pptx.enum.text import PP_ALIGN

    return PP_ALIGN.LEFT if paragraph.alignment is None else paragraph.alignment


def _falsy_same(a, b) -> bool:
    return a == b or (a in (None, False) and b in (None, False))


def _underline_same(a, b) -> bool:
    if a == b:
        return True
    if a is not None and b is not None:
        return False
    return not ((a is None and b is True) or (a is True and b is None))


def _colors_same(run1, run2) -> bool:
    if hasattr(run1.font.color, "rgb") and hasattr(run2.font.color, "rgb"):
        return run1.font.color.rgb == run2.font.color.rgb
    return True


def _runs(run1, run2, on: dict) -> None:
    font1, font2 = run1.font, run2.font
    _need(font1.name == font2.name or not on["font_name"])
    _need(font1.size == font2.size or not on["font_size"])
    _need(_falsy_same(font1.bold, font2.bold) or not on["font_bold"])
    _need(_falsy_same(font1.italic, font2.italic) or not on["font_italic"])
    _need(_colors_same(run1, run2) or not on["color_rgb"])
    _need(_underline_same(font1.underline, font2.underline) or not on["font_underline"])
    _need(font1._element.attrib.get("strike", "noStrike") == font2._element.attrib.get("strike", "noStrike")
          or not on["strike_through"])
    if on["bullets"]:
        try:
            first, second = _bullets(run1.part.blob.decode("utf-8")), _bullets(run2.part.blob.decode("utf-8"))
        except Exception:
            return
        _need(first == second)


def _table(shape1, shape2, on: dict) -> None:
    table1, table2 = shape1.table, shape2.table
    _need(len(table1.rows) == len(table2.rows) and len(table1.columns) == len(table2.columns))
    for row in range(len(table1.rows)):
        for col in range(len(table1.columns)):
            paras1 = table1.cell(row, col).text_frame.paragraphs
            paras2 = table2.cell(row, col).text_frame.paragraphs
            _need(len(paras1) == len(paras2))
            for para1, para2 in zip(paras1, paras2):
                _need(len(para1.runs) == len(para2.runs) or not on["run_count"])
                for run1, run2 in zip(para1.runs, para2.runs):
                    _need(_colors_same(run1, run2) or not on["color_rgb"])
                    _need(_falsy_same(run1.font.bold, run2.font.bold))
                    _need(_falsy_same(run1.font.italic, run2.font.italic))
                    _need(_underline_same(run1.font.underline, run2.font.underline))


def _boxes(shape1, shape2, slide_no: int, on: dict, tolerance: float) -> None:
    """The position and size checks, the task-specific ones included."""
    same_box = all(_close(getattr(shape1, a), getattr(shape2, a), tolerance)
                   for a in ("left", "top", "width", "height"))
    texts = hasattr(shape1, "text") and hasattr(shape2, "text")
    if on["title_bottom_position"]:
        if texts and shape1.text == shape2.text:
            _need(not (shape1.text == "Product Comparison"
                       and (shape1.top <= shape2.top or shape1.top < 3600000)))
        else:
            _need(same_box)
    if on["table_bottom_position"]:
        if slide_no == 3 and shape1.shape_type == _TABLE and shape2.shape_type == _TABLE:
            _need(not (shape1.top <= shape2.top or shape1.top < 3600000))
        else:
            _need(same_box)
    if on["right_position"] and slide_no == 2 and not hasattr(shape1, "text") and not hasattr(shape2, "text"):
        _need(not (shape1.left <= shape2.left or shape1.left < 4320000))
    if on["top_position"] and slide_no == 2 and shape1.shape_type == _PICTURE and shape2.shape_type == _PICTURE:
        _need(not (shape1.top >= shape2.top or shape1.top > 1980000))
    if on["shape_for_shift_size"] and not same_box:
        _need(texts and shape1.text == shape2.text
              and shape1.text == "Elaborate on what you want to discuss.")
    _need(same_box or not on["shape"])
    if on["image_size"]:
        if shape1.shape_type == _PICTURE and shape2.shape_type == _PICTURE:
            _need(_close(shape1.width, shape2.width, tolerance) and _close(shape1.height, shape2.height, tolerance))
        else:
            _need(same_box)
    if on["modify_height"]:
        if (not hasattr(shape1, "text") and not hasattr(shape2, "text")) or \
                (shape1.shape_type == _FREEFORM and shape2.shape_type == _FREEFORM):
            _need(_close(shape1.height, shape2.height, tolerance))
        else:
            _need(same_box)


def _texts(shape1, shape2, on: dict) -> None:
    _need(shape1.text.strip() == shape2.text.strip() or not on["text"])
    paras1, paras2 = shape1.text_frame.paragraphs, shape2.text_frame.paragraphs
    _need(len(paras1) == len(paras2))
    for para1, para2 in zip(paras1, paras2):
        _need(not on["alignment"] or _alignment(para1) == _alignment(para2))
        _need(para1.text == para2.text or not on["text"])
        _need(para1.level == para2.level or not on["indent"])
        _need(len(para1.runs) == len(para2.runs) or not on["run_count"])
        for run1, run2 in zip(para1.runs, para2.runs):
            _runs(run1, run2, on)


def _slides(slide1, slide2, slide_no: int, on: dict, tolerance: float) -> None:
    _need(_background(slide1) == _background(slide2) or not on["background_color"])
    notes1 = slide1.notes_slide.notes_text_frame.text.strip()
    notes2 = slide2.notes_slide.notes_text_frame.text.strip()
    _need(notes1 == notes2 or not on["note"])
    _need(len(slide1.shapes) == len(slide2.shapes))
    for shape1, shape2 in zip(slide1.shapes, slide2.shapes):
        _boxes(shape1, shape2, slide_no, on, tolerance)
        if shape1.shape_type == _TABLE:
            _table(shape1, shape2, on)
        if hasattr(shape1, "text") and hasattr(shape2, "text"):
            _texts(shape1, shape2, on)
    texts1, texts2 = _text_shapes(slide1.shapes), _text_shapes(slide2.shapes)
    _need(len(texts1) == len(texts2))
    for shape1, shape2 in zip(texts1, texts2) if on["alignment"] else ():
        _need(shape1.text.strip() == shape2.text.strip() or not on["text"])
        paras1, paras2 = shape1.text_frame.paragraphs, shape2.text_frame.paragraphs
        _need(len(paras1) == len(paras2))
        _need(all(_alignment(a) == _alignment(b) for a, b in zip(paras1, paras2)))


def compare_pptx_files(result: str, expected: str, **options: Any) -> float:
    """1 when the result deck matches the expected one on every examined property."""
    from pptx import Presentation

    deck1, deck2 = Presentation(result), Presentation(expected)
    on = {name: options.get(f"examine_{name}", True) for name in _ON}
    on.update({name: options.get(f"examine_{name}", False) for name in _OFF})
    tolerance = options.get("approximately_tolerance", 0.005)
    if on["number_of_slides"] and len(deck1.slides) != len(deck2.slides):
        return 0.0
    try:
        for number, (slide1, slide2) in enumerate(zip(deck1.slides, deck2.slides), start=1):
            _slides(slide1, slide2, number, on, tolerance)
    except _Mismatch:
        return 0.0
    return 1.0


METRICS = {"compare_pptx_files": compare_pptx_files}
