"""Media-player metrics (OSWorld's VLC tasks): what VLC is playing (its status.xml), its
settings in ``vlcrc`` (recordings folder, Qt interface options, global keys, one instance),
fullscreen, two sounds compared by MFCC and dynamic time warping (librosa, fastdtw), and two
videos compared frame by frame by perceptual hash (OpenCV); these libraries are the
``[osworld]`` extra.

``vlcrc`` settings are read as OSWorld reads them: the last line containing ``key=`` wins,
commented-out default lines included, and an absent key has VLC's default.
"""

from __future__ import annotations

import os
import xml.etree.ElementTree as ET
from typing import Any
from urllib.parse import urlparse

_META = 'information/category[@name="meta"]/info[@name="{}"]'
_FILE_FIELDS = ("filename", "title", "uri", "location", "name")
_URL_FIELDS = [_META.format(n) for n in ("url", "URI", "location", "title", "filename")] + [
    f'information/category[@name="Stream 0"]/info[@name="{n}"]' for n in ("Codec", "Type", "Language")]


def _first_text(tree, paths) -> str | None:
    for path in paths:
        element = tree.find(path)
        if element is not None and element.text:
            return element.text
    return None


def is_vlc_playing(result: str, rule: dict, **options: Any) -> float:
    """VLC's state is playing, and its file name (``type: file_name``) or URL (``type: url``)
    is the rule's."""
    with open(result, "rb") as handle:
        tree = ET.fromstring(handle.read().decode("utf-8"))
    if tree.find("state").text != "playing":
        return 0.0
    if rule["type"] == "file_name":
        info = _first_text(tree, [_META.format(n) for n in _FILE_FIELDS])
        if not info:
            return 0.0
        wanted = rule["file_name"]
        return float(os.path.basename(info) == wanted or info.endswith(wanted))
    if rule["type"] == "url":
        info = _first_text(tree, _URL_FIELDS)
        if not info:
            return 0.0
        wanted = rule["url"]
        if wanted in info or info.endswith(wanted):
            return 1.0
        parsed = urlparse(wanted)
        if info == os.path.basename(parsed.path):
            return 1.0
        if "://" in info:
            actual = urlparse(info)
            return float(parsed.netloc == actual.netloc and parsed.path in actual.path)
        return 0.0
    return 0.0


def _vlcrc(path: str) -> str:
    with open(path, "rb") as handle:
        return handle.read().decode("utf-8")


def _setting(text: str, marker: str, default: str) -> str:
    value = default
    for line in text.split("\n"):
        if marker in line:
            value = line.split("=")[-1].strip()
    return value


def _expected(rule: dict, key: str) -> str:
    value = rule[key]
    return str(value) if isinstance(value, int) else value


def is_vlc_recordings_folder(result: str, rule: dict, **options: Any) -> float:
    """The first uncommented ``input-record-path`` line names the rule's folder."""
    for line in _vlcrc(result).split("\n"):
        if line.startswith("#") or not line.strip():
            continue
        if "input-record-path" in line:
            return float(line.split("=")[-1].strip() == rule["recording_file_path"])
    return 0.0


def is_vlc_fullscreen(window_size: Any, screen_size: Any, **options: Any) -> float:
    if screen_size is None or window_size is None:
        return 0.0
    return float(window_size["width"] == screen_size["width"] and window_size["height"] == screen_size["height"])


def check_qt_bgcone(result: str, rule: dict, **options: Any) -> float:
    return float(_setting(_vlcrc(result), "qt-bgcone=", "1") == _expected(rule, "expected_qt_bgcone"))


def check_qt_max_volume(result: str, rule: dict, **options: Any) -> float:
    return float(_setting(_vlcrc(result), "qt-max-volume=", "125") == _expected(rule, "expected_qt_max_volume"))


def check_qt_minimal_view(result: str, rule: dict, **options: Any) -> float:
    return float(_setting(_vlcrc(result), "qt-minimal-view=", "0") == _expected(rule, "expected_qt_minimal_view"))


def check_one_instance_when_started_from_file(result: str, rule: dict, **options: Any) -> float:
    value = _setting(_vlcrc(result), "one-instance-when-started-from-file=", "1")
    return float(value == _expected(rule, "expected_one_instance_when_started_from_file"))


