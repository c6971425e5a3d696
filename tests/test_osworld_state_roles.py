"""What each metric does with its result and its expected state (envs/osworld/state_kinds.py's
:data:`RESULT_KINDS` and :data:`EXPECTED_KINDS`, which the load refuses a getter of the other
kind by, tests/test_osworld_state_kinds.py): every metric has a kind for each, and given
what its kind says it cannot read, each fails at grading (a rule's object where it opens a
file, a path where it reads a rule) or scores the path's text whatever the file holds."""

from __future__ import annotations

import copy
import inspect
import json
import tempfile
from pathlib import Path

import pytest

from test_osworld_taskset import EXAMPLES, needs_set

from parallel_rollout.envs.osworld.evaluators import normalized


def test_every_metric_has_a_kind_for_each_state():
    """A metric in no list is checked for neither state; one listed as taking no expected state
    cannot be called with one, and one that takes either says why."""
    from parallel_rollout.envs.osworld.metrics import METRICS
    from parallel_rollout.envs.osworld.state_kinds import EITHER, EXPECTED_KINDS, RESULT_KINDS

    assert set(RESULT_KINDS) == set(METRICS) == set(EXPECTED_KINDS), set(METRICS) ^ set(RESULT_KINDS)
    assert set(RESULT_KINDS.values()) == {"file", "rule", "value", "either"}
    assert set(EXPECTED_KINDS.values()) == {"file", "rule", "value", "either", None}
    for name, kind in EXPECTED_KINDS.items():
        if kind is None:
            try:
                inspect.signature(METRICS[name]).bind("result", "expected")
            except TypeError:
                continue
            raise AssertionError(f"{name} takes an expected state")
    assert {name for name, kind in EXPECTED_KINDS.items() if kind == "either"} == set(EITHER)
    assert {name for name, kind in RESULT_KINDS.items() if kind == "either"} <= set(EITHER)


def _outcome(metric, *states):
    """The metric's score, or the kind of error it raised (a 0 at grading)."""
    try:
        return metric(*states)
    except Exception as exc:  # noqa: BLE001 - any error is a failed grading
        return type(exc).__name__


def _sheet(path: Path) -> str:
    import openpyxl

    book = openpyxl.Workbook()
    book.active.append(["Total", 3])
    book.save(path)
    return str(path)


def _tone(path: Path) -> str:
    """A second of a 440 Hz tone, as a WAV file."""
    import math
    import struct
    import wave

    with wave.open(str(path), "wb") as sound:
        sound.setnchannels(1)
        sound.setsampwidth(2)
        sound.setframerate(8000)
        sound.writeframes(b"".join(struct.pack("<h", int(8000 * math.sin(2 * math.pi * 440 * i / 8000)))
                                   for i in range(8000)))
    return str(path)


def _video(path: Path) -> str:
    """Five grey frames, as an AVI file."""
    import cv2
    import numpy as np

    writer = cv2.VideoWriter(str(path), cv2.VideoWriter_fourcc(*"MJPG"), 5, (32, 32))
    for shade in range(5):
        writer.write(np.full((32, 32, 3), 40 * shade, dtype=np.uint8))
    writer.release()
    return str(path)


def test_the_pairs_of_the_right_kinds_score(tmp_path):
    """What the kinds say works does: two workbooks, two text files, a value and a rule."""
    from parallel_rollout.envs.osworld.metrics import METRICS

    rules = [{"type": "sheet_data", "sheet_idx0": 0, "sheet_idx1": "EI0"}]
    assert METRICS["compare_table"](_sheet(tmp_path / "mine.xlsx"), _sheet(tmp_path / "gold.xlsx"), rules=rules) == 1
    text = tmp_path / "mine.txt"
    text.write_text("Total\n")
    assert METRICS["compare_text_file"](str(text), str(text)) == 1
    assert METRICS["exact_match"]("Total", {"expected": "Total"}) == 1
    assert METRICS["compare_terminal_and_txt"](str(text), "Total\n") == 1
    assert METRICS["is_in_vm_clickboard"]({"expected": "Total"}, "Total\n") == 1  # its result is the rule


