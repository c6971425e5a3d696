"""Document metrics give OSWorld's scores on generated .docx/.odt files, passing and failing."""

from __future__ import annotations

import pytest

from osworld_reference import check_all, reference
from parallel_rollout.envs.osworld.metrics import METRICS

docx = pytest.importorskip("docx")
from docx.enum.text import WD_ALIGN_PARAGRAPH, WD_BREAK, WD_TAB_ALIGNMENT  # noqa: E402
from docx.shared import Inches, Pt, RGBColor  # noqa: E402

TEXT = ["Title line", "First  paragraph\twith tabs", "", "Second paragraph", "References",
        "Smith, J. (2020). A paper.", "Doe, A. (2019). Another paper."]


def document(path, paragraphs=TEXT, edit=None):
    doc = docx.Document()
    for text in paragraphs:
        doc.add_paragraph(text)
    if edit:
        edit(doc)
    doc.save(path)
    return str(path)


def odt(path, paragraphs, highlight=False):
    from odf.opendocument import OpenDocumentText
    from odf.style import Style, TextProperties
    from odf.text import P, Span

    doc = OpenDocumentText()
    style = Style(name="hl", family="text")
    style.addElement(TextProperties(backgroundcolor="#ffff00" if highlight else "#ffffff"))
    doc.automaticstyles.addElement(style)
    for text in paragraphs:
        p = P(text="")
        p.addElement(Span(stylename=style, text=text))
        doc.text.addElement(p)
    doc.save(str(path))
    return str(path)


def table(doc, cells=(("a", "b"), ("c", "d"))):
    t = doc.add_table(rows=len(cells), cols=len(cells[0]))
    for i, row in enumerate(cells):
        for j, text in enumerate(row):
            t.cell(i, j).text = text


def colored(doc, colors):
    t = doc.add_table(rows=1, cols=len(colors))
    for j, (word, rgb) in enumerate(colors):
        t.cell(0, j).paragraphs[0].add_run(word).font.color.rgb = RGBColor(*rgb)


def runs(doc, **font):
    for p in doc.paragraphs:
        for r in p.runs:
            for key, value in font.items():
                setattr(r.font, key, value)


def page_break(doc):
    doc.paragraphs[1].runs[0].add_break(WD_BREAK.PAGE)


def centered(doc):
    doc.paragraphs[0].alignment = WD_ALIGN_PARAGRAPH.CENTER


def footer_number(doc):
    doc.sections[0].footer.paragraphs[0].text = "Page 1"


def spacing(doc, value=2.0):
    doc.paragraphs[1].paragraph_format.line_spacing = value


def tabs(position):
    def edit(doc):
        for p in doc.paragraphs:
            if p.text.strip():
                p.paragraph_format.tab_stops.add_tab_stop(Inches(position), WD_TAB_ALIGNMENT.RIGHT)
    return edit


def subscript(doc):
    doc.paragraphs[0].runs[0].font.subscript = True


def strike_last(doc):
    for r in doc.paragraphs[-1].runs:
        r.font.strike = True


def italic14(size):
    def edit(doc):
        r = doc.paragraphs[0].runs[0]
        r.italic = True
        r.font.size = Pt(size)
    return edit


SHUFFLED = [TEXT[1], TEXT[0]] + TEXT[2:]
CHANGED_REFS = TEXT[:5] + ["Smith, J. (2021). A paper!", "Doe, A. (2019). Another paper."]
TRAINS_INITIAL = ["08:00:00, T1, S1, 1", "08:05:00, T2, S1, 2", "08:07:00, T1, S2, 1"]
TRAINS_GOLD = TRAINS_INITIAL[:2]

