"""What a user of OSWorld's own task folder is told when a flag picks nothing it holds (through
the CLI, on the real files of /work/shared/osworld): the refusal names the flag as the user
gave it, the index it was looked up in, and the value it is close to.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest

from parallel_rollout.exit_codes import EXIT_USAGE
from test_osworld_folder_cli import run_cli, said
from test_osworld_taskset import EXAMPLES, MODEL_AGENT, needs_set

pytestmark = needs_set


@pytest.mark.parametrize("domain, meant", [
    ("libreoffice_cacl", "libreoffice_calc"),  # a typo
    ("OS", "os"),                              # a case slip
    ("o", "os"),                               # one letter short
    ("spreadsheets", None),                    # nothing close: the list alone
])
def test_an_unknown_domain_names_the_flag_and_the_domain_it_is_close_to(domain, meant):
    """`--domain libreoffice_cacl` said "test_all.json: no domain 'libreoffice_cacl'; domains: …":
    neither the flag nor the domain meant, among ten."""
    done = run_cli("--data", str(EXAMPLES), "--domain", domain, "--dry-run", *MODEL_AGENT)
    assert done.returncode == EXIT_USAGE, said(done)
    told = said(done)
    assert f"--domain {domain!r}: {EXAMPLES / 'test_all.json'} has no such domain" in told, told
    assert (f"(did you mean {meant!r}?)" in told) if meant else ("did you mean" not in told), told
    assert "domains: chrome, gimp, libreoffice_calc" in told, told


def test_osworld_cache_missing_refuses_an_unknown_domain_as_the_run_does():
    """`osworld-cache missing DATA --domain D`, the command the dry run's note prints, reads the
    same flag: its refusal is the run's, exit 2, no traceback."""
    done = subprocess.run([sys.executable, "-m", "parallel_rollout", "osworld-cache", "missing", str(EXAMPLES),
                           "--domain", "chorme"], capture_output=True, text=True, timeout=60,
                          env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    assert done.returncode == EXIT_USAGE and "Traceback" not in done.stderr, done.stderr
    assert "--domain 'chorme': " in done.stderr and "(did you mean 'chrome'?)" in done.stderr, done.stderr


@pytest.mark.skipif(shutil.which("qemu-system-x86_64") is None, reason="qemu-system-x86_64 is not installed")
@pytest.mark.parametrize("prog, build", [
    ("./dev", "./dev image build --provider qemu --desktop"),  # ./dev sets PARALLEL_ROLLOUT_PROG
    (None, f"{sys.executable} -m parallel_rollout image build --provider qemu --desktop"),
])
def test_a_desktop_image_not_built_names_the_build_command_as_the_user_reaches_the_tool(tmp_path, prog, build):
    """`./dev run --provider qemu` without the desktop image said "build it with: parallel-rollout
    image build …", a command ./dev's users do not have on PATH (the virtualenv is not active);
    the resume line and the dry run's osworld-cache note already named ./dev."""
    env = {k: v for k, v in os.environ.items() if k != "PARALLEL_ROLLOUT_PROG"}
    env.update({"PYTHONPATH": os.pathsep.join(sys.path), "PARALLEL_ROLLOUT_CACHE": str(tmp_path / "empty-cache"),
                **({"PARALLEL_ROLLOUT_PROG": prog} if prog else {})})
    done = subprocess.run([sys.executable, "-m", "parallel_rollout", "run", "--data", str(EXAMPLES), "--osworld-index",
                           "test_small.json", "--domain", "os", "--provider", "qemu", "--dry-run", *MODEL_AGENT],
                          capture_output=True, text=True, timeout=120, env=env, cwd=tmp_path)
    assert done.returncode == EXIT_USAGE, said(done)
    assert f"no qemu guest image in {tmp_path / 'empty-cache' / 'qemu-desktop'}; build it with: {build}\n" in done.stderr, \
        done.stderr


@pytest.mark.parametrize("written, said_", [
    ('{\n  "chrome": ["a"],\n  "os": "abc"\n}\n', ':3: domain \'os\': "abc" is not a list of task ids (strings)'),
    ('{"os": ["a", 3]}', ':1: domain \'os\': ["a", 3] is not a list of task ids (strings)'),
    ('["a", "b"]', ':1: an OSWorld index is an object, {"domain": ["task id", ...]}, not ["a", "b"]'),
], ids=["a domain's string", "a number among the ids", "a list"])
def test_an_index_of_ones_own_that_is_malformed_names_the_line_and_the_domain(tmp_path, written, said_):
    """An index of one's own (how one task runs) that is no {"domain": [ids]} said only
    'mine.json:1: expected {"domain": ["task id", ...]}': not which domain, nor what it held."""
    index = tmp_path / "mine.json"
    index.write_text(written)
    done = run_cli("--data", str(EXAMPLES), "--osworld-index", str(index), "--dry-run", *MODEL_AGENT)
    assert done.returncode == EXIT_USAGE, said(done)
    assert f"{index}{said_}" in said(done), said(done)


def test_an_empty_task_file_or_index_is_said_to_be_empty(tmp_path):
    """A task file or index cut short to nothing (an interrupted copy) said 'invalid JSON:
    Expecting value (column 1)', as if a character were wrong; the others are still all named."""
    folder = tmp_path / "set"
    task_ids = [p.stem for p in sorted((EXAMPLES / "examples" / "os").glob("*.json"))[:2]]
    (folder / "examples" / "os").mkdir(parents=True)
    for task_id in task_ids:
        shutil.copy(EXAMPLES / "examples" / "os" / f"{task_id}.json", folder / "examples" / "os")
    (folder / "test_all.json").write_text(json.dumps({"os": [*task_ids, "not-there"]}))
    (folder / "examples" / "os" / f"{task_ids[0]}.json").write_text("\n")
    (folder / "test_small.json").write_text("")
    done = run_cli("--data", str(folder), "--dry-run", *MODEL_AGENT)
    assert done.returncode == EXIT_USAGE, said(done)
    assert f"{folder}/examples/os/{task_ids[0]}.json:1: the file is empty; an OSWorld task file is a JSON object" \
        in said(done), said(done)
    assert "has no file" in said(done) and "Expecting value" not in said(done), said(done)
    small = run_cli("--data", str(folder), "--osworld-index", "test_small.json", "--dry-run", *MODEL_AGENT)
    assert f"{folder}/test_small.json:1: the file is empty; an OSWorld index is a JSON object" in said(small), said(small)


TASK = sorted((EXAMPLES / "examples" / "os").glob("*.json"))[0]


@pytest.mark.parametrize("data, extra, told", [
    (EXAMPLES / "examples", (), f"give the folder that holds it and its indexes as --test_config_base_dir: "
                                f"--test_config_base_dir {EXAMPLES}"),
    (EXAMPLES / "test_all.json", (), "give its folder as --test_config_base_dir and it as --osworld-index: "
                                     f"--test_config_base_dir {EXAMPLES} --osworld-index test_all.json"),
    (TASK, (), f"give the task set's folder (--test_config_base_dir {EXAMPLES})"),
    (TASK, ("--domain", "os"), "--domain os applies to an OSWorld folder given as --test_config_base_dir"),
    (EXAMPLES.parent / "nowhere", ("--domain", "os"),
     f"{EXAMPLES.parent / 'nowhere'}: no such folder (--test_config_base_dir: the task set's folder"),
], ids=["examples/", "an index", "a task file", "a task file and --domain", "no such folder"])
@pytest.mark.parametrize("dry_run", [True, False], ids=["dry run", "run"])
def test_a_run_py_line_one_level_off_names_test_config_base_dir_as_typed(data, extra, told, dry_run):
    """OSWorld's run.py line with --test_config_base_dir at the wrong level was told what to give
    as '--data', a flag it never typed (README: errors name a flag as it was typed)."""
    done = run_cli("--test_config_base_dir", str(data), *extra, *(["--dry-run"] if dry_run else []), *MODEL_AGENT,
                   "--model", "m", "--result_dir", str(EXAMPLES.parent / "never-made"))
    assert done.returncode == EXIT_USAGE, said(done)
    assert told in said(done) and "--data" not in said(done), said(done)


@pytest.mark.parametrize("flag", ["--test_all_meta_path", "--osworld-index"])
def test_a_missing_index_given_as_a_path_names_the_flag_as_typed(tmp_path, flag):
    """`--test_all_meta_path missing.json` (a path from the current folder, made absolute) was
    told "EXAMPLES: no index /tmp/…/missing.json": a file, but not the flag that named it."""
    done = run_cli("--test_config_base_dir", str(EXAMPLES), flag, str(tmp_path / "missing.json"), "--dry-run",
                   *MODEL_AGENT, cwd=tmp_path)
    assert done.returncode == EXIT_USAGE, said(done)
    assert f"{flag} {tmp_path / 'missing.json'}: no such file" in said(done), said(done)
    assert f"indexes in {EXAMPLES}: test_all.json, test_infeasible.json" in said(done), said(done)
    if flag == "--test_all_meta_path":
        relative = run_cli("--test_config_base_dir", str(EXAMPLES), flag, "missing.json", *MODEL_AGENT, "--model", "m",
                           cwd=tmp_path)
        assert relative.returncode == EXIT_USAGE, said(relative)
        assert f"{flag} {tmp_path / 'missing.json'}: no such file" in said(relative), said(relative)


@pytest.mark.parametrize("index", ["no/such/test_all.json", "ABS"], ids=["relative", "absolute"])
@pytest.mark.parametrize("dry_run", [True, False], ids=["dry run", "run"])
def test_an_index_alone_in_no_folder_names_test_all_meta_path_as_typed(tmp_path, index, dry_run):
    """`--test_all_meta_path /no/such/folder/test_all.json` alone (its folder is the task set's)
    was told '/no/such/folder: no such folder (--data: …)', a flag the line never typed."""
    index = str(tmp_path / "no" / "such" / "test_all.json") if index == "ABS" else index
    done = run_cli("--test_all_meta_path", index, *(["--dry-run"] if dry_run else []), *MODEL_AGENT, "--model", "m",
                   cwd=tmp_path)
    assert done.returncode == EXIT_USAGE, said(done)
    assert (f"--test_all_meta_path {index}: no such folder {tmp_path / 'no' / 'such'} (without "
            f"--test_config_base_dir, the index's folder is the task set's") in said(done), said(done)
    assert "--data" not in said(done), said(done)


@pytest.mark.parametrize("holds, says", [
    ({}, "the folder is empty"),
    ({"a.jsonl": '{"id": "t", "mode": "shell", "check": "true"}\n'}, "its task files run as --data: --data ABS/a.jsonl"),
], ids=["empty", "task files"])
def test_an_index_alone_in_a_folder_without_a_task_set_names_test_all_meta_path_as_typed(tmp_path, holds, says):
    """`--test_all_meta_path DIR/test_all.json` alone, DIR there and holding no task set, was told
    'DIR: the folder is empty: … --data takes …', of a flag the line never typed."""
    (tmp_path / "set").mkdir()
    for name, text in holds.items():
        (tmp_path / "set" / name).write_text(text)
    done = run_cli("--test_all_meta_path", "set/test_all.json", "--dry-run", *MODEL_AGENT, "--model", "m", cwd=tmp_path)
    assert done.returncode == EXIT_USAGE, said(done)
    assert (f"--test_all_meta_path set/test_all.json: no such file, and no OSWorld task set in its folder "
            f"{tmp_path / 'set'}: {says.replace('ABS', str(tmp_path / 'set'))} (without --test_config_base_dir, the "
            "index's folder is the task set's") in said(done), said(done)
    assert "--data takes" not in said(done), said(done)
