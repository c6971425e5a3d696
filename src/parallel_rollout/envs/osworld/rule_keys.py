"""What a metric reads from the rules a task file gives it, and whose error a bad rule is.

A ``rule`` (or ``rule_relativeTime``) expected getter hands its config's ``rules`` to the
metric as is: ``exact_match`` reads ``rules["expected"]``, ``is_expected_tabs`` reads
``rules["type"]`` and then ``rules["urls"]``. A rule without a key its metric reads is the
task file's mistake, not the agent's, yet OSWorld's metrics raise on it while grading, and a
metric raising here scores the agent 0 (its output may be what made it raise). So:

* at load, :func:`rule_problem` checks a rule against :data:`RULE_SHAPES` (the metric's
  container, the keys it reads without a default, the keys one ``type`` value adds, and the
  lists that a string would be silently iterated for) and the rules nested in it that a metric
  reads (check_accessibility_tree's ``exact``, is_expected_search_query's ``expect.pattern``):
  the folder is refused, naming the file, the metric and the key;
* at grading, the expected state of a rule getter goes to its metric as :func:`task_rules`,
  whose dicts raise :class:`MalformedRule` (a KeyError) for a key the rule lacks, where the
  metric reads one the load could not know (a nested rule's, a ``type``'s own). The env makes
  that the task's error, not a 0. Only the rule's own dicts raise it: a metric never looks a
  rule up by a key of the agent's output (each ``rules[...]`` of ``metrics/`` is a literal or
  a key of the rule itself), so an agent cannot turn its failure into the task's error.
"""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass
from typing import Any

from ...task_json import JSON_WORDS, as_written, kind_of

__all__ = ["KINDS", "RESULT_RULE_SHAPES", "RULE_GETTERS", "RULE_SHAPES", "MalformedRule", "RuleShape", "flag_problem",
           "rule_problem", "shape_problem", "task_rules", "unread_hint"]

#: the expected getters whose state is the task file's ``rules``
RULE_GETTERS = ("rule", "rule_relativeTime")


@dataclass(frozen=True)
class RuleShape:
    """The rule a metric reads: its container, the keys it needs, at least one of ``any_of``
    (a metric that reads each with a default: a rule of none checks nothing), what each
    ``type`` value adds (the keys it needs, or a shape of its own; other values are refused),
    the keys that must be lists (a string would be iterated a letter at a time) and those that
    must be objects, and ``kinds``: a key the metric reads, with a default, as a value of
    :data:`KINDS` (a string where it reads a boolean was true); a shape whose ``optional``
    keys are given reads no others (a typo of one was ignored, the check it meant to switch
    run as if unset), else any key is taken."""

    needs: tuple[str, ...] = ()
    any_of: tuple[str, ...] = ()
    by_type: dict[str, tuple[str, ...] | RuleShape] | None = None
    lists: tuple[str, ...] = ()
    container: type = dict
    objects: tuple[str, ...] = ()
    optional: tuple[str, ...] | None = None
    kinds: dict[str, str] | None = None


def _pairs(value: Any) -> bool:
    return isinstance(value, list) and all(
        isinstance(pair, list) and len(pair) == 2 and all(isinstance(text, str) for text in pair) for pair in value)


#: a value kind a shape's ``kinds`` asks of a key: its test and how the refusal names it
KINDS = {"string": (lambda value: isinstance(value, str), JSON_WORDS[str]),
         "number": (lambda value: isinstance(value, (int, float)) and not isinstance(value, bool), JSON_WORDS[float]),
         "integer": (lambda value: isinstance(value, int) and not isinstance(value, bool), JSON_WORDS[int]),
         "boolean": (lambda value: isinstance(value, bool), JSON_WORDS[bool]),
         "characters": (lambda value: isinstance(value, str) or isinstance(value, list) and all(
             isinstance(text, str) for text in value), "a string (or a list) of characters"),
         "pairs": (_pairs, "a list of [old, new] string pairs")}


def _needs(*keys: str, lists: tuple[str, ...] = ()) -> RuleShape:
    return RuleShape(needs=keys, lists=lists)


def _typed(**by_type: tuple[str, ...]) -> RuleShape:
    return RuleShape(needs=("type",), by_type=by_type)


_INCLUDE = RuleShape(any_of=("include", "exclude"), lists=("include", "exclude"))
_EXPECT = RuleShape(any_of=("expect", "unexpect"))
_EXPECT_LISTS = RuleShape(any_of=("expect", "unexpect"), lists=("expect", "unexpect"))