def check_play_and_exit(result: str, rule: dict, **options: Any) -> float:
    """(OSWorld's newer metric, not in desktop-env 1.0.2.)"""
    return float(_setting(_vlcrc(result), "play-and-exit=", "0") == _expected(rule, "expected_play_and_exit"))


def check_global_key_play_pause(result: str, rule: dict, **options: Any) -> float:
    """The global play/pause key is set ("1") or empty ("0")."""
    value = "0"
    for line in _vlcrc(result).split("\n"):
        if "global-key-play-pause=" in line:
            value = "0" if line.split("=")[-1].strip() == "" else "1"
    return float(value == _expected(rule, "expected_global_key_play_pause"))


def check_qt_slider_colours(result: str, rule: dict, **options: Any) -> float:
    """The slider colours are the rule's (``type: match``), or all blackish (every channel
    under 100)."""
    colours = _setting(_vlcrc(result), "qt-slider-colours", "153;210;153;20;210;20;255;199;15;245;39;29")
    try:
        if rule["type"] == "match":
            return float(colours == rule["expected_qt_slider_colours"])
        if rule["type"] == "blackish":
            values = [int(x) for x in colours.split(";")]
            return float(all(v < 100 for v in values[: len(values) // 3 * 3]))
    except Exception:
        return 0.0
    return None


def compare_audios(result: str | None, expected: str | None, **options: Any) -> float:
    """exp(-d) for d the DTW distance per step (cosine distances) between the two sounds'
    normalised MFCC frames (librosa, fastdtw, scipy: the ``[osworld]`` extra); 1 when neither
    file decodes, 0 when one does not."""
    import librosa
    import numpy as np
    from fastdtw import fastdtw
    from scipy.spatial.distance import cosine

    if not result or not expected:
        return 0.0
    loaded = []
    for path in (result, expected):
        try:
            loaded.append(librosa.load(path))
        except Exception:
            loaded.append((None, None))
    (y1, sr1), (y2, sr2) = loaded
    bad1, bad2 = y1 is None or y1.shape[0] == 0, y2 is None or y2.shape[0] == 0
    if bad1 and bad2:
        return 1.0
    if bad1 or bad2:
        return 0.0
    try:
        mfcc1 = librosa.util.normalize(librosa.feature.mfcc(y=y1, sr=sr1), axis=1)
        mfcc2 = librosa.util.normalize(librosa.feature.mfcc(y=y2, sr=sr2), axis=1)
    except Exception:
        return 0.0
    distance, path = fastdtw(mfcc1.T, mfcc2.T, dist=cosine)
    return np.exp(-(distance / len(path) if len(path) else np.inf))


def compare_videos(result: str, expected: str, max_frames_to_check: int = 100, threshold: int = 5,
                   **options: Any) -> float:
    """The first frames (up to ``max_frames_to_check``) differ by more than ``threshold``
    hash bits in at most ``threshold`` frames, and both videos end together."""
    import cv2
    import imagehash
    from PIL import Image

    first, second = cv2.VideoCapture(result), cv2.VideoCapture(expected)
    mismatches = 0
    for _ in range(max_frames_to_check):
        ok1, frame1 = first.read()
        ok2, frame2 = second.read()
        if not ok1 or not ok2:
            return 1.0 if ok1 == ok2 else 0.0
        hash1 = imagehash.phash(Image.fromarray(cv2.cvtColor(frame1, cv2.COLOR_BGR2RGB)))
        hash2 = imagehash.phash(Image.fromarray(cv2.cvtColor(frame2, cv2.COLOR_BGR2RGB)))
        if hash1 - hash2 > threshold:
            mismatches += 1
            if mismatches > threshold:
                return 0.0
    return 1.0


METRICS = {f.__name__: f for f in (
    is_vlc_playing, is_vlc_recordings_folder, is_vlc_fullscreen, check_qt_bgcone, check_qt_max_volume,
    check_qt_minimal_view, check_one_instance_when_started_from_file, check_play_and_exit, check_global_key_play_pause,
    check_qt_slider_colours, compare_audios, compare_videos)}
