"""Document metrics on what a document says: paragraph texts of ``.docx`` (python-docx) and
``.odt`` (odfpy) compared exactly, blank-insensitively or fuzzily (rapidfuzz); tables, images,
line spacing, reference lists, train-record lists.

Options of ``compare_docx_files``: ``ignore_blanks`` (default true: whitespace runs are one
space over the whole text), ``ignore_case``, ``ignore_order`` (paragraphs sorted),
``content_only`` and ``fuzzy_match`` (a similarity in [0, 1] instead of 0/1),
``delete_empty_lines``. Libraries are the ``[osworld]`` extra, imported when called.
"""

from __future__ import annotations

import re
from typing import Any


def open_docx(path: str):
    """The Word document at ``path`` (python-docx), shared by the docx metrics."""
    from docx import Document

    return Document(path)


def _odt_paragraphs(path: str) -> list[str]:
    """Each text:p's own text and that of its direct text:span children."""
    from odf.opendocument import load
    from odf.text import P

    texts = []
    for paragraph in load(path).getElementsByType(P):
        parts = []
        for node in paragraph.childNodes:
            if node.nodeType == node.TEXT_NODE:
                parts.append(node.data)
            elif node.nodeType == node.ELEMENT_NODE and node.tagName == "text:span":
                parts.extend(c.data for c in node.childNodes if c.nodeType == c.TEXT_NODE)
        texts.append("".join(parts))
    return texts


def _squeezed(paragraphs: list[str]) -> str:
    return re.sub(r"\s+", " ", "\n".join(paragraphs)).strip()


def _ratio(a: str, b: str) -> float:
    from rapidfuzz import fuzz

    return fuzz.ratio(a, b) / 100.0


def compare_docx_files(result: str | None, expected: str | None, **options: Any) -> float:
    """1 (or a similarity) when the two documents' paragraphs say the same (module doc)."""
    if not result or not expected:
        return 0.0
    fold = options.get("ignore_case", False)
    fuzzy = options.get("fuzzy_match", False)
    try:
        if result.endswith(".docx") and expected.endswith(".docx"):
            first = [p.text for p in open_docx(result).paragraphs]
            second = [p.text for p in open_docx(expected).paragraphs]
        elif result.endswith(".odt") and expected.endswith(".odt"):
            first, second = _odt_paragraphs(result), _odt_paragraphs(expected)
        else:
            return 0.0
    except Exception:
        return 0.0
    if options.get("ignore_order", False):
        first, second = sorted(first), sorted(second)
    if options.get("delete_empty_lines", False):
        first, second = [p for p in first if p.strip()], [p for p in second if p.strip()]
    if options.get("content_only", False) or options.get("ignore_blanks", True):
        text1, text2 = _squeezed(first), _squeezed(second)
        if fold:
            text1, text2 = text1.lower(), text2.lower()
        if options.get("content_only", False) or fuzzy:
            return _ratio(text1, text2)
        return float(text1 == text2)
    if len(first) != len(second):
        return 0.0
    if fold:
        first, second = [p.lower() for p in first], [p.lower() for p in second]
    if fuzzy:
        return sum(_ratio(a, b) for a, b in zip(first, second)) / len(first) if first else 1.0
    return float(first == second)


def compare_docx_files_and_ignore_new_lines(result: str | None, expected: str | None, **options: Any) -> float:
    """compare_docx_files on ``.docx`` with empty paragraphs dropped first."""
    if not result or not expected:
        return 0.0
    if not (result.endswith(".docx") and expected.endswith(".docx")):
        return 0.0
    try:
        first = [p.text for p in open_docx(result).paragraphs if p.text != ""]
        second = [p.text for p in open_docx(expected).paragraphs if p.text != ""]
    except Exception:
        return 0.0
    if options.get("ignore_blanks", True):
        return float(_squeezed(first) == _squeezed(second))
    return float(first == second)


def compare_docx_tables(result: str | None, expected: str | None, **options: Any) -> float:
    """1 when both documents have tables of the same shapes whose cells' stripped texts match."""
    if not result or not expected:
        return 0.0
    try:
        tables1, tables2 = open_docx(result).tables, open_docx(expected).tables
    except Exception:
        return 0.0
    if len(tables1) != len(tables2):
        return 0.0
    for t1, t2 in zip(tables1, tables2):
        if len(t1.rows) != len(t2.rows) or len(t1.columns) != len(t2.columns):
            return 0.0
        for i in range(len(t1.rows)):
            for j in range(len(t1.columns)):
                if t1.cell(i, j).text.strip() != t2.cell(i, j).text.strip():
                    return 0.0
    return 1.0


