"""Single-deck and Impress-settings checks give OSWorld's scores on generated files."""

from __future__ import annotations

import io
import zipfile

import pytest

from osworld_reference import reference
from parallel_rollout.envs.osworld.metrics import METRICS

pptx = pytest.importorskip("pptx")
from pptx.dml.color import RGBColor  # noqa: E402
from pptx.util import Inches  # noqa: E402


def deck(path, portrait=False, background=None, image=None, strike=False, transition=None):
    prs = pptx.Presentation()
    if portrait:
        prs.slide_width, prs.slide_height = prs.slide_height, prs.slide_width
    slide = prs.slides.add_slide(prs.slide_layouts[1])
    slide.shapes.title.text = "Title"
    slide.placeholders[1].text_frame.text = "Body"
    if strike:
        slide.shapes.title.text_frame.paragraphs[0].runs[0].font._element.set("strike", "sngStrike")
    if background:
        slide.background.fill.solid()
        slide.background.fill.fore_color.rgb = RGBColor(*background)
    if image:
        left, top, width, height = image
        slide.shapes.add_picture(str(path) + ".png", left, top, width, height)
    buffer = io.BytesIO()
    prs.save(buffer)
    data = buffer.getvalue()
    if transition:
        out = io.BytesIO()
        with zipfile.ZipFile(io.BytesIO(data)) as src, zipfile.ZipFile(out, "w") as dst:
            for item in src.infolist():
                part = src.read(item.filename)
                if item.filename == "ppt/slides/slide1.xml":
                    part = part.replace(b"</p:sld>", f"<p:transition><p:{transition}/></p:transition></p:sld>".encode())
                dst.writestr(item, part)
        data = out.getvalue()
    with open(path, "wb") as handle:
        handle.write(data)
    return str(path)


def png(path):
    from PIL import Image

    Image.new("RGB", (40, 30), (200, 10, 10)).save(str(path) + ".png")


XCU = ('<?xml version="1.0"?><oor:items xmlns:oor="http://openoffice.org/2001/registry">'
       '<item oor:path="/org.openoffice.Office.Impress/Misc/Start"><prop oor:name="EnablePresenterScreen" '
       'oor:op="fuse"><value>{presenter}</value></prop></item>'
       '<item oor:path="/org.openoffice.Office.Common/Save/Document"><prop oor:name="AutoSaveTimeIntervall" '
       'oor:op="fuse"><value>{minutes}</value></prop></item></oor:items>')


def test_slide_checks_score_as_osworld(tmp_path):
    slides = reference("slides")
    portrait, landscape = deck(tmp_path / "p.pptx", portrait=True), deck(tmp_path / "l.pptx")
    red, blue = deck(tmp_path / "red.pptx", background=(250, 0, 0)), deck(tmp_path / "blue.pptx", background=(0, 0, 255))
    fade, struck = deck(tmp_path / "fade.pptx", transition="fade"), deck(tmp_path / "s.pptx", strike=True)
    for name in ("orig.pptx", "full.pptx", "small.pptx"):
        png(tmp_path / name)
    original = deck(tmp_path / "orig.pptx", image=(Inches(1), Inches(1), Inches(2), Inches(1.5)))
    stretched = deck(tmp_path / "full.pptx", image=(0, 0, Inches(10), Inches(7.5)))
    cases = [
        ("check_slide_orientation_Portrait", (portrait,), 1), ("check_slide_orientation_Portrait", (landscape,), 0),
        ("evaluate_presentation_fill_to_rgb_distance", (red, {"rgb": [255, 0, 0]}), None),
        ("evaluate_presentation_fill_to_rgb_distance", (blue, {"rgb": [255, 0, 0], "original_rgb": [0, 0, 255]}), 0.0),
        ("evaluate_presentation_fill_to_rgb_distance", (landscape, {"rgb": [255, 0, 0]}), 0.0),
        ("check_transition", (fade, {"slide_idx": 0, "transition_type": "fade"}), 1.0),
        ("check_transition", (fade, {"slide_idx": 0, "transition_type": "wipe"}), 0.0),
        ("check_transition", (landscape, {"slide_idx": 3, "transition_type": "fade"}), 0.0),
        ("check_strikethrough", (struck, {"slide_index_s": [0], "shape_index_s": [0], "paragraph_index_s": [0]}), 1),
        ("check_strikethrough", (landscape, {"slide_index_s": [0], "shape_index_s": [0], "paragraph_index_s": [0]}), 0),
        ("check_image_stretch_and_center", (stretched, original), 1.0),
        ("check_image_stretch_and_center", (original, original), 0.0),
    ]
    for name, args, score in cases:
        ours, theirs = METRICS[name](*args), getattr(slides, name)(*args)
        assert ours == theirs, name
        assert (0.9 < ours < 1.0) if score is None else ours == score, name


def test_impress_settings_checks_score_as_osworld(tmp_path):
    slides = reference("slides")
    on, off = tmp_path / "on.xcu", tmp_path / "off.xcu"
    on.write_text(XCU.format(presenter="true", minutes=10))
    off.write_text(XCU.format(presenter="false", minutes=3))
    for path, score in ((on, 0.0), (off, 1.0), (tmp_path / "missing.xcu", 0.0)):
        assert METRICS["check_presenter_console_disable"](str(path)) == \
            slides.check_presenter_console_disable(str(path)) == score
    for path, minutes, score in ((on, 10, 1), (off, 10, 0), (tmp_path / "missing.xcu", 3, None)):
        ours = METRICS["check_auto_saving_time"](str(path), {"minutes": minutes})
        assert ours == slides.check_auto_saving_time(str(path), {"minutes": minutes}) == score
    tree = '<desktop-frame><document-frame name="{}"/></desktop-frame>'
    for name, score in (("Slides View", 1.0), ("Outline", 0.0)):
        assert METRICS["check_left_panel"](tree.format(name)) == slides.check_left_panel(tree.format(name)) == score
