"""Editor, browser and PDF/archive metrics give OSWorld's scores on generated inputs."""

from __future__ import annotations

import json
import shutil
import zipfile

import pytest

from conftest import OSWORLD_EXAMPLES
from osworld_reference import check_all, reference
from parallel_rollout.envs.osworld.evaluators import normalized
from parallel_rollout.envs.osworld.metrics import METRICS


def write(folder, name, text):
    path = folder / name
    path.write_text(text)
    return str(path)


EDITOR = [
    # (metric, files {name: text}, result, expected, options, score); "@name" is a made file
    ("check_json_settings", {"s.json": '{"editor.fontSize": 14, "a": 1}'}, "@s.json",
     {"expected": {"editor.fontSize": 14}}, {}, 1.0),
    ("check_json_settings", {"s.json": '{"editor.fontSize": 12}'}, "@s.json",
     {"expected": {"editor.fontSize": 14}}, {}, 0.0),
    ("check_json_settings", {"s.json": "{broken"}, "@s.json", {"expected": {"a": 1}}, {}, 0.0),
    ("check_json_keybindings", {"k.json": '// comment\n[{"key": "ctrl+j", "command": "x"}]'}, "@k.json",
     {"expected": {"key": "ctrl+j", "command": "x"}}, {}, 1.0),
    ("check_json_keybindings", {"k.json": '[{"key": "ctrl+k", "command": "x"}]'}, "@k.json",
     {"expected": {"key": "ctrl+j", "command": "x"}}, {}, 0.0),
    ("compare_text_file", {"a.txt": "Hello\tWorld\n", "b.txt": "hello world"}, "@a.txt", "@b.txt",
     {"ignore_blanks": True, "ignore_case": True}, 1.0),
    ("compare_text_file", {"a.txt": "Hello\tWorld\n", "b.txt": "hello world"}, "@a.txt", "@b.txt", {}, 0.0),
    ("compare_config", {"c.txt": "x=1\n"}, "@c.txt", {"expected": "x=1\n"}, {}, 1.0),
    ("compare_config", {"c.txt": "x=2\n"}, "@c.txt", {"expected": "x=1\n"}, {}, 0.0),
    ("compare_answer", {}, "42", {"expected": "42"}, {}, 1.0),
    ("compare_answer", {}, "", {"expected": ""}, {}, 0.0),
    ("is_extension_installed", {}, "ms-python.python\nfoo.bar", {"type": "contain", "expected": "ms-python.python"}, {}, 1.0),
    ("is_extension_installed", {}, "foo.bar", {"type": "not_contain", "expected": "foo.bar"}, {}, 0.0),
    ("compare_result_files", {"r.txt": "The answer is 3.14159 ", "e.txt": "3.14159"}, "@r.txt", "@e.txt", {}, 1.0),
    ("compare_result_files", {"r.txt": "3.14160", "e.txt": "3.1416"}, "@r.txt", "@e.txt", {}, 1.0),
    ("compare_result_files", {"r.txt": "3.2", "e.txt": "3.1416"}, "@r.txt", "@e.txt", {}, 0.0),
    ("compare_result_files", {"r.txt": "abc", "e.txt": "abc\n"}, "@r.txt", "@e.txt", {}, 1.0),
    ("check_python_file_by_test_suite", {"t.py": "def test():\n    return 0.25\n"}, None, "@t.py", {}, None),
    ("check_python_file_by_test_suite", {"t.py": "def test():\n    raise ValueError\n"}, None, "@t.py", {}, 0.0),
    ("check_python_file_by_test_suite", {"t.py": "import helper\ndef check():\n    return helper.ok\n",
                                         "helper.py": "ok = True\n"}, None, "@t.py",
     {"test_function_name": "check"}, 1.0),
    ("check_html_background_image", {"p.html": "<style>body { background-image: url('bg.png') }</style>"},
     "@p.html", {"value": "bg.png"}, {}, 1.0),
    ("check_html_background_image", {"p.html": "<p>none</p>"}, "@p.html", {"value": "bg.png"}, {}, 0.0),
]
BROWSER = [
    ("is_expected_active_tab", {"url": "https://www.airbnb.com/"}, {"type": "url", "url": "https://airbnb.com.sg"}, 1.0),
    ("is_expected_active_tab", "https://www.airbnb.com/rooms?x=1", {"type": "url", "url": "https://airbnb.com/rooms"}, 0.0),
    ("is_expected_active_tab", None, {"type": "url", "url": "x"}, 0.0),
    ("is_expected_active_tab_approximate", {"url": "https://a.org/p?q=1"}, {"type": "url", "url": "https://a.org/p?q=2"}, 1.0),
    ("is_expected_active_tab_approximate", {"url": "https://a.org/q"}, {"type": "url", "url": "https://a.org/p"}, 0.0),
    ("is_expected_url_pattern_match", {"url": "https://x.com/search?q=cats&lang=en"}, {"expected": ["q=cats", "lang=en"]}, 1.0),
    ("is_expected_url_pattern_match", "https://x.com/search?q=dogs", {"expected": ["q=cats"]}, 0.0),
    ("is_expected_url_pattern_match", ["not a url"], {"expected": ["x"]}, 0.0),
    ("is_expected_tabs", [{"url": "https://b.org"}, {"url": "http://www.a.org/"}], {"type": "url", "urls": ["a.org", "https://b.org"]}, 1.0),
    ("is_expected_tabs", [{"url": "https://b.org"}], {"type": "url", "urls": ["a.org", "https://b.org"]}, 0.0),
    ("is_expected_installed_extensions", ["Dark Reader", "uBlock"], {"expected": ["uBlock"]}, 1.0),
    ("is_expected_installed_extensions", ["Dark Reader"], {"expected": ["uBlock"]}, 0.0),
    ("is_expected_search_query", {"url": "https://google.com/search?q=weather"}, {"expect": {"pattern": r"q=weather"}}, 1.0),
    ("is_expected_search_query", {"url": "https://google.com/"}, {"expect": {"pattern": r"q=weather"}}, 0.0),
    ("is_cookie_deleted", [(1, ".amazon.com"), (2, "x.org")], {"type": "domains", "domains": ["amazon.com"]}, 0.0),
    ("is_cookie_deleted", [(2, "x.org")], {"type": "domains", "domains": ["amazon.com"]}, 1.0),
    ("check_history_deleted", [("https://a.org/x",)], {"type": "keywords", "keywords": ["b.org"]}, 1.0),
    ("check_history_deleted", [("https://a.org/x",)], {"type": "keywords", "keywords": ["a.org"]}, 0.0),
    ("is_shortcut_on_desktop", {"/d/x.desktop": "[Desktop Entry]\nName=GitHub\nExec=chrome\n"}, {"type": "name", "name": "GitHub"}, 1.0),
    ("is_shortcut_on_desktop", {"/d/x.desktop": "Name=GitHub\n"}, {"type": "exec", "exec": "chrome"}, 0.0),
    ("check_font_size", {"default_font_size": 20}, {"type": "range", "min": 16, "max": 24}, 1.0),
    ("check_font_size", {"default_font_size": 16}, {"type": "value", "value": 18}, 0.0),
    ("is_added_to_steam_cart", {"content": "Cart: Dota, Portal"}, {"items": ["Portal"]}, 1.0),
    ("is_added_to_steam_cart", {"content": "Cart: Dota"}, {"items": ["Portal"]}, 0.0),
]
BOOKMARKS = {"bookmark_bar": {"children": [
    {"type": "folder", "name": "Liked Authors", "children": [{"type": "url", "url": "https://a.org"},
                                                            {"type": "url", "url": "https://b.org"}]},
    {"type": "folder", "name": "News", "children": []},
    {"type": "url", "url": "https://c.org", "name": "C"}]}}
