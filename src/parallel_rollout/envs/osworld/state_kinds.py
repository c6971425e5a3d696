"""What each metric does with its two states, which getters give a file, and a getter paired
with a metric that cannot read what it gives, refused at load.

A getter's state goes to its metric as is: a file getter's is the local path of what it
fetched, a rule getter's is the task file's ``rules``, any other's a value read from the VM
(a command's output, a page's URL, the accessibility tree). A metric does one of three things
with each state: opens it as a file (``compare_table`` reads both with pandas,
``check_json`` its result), reads it as a rule (``exact_match`` looks up
``rules["expected"]``) or compares it as a value (``exact_match``'s result,
``compare_terminal_and_txt``'s terminal output). Paired the other way, a rule's object given
to ``compare_table`` as its gold workbook, or a ``cloud_file``'s path given to
``exact_match`` as its rule, raised at every grading, and a path given where a value is
compared was compared as the text of the path, the same whatever the agent did: each attempt
scored 0 (or the same score) with the task's mistake taken for the agent's.
:func:`pairing_problem` names such a pair as the folder loads.

Every metric of the registry has one kind for its result (:data:`RESULT_KINDS`) and one for
its expected state (:data:`EXPECTED_KINDS`: None for a metric of one state, ``"either"`` with
its reason in :data:`EITHER`). A rule's string given where a file is opened is a path on the
host, opened there as OSWorld does, and loads (it scores when the file is there); a list of
them loads only where the metric opens a list (:data:`LIST_FILES`). A value getter
(:data:`VALUE_GETTERS`: none gives a path on the host) given where a file is opened raised at
every grading, and a rule getter given as the result of a metric that does not read its result
as a rule scored the task's own text, the same whatever the agent did: both are refused. A
file getter gives one path or a list (:func:`files_given`: ``multi`` picking several, a Drive
getter's ``path_list``): a list where the metric opens one file raised, and one path where a
metric pairs the files of two lists (:data:`LIST_FILES`) was paired a letter at a time with the
other's files, or the list opened as one path: :func:`lists_problem` refuses the pair. A
command's output is text (:data:`TEXT_GETTERS`): a rule's value a metric compares it with
that is no string never matched it (``exact_match``'s output ``"100\n"`` never equals
``100``) or raised (``is_in_list``'s ``100 in output``): :func:`output_problem` refuses it.
tests/test_osworld_state_kinds.py calls each metric with the kind it cannot read, and checks
that the kinds cover every metric.
"""

from __future__ import annotations

from typing import Any

from ...task_json import as_written, kind_of
from .rule_keys import RULE_GETTERS, RULE_SHAPES

__all__ = ["EITHER", "EXPECTED_KINDS", "FILE_GETTERS", "FILE_METRICS", "LIST_FILES", "RESULT_KINDS", "RULE_METRICS",
           "TEXT_GETTERS", "VALUE_GETTERS", "files_given", "lists_problem", "output_problem",
           "pairing_problem"]

#: the getters whose state is a local file's path (a list of them with ``multi``)
FILE_GETTERS = frozenset({
    "vm_file", "cloud_file", "cache_file", "vlc_config", "vlc_playing_info", "vm_wallpaper", "gimp_config_file",
    "vscode_config", "pdf_from_url", "audio_in_slide", "background_image_in_slide", "googledrive_file"})

#: the getters whose state is a value read from the VM or a page (a command's output, a URL,
#: the accessibility tree, a profile's setting, a page's texts), never a local file's path
VALUE_GETTERS = frozenset({
    "accessibility_tree", "active_tab_html_parse", "active_tab_info", "active_tab_url_parse",
    "active_url_from_accessTree", "bookmarks", "chrome_appearance_mode_ui", "chrome_font_size", "content_from_vm_file",
    "cookie_data", "data_delete_automacally", "default_search_engine", "default_video_player", "enable_do_not_track",
    "enable_safe_browsing", "find_installed_extension_name", "find_unpacked_extension_path",
    "gotoRecreationPage_and_get_html_content", "history", "info_from_website", "list_directory", "new_startup_page",
    "open_tabs_info", "page_info", "profile_name", "shortcuts_on_desktop", "url_dashPart", "url_path_parse",
    "vm_command_error", "vm_command_line", "vm_screen_size", "vm_terminal_output", "vm_window_size"})

