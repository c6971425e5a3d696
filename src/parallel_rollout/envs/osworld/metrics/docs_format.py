"""Document metrics on how a document is formatted: fonts, sub-scripts, italics and sizes,
strike-through, colours of words in tables, highlights (``.odt``), page numbers in footers,
centred first line, tab stops, page breaks, and Writer's default font in its settings file.

Those taking two documents first require the texts to match (``compare_docx_files``) where
OSWorld does. python-docx, odfpy and scikit-image (colour distance) are the ``[osworld]``
extra, imported when called.
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from typing import Any

from .docs import compare_docx_files, open_docx

_W = "{http://schemas.openxmlformats.org/wordprocessingml/2006/main}"


def _runs(document):
    return [run for paragraph in document.paragraphs for run in paragraph.runs]


def _open(path: str | None):
    """The document, or None when it is missing or unreadable."""
    if not path:
        return None
    try:
        return open_docx(path)
    except Exception:
        return None


def compare_font_names(result: str | None, rules: dict, **options: Any) -> float:
    """1 when every run's font is ``rules["font_name"]``."""
    document = _open(result)
    if document is None:
        return 0.0
    return float(all(run.font.name == rules["font_name"] for run in _runs(document)))


def compare_subscript_contains(result: str | None, expected: str | None, **options: Any) -> float:
    """1 when some run at the same place of both documents is a sub-script."""
    doc1, doc2 = _open(result), _open(expected)
    if doc1 is None or doc2 is None or not expected:
        return 0.0
    return float(any(r1.font.subscript and r2.font.subscript
                     for p1, p2 in zip(doc1.paragraphs, doc2.paragraphs)
                     for r1, r2 in zip(p1.runs, p2.runs)))


def has_page_numbers_in_footers(result: str | None, **options: Any) -> float:
    """1 when every section's footer's first paragraph holds a digit."""
    document = _open(result)
    if document is None:
        return 0.0
    for section in document.sections:
        footer = section.footer
        if footer is None:
            return 0.0
        text = footer.paragraphs[0].text if footer.paragraphs else ""
        if not any(ch.isdigit() for ch in text):
            return 0.0
    return 1.0


def is_first_line_centered(result: str | None, **options: Any) -> float:
    """1 when the first paragraph is centred."""
    from docx.enum.text import WD_PARAGRAPH_ALIGNMENT

    document = _open(result)
    if document is None:
        return 0.0
    return float(document.paragraphs[0].paragraph_format.alignment == WD_PARAGRAPH_ALIGNMENT.CENTER)


def check_tabstops(result: str | None, expected: str | None, **options: Any) -> float:
    """1 minus the mean, over non-blank paragraphs, of the tab stops' position differences
    as a share of the text width (0 when their counts or alignments differ); with
    ``word_number_split_by_tabstop`` the ``index``-th tab field must hold that many words."""
    from docx.enum.text import WD_TAB_ALIGNMENT

    doc1, doc2 = _open(result), _open(expected)
    if doc1 is None or doc2 is None or not expected:
        return 0.0
    paras1 = [p for p in doc1.paragraphs if p.text.strip()]
    paras2 = [p for p in doc2.paragraphs if p.text.strip()]
    if len(paras1) != len(paras2):
        return 0.0
    words = options.get("word_number_split_by_tabstop")
    if words is not None:
        index = options.get("index", 0)
        for paragraph in paras1:
            field = paragraph.text.split("\t")[index]
            if len([w for w in re.split(r"\s", field) if w.strip()]) != words:
                return 0.0
    section = doc2.sections[0]
    width = section.page_width - section.left_margin - section.right_margin

    def kept(paragraph):
        return [t for t in paragraph.paragraph_format.tab_stops
                if not (t.alignment == WD_TAB_ALIGNMENT.CLEAR
                        or (t.alignment == WD_TAB_ALIGNMENT.LEFT and t.position == 0))]

    lost = 0.0
    for p1, p2 in zip(paras1, paras2):
        tabs1, tabs2 = kept(p1), kept(p2)
        if len(tabs1) != len(tabs2) or any(a.alignment != b.alignment for a, b in zip(tabs1, tabs2)):
            return 0.0
        lost += sum(abs(a.position - b.position) for a, b in zip(tabs1, tabs2)) / width
    return 1 - lost / len(paras1)


