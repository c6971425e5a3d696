"""Getters that read the guest browser's profile files: Preferences (search engine, profile
name, font sizes, privacy switches, startup page, extensions), Bookmarks, the Cookies and
History databases, and the desktop's ``.desktop`` shortcuts. The values, and the fallbacks
when a file cannot be read, are OSWorld's."""

from __future__ import annotations

import json
import os
import sqlite3
from typing import Any

from .. import chrome


def _preferences(env) -> dict:
    return json.loads(env.vm.read_file(f"{chrome.profile_dir(env.vm)}/Preferences"))


def _prefs_or(env, fallback: Any, read) -> Any:
    try:
        return read(_preferences(env))
    except Exception:
        return fallback


def get_default_search_engine(env, config: dict) -> str:
    return _prefs_or(env, "Google", lambda d: d.get("default_search_provider_data", {})
                     .get("template_url_data", {}).get("short_name", "Google"))


def get_profile_name(env, config: dict) -> Any:
    return _prefs_or(env, None, lambda d: d.get("profile", {}).get("name", None))


def get_chrome_font_size(env, config: dict) -> dict:
    default = {"default_fixed_font_size": 13, "default_font_size": 16, "minimum_font_size": 13}
    return _prefs_or(env, {"default_fixed_font_size": 13, "default_font_size": 16},
                     lambda d: d.get("webkit", {}).get("webprefs", default))


def get_enable_do_not_track(env, config: dict) -> str:
    return _prefs_or(env, "false", lambda d: "true" if d.get("enable_do_not_track", {}) else "false")


def get_enable_safe_browsing(env, config: dict) -> str:
    def read(d):
        safe = d.get("safebrowsing", {})
        return "true" if bool(safe.get("enhanced", False)) or bool(safe.get("enabled", False)) else "false"
    return _prefs_or(env, "false", read)


def get_new_startup_page(env, config: dict) -> str:
    def read(d):
        if "session" not in d:
            return "true"
        return "true" if d.get("session", {}).get("restore_on_startup", {}) == 5 else "false"
    return _prefs_or(env, "Google", read)


def get_data_delete_automacally(env, config: dict) -> str:
    return _prefs_or(env, "Google", lambda d: "true" if d["profile"].get("default_content_setting_values", None)
                     is not None else "false")


def get_find_unpacked_extension_path(env, config: dict) -> Any:
    return _prefs_or(env, "Google", lambda d: [e["path"] for e in d.get("extensions", {}).get("settings", {}).values()])


def get_find_installed_extension_name(env, config: dict) -> Any:
    return _prefs_or(env, "Google", lambda d: [e["manifest"]["name"]
                                               for e in d.get("extensions", {}).get("settings", {}).values()])


_SCHEMES = {"system": "system", "default": "system", "0": "system", "light": "light", "1": "light",
            "dark": "dark", "2": "dark"}


def appearance(preferences: dict) -> str:
    """light, dark or system from Preferences: ``browser.theme.color_scheme2`` (or the older
    ``color_scheme``); a GTK/system theme switched off (``extensions.theme.system_theme`` 0)
    means light."""
    theme = preferences.get("browser", {}).get("theme", {})
    raw = theme.get("color_scheme2", theme.get("color_scheme", None))
    if isinstance(raw, bool):
        mode = None
    elif isinstance(raw, (int, float)):
        mode = {0: "system", 1: "light", 2: "dark"}.get(int(raw))
    else:
        mode = _SCHEMES.get(raw.strip().lower()) if isinstance(raw, str) else None
    if preferences.get("extensions", {}).get("theme", {}).get("system_theme", None) in (0, "0", False):
        return "light"
    return mode or "system"


def get_chrome_appearance_mode_ui(env, config: dict) -> str:
    """The browser's appearance mode as OSWorld's newer getter reads it when the settings page
    cannot be probed: from the profile's Preferences ("system" when unreadable)."""
    return _prefs_or(env, "system", appearance)


def get_bookmarks(env, config: dict) -> Any:
    data = env.vm.read_file(f"{chrome.profile_dir(env.vm)}/Bookmarks")
    if not data:
        return []
    return json.loads(data).get("roots", {})


def _query(env, name: str, dest: str, sql: str) -> list | None:
    try:
        data = env.vm.read_file(f"{chrome.profile_dir(env.vm)}/{name}")
        path = os.path.join(env.cache_dir, dest)
        os.makedirs(env.cache_dir, exist_ok=True)
        with open(path, "wb") as handle:
            handle.write(data)
        with sqlite3.connect(path) as db:
            return db.execute(sql).fetchall()
    except Exception:
        return None


def get_cookie_data(env, config: dict) -> list | None:
    return _query(env, "Cookies", config["dest"], "SELECT * FROM cookies")


def get_history(env, config: dict) -> list | None:
    return _query(env, "History", config["dest"], "SELECT url, title, last_visit_time FROM urls")


def get_shortcuts_on_desktop(env, config: dict) -> dict:
    """{name: content} of the ``.desktop`` files on the guest's desktop."""
    home = (env.vm.execute(["python3", "-c", "import os; print(os.path.expanduser('~'))"], timeout=30,
                           isolated=True)
            .get("output") or "").strip()
    desktop = f"{home}/Desktop"
    tree = env.vm.list_directory(desktop).get("directory_tree", {})
    names = [child["name"] for child in tree.get("children", []) if child["name"].endswith(".desktop")]
    return {name: env.vm.read_file(f"{desktop}/{name}").decode("utf-8") for name in names}


GETTERS = {f.__name__[4:]: f for f in (
    get_default_search_engine, get_profile_name, get_chrome_font_size, get_enable_do_not_track,
    get_enable_safe_browsing, get_new_startup_page, get_data_delete_automacally, get_find_unpacked_extension_path,
    get_find_installed_extension_name, get_chrome_appearance_mode_ui, get_bookmarks, get_cookie_data,
    get_history, get_shortcuts_on_desktop)}
