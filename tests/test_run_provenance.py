"""Runs say what made them, and ``--resume`` keeps to it (through the CLI).

A math run with the openai agent against the local chat server writes the package, Python
and dependency versions (math-verify among them: it grades), a schema version and the task
file's sha256 into config.json and summary.json. Resuming it after the task file changed,
or with another ``--temperature``, ``--max-tokens``, ``--base-url`` or OPENAI_BASE_URL, is
refused naming the file or the setting; a resume with another ``--num-rollouts`` (how fast,
not what) goes ahead. An OSWorld run (its tasks all skipped as unsupported, so no desktop
boots) is refused another observation type, screen size or index file.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import subprocess
import sys
from importlib import metadata

import pytest

from llm_server import llm_server, lookup_solver  # noqa: F401 - fixture
from parallel_rollout import __version__
from parallel_rollout.config import RESULT_FIELDS, RUN_ONLY_FIELDS, RunConfig
from parallel_rollout.exit_codes import EXIT_USAGE
from parallel_rollout.provenance import SCHEMA_VERSION

pytest.importorskip("math_verify")

PROBLEMS = {"What is 6 times 7?": "42", "What is 10 minus 3?": "7"}


@pytest.fixture
def math_run(tmp_path, llm_server):
    """(run folder, cli) after one finished run of two math problems at --temperature 0.2."""
    data = tmp_path / "math.jsonl"
    data.write_text("".join(json.dumps({"id": f"m{i}", "problem": p, "answer": a}) + "\n"
                            for i, (p, a) in enumerate(PROBLEMS.items())))
    server = llm_server(policy=lookup_solver({p: f"\\boxed{{{a}}}" for p, a in PROBLEMS.items()}))
    # the endpoint as a user often gives it: OPENAI_BASE_URL, which a resume's shell has too
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("OPENAI_")}, "OPENAI_BASE_URL": server.url}

    def cli(*args, environ=None):
        argv = [sys.executable, "-m", "parallel_rollout.cli", "run", "--output-dir", str(tmp_path / "out"),
                "--run-id", "r", "--no-progress", *args]
        return subprocess.run(argv, capture_output=True, text=True, env={**env, **(environ or {})}, timeout=120)

    first = cli("--mode", "math", "--data", str(data), "--agent", "openai", "--temperature", "0.2")
    assert first.returncode == 0, first.stderr
    cli.url = server.url
    return tmp_path / "out" / "r", data, cli


def test_config_and_summary_record_versions_schema_and_data_hash(math_run):
    run_dir, data, cli = math_run
    expected_hash = hashlib.sha256(data.read_bytes()).hexdigest()
    for name in ("config.json", "summary.json"):
        doc = json.loads((run_dir / name).read_text())
        assert doc["schema_version"] == SCHEMA_VERSION
        made = doc["provenance"]
        assert made["parallel_rollout"] == __version__ and made["python"].count(".") == 2
        for dist in ("openai", "psutil", "click", "math-verify"):  # math-verify: the math mode's grader
            assert made["dependencies"][dist] == metadata.version(dist)
        assert made["data"] == [{"path": str(data), "sha256": expected_hash}]
        assert made["endpoints"] == [cli.url]  # from OPENAI_BASE_URL: config's base_url is unset


@pytest.mark.slow
def test_resume_refuses_a_changed_task_file_naming_it(math_run):
    run_dir, data, cli = math_run
    before = (run_dir / "results.jsonl").read_bytes()
    data.write_text(data.read_text().replace('"answer": "42"', '"answer": "41"'))
    done = cli("--resume")
    assert done.returncode == EXIT_USAGE
    assert f"the task file {data} changed since the run started" in done.stderr
    assert (run_dir / "results.jsonl").read_bytes() == before


@pytest.mark.slow
def test_resume_refuses_another_temperature_naming_it(math_run):
    run_dir, _, cli = math_run
    done = cli("--resume", "--temperature", "0.7")
    assert done.returncode == EXIT_USAGE
    assert "other settings for --temperature (0.2 then, 0.7 now)" in " ".join(done.stderr.split())


@pytest.mark.parametrize("args, environ, says", [
    (["--max-tokens", "64"], {}, "--max-tokens (unset then, 64 now)"),
    (["--base-url", "http://127.0.0.1:9/v1"], {}, "'http://127.0.0.1:9/v1' now"),
    # the run was made with OPENAI_BASE_URL: another one in the resume's environment
    ([], {"OPENAI_BASE_URL": "http://127.0.0.1:9/v1"}, "from --base-url else OPENAI_BASE_URL"),
    # and none at all would send the rest to OpenAI's API
    ([], {"OPENAI_BASE_URL": "", "OPENAI_API_KEY": "sk-test"}, "'https://api.openai.com/v1' now"),
    # told before what that endpoint lacks (a key), which a resume with the run's settings needs not
    ([], {"OPENAI_BASE_URL": ""}, "'https://api.openai.com/v1' now"),
])
def test_resume_refuses_another_model_setting_naming_it(math_run, args, environ, says):
    run_dir, _, cli = math_run
    before = (run_dir / "results.jsonl").read_bytes()
    done = cli("--resume", *args, environ=environ)
    assert done.returncode == EXIT_USAGE, done.stderr
    said = " ".join(done.stderr.split())
    assert "cannot resume r: the run was made with other settings for" in said and says in said, said
    assert (run_dir / "results.jsonl").read_bytes() == before


def test_resume_with_another_agent_is_told_that_before_what_the_agent_lacks(tmp_path):
    """A run of the oracle resumed with --agent openai and no key: the refused resume is said,
    not first the key that agent would need (set, the refusal came as a second step)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("OPENAI_")}

    def cli(*args):
        return subprocess.run([sys.executable, "-m", "parallel_rollout.cli", "run", "--mode", "py", "--data",
                               "humaneval", "--limit", "2", "--output-dir", str(tmp_path), "--run-id", "r",
                               "--no-progress", *args], capture_output=True, text=True, env=env, timeout=120)

    assert cli("--agent", "oracle").returncode == 0
    before = (tmp_path / "r" / "results.jsonl").read_bytes()
    done = cli("--resume", "--agent", "openai")
    assert done.returncode == EXIT_USAGE, done.stderr
    said = " ".join(done.stderr.split())
    assert "other settings for --agent ('oracle' then, 'openai' now)" in said and "OPENAI_API_KEY" not in said, said
    assert (tmp_path / "r" / "results.jsonl").read_bytes() == before


