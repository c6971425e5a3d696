"""A getter paired with a metric that cannot read what it gives (envs/osworld/state_kinds.py):
a rule getter's object where the metric opens a file (``compare_table``'s gold workbook), a
file getter's path where the metric reads a rule (``exact_match``'s ``rules["expected"]``).
Each raised at every grading, the attempt scored 0 with the task's mistake taken for the
agent's; the folder is refused as it loads (the dry run, exit 2), naming the file, the metric
(by its index in a list), the getter and what to give instead."""

from __future__ import annotations

import copy
from pathlib import Path

from test_osworld_folder_cli import MODEL_AGENT, run_cli, said
from test_osworld_getter_keys import assert_each_refused, changed_folder
from test_osworld_taskset import needs_set

#: OSWorld's task of one compare_table of a vm_file against a cloud_file
TABLE = "libreoffice_calc/0cecd4f3-74de-457b-ba94-29ad6b5dafb6.json"
#: OSWorld's task of three compare_tables, each its own gold file and options, under "or"
TABLES = "multi_apps/3a93cae4-ad3e-403e-8c12-65303b271818.json"
#: OSWorld's task of one metric (exact_match on a command's output against a rule)
SINGLE = "os/28cc3b7e-b194-4bc9-8353-d04c0f4d56d2.json"
#: check_include_exclude on a command (a rule), then compare_csv against a cloud_file
MIXED = "multi_apps/3680a5ee-6870-426a-a997-eba929a0d25c.json"

_GOLD = {"type": "cloud_file", "path": "https://example.org/gold.txt", "dest": "gold.txt"}
_RULE = {"type": "rule", "rules": {"expected": "Total"}}
_TO_FILE = "give a getter of the file (vm_file, cloud_file)"
_TO_RULE = "it gives a file's local path, and the metric reads its expected state as a rule: give a 'rule' getter"


def _set(evaluator: dict, key: str, value) -> None:
    evaluator[key] = copy.deepcopy(value)


#: task id -> (the real task it breaks, the break, what the refusal says after "task 'ID': ")
MISTAKES = {
    "table-rule": (TABLE, lambda ev: _set(ev, "expected", _RULE),
                   "evaluator expected getter 'rule' of metric 'compare_table': it gives the task's 'rules', an "
                   f"object, and the metric opens its expected state as a file: {_TO_FILE}"),
    "table-result-rule": (TABLE, lambda ev: _set(ev, "result", {"type": "rule", "rules": [{"sheet": 1}]}),
                          "evaluator result getter 'rule' of metric 'compare_table': it gives the task's 'rules', a "
                          f"list, and the metric opens its result state as a file: {_TO_FILE}"),
    "second-table-rule": (TABLES, lambda ev: ev["expected"].__setitem__(1, copy.deepcopy(_RULE)),
                          "evaluator.expected[1] getter 'rule' of evaluator.func[1] (compare_table): it gives the "
                          f"task's 'rules', an object, and the metric opens its expected state as a file: {_TO_FILE}"),
    "exact-file": (SINGLE, lambda ev: _set(ev, "expected", _GOLD),
                   f"evaluator expected getter 'cloud_file' of metric 'exact_match': {_TO_RULE}"),
    "include-file": (MIXED, lambda ev: ev["expected"].__setitem__(0, copy.deepcopy(_GOLD)),
                     f"evaluator.expected[0] getter 'cloud_file' of evaluator.func[0] (check_include_exclude): {_TO_RULE}"),
}


@needs_set
def test_a_getter_its_metric_cannot_read_is_refused_at_load(tmp_path):
    assert_each_refused(tmp_path, MISTAKES)


@needs_set
def test_a_metric_that_takes_either_and_a_rules_path_load(tmp_path):
    """contains_page_break reads its rule's page count in a ``try``: a file there is ignored,
    and loads; a rule's string may be a path on the host, and loads where a file is opened."""
    def page_break(ev):
        ev.update(func="contains_page_break", expected=copy.deepcopy(_GOLD))
        ev.pop("options", None)  # compare_table's
    tasks = {"page-break-file": (TABLE, page_break),
             "table-rule-path": (TABLE, lambda ev: _set(ev, "expected", {"type": "rule", "rules": "/srv/gold.xlsx"}))}
    tasks.update({Path(source).stem: (source, lambda ev: None) for source, _, _ in MISTAKES.values()})
    done = run_cli("--data", str(changed_folder(tmp_path, tasks)), "--dry-run", *MODEL_AGENT)
    assert done.returncode == 0, said(done)
    assert f"runnable {len(tasks)} of {len(tasks)} tasks" in done.stdout, said(done)


def _scores_nothing(metric, *states) -> bool:
    try:
        return not metric(*states)  # 0, or None (a state it could not read)
    except Exception:
        return True


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


def test_what_the_lists_say_cannot_work_does_not_at_grading(tmp_path):
    """Each metric listed as opening files scores nothing given a rule's object, each listed as
    reading a rule scores nothing given a path, and the right kinds of state score."""
    from parallel_rollout.envs.osworld.metrics import METRICS
    from parallel_rollout.envs.osworld.state_kinds import FILE_METRICS, RULE_METRICS

    sheet = _sheet(tmp_path / "mine.xlsx")
    rules = [{"type": "sheet_data", "sheet_idx0": 0, "sheet_idx1": "EI0"}]
    assert METRICS["compare_table"](sheet, _sheet(tmp_path / "gold.xlsx"), rules=rules) == 1  # the pairs that work
    assert _scores_nothing(lambda *states: METRICS["compare_table"](*states, rules=rules), sheet, {"expected": "Total"})
    text = tmp_path / "mine.txt"
    text.write_text("Total\n")
    assert METRICS["compare_text_file"](str(text), str(text)) == 1
    assert METRICS["exact_match"]("Total", {"expected": "Total"}) == 1
    assert _scores_nothing(METRICS["exact_match"], "Total", str(text))
    # compare_audios scores 1 when neither file decodes (OSWorld's): its result must be a sound
    results = {"compare_audios": _tone(tmp_path / "mine.wav")}
    for name in sorted(FILE_METRICS):
        assert _scores_nothing(METRICS[name], results.get(name, sheet), {"expected": "Total"}), name
    for name in sorted(RULE_METRICS):
        assert _scores_nothing(METRICS[name], str(text), str(text)), name
