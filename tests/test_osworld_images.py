"""Image, single-deck and desktop-app metrics give OSWorld's scores on generated files."""

from __future__ import annotations

import pytest

from osworld_reference import check_all, reference
from parallel_rollout.envs.osworld.metrics import METRICS

Image = pytest.importorskip("PIL.Image")
np = pytest.importorskip("numpy")


def picture(path, kind="scene", **changes):
    """A 64x48 scene: gradient background, a dark box at the left, a yellow triangle."""
    width, height = changes.get("size", (64, 48))
    y, x = np.mgrid[0:height, 0:width]
    rgb = np.stack([(x * 3) % 256, (y * 5) % 256, ((x + y) * 2) % 256], axis=2).astype(np.float32)
    if changes.get("plain"):
        rgb[:] = 235
    rgb[10:30, 1:12] = (20, 20, 20)
    for row in range(8):
        rgb[height // 2 - 4 + row, width // 2 - row:width // 2 + row + 1] = (250, 220, 0)
    if changes.get("scale"):
        rgb = rgb * changes["scale"]
    if changes.get("contrast"):
        rgb = (rgb - 128) * changes["contrast"] + 128
    image = Image.fromarray(np.clip(rgb, 0, 255).astype(np.uint8))
    if changes.get("saturate"):
        from PIL import ImageEnhance

        image = ImageEnhance.Color(image).enhance(changes["saturate"])
    if changes.get("mirror"):
        image = image.transpose(Image.FLIP_LEFT_RIGHT)
    if changes.get("noise"):
        rng = np.random.default_rng(1)
        image = Image.fromarray(rng.integers(0, 255, (height, width, 3), dtype=np.uint8))
    if changes.get("palette"):
        image = image.convert("P", palette=Image.Palette.ADAPTIVE, colors=256)
    if changes.get("upscale"):
        image = image.resize((width * 2, height * 2))
    if changes.get("transparent_border"):
        rgba = Image.new("RGBA", (width + 20, height + 20), (0, 0, 0, 0))
        rgba.paste(image, (10, 10))
        image = rgba
    image.save(path)
    return str(path)


# (metric, result changes, expected changes, score); None: strictly between 0 and 1
TWO = [
    ("compare_images", {}, {}, None),
    ("compare_images", {"noise": True}, {}, None),
    ("compare_image_list", {}, {}, 1.0),
    ("compare_image_list", {"scale": 0.9}, {}, 0.0),
    ("check_structure_sim", {}, {}, 1.0),
    ("check_structure_sim", {"noise": True}, {}, 0.0),
    ("check_structure_sim", {"size": (60, 48)}, {}, 0.0),
    ("check_file_exists_and_structure_sim", {}, {}, 1.0),
    ("check_structure_sim_resized", {"upscale": True}, {}, 1.0),
    ("check_structure_sim_resized", {"transparent_border": True}, {}, 1.0),
    ("check_structure_sim_resized", {"noise": True}, {}, 0.0),
    ("check_image_mirror", {"mirror": True}, {}, 1.0),
    ("check_image_mirror", {}, {}, 0.0),
    ("check_palette_and_structure_sim", {"palette": True}, {}, 1.0),
    ("check_palette_and_structure_sim", {}, {}, 0.0),
    ("check_brightness_decrease_and_structure_sim", {"scale": 0.7}, {}, 1.0),
    ("check_brightness_decrease_and_structure_sim", {"scale": 1.2}, {}, 0.0),
    ("check_saturation_increase_and_structure_sim", {"saturate": 1.6}, {}, 1.0),
    ("check_saturation_increase_and_structure_sim", {"saturate": 0.5}, {}, 0.0),
    ("check_contrast_increase_and_structure_sim", {"contrast": 1.3}, {}, 1.0),
    ("check_contrast_increase_and_structure_sim", {"contrast": 0.6}, {}, 0.0),
    ("check_green_background", {}, {}, 0.0),
]
ONE = [
    ("check_triangle_position", {}, None, None),
    ("check_textbox_on_leftside", {"plain": True}, None, 1.0),
    ("check_textbox_on_leftside", {"plain": True, "mirror": True}, None, 0.0),
    ("check_image_size", {}, {"width": 64, "height": 48}, 1.0),
    ("check_image_size", {}, {"width": 60}, 0.0),
    ("check_image_size", {"transparent_border": True}, {"width": 64, "ignore_transparent": True}, 1.0),
    ("check_image_file_size", {}, {"max_size": 100_000}, 1.0),
    ("check_image_file_size", {}, {"max_size": 10}, 0.0),
]


def module_of(name):
    return "vlc" if name == "compare_images" else "gimp"


def test_two_image_metrics_score_as_osworld(tmp_path):
    def run(folder, name, mine, gold, score):
        result, expected = picture(folder / "r.png", **mine), picture(folder / "e.png", **gold)
        ours = METRICS[name](result, expected)
        theirs = getattr(reference(module_of(name)), name)(result, expected)
        if score is None and name == "compare_images":  # SSIM of a picture with itself is 1
            score = 1.0 if not mine else None
        return ours, theirs, score

    check_all(TWO, run, tmp_path)


def test_one_image_metrics_score_as_osworld(tmp_path):
    def run(folder, name, mine, rule, score):
        result = picture(folder / "r.png", **mine)
        args = (result,) if rule is None else (result, rule)
        ours, theirs = METRICS[name](*args), getattr(reference("gimp"), name)(*args)
        return ours, theirs, (float(ours) if score is None else score)

    check_all(ONE, run, tmp_path)


def test_compare_images_base_and_gimp_config(tmp_path):
    result, expected = picture(tmp_path / "r.png", scale=0.95), picture(tmp_path / "e.png")
    for base in (0.1, 0.99):
        ours = METRICS["compare_images"](result, expected, reference_base_result=base)
        assert ours == reference("vlc").compare_images(result, expected, reference_base_result=base)
    gimprc = tmp_path / "gimprc"
    gimprc.write_text("# comment\n(default-image-size 640 480)\n(theme \"Dark\")\n(show-tips no)\n")
    for rule, score in (({"key": "show-tips", "value": "no"}, 1.0), ({"key": "theme", "value": "Light"}, 0.0),
                        ({"key": ["default-image-size", "640"], "value": "480"}, 1.0)):
        assert METRICS["check_config_status"](str(gimprc), rule) == \
            reference("gimp").check_config_status(str(gimprc), rule) == score


PREFS = ('user_pref("mail.spam.manualMark", true);\nuser_pref("mailnews.start_page.enabled", false);\n'
         'user_pref("mail.identity.id1.fullName", "Ann Lee");\n')
FILTERS = ('version="9"\nlogging="no"\nname="Spam \\"bad\\""\nenabled="yes"\ntype="17"\naction="Move to folder"\n'
           'actionValue="mailbox://nobody@Local%20Folders/Junk"\ncondition="AND (subject,contains,spam)"\n')
FOLDER = "FROM - Mon\nX-Mozilla-Status: 0001\nSubject: a\n\nFROM - Tue\nX-Mozilla-Status: 0009\nSubject: b\n"


def test_desktop_app_metrics_score_as_osworld(tmp_path):
    prefs, filters = tmp_path / "prefs.js", tmp_path / "msgFilterRules.dat"
    prefs.write_text(PREFS)
    filters.write_text(FILTERS)
    folder, other = tmp_path / "Inbox", tmp_path / "Other"
    folder.write_text(FOLDER)
    other.write_text(FOLDER.replace("Subject: a", "Subject: c") + "FROM - \n")
    bird = reference("thunderbird")
    cases = [
        ("check_thunderbird_prefs", str(prefs), {"expect": {"mail.spam.manualMark": {"method": "eq", "ref": True}},
                                                 "unexpect": {"mailnews.start_page.enabled": {"method": "eq", "ref": True}}}, 1.0),
        ("check_thunderbird_prefs", str(prefs), {"expect": {"mail.identity.id1.fullName": {"method": "re", "ref": "^Bob"}}}, 0.0),
        ("check_thunderbird_filter", str(filters), {"expect": [{"name": 'Spam "bad"', "action": "Move to folder",
                                                               "condition": ["AND (subject,contains,spam)"]}]}, 1.0),
        ("check_thunderbird_filter", str(filters), {"unexpect": [{"enabled": "yes"}]}, 0.0),
        ("check_thunderbird_folder", str(folder), str(folder), 1.0),
        ("check_thunderbird_folder", str(folder), str(other), None),
    ]
    for name, result, rule, score in cases:
        ours, theirs = METRICS[name](result, rule), getattr(bird, name)(result, rule)
        assert ours == theirs, name
        if score is not None:
            assert ours == score, name
    basic = reference("basic_os")
    timedatectl = ("               Local time: Thu 2024-01-25 12:56:06 WET\n           Universal time: x\n"
                   "                 RTC time: x\n                Time zone: Atlantic/Faroe (WET, +0000)\n")
    for name, args, score in (
            ("check_gnome_favorite_apps", ("['a.desktop', 'b.desktop']\n", {"expected": ["b.desktop", "a.desktop"]}), 1.0),
            ("check_gnome_favorite_apps", ("['a.desktop']", {"expected": ["b.desktop"]}), 0.0),
            ("is_utc_0", (timedatectl,), 1.0), ("is_utc_0", (timedatectl.replace("+0000", "+0100"),), 0.0),
            ("check_text_enlarged", ("1.25",), 1.0), ("check_text_enlarged", ("1.0",), 0.0),
            ("check_moved_jpgs", ({"children": [{"name": "a.jpg"}]}, {"expected": ["a.jpg"]}), 1.0),
            ("check_moved_jpgs", ({"children": []}, {"expected": ["a.jpg"]}), 0.0),
            ("is_in_vm_clickboard", ({"expected": ["x", "y"]}, "x and y"), 1.0),
            ("is_in_vm_clickboard", ({"expected": "z"}, "x and y"), 0.0)):
        assert METRICS[name](*args) == getattr(basic, name)(*args) == score, name


def test_check_mp3_meta_scores_as_osworld(tmp_path):
    from mutagen.easyid3 import EasyID3

    song = tmp_path / "song.mp3"
    song.write_bytes(b"")
    tags = EasyID3()
    tags["title"] = "Blue"
    tags["artist"] = ["Ann", "Bob"]
    tags.save(str(song))
    others = reference("others")
    for meta, score in (({"title": {"method": "eq", "ref": "Blue"}, "artist": {"method": "eq", "ref": "Ann,Bob"}}, 1.0),
                        ({"album": {"method": "eq", "ref": "X"}}, 0.0)):
        assert METRICS["check_mp3_meta"](str(song), meta) == others.check_mp3_meta(str(song), meta) == score


def test_structure_sim_with_threshold(tmp_path):
    gold = picture(tmp_path / "g.png")
    bigger = picture(tmp_path / "b.png", upscale=True)
    noise = picture(tmp_path / "n.png", noise=True)
    check = METRICS["check_structure_sim_with_threshold"]
    assert check(gold, gold) == 1.0
    assert check(bigger, gold) == 1.0  # resized to the expected size first
    assert check(bigger, gold, ssim_threshold=1.0) == 0.0
    assert check(noise, gold) == 0.0
    assert check(None, gold) == 0.0 and check(str(tmp_path / "missing.png"), gold) == 0.0


def test_compare_image_text_reads_the_text(tmp_path):
    import shutil

    from PIL import ImageDraw, ImageFont

    if shutil.which("tesseract") is None:
        pytest.fail("tesseract is missing: ./dev installs tesseract-ocr for the tests")
    image = Image.new("RGB", (640, 120), "white")
    ImageDraw.Draw(image).text((20, 30), "total 42 files", fill="black", font=ImageFont.load_default(size=40))
    png, xwd = tmp_path / "shot.png", tmp_path / "missing.xwd"
    image.save(png)
    assert METRICS["compare_image_text"](str(png), {"type": "text", "text": "42 files"}) == 1.0
    assert METRICS["compare_image_text"](str(png), {"type": "text", "text": "ls -l"}) == 0.0
    assert METRICS["compare_image_text"](str(xwd), {"type": "text", "text": "x"}) == 0.0
