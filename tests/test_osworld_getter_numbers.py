"""A getter's key read as a number at grading (envs/osworld/getter_keys.py's :data:`KINDS`): a
``vm_command_line``'s ``timeout`` (this mode's own key, read with ``float()``) and a slide
getter's ``slide_index`` (OSWorld's ``int(config["slide_index"])``). A value those fail on
(``"abc"``, ``"1.5"``, null) raised as grading fetched the state, and one they read otherwise
than it says (``1.5`` as slide 1, true as 1, ``"30"`` a timeout no step's takes, a slide below
0 that no deck holds) graded the wrong state: the metric scored 0 whatever the agent did. The
folder is refused as it loads (the dry run, exit 2), naming the file, the getter, its metric,
the key, its value and what to give; what OSWorld reads as written (``"1"``, a slide's digits)
loads."""

from __future__ import annotations

from pathlib import Path

from test_osworld_folder_cli import MODEL_AGENT, run_cli, said
from test_osworld_getter_keys import SINGLE, assert_each_refused, changed_folder
from test_osworld_getter_values import _in
from test_osworld_taskset import needs_set

#: compare_audios of an audio_in_slide, "slide_index": 0
SLIDE = "libreoffice_impress/c59742c0-4323-4b9d-8a02-723c251deaa0.json"

_SECONDS = "give a number of seconds, 0 or more"
_SLIDE_NUMBER = "give a slide's number from 0 (the first slide): a whole number, or a string of its digits"
_COMMAND = "evaluator result getter 'vm_command_line' of metric 'exact_match' has 'timeout'"
_AUDIO = "evaluator result getter 'audio_in_slide' of metric 'compare_audios' has 'slide_index'"


#: task id -> (the real task it breaks, the break, what the refusal says after "task 'ID': ")
MISTAKES = {
    "timeout-word": (SINGLE, _in("result", timeout="abc"), f"{_COMMAND} \"abc\", a string: {_SECONDS}"),
    "timeout-string": (SINGLE, _in("result", timeout="30"), f"{_COMMAND} \"30\", a string: {_SECONDS}"),
    "timeout-negative": (SINGLE, _in("result", timeout=-5), f"{_COMMAND} -5, a number: {_SECONDS}"),
    "timeout-null": (SINGLE, _in("result", timeout=None), f"{_COMMAND} null: {_SECONDS}"),
    "timeout-huge": (SINGLE, _in("result", timeout=10**400), f"{_COMMAND} {str(10**400)[:57]}..., a number: {_SECONDS}"),
    "slide-fraction": (SLIDE, _in("result", slide_index=1.5), f"{_AUDIO} 1.5, a number: {_SLIDE_NUMBER}"),
    "slide-fraction-text": (SLIDE, _in("result", slide_index="1.5"), f"{_AUDIO} \"1.5\", a string: {_SLIDE_NUMBER}"),
    "slide-negative": (SLIDE, _in("result", slide_index=-1), f"{_AUDIO} -1, a number: {_SLIDE_NUMBER}"),
    "slide-true": (SLIDE, _in("result", slide_index=True), f"{_AUDIO} true, a boolean: {_SLIDE_NUMBER}"),
    "slide-list": (SLIDE, _in("result", slide_index=[0]), f"{_AUDIO} [0], a list: {_SLIDE_NUMBER}"),
}


@needs_set
def test_a_getters_number_it_cannot_read_as_written_is_refused_at_load(tmp_path):
    assert_each_refused(tmp_path, MISTAKES)


@needs_set
def test_getter_numbers_read_as_written_load(tmp_path):
    """The real tasks broken above load as they are; so do a timeout of 2.5 seconds and a
    slide's number as OSWorld reads it: "1", 2.0."""
    tasks = {Path(source).stem: (source, lambda evaluator: None) for source in (SINGLE, SLIDE)}
    tasks["timeout-seconds"] = (SINGLE, _in("result", timeout=2.5))
    tasks["slide-digits"] = (SLIDE, _in("result", slide_index="1"))
    tasks["slide-whole-float"] = (SLIDE, _in("result", slide_index=2.0))
    done = run_cli("--data", str(changed_folder(tmp_path, tasks)), "--dry-run", *MODEL_AGENT)
    assert done.returncode == 0, said(done)
    assert f"runnable {len(tasks)} of {len(tasks)} tasks" in done.stdout, said(done)