BROWSER += [
    ("is_expected_bookmarks", BOOKMARKS, {"type": "bookmark_bar_folders_names", "names": ["News", "Liked Authors"]}, 1.0),
    ("is_expected_bookmarks", BOOKMARKS, {"type": "bookmark_bar_websites_urls", "urls": ["https://d.org"]}, 0.0),
    ("is_expected_bookmarks", BOOKMARKS, {"type": "liked_authors_websites_urls",
                                          "urls": [["https://x.org", "https://a.org"], "https://b.org"]}, 1.0),
    ("is_expected_bookmarks", BOOKMARKS, {"type": "liked_authors_websites_urls", "urls": ["https://a.org"]}, 0.0),
]


def test_editor_metrics_score_as_osworld(tmp_path):
    def run(folder, name, made, result, expected, options, score):
        paths = {n: write(folder, n, text) for n, text in made.items()}

        def resolve(v):
            return paths[v[1:]] if isinstance(v, str) and v.startswith("@") else v

        args = (resolve(result), resolve(expected))
        return METRICS[name](*args, **options), getattr(reference("vscode"), name)(*args, **options), score

    check_all(EDITOR, run, tmp_path)


def test_browser_metrics_score_as_osworld(tmp_path):
    def run(folder, name, result, rule, score):
        return METRICS[name](result, rule), getattr(reference("chrome"), name)(result, rule), score

    check_all(BROWSER, run, tmp_path)


