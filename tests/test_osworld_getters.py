"""Getters: relative dates as OSWorld's getter computes them, and the desktop/app getters
through a real guest agent (files, directory tree, slide media, missing routes)."""

from __future__ import annotations

import copy
import io
import json
import zipfile
from types import SimpleNamespace

import pytest

from osworld_reference import reference
from parallel_rollout.envs.osworld.getters import GETTERS
from parallel_rollout.guest.client import GuestClient
from test_guest import _start_agent

RELATIVE = [
    {"relativeTime": {"from": "tomorrow"}, "expected": {"time": "{DoW}, {Month} {Day0D}, {Year}"}},
    {"relativeTime": {"from": "next Monday"}, "expected": {"time": "{MonthFull} {DayD} {month} {MonthD}"}},
    {"relativeTime": {"from": "5th next month"}, "expected": {"time": "{Year}-{Month0D}-{Day0D}"}},
    {"relativeTime": {"from": "this month"}, "expected": {"time": "{Month} {Year}"}},
    {"relativeTime": {"from": "first monday eight months later"}, "expected": {"time": "{Year}-{MonthD}-{DayD}"}},
    {"relativeTime": {"from": "first monday four months later"}, "expected": {"time": "{Year}-{MonthD}-{DayD}"}},
    {"relativeTime": {"from": "10th next month", "to": "11th next month"},
     "expected": {"from": "{DoW} {Day0D}", "to": "{DoW} {Day0D}"}},
    {"relativeTime": {"from": "next week Friday", "to": "next week Sunday"},
     "expected": {"from": "{Month} {DayD}", "to": "{Month} {DayD}"}},
    {"relativeTime": {"from": "next week Saturday", "to": "next week Sunday"},
     "expected": {"from": "{Month} {DayD}", "to": "{Month} {DayD}"}},
    {"relativeTime": {"from": "next Monday split", "to": "next Friday split"},
     "expected": {"puDay": "{DayD}", "puMonth": "{MonthFull}", "puYear": "{Year}", "doDay": "{DayD}",
                  "doMonth": "{MonthFull}", "doYear": "{Year}"}},
    {"relativeTime": {"from": "this Saturday", "to": "this Sunday"},
     "expected": {"from": "{DoW} {DayD}", "to": "{DoW} {DayD}"}},
    {"relativeTime": {"from": "next Saturday", "to": "next Sunday"},
     "expected": {"from": "{DoW} {DayD}", "to": "{DoW} {DayD}"}},
]


@pytest.mark.parametrize("zone", ["Europe/Zurich", "America/Los_Angeles", "Pacific/Kiritimati"])
def test_relative_dates_are_osworlds(zone):
    misc = reference("misc", kind="getters")
    for rules in RELATIVE:
        config = {"type": "rule_relativeTime", "rules": {**copy.deepcopy(rules), "timezone": zone}}
        ours = GETTERS["rule_relativeTime"](None, copy.deepcopy(config))
        theirs = misc.get_rule_relativeTime(None, copy.deepcopy(config))
        assert ours == theirs, rules["relativeTime"]
        assert not any("{" in value for value in ours["expected"].values())


