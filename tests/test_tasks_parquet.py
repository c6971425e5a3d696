"""Parquet task files (``tasks_parquet``): verl's dataset layout run as math tasks through the
CLI, our own columns as they are, and bad files refused by name."""

from __future__ import annotations

import datetime
import decimal
import json
import sys

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

from conftest import ROOT, assert_exactly_once
from llm_server import LLMServer, lookup_solver
from parallel_rollout.cli import main
from readme_support import ENV, bash, readme_lines
from parallel_rollout.envs import task_validators
from parallel_rollout.tasks import load_tasks


def verl_row(index: int, question: str, answer: str, split: str = "test") -> dict:
    """A row as verl's examples/data_preprocess/gsm8k.py writes it."""
    return {"data_source": "openai/gsm8k",
            "prompt": [{"role": "system", "content": "Think step by step."},
                       {"role": "user", "content": question}],
            "ability": "math", "reward_model": {"style": "rule", "ground_truth": answer},
            "extra_info": {"split": split, "index": index, "answer": f"... #### {answer}", "question": question}}


def write(path, rows: list[dict], schema: pa.Schema | None = None):
    pq.write_table(pa.Table.from_pylist(rows, schema=schema), path)
    return path


def run_cli(*args: str):
    return CliRunner().invoke(main, ["run", "--mode", "math", "--no-progress", *args], catch_exceptions=False)


@pytest.mark.slow
def test_a_verl_dataset_runs_as_math_tasks_through_the_cli(tmp_path):
    data = write(tmp_path / "test.parquet", [
        verl_row(0, "Natalia sold 48 clips in April and half as many in May. How many in all?", "72"),
        verl_row(1, "What is 3 times 4?", "12"),
        verl_row(7, "What is 10 minus 3?", "7")])
    out = tmp_path / "out"
    result = run_cli("--data", str(data), "--agent", "oracle", "--output-dir", str(out), "--run-id", "gsm",
                     "--num-rollouts", "3")
    assert result.exit_code == 0, result.output
    finals = {r["task_id"]: r for r in map(json.loads, (out / "gsm" / "results.jsonl").read_text().splitlines())
              if r["final"]}
    assert sorted(finals) == ["openai/gsm8k/test/0", "openai/gsm8k/test/1", "openai/gsm8k/test/7"]
    assert all(r["success"] and r["tags"] == ["openai/gsm8k"] for r in finals.values())
    [turn] = [json.loads(line) for line in (out / "gsm" / finals["openai/gsm8k/test/7"]["trajectory"]).read_text().splitlines()]
    assert "What is 10 minus 3?" in json.dumps(turn)


def test_the_readme_command_runs_a_verl_file_against_a_local_model(tmp_path):
    """The README's line with its file and server replaced by the test's: the model sees each
    row's user message (not verl's system prompt) and is graded on its ground truth."""
    [line] = readme_lines("Modes", "", "./dev run --mode math --data ~/data/gsm8k/test.parquet")
    data = write(tmp_path / "test.parquet", [verl_row(0, "What is 6 times 12?", "72"),
                                             verl_row(1, "What is 5 plus 4?", "9")])
    server = LLMServer(policy=lookup_solver({"6 times 12": "Answer: 72", "5 plus 4": "Answer: 8"})).start()
    printed = "--base-url http://127.0.0.1:8000/v1"
    command = line.replace("~/data/gsm8k/test.parquet", str(data)).replace(printed, f"--base-url {server.url}")
    env = {k: v for k, v in ENV.items() if k != "OPENAI_API_KEY"}
    try:
        proc = bash(f"{command} --output-dir {tmp_path} --run-id verl --no-progress", ROOT, env=env, timeout=600)
    finally:
        server.stop()
    assert proc.returncode == 0, proc.stderr[-3000:]  # a wrong answer is a result, not an error
    finals = assert_exactly_once(tmp_path / "verl", {"openai/gsm8k/test/0#0", "openai/gsm8k/test/1#0"})
    assert [finals[k]["success"] for k in sorted(finals)] == [True, False]
    assert not any("Think step by step." in json.dumps(r["body"]) for r in server.requests)


def test_rows_in_our_own_columns_are_tasks_as_they_are(tmp_path):
    data = write(tmp_path / "own.parquet", [
        {"id": "half", "problem": "What is 1/2 of 3?", "answer": "\\frac{3}{2}", "tags": ["easy"]},
        {"id": "sum", "problem": "What is 2+2?", "answer": "4", "tags": []}])
    tasks = load_tasks(data, default_mode="math", validators=task_validators())
    assert [(t.id, t.payload["answer"], t.tags) for t in tasks] == [
        ("half", "\\frac{3}{2}", ("easy",)), ("sum", "4", ())]
    assert tasks[0].source == f"{data}: row 1"