#: the metrics that open both their states as files (the result's and the expected one's)
FILE_METRICS = frozenset({
    "check_brightness_decrease_and_structure_sim", "check_contrast_increase_and_structure_sim",
    "check_file_exists_and_structure_sim", "check_green_background", "check_highlighted_words",
    "check_image_mirror", "check_image_stretch_and_center", "check_italic_font_size_14",
    "check_palette_and_structure_sim", "check_python_file_by_test_suite", "check_saturation_increase_and_structure_sim",
    "check_structure_sim", "check_structure_sim_resized", "check_structure_sim_with_threshold", "check_tabstops",
    "check_thunderbird_folder", "compare_archive", "compare_audios", "compare_csv", "compare_docx_files",
    "compare_docx_files_and_ignore_new_lines", "compare_docx_images", "compare_docx_tables", "compare_epub",
    "compare_htmls", "compare_image_list", "compare_images", "compare_line_spacing", "compare_pdf_images",
    "compare_pdfs", "compare_pptx_files", "compare_python_pure_text", "compare_references", "compare_result_files",
    "compare_subscript_contains", "compare_table", "compare_text_file", "compare_unique_train_records",
    "compare_videos", "compare_zip_files", "diff_text_file", "evaluate_colored_words_in_tables",
    "evaluate_strike_through_last_paragraph"})

#: the metrics that read their expected state as a rule: those whose rule's shape the load
#: checks (an object or a list, never a path's string) and two that look up a rule's keys
RULE_METRICS = frozenset({*RULE_SHAPES, "check_image_size", "check_mp3_meta"})

#: the metrics that open their result as a file and read the rest otherwise: a rule, or
#: nothing (a check of one document, image or settings file)
_RESULT_FILES = frozenset({
    "check_auto_saving_time", "check_config_status", "check_csv", "check_global_key_play_pause",
    "check_html_background_image", "check_image_file_size", "check_image_size", "check_json", "check_json_keybindings",
    "check_json_settings", "check_line_number", "check_list", "check_mp3_meta",
    "check_one_instance_when_started_from_file", "check_page_number_colors", "check_pdf_pages", "check_play_and_exit",
    "check_qt_bgcone", "check_qt_max_volume", "check_qt_minimal_view", "check_qt_slider_colours", "check_strikethrough",
    "check_thunderbird_filter", "check_thunderbird_prefs", "check_transition", "compare_conference_city_in_order",
    "compare_config", "compare_font_names", "compare_image_text", "evaluate_presentation_fill_to_rgb_distance",
    "file_contains", "find_default_font", "fuzzy_place_math", "is_vlc_playing", "is_vlc_recordings_folder",
    "run_sqlite3",
    "check_presenter_console_disable", "check_slide_orientation_Portrait", "check_textbox_on_leftside",
    "check_triangle_position", "compare_terminal_and_txt", "contains_page_break", "has_page_numbers_in_footers",
    "is_first_line_centered"})

#: the metrics that compare their result as a value (a command's output, a URL, a tree's XML)
_RESULT_VALUES = frozenset({
    "check_accessibility_tree", "check_direct_json_object", "check_font_size", "check_gnome_favorite_apps",
    "check_history_deleted", "check_include_exclude", "check_left_panel", "check_moved_jpgs", "check_text_enlarged",
    "compare_answer", "exact_match", "fuzzy_match", "is_added_to_steam_cart", "is_cookie_deleted",
    "is_expected_active_tab", "is_expected_active_tab_approximate", "is_expected_bookmarks",
    "is_expected_installed_extensions", "is_expected_search_query", "is_expected_tabs",
    "is_expected_url_pattern_match", "is_extension_installed", "is_in_list", "is_shortcut_on_desktop", "is_utc_0", "is_vlc_fullscreen",
    "literal_match", "match_in_list"})

