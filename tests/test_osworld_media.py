"""VLC and video metrics give OSWorld's scores on generated status files, settings files and
videos."""

from __future__ import annotations

import pytest

from osworld_reference import reference
from parallel_rollout.envs.osworld.metrics import METRICS

STATUS = ('<root><state>{state}</state><information><category name="meta">'
          '<info name="filename">{name}</info></category></information></root>')
VLCRC = ("[qt]\n#qt-bgcone=1\nqt-bgcone=0\n# qt-max-volume=125\nqt-max-volume=200\n"
         "qt-slider-colours=10;20;30;40;50;60\n[core]\ninput-record-path=/home/user/Videos\n"
         "#one-instance-when-started-from-file=1\nglobal-key-play-pause=Space\n")


def test_vlc_metrics_score_as_osworld(tmp_path):
    vlc = reference("vlc")
    playing, paused = tmp_path / "playing.xml", tmp_path / "paused.xml"
    playing.write_text(STATUS.format(state="playing", name="/home/user/Music/song.mp3"))
    paused.write_text(STATUS.format(state="paused", name="song.mp3"))
    rc, empty = tmp_path / "vlcrc", tmp_path / "empty"
    rc.write_text(VLCRC)
    empty.write_text("[qt]\n")
    cases = [
        ("is_vlc_playing", str(playing), {"type": "file_name", "file_name": "song.mp3"}, 1),
        ("is_vlc_playing", str(playing), {"type": "file_name", "file_name": "other.mp3"}, 0),
        ("is_vlc_playing", str(paused), {"type": "file_name", "file_name": "song.mp3"}, 0),
        ("is_vlc_playing", str(playing), {"type": "url", "url": "https://x.org/a/song.mp3"}, 0),
        ("is_vlc_recordings_folder", str(rc), {"recording_file_path": "/home/user/Videos"}, 1),
        ("is_vlc_recordings_folder", str(rc), {"recording_file_path": "/tmp"}, 0),
        ("check_qt_bgcone", str(rc), {"expected_qt_bgcone": 0}, 1),
        ("check_qt_bgcone", str(empty), {"expected_qt_bgcone": 0}, 0),
        ("check_qt_max_volume", str(rc), {"expected_qt_max_volume": 200}, 1),
        ("check_qt_minimal_view", str(empty), {"expected_qt_minimal_view": "0"}, 1),
        ("check_one_instance_when_started_from_file", str(rc),
         {"expected_one_instance_when_started_from_file": 0}, 0),
        ("check_global_key_play_pause", str(rc), {"expected_global_key_play_pause": 1}, 1),
        ("check_qt_slider_colours", str(rc), {"type": "blackish"}, 1),
        ("check_qt_slider_colours", str(empty), {"type": "blackish"}, 0),
        ("check_qt_slider_colours", str(rc), {"type": "match", "expected_qt_slider_colours": "1;2;3"}, 0),
    ]
    for name, result, rule, score in cases:
        assert METRICS[name](result, rule) == getattr(vlc, name)(result, rule) == score, (name, rule)
    screen = {"width": 1920, "height": 1080}
    for window, score in ((dict(screen), 1), ({"width": 800, "height": 600}, 0), (None, 0)):
        assert METRICS["is_vlc_fullscreen"](window, screen) == vlc.is_vlc_fullscreen(window, screen) == score


def test_compare_videos_scores_as_osworld(tmp_path):
    cv2 = pytest.importorskip("cv2")
    np = pytest.importorskip("numpy")

    def video(name, frames, shade=0):
        path = str(tmp_path / name)
        writer = cv2.VideoWriter(path, cv2.VideoWriter_fourcc(*"MJPG"), 10, (64, 48))
        for index in range(frames):
            frame = np.zeros((48, 64, 3), np.uint8)
            frame[:, : 8 + index * 4] = (200, 100 + shade, 50)
            frame[20:30, 10:50] = (0, 0, 255) if shade else (255, 255, 255)
            writer.write(frame)
        writer.release()
        return path

    gold = video("gold.avi", 12)
    vlc = reference("vlc")
    for other, score in ((video("same.avi", 12), 1.0), (video("short.avi", 6), 0.0),
                         (video("other.avi", 12, shade=120), None)):
        ours = METRICS["compare_videos"](other, gold)
        assert ours == vlc.compare_videos(other, gold)
        if score is not None:
            assert ours == score


def test_play_and_exit_follows_the_other_vlcrc_settings(tmp_path):
    rc = tmp_path / "vlcrc"
    rc.write_text("#play-and-exit=0\nplay-and-exit=1\n")
    assert METRICS["check_play_and_exit"](str(rc), {"expected_play_and_exit": 1}) == 1.0
    assert METRICS["check_play_and_exit"](str(rc), {"expected_play_and_exit": "0"}) == 0.0
    rc.write_text("[qt]\n")
    assert METRICS["check_play_and_exit"](str(rc), {"expected_play_and_exit": 0}) == 1.0


@pytest.mark.slow
def test_compare_audios_scores_as_osworld(tmp_path):
    import wave

    np = pytest.importorskip("numpy")
    pytest.importorskip("librosa")

    def tone(name, *freqs):
        rate = 8000
        t = np.arange(rate // 2) / rate
        signal = np.concatenate([np.sin(2 * np.pi * f * t) for f in freqs])
        path = tmp_path / name
        with wave.open(str(path), "wb") as out:
            out.setnchannels(1)
            out.setsampwidth(2)
            out.setframerate(rate)
            out.writeframes((signal * 20000).astype("<i2").tobytes())
        return str(path)

    gold = tone("gold.wav", 440, 660)
    broken = tmp_path / "broken.wav"
    broken.write_bytes(b"not audio")
    vlc = reference("vlc")
    for other, check in ((tone("same.wav", 440, 660), lambda s: s > 0.99), (tone("other.wav", 300, 1200), lambda s: s < 0.9),
                         (str(broken), lambda s: s == 0.0)):
        ours = METRICS["compare_audios"](other, gold)
        assert ours == pytest.approx(vlc.compare_audios(other, gold)) and check(ours), other
    assert METRICS["compare_audios"](str(broken), str(broken)) == vlc.compare_audios(str(broken), str(broken)) == 1.0