@pytest.mark.parametrize("rows, schema, message", [
    ([{"id": "a", "problem": "p", "answer": 1.0}, {"id": "b", "problem": "p", "answer": float("nan")}],
     None, "row 2: column 'answer' holds NaN, not a JSON number"),  # Python's "nan"
    ([{"id": "a", "problem": "p", "answer": "1", "scores": [1.0, float("-inf")]}],
     None, "row 1: column 'scores[1]' holds -Infinity, not a JSON number"),
    # a value no JSON task holds, said in the Parquet schema's words and by its path: it said
    # Python's type, "holds a bytes", "holds a datetime", of the top column
    ([{"id": "a", "problem": "p", "answer": "1", "blob": b"\x00\x01"}],
     None, "row 1: column 'blob' holds a Parquet binary, which a task cannot hold (a task holds JSON's values: "
           "a string, a number, true or false, null, a list or an object)"),
    ([{"id": "a", "problem": "p", "answer": "1", "when": datetime.datetime(2024, 5, 1)}],
     None, "row 1: column 'when' holds a Parquet timestamp[us], which a task cannot hold"),
    ([{"id": "a", "problem": "p", "answer": "1", "meta": {"cost": decimal.Decimal("1.5"), "ok": True}}],
     None, "row 1: column 'meta.cost' holds a Parquet decimal128(2, 1), which a task cannot hold"),
    ([{"id": "a", "problem": "p", "answer": "1", "files": [b"x"]}],
     None, "row 1: column 'files[0]' holds a Parquet binary, which a task cannot hold"),
    ([verl_row(0, "q", "1"), {**verl_row(1, "q", "2"), "prompt": [{"role": "system", "content": "no user"}]}],
     None, "row 2: verl's 'prompt' holds no user message (its last one is the task's problem)"),
    # the real problem is the missing answer, not an 'id' the row never needed
    ([verl_row(0, "q", "1"), {**verl_row(1, "q", "2"), "reward_model": None}],
     None, "row 2: verl's 'reward_model' is null: its ground_truth is the task's answer"),
    ([verl_row(0, "q", "1"), {**verl_row(1, "q", "2"), "reward_model": {"style": "rule", "ground_truth": None}}],
     None, "row 2: verl's reward_model.ground_truth is missing (null): it is the task's answer"),
])
def test_a_bad_row_is_refused_naming_the_file_row_and_column(tmp_path, rows, schema, message):
    data = write(tmp_path / "bad.parquet", rows, schema)
    out = tmp_path / "out"
    result = run_cli("--data", str(data), "--agent", "oracle", "--output-dir", str(out), "--run-id", "bad")
    assert result.exit_code == 2, result.output
    assert f"{data}: {message}" in result.output
    assert not (out / "bad").exists()  # refused before anything ran


def test_a_map_column_is_a_json_object(tmp_path):
    """A Parquet map (pyarrow gives its entries as (key, value) pairs) is the object a JSON
    task file writes: a Sokoban task's grid_vocab as map<string, string> was refused, "field
    'grid_vocab' must be an object mapping a meaning to its symbol", a list of pairs."""
    data = tmp_path / "boxes.parquet"
    pq.write_table(pa.table({"id": ["b"], "mode": ["gym"], "game": ["Sokoban"], "dim_room": [[6, 6]], "num_boxes": [1],
                             "grid_vocab": pa.array([[("wall", "W")]], type=pa.map_(pa.string(), pa.string()))}), data)
    done = CliRunner().invoke(main, ["run", "--data", str(data), "--dry-run", "--no-progress"])
    assert done.exit_code == 0, done.output
    assert "runnable 1 of 1 tasks" in done.output, done.output
    [task] = load_tasks(data, default_mode="gym", validators=task_validators())
    assert task.payload["grid_vocab"] == {"wall": "W"}


def test_a_file_that_is_not_parquet_or_no_pyarrow_is_a_clear_error(tmp_path, monkeypatch):
    broken = tmp_path / "broken.parquet"
    broken.write_bytes(b"PAR1 not really")
    result = run_cli("--data", str(broken), "--agent", "oracle", "--output-dir", str(tmp_path / "out"))
    assert result.exit_code == 2 and f"{broken}: not a readable Parquet file" in result.output

    data = write(tmp_path / "fine.parquet", [{"id": "a", "problem": "p", "answer": "1"}])
    monkeypatch.setitem(sys.modules, "pyarrow", None)  # as if the [parquet] extra were not installed
    monkeypatch.setitem(sys.modules, "pyarrow.parquet", None)
    result = run_cli("--data", str(data), "--agent", "oracle", "--output-dir", str(tmp_path / "out"))
    assert result.exit_code == 2
    assert f"{data}: a .parquet task file needs pyarrow: pip install 'parallel-rollout[parquet]'" in result.output


def test_a_verl_file_needs_no_mode_flag(tmp_path):
    """A verl user's file runs as it is: without --mode, verl's layout (data_source,
    reward_model) is a math task set, as a file whose tasks all name one mode is."""
    data = write(tmp_path / "gsm.parquet", [verl_row(0, "What is 3 times 4?", "12"),
                                            verl_row(1, "What is 10 minus 3?", "7")])
    argv = ["run", "--data", str(data), "--agent", "oracle", "--output-dir", str(tmp_path / "out"), "--no-progress"]
    shown = CliRunner().invoke(main, [*argv, "--print-config"])
    assert shown.exit_code == 0, shown.output
    assert json.loads(shown.output)["mode"] == "math"
    dry = CliRunner().invoke(main, [*argv, "--dry-run"])
    assert dry.exit_code == 0, dry.output
    assert "runnable 2 of 2 tasks" in dry.output and "missing field" not in dry.output
    # a row of its own mode beside verl's rows: no one mode to infer, said as before
    mixed = write(tmp_path / "mixed.parquet", [verl_row(0, "q", "1"), {"id": "s", "mode": "shell", "data_source": None,
                                                                      "instruction": "x", "check": "true"}])
    refused = CliRunner().invoke(main, ["run", "--data", str(mixed), "--agent", "oracle", "--dry-run",
                                        "--output-dir", str(tmp_path / "out")])
    assert refused.exit_code == 2