#: metric -> what it does with its result state: "file", "rule" or "value"
RESULT_KINDS: dict[str, str] = {
    **dict.fromkeys(FILE_METRICS | _RESULT_FILES, "file"), **dict.fromkeys(_RESULT_VALUES, "value"),
    "is_in_vm_clickboard": "rule",  # its first state is the rule ("config"), its second the clipboard's text
    "infeasible": "either",  # never called: see EITHER
}

#: the metrics that take an expected state and read it in either kind, and why
EITHER = {
    "contains_page_break": "reads its rule's page count in a try: a path there is ignored",
    "infeasible": "the env scores it (1 when the agent's last action is FAIL), it reads neither state",
}

#: metric -> what it does with its expected state: "file", "rule", "value", "either", or None
#: (a check of one state, which the call's check refuses an expected getter)
EXPECTED_KINDS: dict[str, str | None] = {
    **dict.fromkeys(RESULT_KINDS.keys() - FILE_METRICS - RULE_METRICS), **dict.fromkeys(FILE_METRICS, "file"),
    **dict.fromkeys(RULE_METRICS, "rule"), **dict.fromkeys(EITHER, "either"),
    **dict.fromkeys(("compare_terminal_and_txt", "is_in_vm_clickboard", "is_vlc_fullscreen", "literal_match"),
                    "value"),
}

#: the metrics that open a list of files (pairing each result with its expected file) in the
#: roles named; every other opens one path, and a list there raised at every grading
LIST_FILES: dict[str, tuple[str, ...]] = {
    **dict.fromkeys(("compare_image_list", "compare_pdfs", "check_thunderbird_folder"), ("result", "expected")),
    "compare_csv": ("expected",),  # the result's lines are any one's
    "compare_unique_train_records": ("expected",),  # [the gold file, the initial one]
}

#: the metrics of :data:`LIST_FILES` that read their expected state as a list alone, and what it lists
_LIST_ONLY = {"compare_unique_train_records": "[the gold file, the initial one]"}


def files_given(getter: dict) -> int | None:
    """How many files' paths a file getter (or a rule's paths) hands its metric as a list, or
    None when it hands one path (or gives no file)."""
    kind = getter["type"]
    if kind in ("vm_file", "cloud_file") and getter.get("multi"):
        picked = getter.get("gives", [0])  # one index picked gives its path, not a list
        return len(set(picked)) if isinstance(picked, list) and len(set(picked)) > 1 else None
    if kind == "googledrive_file" and "query" not in getter and "path" not in getter:
        return len(getter.get("query_list") or getter.get("path_list") or [])
    if kind in RULE_GETTERS and isinstance(getter.get("rules"), list):
        return len(getter["rules"])
    return None


def _said(count: int | None) -> str:
    return "one file" if count is None else f"a list of {count} file{'' if count == 1 else 's'}"


def lists_problem(func: str, result: Any, expected: Any) -> str | None:
    """Why metric ``func`` cannot pair the files its two file getters give, or None: one path
    against a list, or lists of two lengths, where it pairs each result file with its expected
    one (compare_pdfs read a path's letters as its files, compare_image_list opened the list)."""
    if not isinstance(result, dict) or not isinstance(expected, dict) or LIST_FILES.get(func) != (
            "result", "expected") or not {result["type"], expected["type"]} <= FILE_GETTERS | set(RULE_GETTERS):
        return None
    mine, theirs = files_given(result), files_given(expected)
    if mine != theirs:
        return (f"its result getter {result['type']!r} gives {_said(mine)} and its expected getter "
                f"{expected['type']!r} {_said(theirs)}, and the metric pairs each result file with its expected "
                f"one: give both one file, or lists of as many ('multi' and its 'gives')")
    return None