@pytest.fixture
def guest(tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    agent = _start_agent(tmp_path / "agent.sock", home)
    env = SimpleNamespace(vm=GuestClient(f"unix:{tmp_path / 'agent.sock'}", timeout_s=30),
                          cache_dir=str(tmp_path / "cache"), task=SimpleNamespace(id="t", source=""))
    yield env, home
    agent.kill()
    agent.wait()


def deck_with_media() -> bytes:
    pptx = pytest.importorskip("pptx")
    from PIL import Image

    prs = pptx.Presentation()
    prs.slides.add_slide(prs.slide_layouts[6])
    buffer = io.BytesIO()
    prs.save(buffer)
    image = io.BytesIO()
    Image.new("RGB", (8, 8), (10, 200, 30)).save(image, "PNG")
    out = io.BytesIO()
    with zipfile.ZipFile(io.BytesIO(buffer.getvalue())) as src, zipfile.ZipFile(out, "w") as dst:
        for item in src.infolist():
            data = src.read(item.filename)
            if item.filename == "ppt/slides/slide1.xml":
                data = data.replace(b"<p:cSld>", b'<p:cSld><p:bg><p:bgPr><a:blipFill><a:blip r:embed="rIdBg"/>'
                                    b"</a:blipFill><a:effectLst/></p:bgPr></p:bg>")
            if item.filename == "ppt/slides/_rels/slide1.xml.rels":
                data = data.replace(b"</Relationships>", (
                    b'<Relationship Id="rIdBg" Type="http://schemas.openxmlformats.org/officeDocument/2006/'
                    b'relationships/image" Target="../media/bg.png"/>'
                    b'<Relationship Id="rIdA" Type="http://schemas.openxmlformats.org/officeDocument/2006/'
                    b'relationships/audio" Target="../media/song.mp3"/></Relationships>'))
            dst.writestr(item, data)
        dst.writestr("ppt/media/bg.png", image.getvalue())
        dst.writestr("ppt/media/song.mp3", b"ID3 not really audio")
    return out.getvalue()


def test_a_relative_date_given_as_a_list_of_formats_fills_each():
    """OSWorld's chrome task 82bc8d6a ("next Monday, a flight from Mumbai to Stockholm") gives
    ``"time": ["{Year}-{Month0D}-{Day0D}"]``, a list of acceptable dates, as OSWorld's getter
    (after desktop-env 1.0.2) reads it: the getter raised on the list (AttributeError), and
    every attempt scored 0 whatever the agent did."""
    rules = {"relativeTime": {"from": "next Monday"}, "timezone": "Europe/Zurich",
             "expected": {"fromStation": ["BOM"], "time": ["{Year}-{Month0D}-{Day0D}", "{DoW}"]}}
    alone = {**copy.deepcopy(rules), "expected": {"time": "{Year}-{Month0D}-{Day0D}"}}
    day = GETTERS["rule_relativeTime"](None, {"rules": alone})["expected"]["time"]
    filled = GETTERS["rule_relativeTime"](None, {"rules": rules})["expected"]
    assert filled == {"fromStation": ["BOM"], "time": [day, filled["time"][1]]}, filled
    assert filled["time"][1] == "Mon", filled


def test_desktop_getters_through_a_real_guest_agent(guest):
    env, home = guest
    (home / ".config" / "vlc").mkdir(parents=True)
    (home / ".config" / "vlc" / "vlcrc").write_text("[qt]\nqt-bgcone=0\n")
    (home / ".config" / "GIMP" / "2.10").mkdir(parents=True)
    (home / ".config" / "GIMP" / "2.10" / "gimprc").write_text("(default-image-size 640 480)\n")
    (home / "deck.pptx").write_bytes(deck_with_media())
    assert open(GETTERS["vlc_config"](env, {"dest": "vlcrc"})).read() == "[qt]\nqt-bgcone=0\n"
    assert "640 480" in open(GETTERS["gimp_config_file"](env, {"file_name": "gimprc", "dest": "gimprc"})).read()
    tree = GETTERS["list_directory"](env, {"path": str(home / ".config")})
    assert sorted(child["name"] for child in tree["children"]) == ["GIMP", "vlc"]
    slide = {"ppt_file_path": str(home / "deck.pptx"), "slide_index": 0, "dest": "x"}
    assert open(GETTERS["audio_in_slide"](env, slide), "rb").read() == b"ID3 not really audio"
    background = GETTERS["background_image_in_slide"](env, slide)
    assert background.endswith("ppt/media/bg.png") and open(background, "rb").read().startswith(b"\x89PNG")
    assert GETTERS["vlc_playing_info"](env, {"dest": "status.xml"}) is None  # no VLC answering
    assert GETTERS["background_image_in_slide"](env, {**slide, "slide_index": 3}) is None
    assert GETTERS["chrome_appearance_mode_ui"](env, {}) == "system"  # no profile yet
    profile = home / ".config" / "google-chrome" / "Default"
    profile.mkdir(parents=True)
    for prefs, mode in (({"browser": {"theme": {"color_scheme2": 2}}}, "dark"),
                        ({"browser": {"theme": {"color_scheme": "Light"}}}, "light"),
                        ({"browser": {"theme": {"color_scheme2": 2}}, "extensions": {"theme": {"system_theme": 0}}}, "light"),
                        ({}, "system")):
        (profile / "Preferences").write_text(json.dumps(prefs))
        assert GETTERS["chrome_appearance_mode_ui"](env, {}) == mode


def test_url_path_parse_reads_shop_filters():
    from parallel_rollout.envs.osworld.getters.browser import _path_facts

    url = ("https://www.macys.com/shop/mens-clothing/mens-shirts/Men_regular_size_t,Price_discount_range,"
           "Sleeve_length/L,50_PERCENT_%20off%20%26%20more,Short%20Sleeve?id=20626")
    assert _path_facts(url, ["Men_regular_size_t", "Price_discount_range", "Sleeve_length"]) == {
        "mens_clothing": True, "shirts": True, "short_sleeve": True, "Men_regular_size_t": "L",
        "Price_discount_range": "50_PERCENT_ off & more", "Sleeve_length": "Short Sleeve"}
    assert _path_facts("https://www.macys.com/shop/womens/Price_discount_range,x/"
                       "20_PERCENT_%20off%20%26%20more|50_PERCENT_%20off%20%26%20more,y", ["Price_discount_range"]) == {
        "mens_clothing": None, "shirts": None, "short_sleeve": None,
        "Price_discount_range": "not_50_PERCENT_ off & more"}
