"""Which getters give a file and which metrics open one, and a getter paired with a metric
that cannot read what it gives, refused at load.

A getter's state goes to its metric as is: a file getter's is the local path of what it
fetched, a rule getter's is the task file's ``rules``. A metric that compares files opens
both of its states (``compare_table`` reads each with pandas), and one that reads a rule looks
its keys up (``exact_match`` reads ``rules["expected"]``). Paired the other way, a rule's
object given to ``compare_table`` as its gold workbook, or a ``cloud_file``'s path given to
``exact_match`` as its rule, raised at every grading: each attempt scored 0 with the task's
mistake taken for the agent's. :func:`pairing_problem` names such a pair as the folder loads.
A metric that takes either is in neither list (``contains_page_break`` reads its optional
page count from the rule in a ``try``, so a path there loads), and a rule's string, or list
of strings, given where a file is opened may be a path on the host and loads as well.
tests/test_osworld_state_kinds.py calls each metric listed with what it cannot read.
"""

from __future__ import annotations

from typing import Any

from .rule_keys import RULE_GETTERS, RULE_SHAPES, kind_of

__all__ = ["FILE_GETTERS", "FILE_METRICS", "RULE_METRICS", "pairing_problem"]

#: the getters whose state is a local file's path (a list of them with ``multi``)
FILE_GETTERS = frozenset({
    "vm_file", "cloud_file", "cache_file", "vlc_config", "vlc_playing_info", "vm_wallpaper", "gimp_config_file",
    "vscode_config", "pdf_from_url", "audio_in_slide", "background_image_in_slide", "googledrive_file"})

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


def pairing_problem(func: str, role: str, getter: dict) -> str | None:
    """Why metric ``func`` cannot read what ``getter`` (its ``role`` getter, "result" or
    "expected") gives, or None."""
    kind = getter["type"]
    rules: Any = getter.get("rules")
    if func in FILE_METRICS and kind in RULE_GETTERS and (
            isinstance(rules, dict) or isinstance(rules, list) and not all(isinstance(item, str) for item in rules)):
        return (f"it gives the task's 'rules', {kind_of(rules)}, and the metric opens its {role} state as a file: "
                f"give a getter of the file (vm_file, cloud_file)")
    if role == "expected" and func in RULE_METRICS and kind in FILE_GETTERS:
        return "it gives a file's local path, and the metric reads its expected state as a rule: give a 'rule' getter"
    return None