#: the getters whose state is text, a command's output or its errors
TEXT_GETTERS = frozenset({"vm_command_line", "vm_command_error"})
#: metric -> its rule's keys it compares a text result with, each as a string ("string") or a
#: list of strings ("strings"); the rule shapes check the rest
_TEXT_RULES = {"exact_match": {"expected": "string"}, "fuzzy_match": {"expected": "string"},
               "is_in_list": {"expected": "string"}, "match_in_list": {"expected": "strings"},
               "check_include_exclude": {"include": "strings", "exclude": "strings"}}


def output_problem(func: str, result: Any, expected: Any) -> str | None:
    """Why metric ``func``'s rule cannot match its result, a command's output (a string), or
    None: a value of its rule compared with it that is no string (a list of them)."""
    if not isinstance(result, dict) or result.get("type") not in TEXT_GETTERS or not isinstance(expected, dict) \
            or expected.get("type") not in RULE_GETTERS or not isinstance(expected.get("rules"), dict):
        return None
    for key, kind in _TEXT_RULES.get(func, {}).items():
        value = expected["rules"].get(key)
        texts = isinstance(value, list) and all(isinstance(item, str) for item in value)
        if key in expected["rules"] and not (texts if kind == "strings" else isinstance(value, str)):
            said = "null" if value is None else f"{as_written(value)}, {kind_of(value)}"  # as the file writes it
            return (f"its rule's {key!r} is {said}, and its result getter {result['type']!r} "
                    f"gives a command's output, a string, which the metric compares it with (never a match): give "
                    f"{'a list of strings' if kind == 'strings' else 'a string'}")
    return None


_READS = {"rule": "reads its {role} state as a rule: give a 'rule' getter",
          "value": "compares its {role} state as a value, never opening it: give a getter of the value "
                   "(vm_command_line, content_from_vm_file)"}


def pairing_problem(func: str, role: str, getter: dict) -> str | None:
    """Why metric ``func`` cannot read what ``getter`` (its ``role`` getter, "result" or
    "expected") gives, or None."""
    reads = (RESULT_KINDS if role == "result" else EXPECTED_KINDS).get(func)
    kind = getter["type"]
    rules: Any = getter.get("rules")
    if reads == "file" and kind in RULE_GETTERS and (
            isinstance(rules, dict) or isinstance(rules, list) and not all(isinstance(item, str) for item in rules)):
        return (f"it gives the task's 'rules', {kind_of(rules)}, and the metric opens its {role} state as a file: "
                f"give a getter of the file (vm_file, cloud_file)")
    if reads == "file" and kind in RULE_GETTERS and isinstance(rules, list) and role not in LIST_FILES.get(func, ()):
        return (f"it gives the task's 'rules', a list of paths, and the metric opens its {role} state as one file: "
                f"give the one path, or a getter of the file (vm_file, cloud_file)")
    if reads == "file" and kind in FILE_GETTERS and files_given(getter) and role not in LIST_FILES.get(func, ()):
        return (f"it gives {_said(files_given(getter))}, and the metric opens its {role} state as one file: give "
                f"it one ('gives' one index of its files)")
    if func in _LIST_ONLY and role == "expected" and kind in FILE_GETTERS and files_given(getter) is None:
        return (f"it gives one file, and the metric reads its expected state as a list, {_LIST_ONLY[func]}: give "
                f"it both ('multi', and 'gives' [0, 1])")
    if reads in _READS and kind in FILE_GETTERS:
        return "it gives a file's local path, and the metric " + _READS[reads].format(role=role)
    if reads == "file" and kind in VALUE_GETTERS:
        return (f"it gives a value read from the VM (a command's output, a page's text), no file's path, and the "
                f"metric opens its {role} state as a file: give a getter of the file (vm_file, cloud_file)")
    if role == "result" and reads in ("file", "value") and kind in RULE_GETTERS:
        return ("it gives the task's 'rules', the same whatever the agent did, and the metric reads its result "
                "state as the agent's: give a getter of what the agent made (vm_file, vm_command_line)")
    return None
