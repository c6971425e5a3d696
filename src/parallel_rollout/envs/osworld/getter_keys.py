"""The keys each getter reads from its config, and a task file's getter key that none reads,
refused at load.

A getter is called with its whole config (``getter(env, config)``) and reads the keys it
knows, most of them with a default: a key it does not read (a typo, ``"mutli": true`` for a
``vm_file``'s ``multi``, ``"give"`` for ``gives``) was silently ignored, the getter fetched
one file where the task meant several, and the metric scored the agent on the wrong state
with nothing saying why. :data:`FIELDS` are the keys a getter reads without a default (one
missing failed every grading), :data:`OPTIONAL` those it reads with one; :func:`key_problem`
names a key in neither (and the nearest one the getter reads) as the folder loads. A key
starting with ``_`` is a comment, as in the evaluator. :data:`FLAGS` are the keys a getter
reads as a flag: a string there reads as true, ``"multi": "false"`` fetched a list, so one
other than "true" (which OSWorld's tasks write) is refused, as are a list, an object and a
number other than 0 or 1 (a step's flag's kind, :data:`.step_values.FLAG`). :data:`KINDS`
are the keys a getter reads as a value of one kind (a ``dest`` a string, a command, a
slide's number).
:func:`files_problem` checks what a file getter's ``path``, ``dest``, ``multi`` and ``gives``
pick. tests/test_osworld_getter_keys.py checks both lists against each getter's code and the
369 real tasks.
"""

from __future__ import annotations

from typing import Any

from ...task_json import as_written
from .rule_keys import unread_hint
from .step_values import COMMAND, FLAG, NUMBER, SECONDS, TEXT, TEXTS, WHOLE, Kind

__all__ = ["FIELDS", "FLAGS", "KINDS", "OPTIONAL", "VALUES", "files_problem", "key_problem", "reads"]

_DEST = ("dest",)
#: getter type -> the keys it reads without a default, as OSWorld's own do: one missing is the
#: task file's error, which failed every attempt's grading (a KeyError taken for the agent's
#: output failing the metric: reward 0, the run's exit 0)
FIELDS: dict[str, tuple[str, ...]] = {
    "vm_file": ("path",), "cloud_file": ("path",), "cache_file": ("path",),
    "vm_command_line": ("command",), "vm_command_error": ("command",), "rule": ("rules",),
    "content_from_vm_file": ("path", "file_type", "file_content"),
    "rule_relativeTime": ("rules",),
    **dict.fromkeys(("cookie_data", "history", "vlc_config", "vlc_playing_info", "vm_wallpaper", "googledrive_file"),
                    _DEST),
    "gimp_config_file": ("dest", "file_name"), "vscode_config": ("path", "dest", "vscode_extension_command"),
    "pdf_from_url": ("path", "dest"), "list_directory": ("path",), "page_info": ("url",),
    "info_from_website": ("url",), "vm_window_size": ("app_class_name",),
    "audio_in_slide": ("ppt_file_path", "slide_index"),
    "background_image_in_slide": ("ppt_file_path", "slide_index"),
    "active_tab_html_parse": ("category",), "active_tab_url_parse": ("parse_keys",),
    "url_path_parse": ("parse_keys",), "url_dashPart": ("partIndex", "returnType", "key"),
    "gotoRecreationPage_and_get_html_content": ("class",)}

_FILES = ("dest", "multi", "gives")
_COMMAND = ("shell", "timeout")
_URL = ("goto_prefix",)  # the address bar shows no scheme: what is put before it
#: getter type -> the keys it reads with a default (each getter with none is absent)
OPTIONAL: dict[str, tuple[str, ...]] = {
    "vm_file": (*_FILES, "time_suffix"), "cloud_file": _FILES,
    "vm_command_line": _COMMAND, "vm_command_error": _COMMAND,
    "active_url_from_accessTree": _URL, "active_tab_info": _URL, "url_path_parse": _URL,
    "active_tab_url_parse": (*_URL, "replace", "split_list"), "url_dashPart": (*_URL, "needDeleteId"),
    "active_tab_html_parse": (*_URL, "class_multiObject", "class_multiObject_child", "class_multiObject_only_child",
                              "class_multiObject_search_exist", "class_singleObject", "labelObject", "xpathObject",
                              "inputObject", "class_multiObject_li", "url_include_expected",
                              "url_include_expected_multichoice"),
    "info_from_website": ("infos", "backups"),
    "gotoRecreationPage_and_get_html_content": ("selector", "order", "url"),
    "audio_in_slide": _DEST, "background_image_in_slide": _DEST,  # a slide's part linked as a file://
    "googledrive_file": ("settings_file", "query", "path", "query_list", "path_list"),
}