# (metric, result paragraphs, result edit, expected paragraphs, expected edit, options, score)
CASES = [
    ("compare_docx_files", TEXT, None, TEXT, None, {}, 1.0),
    ("compare_docx_files", [t.replace("  ", " ") for t in TEXT], None, TEXT, None, {}, 1.0),
    ("compare_docx_files", [t.replace("  ", " ") for t in TEXT], None, TEXT, None, {"ignore_blanks": False}, 0.0),
    ("compare_docx_files", [t.upper() for t in TEXT], None, TEXT, None, {"ignore_case": True}, 1.0),
    ("compare_docx_files", [t.upper() for t in TEXT], None, TEXT, None, {}, 0.0),
    ("compare_docx_files", SHUFFLED, None, TEXT, None, {"ignore_order": True, "ignore_blanks": False}, 1.0),
    ("compare_docx_files", [t for t in TEXT if t], None, TEXT, None,
     {"delete_empty_lines": True, "ignore_blanks": False}, 1.0),
    ("compare_docx_files", CHANGED_REFS, None, TEXT, None, {"content_only": True}, None),
    ("compare_docx_files", CHANGED_REFS, None, TEXT, None, {"ignore_blanks": False, "fuzzy_match": True}, None),
    ("compare_docx_files", CHANGED_REFS, None, TEXT, None, {"fuzzy_match": True}, None),
    ("compare_docx_files_and_ignore_new_lines", [t for t in TEXT if t], None, TEXT, None, {"ignore_blanks": False}, 1.0),
    ("compare_docx_files_and_ignore_new_lines", CHANGED_REFS, None, TEXT, None, {}, 0.0),
    ("compare_docx_tables", TEXT, table, TEXT, table, {}, 1.0),
    ("compare_docx_tables", TEXT, lambda d: table(d, (("a", "b"), ("c", "x"))), TEXT, table, {}, 0.0),
    ("compare_docx_tables", TEXT, None, TEXT, table, {}, 0.0),
    ("compare_line_spacing", TEXT, spacing, TEXT, spacing, {}, 1.0),
    ("compare_line_spacing", TEXT, lambda d: spacing(d, 1.5), TEXT, spacing, {}, 0.0),
    ("compare_references", CHANGED_REFS, None, TEXT, None, {}, None),
    ("compare_references", TEXT[:4], None, TEXT, None, {}, 0.0),
    ("compare_references", TEXT, None, TEXT, None, {"reference_base_result": 0.9}, 1.0),
    ("compare_subscript_contains", TEXT, subscript, TEXT, subscript, {}, 1.0),
    ("compare_subscript_contains", TEXT, None, TEXT, subscript, {}, 0.0),
    ("check_tabstops", TEXT, tabs(5), TEXT, tabs(5), {}, 1.0),
    ("check_tabstops", TEXT, tabs(4.5), TEXT, tabs(5), {}, None),
    ("check_tabstops", TEXT, None, TEXT, tabs(5), {}, 0.0),
    ("evaluate_strike_through_last_paragraph", TEXT, strike_last, TEXT, None, {}, 1.0),
    ("evaluate_strike_through_last_paragraph", TEXT, None, TEXT, None, {}, 0.0),
    ("check_italic_font_size_14", TEXT, italic14(14), TEXT, None, {}, 1.0),
    ("check_italic_font_size_14", TEXT, italic14(12), TEXT, None, {}, 0.0),
    ("evaluate_colored_words_in_tables", TEXT, lambda d: colored(d, [("apple", (255, 0, 0)), ("pear", (0, 0, 250))]),
     TEXT, None, {}, 1.0),
    ("evaluate_colored_words_in_tables", TEXT, lambda d: colored(d, [("apple", (0, 0, 255))]), TEXT, None, {}, 0.0),
    ("compare_unique_train_records", TRAINS_GOLD, None, "trains", None, {}, 1.0),
    ("compare_unique_train_records", TRAINS_INITIAL, None, "trains", None, {}, 0.0),
]
ONE_FILE = [
    ("compare_font_names", lambda d: runs(d, name="Arial"), {"font_name": "Arial"}, 1.0),
    ("compare_font_names", None, {"font_name": "Arial"}, 0.0),
    ("contains_page_break", page_break, {}, 1.0),
    ("contains_page_break", page_break, {"page_break_count": 2}, 0.0),
    ("contains_page_break", None, {}, 0.0),
    ("fuzzy_place_math", None, {"expected": ["Title", "line"]}, 0.0),
]
NO_RULES = [
    ("is_first_line_centered", centered, 1.0),
    ("is_first_line_centered", None, 0.0),
    ("has_page_numbers_in_footers", footer_number, 1.0),
    ("has_page_numbers_in_footers", None, 0.0),
]


