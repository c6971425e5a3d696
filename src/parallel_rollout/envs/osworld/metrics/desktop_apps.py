"""Metrics on the desktop and mail settings: Thunderbird's prefs.js, message filters and
folder files; GNOME's favourite apps, the timezone, text scaling, moved files, the clipboard;
an MP3's ID3 tags (mutagen, the ``[osworld]`` extra)."""

from __future__ import annotations

import ast
import json
import re
from typing import Any

from .rules import match_record, match_value

_PREF = re.compile(r'^user_pref\("(?P<key>(?:[^"]|\\")+)\", (?P<val>.+)\);$')


def check_thunderbird_prefs(result: str | None, rule: dict, **options: Any) -> float:
    """Each ``expect`` pref's last line matches its rule; no ``unexpect`` pref line does."""
    if result is None:
        return 0.0
    wanted, banned = rule.get("expect", {}), rule.get("unexpect", {})
    seen = {key: False for key in wanted}
    clean = True
    with open(result) as handle:
        for line in handle:
            match = _PREF.match(line.strip())
            if match is None:
                continue
            key, value = match.group("key"), json.loads(match.group("val"))
            if key in wanted:
                seen[key] = match_value(value, wanted[key])
            elif key in banned:
                clean = clean and not match_value(value, banned[key])
    return float(all(seen.values()) and clean)


_CONDITION = re.compile(r'\b(?:AND|OR) \((?:[\w ]+),(?:[\w ' + "'" + r']+),(?:"(?:(?:[^"]|\")+)"|(?:[^)]+))\)|\bALL\b')
_FILTER_FIELDS = (("name=", "name"), ("enabled=", "enabled"), ("type=", "type"), ("action=", "action"),
                  ("actionValue=", "actionValue"), ("condition=", "condition"))


def _unquote(value: str) -> str:
    return value.replace('\\"', '"').replace("\\\\", "\\")


def _filters(path: str) -> list[dict]:
    """msgFilterRules.dat's filters; a filter is complete at its condition line."""
    found, current = [], {}
    with open(path) as handle:
        for line in handle:
            for prefix, field in _FILTER_FIELDS:
                if not line.startswith(prefix):
                    continue
                value = _unquote(line[len(prefix) + 1:-2])
                if field == "name":
                    current = {"name": value}
                elif field == "condition":
                    current["condition"] = _CONDITION.findall(value)
                    found.append(current)
                else:
                    current[field] = value
                break
    return found


def check_thunderbird_filter(result: str | None, rules: dict, **options: Any) -> float:
    """Each ``expect`` record pattern matches some filter; no ``unexpect`` one matches any."""
    if result is None:
        return 0.0
    filters = _filters(result)
    wanted, banned = rules.get("expect", []), rules.get("unexpect", [])
    return float(all(any(match_record(p, f) for f in filters) for p in wanted)
                 and not any(match_record(p, f) for p in banned for f in filters))


def _folder_text(path: str, options: dict) -> str:
    """The folder file's messages as OSWorld lists them: its split on ``FROM - `` keeps the
    blank pieces only (deleted ones dropped, duplicates too), each normalised and sorted."""
    with open(path) as handle:
        pieces = handle.read().strip().split("FROM - ")
    messages = []
    for piece in pieces:
        if piece.strip():
            continue
        if options.get("remove_deleted", True) and re.search(r"X-Mozilla-Status: 000[89]", piece):
            continue
        if options.get("ignore_status", False):
            piece = re.sub(r"X-Mozilla-Status\d?:[\s\d]+", "", piece)
        if options.get("ignore_keys", False):
            piece = re.sub(r"(X-Mozilla-Keys:[^\n]*?)\n(MIME-Version)", r"\2", piece)
        messages.append("FROM - " + piece.strip())
    if options.get("remove_duplicate", True):
        messages = list(set(messages))
    return "\n".join(sorted(messages))


def check_thunderbird_folder(result, expected, **options: Any) -> float:
    """1 when each result folder file lists the messages of its expected one."""
    if type(expected) is not list:
        result, expected = [result], [expected]
    for mine, gold in zip(result, expected):
        if mine is None or _folder_text(mine, options) != _folder_text(gold, options):
            return 0.0
    return 1.0


def check_gnome_favorite_apps(apps_text: str, rule: dict, **options: Any) -> float:
    """gsettings' favourite-apps list holds exactly the expected apps."""
    apps = ast.literal_eval(apps_text.strip())
    wanted = rule["expected"]
    return float(len(apps) == len(wanted) and set(apps) == set(wanted))


def is_utc_0(timedatectl_output: str, **options: Any) -> float:
    """timedatectl's fourth line (the time zone) ends at offset +0000."""
    return float(timedatectl_output.split("\n")[3].endswith("+0000)"))


def check_text_enlarged(scaling_factor: str, **options: Any) -> float:
    return float(float(scaling_factor) > 1.0)


def check_moved_jpgs(directory_tree: dict, rule: dict, **options: Any) -> float:
    """The folder holds exactly the expected files."""
    names = [node["name"] for node in directory_tree["children"]]
    return float(len(names) == len(rule["expected"]) and set(names) == set(rule["expected"]))


def is_in_vm_clickboard(config: dict, terminal_output: str, **options: Any) -> float:
    """The clipboard text (a command's output) holds the expected text(s)."""
    wanted = config["expected"]
    if not isinstance(wanted, list):
        return float(wanted in terminal_output)
    return float(all(item in terminal_output for item in wanted))


def check_mp3_meta(result: str | None, meta: dict, **options: Any) -> float:
    """Each ID3 tag (lists joined by commas, absent ones empty) matches its rule."""
    from mutagen.easyid3 import EasyID3

    if result is None:
        return 0.0
    tags = EasyID3(result)
    ok = True
    for key, rule in meta.items():
        value = tags.get(key, "")
        ok = ok and match_value(",".join(value) if isinstance(value, list) else value, rule)
    return float(ok)


METRICS = {f.__name__: f for f in (
    check_thunderbird_prefs, check_thunderbird_filter, check_thunderbird_folder, check_gnome_favorite_apps,
    is_utc_0, check_text_enlarged, check_moved_jpgs, is_in_vm_clickboard, check_mp3_meta)}