#: (getter type, key) -> the values of it the getter implements (OSWorld's own tasks give these)
VALUES: dict[tuple[str, str], tuple[Any, ...]] = {
    ("gotoRecreationPage_and_get_html_content", "selector"): ("class",),
}


#: getter type -> the keys it reads as a flag (``if config.get(key):``, ``bool(...)``)
FLAGS: dict[str, tuple[str, ...]] = {
    "vm_file": ("multi", "time_suffix"), "cloud_file": ("multi",), "vm_command_line": ("shell",),
    "vm_command_error": ("shell",), "url_dashPart": ("needDeleteId",), "active_tab_url_parse": ("split_list",)}

_NAMED = ("cookie_data", "history", "vlc_config", "vlc_playing_info", "vm_wallpaper", "gimp_config_file",
          "vscode_config", "pdf_from_url", "audio_in_slide", "background_image_in_slide")
_PER_FILE = Kind(lambda value: isinstance(value, list) and all(map(TEXTS.test, value)),
                 "a list of lists of strings, one per file")


def _slide_number(value: Any) -> bool:
    """Whether OSWorld's ``int(config["slide_index"])`` reads ``value`` as the slide it
    says, 0 or more: a whole number, or a string of digits ("1" reads as 1, here too); 1.5
    read as 1, "1.5" and true raised or read as a slide not written, and a slide below 0
    is in no deck."""
    if isinstance(value, str):
        return value.strip().isdecimal()
    whole = WHOLE.test(value) or NUMBER.test(value) and value.is_integer()  # 2.0 reads as 2
    return whole and value >= 0


#: a slide's place in its deck, as OSWorld's audio_in_slide and background_image_in_slide read it
_SLIDE = Kind(_slide_number, "a slide's number from 0 (the first slide): a whole number, or a string of its digits")
#: (getter type, key) -> the kind of value the getter reads there (:mod:`.step_values`): a
#: file's name in the attempt's cache folder (``dest``), a path on the guest, a URL, a
#: command; another raised as grading fetched the state, and the metric scored 0 whatever
#: the agent did (a vm_file's and a cloud_file's path and dest: :func:`files_problem`)
KINDS: dict[tuple[str, str], Kind] = {
    **{(kind, "dest"): TEXT for kind in _NAMED},
    **{(kind, "command"): COMMAND for kind in ("vm_command_line", "vm_command_error")},
    **{(kind, "ppt_file_path"): TEXT for kind in ("audio_in_slide", "background_image_in_slide")},
    **{(kind, "slide_index"): _SLIDE for kind in ("audio_in_slide", "background_image_in_slide")},
    # this mode's own key (OSWorld's getter reads none), read with float() as grading runs it
    **{(kind, "timeout"): SECONDS for kind in ("vm_command_line", "vm_command_error")},
    **{(kind, "path"): TEXT for kind in ("cache_file", "list_directory", "pdf_from_url", "vscode_config",
                                         "content_from_vm_file")},
    ("page_info", "url"): TEXT, ("info_from_website", "url"): TEXT, ("gimp_config_file", "file_name"): TEXT,
    ("vm_window_size", "app_class_name"): TEXT,
    # a Drive file's folders and name, or a query per level: a string was read a letter a level
    **{("googledrive_file", key): TEXTS for key in ("path", "query")},
    **dict.fromkeys((("googledrive_file", "path_list"), ("googledrive_file", "query_list")), _PER_FILE),
    ("googledrive_file", "settings_file"): TEXT}


