"""One file or a list of files where the metric reads the other (envs/osworld/state_kinds.py's
:func:`files_given`, :func:`lists_problem`): a file getter gives one path, or a list with
``multi`` picking several (``gives``), a Drive getter's ``path_list`` or a rule's paths.
compare_pdfs, compare_image_list and check_thunderbird_folder pair each result file with its
expected one: given one path against a list they paired the path's letters with the files
(or opened the list as a path), and lists of two lengths left files unpaired (compare_pdfs'
mean over the expected list, never 1); a metric opening one file was handed a list, and
compare_unique_train_records, which reads [the gold file, the initial one], one path. Each
scored 0 whatever the agent did (or skipped a file); the folder is refused as it loads (the dry
run, exit 2), naming the file, the metric and its getters."""

from __future__ import annotations

from test_osworld_getter_keys import assert_each_refused
from test_osworld_state_kinds import MIXED, PDFS, TABLE
from test_osworld_taskset import needs_set

from parallel_rollout.envs.osworld.metrics import METRICS

#: compare_image_list of four vm_files against four cloud_files, each "multi" giving the first
IMAGES = "multi_apps/82e3c869-49f6-4305-a7ce-f3e64a0618e7.json"
#: compare_pdfs of seven cloud_files against seven vm_files ("multi", each given)
PDF_LISTS = "multi_apps/185f29bd-5da0-40a6-b69c-ba7f4e0324ef.json"
#: check_thunderbird_folder of two folder files against two, then compare_pdfs of two Drive files
FOLDERS = "multi_apps/78aed49a-a710-4321-a793-b611a7c5b56b.json"
#: compare_unique_train_records against [the gold file, the initial one]
TRAINS = "libreoffice_writer/6f81754e-285d-4ce0-b59e-af7edb02d108.json"

_PAIRS = ("and the metric pairs each result file with its expected one: give both one file, or lists of as many "
          "('multi' and its 'gives')")
_TWO = {"type": "cloud_file", "multi": True, "path": ["https://example.org/a.pdf", "https://example.org/b.pdf"],
        "dest": ["a.pdf", "b.pdf"], "gives": [0, 1]}


def _set(key: str, value):
    return lambda evaluator: evaluator.__setitem__(key, value)


#: task id -> (the real task it breaks, the break, what the refusal says after "task 'ID': ")
MISTAKES = {
    "pdfs-one-against-two": (PDFS, _set("expected", _TWO),
                             "evaluator metric 'compare_pdfs': its result getter 'vm_file' gives one file and its "
                             f"expected getter 'cloud_file' a list of 2 files, {_PAIRS}"),
    "pdfs-one-against-rule-list": (PDFS, _set("expected", {"type": "rule", "rules": ["/srv/gold.pdf"]}),
                                   "evaluator metric 'compare_pdfs': its result getter 'vm_file' gives one file and "
                                   f"its expected getter 'rule' a list of 1 file, {_PAIRS}"),
    "images-four-against-one": (IMAGES, lambda ev: ev["result"].update(gives=[0, 1, 2, 3]),
                                "evaluator metric 'compare_image_list': its result getter 'vm_file' gives a list of 4 "
                                f"files and its expected getter 'cloud_file' one file, {_PAIRS}"),
    "pdfs-seven-against-six": (PDF_LISTS, lambda ev: ev["expected"]["gives"].pop(),
                               "evaluator metric 'compare_pdfs': its result getter 'cloud_file' gives a list of 7 "
                               f"files and its expected getter 'vm_file' a list of 6 files, {_PAIRS}"),
    "folders-one-against-two": (FOLDERS, lambda ev: ev["result"][0].update(gives=[1]),
                                "evaluator.func[0] (check_thunderbird_folder): its result getter 'vm_file' gives one "
                                f"file and its expected getter 'cloud_file' a list of 2 files, {_PAIRS}"),
    "table-two-results": (TABLE, lambda ev: ev["result"].update(
        multi=True, path=[ev["result"]["path"], "/home/user/b.xlsx"], dest=[ev["result"]["dest"], "b.xlsx"],
        gives=[0, 1]),
                          "evaluator result getter 'vm_file' of metric 'compare_table': it gives a list of 2 files, and "
                          "the metric opens its result state as one file: give it one ('gives' one index of its files)"),
    "csv-two-results": (MIXED, lambda ev: ev["result"].__setitem__(1, {**_TWO, "type": "vm_file"}),
                        "evaluator.result[1] getter 'vm_file' of evaluator.func[1] (compare_csv): it gives a list of 2 "
                        "files, and the metric opens its result state as one file: give it one ('gives' one index of "
                        "its files)"),
    "trains-one-expected": (TRAINS, lambda ev: ev["expected"].update(gives=[0]),
                            "evaluator expected getter 'cloud_file' of metric 'compare_unique_train_records': it gives "
                            "one file, and the metric reads its expected state as a list, [the gold file, the initial "
                            "one]: give it both ('multi', and 'gives' [0, 1])"),
}


@needs_set
def test_one_file_where_the_metric_reads_a_list_or_the_reverse_is_refused_at_load(tmp_path):
    assert_each_refused(tmp_path, MISTAKES)


def _pdf(path) -> str:
    import fitz

    document = fitz.open()
    document.new_page().insert_text((72, 72), "Invoice 243729: total 120.00")
    document.save(str(path))
    return str(path)


def _png(path) -> str:
    from PIL import Image

    Image.new("RGB", (8, 8), (200, 30, 30)).save(path)
    return str(path)


def test_a_path_against_a_list_never_scores_what_the_files_hold(tmp_path):
    """Why: the same file on both sides scores 1 as one path each or as lists of one, and
    nothing (0, or an error: a 0 at grading) as one path against a list, either way round."""
    for name, make, file_name in (("compare_pdfs", _pdf, "a.pdf"), ("compare_image_list", _png, "a.png")):
        path = make(tmp_path / file_name)
        metric = METRICS[name]
        assert metric(path, path) == 1 and metric([path], [path]) == 1, name
        for states in ((path, [path]), ([path], path)):
            try:
                score = metric(*states)
            except Exception:  # noqa: BLE001 - an error at grading is a 0
                score = 0
            assert score == 0, (name, states)
    pdf = str(tmp_path / "a.pdf")
    assert METRICS["compare_pdfs"]([pdf], [pdf, pdf]) == 0.5  # lists of two lengths: never 1