def module_of(name):
    return "general" if name == "fuzzy_place_math" else "docs"


def test_two_document_metrics_score_as_osworld(tmp_path):
    def run(folder, name, mine, edit_mine, gold, edit_gold, options, score):
        result = document(folder / "result.docx", mine, edit_mine)
        if gold == "trains":
            expected = [document(folder / "gold.docx", TRAINS_GOLD), document(folder / "initial.docx", TRAINS_INITIAL)]
        else:
            expected = document(folder / "expected.docx", gold, edit_gold)
        return (METRICS[name](result, expected, **options),
                getattr(reference("docs"), name)(result, expected, **options), score)

    check_all(CASES, run, tmp_path)


def test_one_document_metrics_score_as_osworld(tmp_path):
    def with_rules(folder, name, edit, rules, score):
        result = document(folder / "result.docx", edit=edit)
        return METRICS[name](result, rules), getattr(reference(module_of(name)), name)(result, rules), score

    def alone(folder, name, edit, score):
        result = document(folder / "result.docx", edit=edit)
        return METRICS[name](result), getattr(reference("docs"), name)(result), score

    (tmp_path / "rules").mkdir()
    (tmp_path / "alone").mkdir()
    check_all(ONE_FILE, with_rules, tmp_path / "rules")
    check_all(NO_RULES, alone, tmp_path / "alone")


def test_fuzzy_place_math_scores_three_words(tmp_path):
    result = document(tmp_path / "r.docx", ["x = 12", ""])
    rules = {"expected": ["x", "=", "13"]}
    ours = METRICS["fuzzy_place_math"](result, rules)
    assert ours == reference("general").fuzzy_place_math(result, rules)
    assert 0.5 < ours < 1.0


@pytest.mark.parametrize("highlight, score", [(False, 1.0), (True, 0.0)])
def test_odt_texts_and_highlights_score_as_osworld(tmp_path, highlight, score):
    result = odt(tmp_path / "r.odt", ["one", "two"], highlight=highlight)
    expected = odt(tmp_path / "e.odt", ["one", "two"])
    assert METRICS["compare_docx_files"](result, expected) == reference("docs").compare_docx_files(result, expected) == 1.0
    ours = METRICS["check_highlighted_words"](result, expected)
    assert ours == reference("docs").check_highlighted_words(result, expected) == score
    other = odt(tmp_path / "o.odt", ["one", "three"])
    assert METRICS["compare_docx_files"](other, expected) == reference("docs").compare_docx_files(other, expected) == 0.0


@pytest.mark.parametrize("font, score", [("Liberation Serif", 1.0), ("Arial", 0.0)])
def test_find_default_font_reads_writers_settings(tmp_path, font, score):
    xcu = tmp_path / "registrymodifications.xcu"
    xcu.write_text('<?xml version="1.0"?><oor:items xmlns:oor="http://openoffice.org/2001/registry">'
                   '<item oor:path="/org.openoffice.Office.Writer/DefaultFont"><prop oor:name="Standard" '
                   'oor:op="fuse"><value>Liberation Serif</value></prop></item></oor:items>')
    rules = {"font_name": font}
    assert METRICS["find_default_font"](str(xcu), rules) == reference("docs").find_default_font(str(xcu), rules) == score