def evaluate_colored_words_in_tables(result: str | None, expected: str | None, **options: Any) -> float:
    """Texts match, and in the result's tables every run starting with a vowel is red and
    every other run blue, within CIEDE2000 ``threshold`` (default 3.5)."""
    from skimage.color import deltaE_ciede2000, rgb2lab

    if not result or not expected or not compare_docx_files(result, expected):
        return 0.0
    document = _open(result)
    if document is None:
        return 0.0
    threshold = options.get("threshold", 3.5)

    def distance(rgb, target):
        return deltaE_ciede2000(rgb2lab([c / 255.0 for c in rgb]), rgb2lab([c / 255.0 for c in target]))

    for table in document.tables:
        for row in table.rows:
            for cell in row.cells:
                for paragraph in cell.paragraphs:
                    for run in paragraph.runs:
                        if not run.text:
                            continue
                        target = (255, 0, 0) if run.text[0].lower() in "aeiou" else (0, 0, 255)
                        if distance(run.font.color.rgb, target) > threshold:
                            return 0.0
    return 1.0


def check_highlighted_words(result: str | None, expected: str | None, **options: Any) -> float:
    """Texts match and no span of the result (``.odt``) has a yellow background left."""
    from odf.opendocument import load
    from odf.text import Span

    if not result or not expected or not compare_docx_files(result, expected):
        return 0.0
    document = load(result)
    for span in document.getElementsByType(Span):
        name = span.getAttribute("stylename")
        if not name:
            continue
        for style in document.automaticstyles.childNodes:
            if style.getAttribute("name") == name and any(
                    prop.getAttribute("backgroundcolor") == "#ffff00" for prop in style.childNodes):
                return 0.0
    return 1.0


def evaluate_strike_through_last_paragraph(result: str | None, expected: str | None, **options: Any) -> float:
    """Texts match and every run of the result's last paragraph is struck through."""
    if not result or not expected or not compare_docx_files(result, expected):
        return 0.0
    document = _open(result)
    if document is None:
        return 0.0
    return float(all(run.font.strike for run in document.paragraphs[-1].runs))


def check_italic_font_size_14(result: str | None, expected: str | None, **options: Any) -> float:
    """Texts match and every italic run of the result is 14 pt."""
    if not result or not expected or not compare_docx_files(result, expected):
        return 0.0
    document = _open(result)
    if document is None:
        return 0.0
    return float(all(run.font.size is not None and run.font.size.pt == 14
                     for run in _runs(document) if run.italic))


def contains_page_break(result: str | None, rules: dict, **options: Any) -> float:
    """1 when the document has page breaks (``rules["page_break_count"]`` of them, if given)."""
    document = _open(result)
    if document is None:
        return 0.0
    try:
        wanted = rules["page_break_count"]
    except Exception:
        wanted = None
    count = sum(1 for run in _runs(document) for br in run.element.iter(_W + "br")
                if br.get(_W + "type") == "page")
    if wanted is not None and count != wanted:
        return 0.0
    return float(count > 0)


def find_default_font(result: str | None, rules: dict, **options: Any) -> float:
    """1 when Writer's registry file sets the standard default font to ``rules["font_name"]``."""
    wanted = rules["font_name"]
    if not result:
        return 0.0
    found = None
    registry = "{http://openoffice.org/2001/registry}"
    try:
        for item in ET.parse(result).getroot().iter("item"):
            if item.get(registry + "path") != "/org.openoffice.Office.Writer/DefaultFont":
                continue
            for prop in item.iter("prop"):
                if prop.get(registry + "name") == "Standard":
                    for value in prop.findall("value"):
                        found = value.text
    except Exception:
        pass
    return float(found == wanted)


METRICS = {f.__name__: f for f in (
    compare_font_names, compare_subscript_contains, has_page_numbers_in_footers,
    is_first_line_centered, check_tabstops, evaluate_colored_words_in_tables,
    check_highlighted_words, evaluate_strike_through_last_paragraph, check_italic_font_size_14,
    contains_page_break, find_default_font)}
