"""A metric's option given a value of a kind the metric cannot use (envs/osworld/option_keys.py's
:data:`VALUES`): ``"ssim_threshold": "0.85"`` compared a score with a string (a TypeError at
every grading, each attempt scored 0 whatever the agent did), check_tabstops' word count
``"3"`` never equalled a count (0 likewise), a literal_match ``type`` other than ``str`` or
``list`` raised; and an option read as a flag given a list, an object or a number other than
0 or 1 (``"ignore_case": [false]`` read as true), as a setup step's flag. The folder is refused
as it loads (the dry run, exit 2), naming the file, the metric, the option, its value and what
to give."""

from __future__ import annotations

import inspect
from pathlib import Path

from test_osworld_folder_cli import MODEL_AGENT, run_cli, said
from test_osworld_getter_keys import assert_each_refused, changed_folder
from test_osworld_taskset import needs_set

from parallel_rollout.envs.osworld.metrics import METRICS
from parallel_rollout.envs.osworld.option_keys import FLAGS, OPTIONS, VALUES

#: check_tabstops, {"word_number_split_by_tabstop": 3, "index": 0}
TABSTOPS = "libreoffice_writer/0a0faba3-5580-44df-965d-f562a99b291c.json"
#: literal_match, {"type": "list", "ignore_case": true}
LITERAL = "multi_apps/5990457f-2adb-467b-a4af-5c857c92d762.json"
#: compare_references, {"content_only": true, "reference_base_result": 0.6}
REFERENCES = "multi_apps/2c1ebcd7-9c6d-4c9a-afad-900e381ecd5e.json"
#: compare_docx_files, no options
DOCX = "libreoffice_writer/adf5e2c3-64c7-4644-b7b6-d2f0167927e7.json"
#: compare_pptx_files, {"examine_shape": false}
PPTX = "libreoffice_impress/0a211154-fda0-48d0-9274-eaac4ce5486d.json"
#: compare_videos, no options (its max_frames_to_check and threshold are parameters)
VIDEOS = "vlc/aa4b5023-aef6-4ed9-bdc9-705f59ab9ad6.json"


def _options(**options):
    return lambda evaluator: evaluator.setdefault("options", {}).update(options)


#: task id -> (the real task it breaks, the break, what the refusal says after "task 'ID': ")
MISTAKES = {
    "tabstops-word-count-string": (
        TABSTOPS, _options(word_number_split_by_tabstop="3"),
        "evaluator metric 'check_tabstops': its option 'word_number_split_by_tabstop' is \"3\", a string: give a whole "
        "number"),
    "tabstops-index-fraction": (TABSTOPS, _options(index=0.5),
                                "evaluator metric 'check_tabstops': its option 'index' is 0.5, a number: give a whole "
                                "number"),
    "literal-type-string": (LITERAL, _options(type="string"),
                            "evaluator metric 'literal_match': its option 'type' is \"string\", a string: give one of "
                            "'str' or 'list'"),
    "references-base-string": (REFERENCES, _options(reference_base_result="0.6"),
                               "evaluator metric 'compare_references': its option 'reference_base_result' is \"0.6\", a "
                               "string: give a number"),
    "pptx-tolerance-null": (PPTX, _options(approximately_tolerance=None),
                            "evaluator metric 'compare_pptx_files': its option 'approximately_tolerance' is null: give "
                            "a number"),
    "videos-frames-string": (VIDEOS, _options(max_frames_to_check="100"),
                             "evaluator metric 'compare_videos': its option 'max_frames_to_check' is \"100\", a string: "
                             "give a whole number"),
    "docx-ignore-case-list": (
        DOCX, _options(ignore_case=[False]),
        "evaluator metric 'compare_docx_files': its option 'ignore_case' is [false], a list, which reads as true (a "
        "list or an object reads as true unless empty, as in OSWorld): give true or false"),
    "pptx-examine-shape-2": (
        PPTX, _options(examine_shape=2),
        "evaluator metric 'compare_pptx_files': its option 'examine_shape' is 2, a number, which reads as true (any "
        "number but 0 does, as in OSWorld): give true or false"),
}


@needs_set
def test_an_option_of_a_kind_its_metric_cannot_use_is_refused_at_load(tmp_path):
    assert_each_refused(tmp_path, MISTAKES)


@needs_set
def test_options_of_the_kinds_the_metrics_read_load(tmp_path):
    """The real tasks broken above load as they are; so do a whole number where a number is
    read, a fraction for compare_videos' threshold and 0 or 1 for a flag."""
    tasks = {Path(source).stem: (source, lambda evaluator: None) for source, _, _ in MISTAKES.values()}
    tasks["references-base-0"] = (REFERENCES, _options(reference_base_result=0))
    tasks["videos-threshold-fraction"] = (VIDEOS, _options(threshold=4.5, max_frames_to_check=50))
    tasks["docx-ignore-case-1"] = (DOCX, _options(ignore_case=1, ignore_blanks=0))
    done = run_cli("--data", str(changed_folder(tmp_path, tasks)), "--dry-run", *MODEL_AGENT)
    assert done.returncode == 0, said(done)
    assert f"runnable {len(tasks)} of {len(tasks)} tasks" in done.stdout, said(done)


#: options read and checked elsewhere: compare_table's rules (rule_keys), compare_archive's
#: file_type (option_keys.option_problem), a metric's states filled by name
_CHECKED_ELSEWHERE = {("compare_table", "rules"), ("compare_archive", "file_type"), ("compare_table", "expected"),
                      ("check_html_background_image", "rule")}


def test_every_option_a_metric_reads_has_its_kind():
    """Each option a metric lists (OPTIONS) or takes as a parameter with a default is a flag
    (FLAGS) or has its kind in VALUES, unless checked elsewhere; each in VALUES is read."""
    read = {(func, key) for func, keys in OPTIONS.items() for key in keys}
    read |= {(func, name) for func, metric in METRICS.items()
             for name, parameter in inspect.signature(metric).parameters.items()
             if parameter.default is not parameter.empty and parameter.kind is parameter.POSITIONAL_OR_KEYWORD}
    kinds = {(func, key) for func, keys in VALUES.items() for key in keys}
    flags = {(func, key) for func, keys in FLAGS.items() for key in keys}
    assert read - kinds - flags - _CHECKED_ELSEWHERE == set()
    assert kinds <= read, kinds - read