def test_a_result_rule_without_the_key_its_metric_reads_fails_at_grading():
    """Why the load checks is_in_vm_clickboard's rule (its result): one without 'expected' raised."""
    from parallel_rollout.envs.osworld.metrics import METRICS

    assert _outcome(METRICS["is_in_vm_clickboard"], {"expect": "Total"}, "Total\n") == "KeyError"


def _nothing(outcome) -> bool:
    return isinstance(outcome, str) or not outcome  # an error's name, 0, or None


def _real_rules() -> dict[str, object]:
    """Metric -> the rule one of OSWorld's tasks gives it."""
    found = {}
    for path in sorted((EXAMPLES / "examples").glob("*/*.json")):
        evaluator = json.loads(path.read_text()).get("evaluator") or {}
        for func, result, expected, _options in normalized(evaluator) if "func" in evaluator else ():
            for getter in (result, expected):
                if isinstance(getter, dict) and getter.get("type") == "rule":
                    found.setdefault(func, getter["rules"])
    return found


@pytest.mark.slow  # 25 s of the default run: every metric, each role, each kind given the wrong state
@needs_set
def test_what_the_kinds_say_cannot_work_does_not_at_grading(tmp_path, monkeypatch):
    """Given a rule's object (or a list of paths, where it opens one) or a value (a command's
    output) where it opens a file, each metric scores nothing; given a path
    where it reads a rule, each scores nothing; given a file's path where it compares a value,
    each scores the same whatever the file holds, and with no file there (it compares the path's text)."""
    from parallel_rollout.envs.osworld.metrics import METRICS
    from parallel_rollout.envs.osworld.rule_keys import task_rules
    from parallel_rollout.envs.osworld.state_kinds import EXPECTED_KINDS, LIST_FILES, RESULT_KINDS

    rules = _real_rules()
    assert len(rules) > 50, len(rules)
    agents = tmp_path / "agents.txt"
    agents.write_text("the agent's output")
    # a file metric's other file: compare_audios and compare_videos score 1 when neither decodes (OSWorld's)
    files = {"compare_audios": _tone(tmp_path / "mine.wav"), "compare_videos": _video(tmp_path / "mine.avi")}
    state = tmp_path / "state.txt"
    checked = 0
    for name, metric in sorted(METRICS.items()):
        rule = task_rules(copy.deepcopy(rules.get(name, {})))
        # the state the other role gets: of its kind, so that only the one tried can fail
        result = {"file": files.get(name, str(agents)), "rule": rule}.get(RESULT_KINDS[name], "the agent's output")
        expected = files.get(name, str(agents)) if EXPECTED_KINDS[name] == "file" else rule
        calls = {"result": lambda given: _outcome(metric, given, expected) if EXPECTED_KINDS[name] else
                 _outcome(metric, given),
                 "expected": lambda given: _outcome(metric, result, given)}
        for role, kinds in (("result", RESULT_KINDS), ("expected", EXPECTED_KINDS)):
            kind, call = kinds[name], calls[role]
            if kind == "file":
                assert _nothing(call({"expected": "Total"})), (name, role)
                # a value getter's, a command's output, read as a path from a folder of its own: a metric
                # that makes the file (sqlite3's connect) or a folder beside it (compare_archive) makes it there
                monkeypatch.chdir(Path(tempfile.mkdtemp(dir=tmp_path)))
                assert _nothing(call("Total\n")), (name, role)
                if role not in LIST_FILES.get(name, ()):  # a rule's list of paths: it opens one
                    assert _nothing(call([str(agents), str(agents)])), (name, role)
            elif kind == "rule":
                state.write_text("{}")
                assert _nothing(call(str(state))), (name, role)
            elif kind == "value":
                outcomes = []
                for content in ("", "the agent's output", json.dumps(rule), None):  # None: no file at the path
                    state.write_text(content) if content is not None else state.unlink()
                    outcomes.append(repr(call(str(state))))
                assert len(set(outcomes)) == 1, (name, role, outcomes)
            else:
                continue
            checked += 1
    assert checked > 180, checked