def _images(document) -> list[bytes]:
    from io import BytesIO

    from PIL import Image

    return [Image.open(BytesIO(rel.target_part.blob)).tobytes()
            for rel in document.part.rels.values() if "image" in rel.reltype]


def compare_docx_images(result: str | None, expected: str | None, **options: Any) -> float:
    """1 when both documents hold the same images (decoded pixels), in order."""
    if not result or not expected:
        return 0.0
    try:
        doc1, doc2 = open_docx(result), open_docx(expected)
    except Exception:
        return 0.0
    return float(_images(doc1) == _images(doc2))


def compare_line_spacing(result: str | None, expected: str | None, **options: Any) -> float:
    """1 when the texts match (compare_docx_files) and every paragraph's line spacing too."""
    if not result or not expected or not compare_docx_files(result, expected):
        return 0.0
    try:
        paras1, paras2 = open_docx(result).paragraphs, open_docx(expected).paragraphs
    except Exception:
        return 0.0
    return float(len(paras1) == len(paras2) and all(
        a.paragraph_format.line_spacing == b.paragraph_format.line_spacing for a, b in zip(paras1, paras2)))


def compare_references(result: str | None, expected: str | None, **options: Any) -> float:
    """Mean fuzzy similarity of the non-blank paragraphs after the ``reference_indicator``
    paragraph, rescaled above ``reference_base_result`` (0 at or below it plus 0.01)."""
    if not result or not expected:
        return 0.0
    marker = options.get("reference_indicator", "References")
    base = options.get("reference_base_result", 0.5)
    if not (result.endswith(".docx") and expected.endswith(".docx")):
        return 0.0
    try:
        first = [p.text for p in open_docx(result).paragraphs]
        second = [p.text for p in open_docx(expected).paragraphs]
    except Exception:
        return 0.0
    if marker not in first and marker not in second:
        return 1.0
    if marker not in first or marker not in second:
        return 0.0
    refs1 = [p for p in first[first.index(marker) + 1:] if p.strip()]
    refs2 = [p for p in second[second.index(marker) + 1:] if p.strip()]
    if len(refs1) != len(refs2):
        return 0.0
    mean = sum(_ratio(a, b) for a, b in zip(refs1, refs2)) / len(refs1)
    return (mean - base) / (1 - base) if mean >= base + 0.01 else 0.0


def _records(path: str):
    lines = [p.text.strip() for p in open_docx(path).paragraphs if p.text.strip()]
    return lines, [line.split(",")[1].strip() for line in lines if len(line.split(",")) == 4]


def compare_unique_train_records(result: str | None, expected: Any, **options: Any) -> float:
    """``expected`` is [gold, initial]: the result's lines all come from the initial file, its
    train ids are unique and the gold file's, and it has as many lines as the gold file."""
    if not result or not isinstance(expected, list) or len(expected) < 2 or not expected[0] or not expected[1]:
        return 0.0
    try:
        lines, ids = _records(result)
        gold_lines, gold_ids = _records(expected[0])
        initial, _ = _records(expected[1])
    except Exception:
        return 0.0
    return float(set(lines) <= set(initial) and len(ids) == len(set(ids))
                 and set(ids) == set(gold_ids) and len(lines) == len(gold_lines))


def fuzzy_place_math(result: str | None, rules: dict, **options: Any) -> float:
    """The document holds exactly three words; the mean of each one's best fuzzy match
    against the acceptable answers."""
    if result is None:
        return 0.0
    words = [w for p in open_docx(result).paragraphs for w in p.text.split()]
    if len(words) != 3:
        return 0.0
    return sum(max([0] + [_ratio(w, a) for a in rules["expected"]]) for w in words) / 3


METRICS = {f.__name__: f for f in (
    compare_docx_files, compare_docx_files_and_ignore_new_lines, compare_docx_tables,
    compare_docx_images, compare_line_spacing, compare_references, compare_unique_train_records,
    fuzzy_place_math)}