#: metric name -> the rule it reads, from each metric's code in ``metrics/``
RULE_SHAPES: dict[str, RuleShape] = {
    **{name: _needs("expected") for name in (
        "exact_match", "is_in_list", "fuzzy_match", "compare_answer", "compare_config",
        "check_json_keybindings", "check_line_number", "check_direct_json_object")},
    # each iterates its expected list: a string's letters were the list (match_in_list's a substring test)
    **{name: _needs("expected", lists=("expected",)) for name in (
        "file_contains", "is_expected_url_pattern_match", "is_expected_installed_extensions", "match_in_list",
        "check_gnome_favorite_apps", "check_moved_jpgs", "compare_conference_city_in_order", "fuzzy_place_math")},
    "check_json_settings": _needs("expected"),
    "check_include_exclude": _INCLUDE,
    "check_list": _EXPECT_LISTS, "check_csv": _EXPECT_LISTS, "check_thunderbird_filter": _EXPECT_LISTS,
    "check_json": _EXPECT, "check_thunderbird_prefs": _EXPECT,
    "check_accessibility_tree": RuleShape(container=list),
    "check_auto_saving_time": _needs("minutes"),
    "check_config_status": _needs("key", "value"),
    "check_image_file_size": _needs("max_size"), "check_html_background_image": _needs("value"),
    "check_page_number_colors": _needs("color"),
    "check_pdf_pages": _needs("relation", "ref_value"),
    "check_transition": _needs("slide_idx", "transition_type"),
    "check_strikethrough": _needs("slide_index_s", "shape_index_s", "paragraph_index_s"),
    "compare_font_names": _needs("font_name"), "find_default_font": _needs("font_name"),
    "evaluate_presentation_fill_to_rgb_distance": _needs("rgb"),
    "is_added_to_steam_cart": _needs("items", lists=("items",)),
    "is_expected_search_query": _needs("expect"),
    "is_vlc_recordings_folder": _needs("recording_file_path"),
    "run_sqlite3": _needs("sql"),
    **{f"check_{name}": _needs(f"expected_{name}") for name in (
        "qt_bgcone", "qt_max_volume", "qt_minimal_view", "one_instance_when_started_from_file",
        "play_and_exit", "global_key_play_pause")},
    "check_qt_slider_colours": _typed(match=("expected_qt_slider_colours",), blackish=()),
    "is_expected_active_tab": _typed(url=("url",)), "is_expected_active_tab_approximate": _typed(url=("url",)),
    "is_expected_tabs": _typed(url=("urls",)),
    "is_expected_bookmarks": _typed(bookmark_bar_folders_names=("names",), bookmark_bar_websites_urls=("urls",),
                                    liked_authors_websites_urls=("urls",)),
    "is_cookie_deleted": _typed(domains=("domains",)),
    "is_shortcut_on_desktop": _typed(name=("name",), exec=("exec",)),
    "check_history_deleted": _typed(keywords=("keywords",)),
    "check_font_size": _typed(value=("value",), range=("min", "max")),
    "is_extension_installed": _typed(contain=("expected",), not_contain=("expected",)),
    "is_vlc_playing": _typed(file_name=("file_name",), url=("url",)),
    "compare_image_text": _typed(text=("text",)),
}

#: metric name -> the rule it reads as its result state (its expected one a value)
RESULT_RULE_SHAPES: dict[str, RuleShape] = {
    "is_in_vm_clickboard": _needs("expected"),  # its "config": the text the clipboard must hold
}


def rule_problem(func: str, rules: Any, role: str = "expected") -> str | None:
    """What ``func`` cannot read in ``rules`` (a task file's, its ``role`` state), or None: one
    this module does not know the shape of is taken as is."""
    shape = (RULE_SHAPES if role == "expected" else RESULT_RULE_SHAPES).get(func)
    if shape is None:
        return None
    return shape_problem(shape, rules) or _nested_problem(func, rules)


def shape_problem(shape: RuleShape, rules: Any, also: tuple[str, ...] = ()) -> str | None:
    """What a metric reading ``shape`` (and the keys ``also``) cannot read in ``rules`` (a task
    file's), or None: the one check of a metric's rule and of a rule nested in its options
    (compare_table's)."""
    if not isinstance(rules, shape.container):
        return f"must be {kind_of(shape.container())}, not {kind_of(rules)}"
    if shape.container is not dict:
        return None
    for key in shape.needs:
        if key not in rules:
            return f"needs the key {key!r}"
    if shape.any_of and not any(key in rules for key in shape.any_of):
        return "needs the key " + " or ".join(repr(key) for key in shape.any_of)
    if shape.by_type is not None:
        kind = rules["type"]
        if not isinstance(kind, str) or kind not in shape.by_type:
            known = ", ".join(repr(name) for name in shape.by_type)
            return f"has the type {kind!r}, which the metric does not read (it reads {known})"
        typed = shape.by_type[kind]
        problem = shape_problem(typed if isinstance(typed, RuleShape) else RuleShape(needs=typed), rules,
                                (*also, *_named(shape)))
        if problem:
            return f"of type {kind!r} {problem}"
    for keys, container in ((shape.lists, list), (shape.objects, dict)):
        for key in keys:
            if key in rules and not isinstance(rules[key], container):
                return f"key {key!r} must be {kind_of(container())}, not {kind_of(rules[key])}"
    for key, kind in (shape.kinds or {}).items():
        test, name = KINDS[kind]
        if key in rules and not test(rules[key]):
            value = rules[key]  # as the task file writes it: JSON's true and null, "text"
            said = "null" if value is None else f"{kind_of(value)} {as_written(value)}"
            return f"key {key!r} must be {name}, not {said}"
    if shape.optional is not None:
        known = [*also, *_named(shape)]
        for key in rules:
            if key not in known:
                return f"has the key {key!r}, which the metric does not read ({unread_hint(key, known)})"
    return None