def reads(kind: str) -> tuple[str, ...]:
    """Every key getter ``kind`` reads from its config besides ``type``."""
    return (*FIELDS.get(kind, ()), *OPTIONAL.get(kind, ()))


def key_problem(getter: dict) -> str | None:
    """What is wrong with a key of a getter config (one whose ``type`` is a getter's): one the
    getter does not read, a string given to a flag (``"multi": "false"`` fetched a list), or a
    value of one it does not implement; None when nothing is."""
    kind = getter["type"]
    known = reads(kind)
    for key, value in getter.items():
        if key == "type" or isinstance(key, str) and key.startswith("_"):
            continue
        if key not in known:
            hint = unread_hint(key, list(known), "it reads no key but 'type'")
            return f"has the key {key!r}, which the getter does not read: {hint} (a comment's key starts with '_')"
        need = FLAG if key in FLAGS.get(kind, ()) else KINDS.get((kind, key))
        problem = need.problem(value) if need else None
        if problem:  # "is 'false', a string, …"
            return f"has {key!r} {problem.removeprefix('is ')}"
        allowed = VALUES.get((kind, key))
        if allowed is not None and value not in allowed:
            return f"has {key!r} {value!r}, which the getter does not read (it reads {', '.join(map(repr, allowed))})"
    return None


def files_problem(getter: dict) -> str | None:
    """What a ``vm_file``'s or ``cloud_file``'s ``multi``, ``gives`` and ``time_suffix``
    cannot fetch: with ``multi``, ``path`` and ``dest`` are lists of one length and ``gives``
    picks indexes of them; without it one file is fetched, a ``gives`` picking past it handed
    the metric an empty list (a 0), and a ``time_suffix`` raised at grading."""
    if getter["type"] == "googledrive_file":
        return _drive_dest_problem(getter)
    if getter["type"] not in ("vm_file", "cloud_file"):
        return None
    if not getter.get("multi"):
        one = next((key for key in ("path", "dest") if key in getter and not TEXT.test(getter[key])), None)
        if one:
            said = TEXT.problem(getter[one]).removeprefix("is ")
            return f"has {one!r} {said} (without 'multi': true the getter fetches one file)"
        if getter.get("time_suffix"):  # OSWorld's reads the file's creation time on the guest
            return ("has 'time_suffix', which this mode does not implement (its 'dest' named with the file's "
                    "creation time): drop it, and give 'dest' the name")
        if "gives" in getter:
            return ("has 'gives', which picks among the files of a getter with 'multi': true, and it fetches one "
                    "file: give 'multi' (and lists 'path' and 'dest'), or drop 'gives'")
        return None
    paths, dests = getter.get("path"), getter.get("dest")
    if not isinstance(paths, list) or not isinstance(dests, list) or len(paths) != len(dests):
        return "has 'multi', and its 'path' and 'dest' must be lists of the same length"
    if not all(map(TEXT.test, paths + dests)):
        return "has 'multi', and its 'path' and 'dest' must be lists of strings"
    gives = getter.get("gives", [0])
    if not isinstance(gives, list) or not all(
            isinstance(i, int) and not isinstance(i, bool) and 0 <= i < len(paths) for i in gives):
        return f"has 'gives' {gives!r}, and it must list indexes of its {len(paths)} files (0 to {len(paths) - 1})"
    return None


def _drive_dest_problem(getter: dict) -> str | None:
    """A googledrive_file's ``dest`` against what it fetches: one file (``path`` or ``query``)
    saved as a string, a file per entry of ``path_list`` or ``query_list`` each saved as its
    entry of a list as long (zipped: one short left a file out, a string named each a letter)."""
    dest = getter.get("dest")
    if "path" in getter or "query" in getter:
        problem = TEXT.problem(dest)
        return f"has 'dest' {problem.removeprefix('is ')} (the one file's name)" if problem else None
    files = getter.get("query_list") or getter.get("path_list")
    if isinstance(files, list) and not (TEXTS.test(dest) and len(dest) == len(files)):
        return f"has 'dest' {as_written(dest)}, and it must be a list of {len(files)} names, one per file of its list"
    return None