def test_compare_htmls(tmp_path):
    page = '<html><body><table><tr><td sdnum="1033;0;0">1</td><td>x</td></tr></table></body></html>'
    same = write(tmp_path, "a.html", page)
    other_sdnum = write(tmp_path, "b.html", page.replace("1033;0;0", "1033;0;0.00"))
    other_text = write(tmp_path, "c.html", page.replace(">x<", ">y<"))
    for result, options, score in ((same, {}, 1.0), (other_sdnum, {}, 0.0), (other_sdnum, {"ignore_sdnum": True}, 1.0),
                                   (other_text, {"ignore_sdnum": True}, 0.0)):
        ours = METRICS["compare_htmls"](result, same, **options)
        assert ours == reference("chrome").compare_htmls(result, same, **options) == score


fitz = pytest.importorskip("fitz")


def pdf(path, lines, image_color=None):
    document = fitz.open()
    page = document.new_page()
    for index, line in enumerate(lines):
        page.insert_text((72, 72 + 20 * index), line)
    if image_color:
        from PIL import Image, ImageDraw

        picture = Image.new("RGB", (64, 64), image_color)
        ImageDraw.Draw(picture).rectangle((8, 8, 30, 50), fill=(255, 255, 255))
        png = path.with_suffix(".png")
        picture.save(png)
        page.insert_image(fitz.Rect(72, 300, 200, 428), filename=str(png))
    document.save(str(path))
    document.close()
    return str(path)


def test_pdf_metrics_score_as_osworld(tmp_path):
    text = ["Quarterly report", "Revenue grew by ten percent"]
    a = pdf(tmp_path / "a.pdf", text, image_color=(200, 0, 0))
    b = pdf(tmp_path / "b.pdf", text, image_color=(200, 0, 0))
    c = pdf(tmp_path / "c.pdf", ["Quarterly report", "Costs fell"], image_color=(0, 0, 200))
    d = pdf(tmp_path / "d.pdf", text)
    chrome, pdf_module = reference("chrome"), reference("pdf")
    for result, expected, score in ((a, b, 1.0), (c, b, None), ([a, c], [b, b], None), (None, b, 0.0)):
        ours = METRICS["compare_pdfs"](result, expected)
        assert ours == chrome.compare_pdfs(result, expected)
        assert ours == score if score is not None else 0.0 < ours < 1.0
    for result, expected, score in ((a, b, 1.0), (d, b, 0.0), (d, d, 1.0), (None, b, 0.0)):
        assert METRICS["compare_pdf_images"](result, expected) == chrome.compare_pdf_images(result, expected) == score
    for rules, score in (({"relation": "eq", "ref_value": 1}, 1.0), ({"relation": "gt", "ref_value": 1}, 0.0)):
        assert METRICS["check_pdf_pages"](a, rules) == pdf_module.check_pdf_pages(a, rules) == score


