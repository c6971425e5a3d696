"""The options each metric reads, and a task file's option that no metric reads, refused at load.

Every metric takes ``**options``, so grading binds any key a task's ``options`` give, and a
key the metric does not read (a typo, ``examine_run_cout`` for ``examine_run_count``) was
silently ignored: the check it meant to switch ran as if unset and the score was wrong with
nothing saying why. :func:`option_problem` names such a key (and the nearest key the metric
reads) as the folder loads. A metric reads its named parameters (``check_json``'s
``is_yaml``) and the keys :data:`OPTIONS` lists for it; ``compare_archive`` also hands the
rest to the metric of its ``file_type``. :data:`DEAD` lists the keys OSWorld's own tasks give
that OSWorld itself never reads: they keep loading. :data:`FLAGS` are the options a metric
reads as a flag, where a string other than "true" is refused: ``"ignore_case": "false"``
read as true (so are a list, an object and a number other than 0 or 1, as a step's flag).
:data:`VALUES` are the options a metric reads as a value of one kind (a number it compares
with, a whole number, one of the names it knows), where another raised at grading or scored
0 whatever the agent did. tests/test_osworld_options.py checks this list against each
metric's code and the 369 real tasks.
"""

from __future__ import annotations

import inspect

from .metrics import METRICS
from .metrics.pdfs import ARCHIVE_MEMBER_METRICS
from .metrics.slides import OPTIONS as PPTX_OPTIONS
from .rule_keys import unread_hint
from .step_values import FLAG, NUMBER, TEXT, WHOLE, Kind, one_of

__all__ = ["DEAD", "FLAGS", "OPTIONS", "VALUES", "option_problem", "reads_option"]

_DOCX = ("content_only", "delete_empty_lines", "fuzzy_match", "ignore_blanks", "ignore_case", "ignore_order")

#: metric -> the keys of ``**options`` it reads (each metric with none is absent)
OPTIONS: dict[str, tuple[str, ...]] = {
    "check_python_file_by_test_suite": ("test_function_name",),
    "check_structure_sim_with_threshold": ("ssim_threshold",),
    "check_tabstops": ("index", "word_number_split_by_tabstop"),
    "check_thunderbird_folder": ("ignore_keys", "ignore_status", "remove_deleted", "remove_duplicate"),
    "compare_archive": ("file_path", "file_type"),
    "compare_config": ("containment_ok",),
    "compare_csv": ("ignore_case", "strict"),
    "compare_docx_files": _DOCX,
    "compare_docx_files_and_ignore_new_lines": ("ignore_blanks",),
    "compare_htmls": ("ignore_sdnum",),
    "compare_images": ("reference_base_result",),
    "compare_pptx_files": PPTX_OPTIONS,
    "compare_references": ("reference_base_result", "reference_indicator"),
    "compare_table": ("rules",),
    "compare_text_file": ("ignore_blanks", "ignore_case"),
    "evaluate_colored_words_in_tables": ("threshold",),
    "literal_match": ("ignore_case", "type"),
}

#: metric -> the options it reads as a flag (``if options.get(key):``): a string there reads as
#: true, ``"ignore_case": "false"`` folded the case
FLAGS: dict[str, tuple[str, ...]] = {
    "check_json": ("is_yaml",),
    "check_thunderbird_folder": ("ignore_keys", "ignore_status", "remove_deleted", "remove_duplicate"),
    "compare_config": ("containment_ok",),
    "compare_csv": ("ignore_case", "strict"),
    "compare_docx_files": _DOCX,
    "compare_docx_files_and_ignore_new_lines": ("ignore_blanks",),
    "compare_htmls": ("ignore_sdnum",),
    "compare_pptx_files": tuple(name for name in PPTX_OPTIONS if name.startswith("examine_")),
    "compare_text_file": ("ignore_blanks", "ignore_case"),
    "literal_match": ("ignore_case",),
}

#: metric -> the options it reads as a value of one kind (:mod:`.step_values`'): a number
#: compared with a score (``"ssim_threshold": "0.85"`` raised a TypeError at every grading, the
#: attempt scored 0), a word count compared with a count (``"3"`` never equal: 0 whatever the
#: agent wrote), an index, a name the metric looks up (a literal_match ``type`` or an
#: ``osname`` it does not know raised)
VALUES: dict[str, dict[str, Kind]] = {
    "check_accessibility_tree": {"osname": one_of("ubuntu")},
    "check_brightness_decrease_and_structure_sim": {"threshold": NUMBER},
    "check_python_file_by_test_suite": {"test_function_name": TEXT},
    "check_structure_sim_with_threshold": {"ssim_threshold": NUMBER},
    "check_tabstops": {"index": WHOLE, "word_number_split_by_tabstop": WHOLE},
    "compare_archive": {"file_path": TEXT},
    "compare_images": {"reference_base_result": NUMBER},
    "compare_pptx_files": {"approximately_tolerance": NUMBER},
    "compare_references": {"reference_base_result": NUMBER, "reference_indicator": TEXT},
    "compare_videos": {"max_frames_to_check": WHOLE, "threshold": NUMBER},
    "evaluate_colored_words_in_tables": {"threshold": NUMBER},
    "literal_match": {"type": one_of("str", "list")},
}

#: (metric, option) pairs OSWorld's real tasks give that OSWorld itself never reads, with where
DEAD: dict[tuple[str, str], str] = {
    ("compare_pptx_files", "_note"): "a comment in 7ae48c60's options",
    ("compare_pptx_files", "examine_shape_lenient_height"): "04578141, which also sets examine_shape false",
    ("compare_references", "content_only"): "2c1ebcd7; compare_docx_files reads it, compare_references does not",
}


def _named(func: str) -> list[str]:
    """The metric's parameters an option can fill by name."""
    return [name for name, p in inspect.signature(METRICS[func]).parameters.items()
            if p.kind not in (p.VAR_KEYWORD, p.VAR_POSITIONAL)]


def reads_option(func: str, key: str) -> bool:
    """Whether metric ``func`` reads option ``key`` (a named parameter or one it lists)."""
    return key in OPTIONS.get(func, ()) or key in _named(func)


def option_problem(func: str, options: dict, states: int = 2) -> str | None:
    """The first key of a task's ``options`` that metric ``func`` (given ``states`` states,
    the result and perhaps the expected one) does not read, or None."""
    member = None
    if func == "compare_archive":
        kind = options.get("file_type", "text")
        if not isinstance(kind, str) or kind not in ARCHIVE_MEMBER_METRICS:
            return f"its option 'file_type' is {kind!r}, no file type the metric reads " \
                   f"({', '.join(map(repr, ARCHIVE_MEMBER_METRICS))})"
        member = ARCHIVE_MEMBER_METRICS[kind].__name__
    for key, value in options.items():
        flag = key in (*FLAGS.get(func, ()), *FLAGS.get(member, ()))
        kind = FLAG if flag else VALUES.get(func, {}).get(key) or VALUES.get(member, {}).get(key)
        problem = kind.problem(value) if kind else None
        if problem:
            return f"its option {key!r} {problem}"
        if reads_option(func, key) or (func, key) in DEAD or (member and reads_option(member, key)):
            continue
        known = [*OPTIONS.get(func, ()), *_named(func)[states:], *(OPTIONS.get(member, ()) if member else ())]
        return f"it does not read the option {key!r} ({unread_hint(key, known, 'it reads no options')})"
    return None