def unread_hint(key: Any, known: list[str], none: str = "it reads ") -> str:
    """What a key a metric does not read is said with: the nearest key it reads, else those it
    reads (``none`` when it reads none)."""
    near = difflib.get_close_matches(str(key), known, n=1)
    return f"did you mean {near[0]!r}?" if near else f"it reads {', '.join(map(repr, known))}" if known else none


def flag_problem(value: Any) -> str | None:
    """Why ``value`` of a key read as a flag (``if value:``, a getter's ``multi``, a metric's
    ``ignore_case``) is wrong, or None: a string other than "true", which reads as true
    whatever it says, "false" too. OSWorld's own tasks write ``"multi": "true"`` and
    ``"shell": "true"``, meaning what they read as; "" reads as false and loads."""
    if isinstance(value, str) and value and value.lower() != "true":
        return f"{as_written(value)}, a string, which reads as true (any string but \"\" does, as in OSWorld): give true or false"
    return None


def _named(shape: RuleShape) -> tuple[str, ...]:
    """The keys a shape names (its ``type``'s own are the typed shape's)."""
    return (*shape.needs, *shape.any_of, *shape.lists, *shape.objects, *(shape.optional or ()), *(shape.kinds or ()))


def _a11y_problem(rules: list) -> str | None:
    """check_accessibility_tree's rules: each picks elements by ``xpath`` or ``selectors`` (a
    list) and, matching a ``text``, says whether ``exact``ly (it raised at grading without)."""
    for index, rule in enumerate(rules):
        if not isinstance(rule, dict):
            return f"[{index}] must be an object, not {kind_of(rule)}"
        if "xpath" not in rule and "selectors" not in rule:
            return f"[{index}] needs the key 'xpath' or 'selectors'"
        if "xpath" not in rule and not isinstance(rule["selectors"], list):
            return f"[{index}] key 'selectors' must be a list, not {kind_of(rule['selectors'])}"
        if "text" in rule and "exact" not in rule:
            return f"[{index}] gives 'text' and needs the key 'exact' (true, or false for a fuzzy match)"
    return None


def _search_problem(rules: dict) -> str | None:
    """is_expected_search_query's ``expect``: an object whose ``pattern`` is a regular expression."""
    expect = rules["expect"]
    if not isinstance(expect, dict):
        return f"key 'expect' must be an object, not {kind_of(expect)}"
    if "pattern" not in expect:
        return "['expect'] needs the key 'pattern'"
    if not isinstance(expect["pattern"], str):
        return f"['expect']['pattern'] must be a string, not {kind_of(expect['pattern'])}"
    try:
        re.compile(expect["pattern"])
    except re.error as exc:
        return f"['expect']['pattern'] is no regular expression: {exc}"
    return None


def _nested_problem(func: str, rules: Any) -> str | None:
    """What ``func`` cannot read in the rules nested in its rule (they raised at grading)."""
    nested = {"check_accessibility_tree": _a11y_problem, "is_expected_search_query": _search_problem}.get(func)
    return nested(rules) if nested else None


class MalformedRule(KeyError):
    """A metric read a key that the task file's rule lacks: the task's error, not the agent's."""

    def __init__(self, key: Any):
        super().__init__(key)
        self.key = key

    def __str__(self) -> str:
        return f"the task file's rule has no key {self.key!r}"


class _RuleDict(dict):
    """A dict of a task's rule: a missing key is :class:`MalformedRule` (``get`` and ``in``
    are unchanged, so a metric's optional keys stay optional)."""

    def __missing__(self, key: Any) -> Any:
        raise MalformedRule(key)


def task_rules(value: Any) -> Any:
    """``value`` (a rule getter's state) with each dict in it a :class:`_RuleDict`."""
    if isinstance(value, dict):
        return _RuleDict((key, task_rules(item)) for key, item in value.items())
    if isinstance(value, list):
        return [task_rules(item) for item in value]
    return value