@pytest.mark.slow
def test_resume_naming_the_same_endpoint_by_the_flag_goes_ahead(math_run):
    run_dir, _, cli = math_run
    done = cli("--resume", "--base-url", cli.url, environ={"OPENAI_BASE_URL": ""})
    assert done.returncode == 0, done.stderr


@pytest.mark.slow
def test_resume_with_another_num_rollouts_goes_ahead(math_run):
    run_dir, _, cli = math_run
    done = cli("--resume", "--num-rollouts", "2")
    assert done.returncode == 0, done.stderr
    assert "2/2 samples finished" in done.stdout
    assert json.loads((run_dir / "config.json").read_text())["config"]["num_rollouts"] == 2


def test_every_setting_is_classified_once():
    """A new setting must say whether it changes results (then a resume must keep it)."""
    names = {f.name for f in dataclasses.fields(RunConfig)} - {"explicit", "sources"}
    assert set(RESULT_FIELDS) | set(RUN_ONLY_FIELDS) == names
    assert not set(RESULT_FIELDS) & set(RUN_ONLY_FIELDS)
    for name in ("temperature", "max_tokens", "base_url", "observation_type", "screen_width", "screen_height",
                 "osworld_index", "sampling", "extra_body"):
        assert name in RESULT_FIELDS


def osworld_run(tmp_path):
    """(cli, folder) after a finished OSWorld run whose two tasks use a metric no version has:
    with --skip-unsupported each gets a final 'unsupported' record and no desktop boots."""
    from test_osworld_taskset import osworld_folder

    lacking = {"func": "no_such_metric", "result": {"type": "vm_file", "path": "/tmp/x", "dest": "x"}}
    folder = osworld_folder(tmp_path / "set", {
        "a": {"domain": "os", "instruction": "a", "config": [], "evaluator": lacking},
        "b": {"domain": "os", "instruction": "b", "config": [], "evaluator": lacking}})
    (folder / "evaluation_examples" / "test_small.json").write_text(json.dumps({"os": ["a"]}))

    def cli(*args):
        argv = [sys.executable, "-m", "parallel_rollout", "run", "--output-dir", str(tmp_path / "out"),
                "--run-id", "o", "--no-progress", *args]
        return subprocess.run(argv, capture_output=True, text=True, timeout=120)

    # OSWorld's own spellings, as its users' scripts have them
    first = cli("--mode", "osworld", "--test_config_base_dir", str(folder), "--skip-unsupported",
                "--observation_type", "screenshot", "--screen_width", "1920", "--screen_height", "1080")
    assert first.returncode == 0, first.stderr
    assert "2/2 samples finished" in first.stdout
    return cli, folder


@pytest.mark.parametrize("args, says", [
    # each named as typed: OSWorld's spelling, or this CLI's
    (["--observation_type", "a11y_tree"], "--observation_type ('screenshot' then, 'a11y_tree' now)"),
    (["--screen-width", "1280"], "--screen-width (1920 then, 1280 now)"),
    (["--screen_height", "720"], "--screen_height (1080 then, 720 now)"),
    (["--max_steps", "7"], "--max_steps (15 then, 7 now)"),
    (["--osworld-index", "test_small.json"], "--osworld-index ('test_all.json' then, 'test_small.json' now)"),
])
def test_osworld_resume_refuses_another_observation_screen_or_index(tmp_path, args, says):
    cli, _ = osworld_run(tmp_path)
    done = cli("--resume", *args)
    assert done.returncode == EXIT_USAGE, done.stderr
    assert says in " ".join(done.stderr.split()), done.stderr
    assert cli("--resume").returncode == 0  # the same settings go ahead


def test_osworld_resume_refuses_a_changed_task_folder(tmp_path):
    cli, folder = osworld_run(tmp_path)
    task = folder / "evaluation_examples" / "examples" / "os" / "b.json"
    task.write_text(task.read_text().replace('"instruction": "b"', '"instruction": "b, but other"'))
    done = cli("--resume")
    assert done.returncode == EXIT_USAGE
    assert f"the task folder {folder} changed since the run started" in \
        " ".join(done.stderr.split()), done.stderr