def test_compare_archive_scores_as_osworld(tmp_path):
    text = ["Lecture one", "Slides"]
    sources = tmp_path / "src"
    (sources / "lecture").mkdir(parents=True)
    pdf(sources / "lecture" / "one.pdf", text)
    pdf(sources / "lecture" / "two.pdf", ["Lecture two"])
    gold = shutil.make_archive(str(tmp_path / "gold"), "zip", sources)
    pdf(sources / "lecture" / "two.pdf", ["Lecture 2, revised"])
    changed = shutil.make_archive(str(tmp_path / "changed"), "zip", sources)
    chrome = reference("chrome")
    for name in ("mine-a", "mine-b"):
        shutil.copy(gold, tmp_path / f"{name}.zip")
    ours = METRICS["compare_archive"](str(tmp_path / "mine-a.zip"), gold, file_path="lecture", file_type="pdf")
    theirs = chrome.compare_archive(str(tmp_path / "mine-b.zip"), gold, file_path="lecture", file_type="pdf")
    assert ours == theirs == 1.0
    ours = METRICS["compare_archive"](changed, gold, file_path="lecture", file_type="pdf")
    assert ours == chrome.compare_archive(changed, gold, file_path="lecture", file_type="pdf")
    assert 0.5 < ours < 1.0
    with zipfile.ZipFile(tmp_path / "other.zip", "w") as archive:
        archive.writestr("lecture/three.pdf", b"%PDF")
    assert METRICS["compare_archive"](str(tmp_path / "other.zip"), gold, file_path="lecture", file_type="pdf") == 0.0


def test_compare_zip_files_scores_as_osworld(tmp_path):
    def archive(name, files):
        with zipfile.ZipFile(tmp_path / name, "w") as z:
            for inner, data in files.items():
                z.writestr(inner, data)
        return str(tmp_path / name)

    gold = archive("gold.zip", {"a.txt": "one", "b/c.txt": "two"})
    same = archive("same.zip", {"b/c.txt": "two", "a.txt": "one"})
    changed = archive("changed.zip", {"a.txt": "one", "b/c.txt": "2"})
    vscode = reference("vscode")
    for result, score in ((same, 1.0), (changed, 0.0), (None, 0.0)):
        assert METRICS["compare_zip_files"](result, gold) == vscode.compare_zip_files(result, gold) == score


def test_compare_epub_scores_as_osworld(tmp_path):
    def book(name, chapter):
        with zipfile.ZipFile(tmp_path / name, "w") as z:
            z.writestr("content.opf", "<package>\n<dc:identifier>id-1</dc:identifier>\n<title>T</title>\n</package>")
            z.writestr("toc.ncx", "<ncx>\n<navPoint/>\n<text>T</text>\n</ncx>")
            z.writestr("ch1.html", f"<html><body><p>{chapter}</p>\n<p>end</p></body></html>")
        return str(tmp_path / name)

    gold = book("gold.epub", "Once upon a time")
    for result, score in ((book("same.epub", "Once upon a time"), 1.0), (book("other.epub", "Another story"), None)):
        ours = METRICS["compare_epub"](result, gold)
        assert ours == reference("others").compare_epub(result, gold)
        assert ours == score if score is not None else 0.0 < ours < 1.0
    assert json.dumps(METRICS["compare_epub"](None, gold)) == "0.0"


def test_the_real_vs_code_theme_tasks_containment_ok_accepts_settings_vs_code_wrote(tmp_path):
    """982d12a5 ("change the color theme to Visual Studio Dark") gives compare_config
    ``containment_ok: true``: settings.json as VS Code writes it (indented, other settings kept)
    holds the expected setting. The port compared the text exactly and scored it 0."""
    if OSWORLD_EXAMPLES is None:
        pytest.skip("OSWorld's task set is not beside the checkout")
    task = json.loads((OSWORLD_EXAMPLES / "examples" / "vs_code"
                       / "982d12a5-beab-424f-8d38-d2a48429e511.json").read_text())
    [(func, _result, expected, options)] = normalized(task["evaluator"])
    assert options == {"containment_ok": True}
    metric, rules = METRICS[func], expected["rules"]
    settings = tmp_path / "settings.json"
    settings.write_text(json.dumps({"editor.fontSize": 14, "workbench.colorTheme": "Visual Studio Dark"}, indent=4))
    assert metric(str(settings), rules, **options) == 1.0
    assert metric(str(settings), rules) == 0.0  # without the option the text must match exactly
    settings.write_text(json.dumps({"editor.fontSize": 14, "workbench.colorTheme": "Red"}, indent=4))
    assert metric(str(settings), rules, **options) == 0.0
    settings.write_text('{"workbench.colorTheme": "Visual Studio Dark",}')  # not JSON: the text within
    assert metric(str(settings), rules, **options) == 0.0
    settings.write_text('// mine\n{"workbench.colorTheme": "Visual Studio Dark"}\n')
    assert metric(str(settings), rules, **options) == 1.0
