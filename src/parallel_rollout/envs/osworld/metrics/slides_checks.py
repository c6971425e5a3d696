"""Presentation checks beyond comparing two decks: an image stretched to the slide and
centred, portrait orientation, how far slide backgrounds are from a colour, a transition,
the page-number colour of the master, strike-through runs; and Impress settings (presenter
console, autosave interval) and its left panel in the accessibility tree."""

from __future__ import annotations

import xml.etree.ElementTree as ET
import zipfile
from math import sqrt
from typing import Any

_A = "http://schemas.openxmlformats.org/drawingml/2006/main"
_P = "http://schemas.openxmlformats.org/presentationml/2006/main"
_OOR = "{http://openoffice.org/2001/registry}"


def check_presenter_console_disable(result: str, **options: Any) -> float:
    """Impress's registry file sets EnablePresenterScreen to false."""
    try:
        for item in ET.parse(result).getroot().iter("item"):
            if item.get(_OOR + "path") != "/org.openoffice.Office.Impress/Misc/Start":
                continue
            for prop in item.findall("prop"):
                if prop.get(_OOR + "name") == "EnablePresenterScreen":
                    return float(prop.find("value").text.lower() == "false")
        return 0.0
    except Exception:
        return 0.0


def check_image_stretch_and_center(result: str, expected: str, **options: Any) -> float:
    """The first slide's image (the same bytes as in the original) fills the slide within
    half an inch and is centred within half an inch."""
    from pptx import Presentation
    from pptx.util import Inches

    original, modified = Presentation(expected), Presentation(result)
    images = [s for s in original.slides[0].shapes if s.shape_type == 13]
    if not images:
        return 0.0
    blob = images[0].image.blob
    matches = [s for s in modified.slides[0].shapes if s.shape_type == 13 and s.image.blob == blob]
    if not matches:
        return 0.0
    image, width, height, slack = matches[-1], original.slide_width, original.slide_height, Inches(0.5)
    return float(abs(image.width - width) <= slack and abs(image.height - height) <= slack
                 and abs(image.left - (width - image.width) / 2) <= slack
                 and abs(image.top - (height - image.height) / 2) <= slack)


def check_slide_orientation_Portrait(result: str, **options: Any) -> float:
    from pptx import Presentation

    deck = Presentation(result)
    return float(deck.slide_width < deck.slide_height)


def _fill_rgb(fill) -> Any:
    try:
        return fill.fore_color.rgb if hasattr(fill.fore_color, "rgb") else None
    except Exception:
        return None


def evaluate_presentation_fill_to_rgb_distance(result: str, rules: dict, **options: Any) -> float:
    """1 minus the mean over slides of the background colour's distance to ``rgb`` (0 to 1;
    a slide keeping ``original_rgb``, or with no solid colour, counts as far)."""
    from pptx import Presentation

    target, original = rules["rgb"], rules.get("original_rgb")

    def distance(slide) -> float:
        fill = slide.background.fill
        if fill.type == 5:
            fill = slide.slide_layout.slide_master.background.fill
            if fill.type != 1:
                return 1
        elif fill.type != 1:
            return 1
        rgb = _fill_rgb(fill)
        if rgb is None:
            return 1
        if original is not None and tuple(rgb) == tuple(original):
            return 1
        return sqrt(sum((a - b) ** 2 for a, b in zip(rgb, target))) / sqrt(3 * 255 ** 2)

    slides = Presentation(result).slides
    return 1 - sum(distance(slide) for slide in slides) / len(slides)


def check_left_panel(accessibility_tree: str, **options: Any) -> float:
    """The Slides View pane is in the tree."""
    root = ET.fromstring(accessibility_tree)
    return float(any(frame.get("name") == "Slides View" for frame in root.iter("document-frame")))


def check_transition(result: str, rules: dict, **options: Any) -> float:
    """Slide ``slide_idx`` has a transition of ``transition_type``."""
    with zipfile.ZipFile(result) as deck:
        name = f"ppt/slides/slide{rules['slide_idx'] + 1}.xml"
        if name not in deck.namelist():
            return 0.0
        root = ET.fromstring(deck.read(name))
    transition = next(root.iter(f"{{{_P}}}transition"), None)
    return float(transition is not None and next(transition.iter(f"{{{_P}}}{rules['transition_type']}"), None)
                 is not None)


def _channels(hex_color: str) -> tuple[int, int, int]:
    return int(hex_color[1:3], 16), int(hex_color[3:5], 16), int(hex_color[5:7], 16)


def check_page_number_colors(result: str, rules: dict, **options: Any) -> float:
    """The master's second-to-last solid colour (its page number's) reads as ``color``
    (read as OSWorld does: from the second character of the hex value)."""
    with zipfile.ZipFile(result) as deck:
        root = ET.fromstring(deck.read("ppt/slideMasters/slideMaster1.xml"))
    colours = [c for fill in root.iter(f"{{{_A}}}solidFill") for c in fill.iter(f"{{{_A}}}srgbClr")]
    value = colours[-2].get("val")
    if value is None:
        return 0.0
    r, g, b = _channels(value)
    tests = {"red": r > g + 50 and r > b + 50, "blue": b > g + 50 and b > r + 50,
             "green": g > r + 50 and g > b + 50, "black": r < 50 and g < 50 and b < 50}
    return float(tests.get(rules["color"], True))


def check_auto_saving_time(result: str, rules: dict, **options: Any) -> float | None:
    """LibreOffice's registry file sets the autosave interval to ``minutes`` (None when the
    file is missing or unreadable, as OSWorld returns)."""
    try:
        root = ET.parse(result).getroot()
    except (ET.ParseError, FileNotFoundError):
        return None
    interval = None
    for item in root.iter("item"):
        if item.get(_OOR + "path") == "/org.openoffice.Office.Common/Save/Document":
            for prop in item.iter("prop"):
                if prop.get(_OOR + "name") == "AutoSaveTimeIntervall":
                    interval = next(prop.iter("value")).text
                    break
    return float(interval is not None and int(interval) == rules["minutes"])


def check_strikethrough(result: str, rules: dict, **options: Any) -> float:
    """The first run of each named paragraph of each named shape and slide is struck through."""
    from pptx import Presentation

    deck = Presentation(result)
    try:
        for slide in rules["slide_index_s"]:
            for shape in rules["shape_index_s"]:
                paragraphs = deck.slides[slide].shapes[shape].text_frame.paragraphs
                for paragraph in rules["paragraph_index_s"]:
                    if "strike" not in paragraphs[paragraph].runs[0].font._element.attrib:
                        return 0.0
    except Exception:
        return 0.0
    return 1.0


METRICS = {f.__name__: f for f in (
    check_presenter_console_disable, check_image_stretch_and_center, check_slide_orientation_Portrait,
    evaluate_presentation_fill_to_rgb_distance, check_left_panel, check_transition, check_page_number_colors,
    check_auto_saving_time, check_strikethrough)}
