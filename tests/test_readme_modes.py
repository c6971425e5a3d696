"""The README's "Modes" and "Shell tasks" sections, run as printed (no stdin, in a shell, from
the repository's root): the Sokoban command with the oracle, verl's GSM8K parquet command
against a local model server (the test's, where the README has port 8000; a file in verl's
layout where it has ~/data), and the shell task it prints over three lines, as one line of a
task file. Each is taken from the README's text, so an edit that breaks one fails here."""

from __future__ import annotations

import json
import re

import pytest

from conftest import assert_exactly_once
from llm_server import LLMServer
from readme_support import INSTALLED, ROOT, bash, readme_lines, readme_section


def test_the_sokoban_command_solves_every_shipped_room(tmp_path):
    [line] = readme_lines("Modes", "bash", "parallel-rollout run --mode gym --data sokoban")
    proc = bash(f"{line} --output-dir {tmp_path}", ROOT, env=INSTALLED, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    [run_dir] = tmp_path.iterdir()
    finals = [json.loads(r) for r in (run_dir / "results.jsonl").read_text().splitlines()]
    assert len(finals) == 300 and {r["status"] for r in finals} == {"success"}, len(finals)
    for tag in ("SimpleSokoban", "LargerSokoban", "SokobanDifferentGridVocab"):  # 100 for each of ROLL's tags
        assert sum(tag in r["tags"] for r in finals) == 100, tag


@pytest.mark.slow  # 11 s: a guard (it held); the parquet loader's own tests run by default
def test_the_verl_parquet_command_runs_a_gsm8k_file_as_math_tasks(tmp_path):
    pa, parquet = pytest.importorskip("pyarrow"), pytest.importorskip("pyarrow.parquet")
    [line] = readme_lines("Modes", "", "./dev run --mode math --data ~/data/gsm8k/test.parquet")
    printed = "--base-url http://127.0.0.1:8000/v1"
    assert printed in line
    rows = [{"data_source": "openai/gsm8k", "ability": "math",
             "prompt": [{"role": "user", "content": f"What is {a} plus {b}?"}],
             "reward_model": {"style": "rule", "ground_truth": str(a + b)},
             "extra_info": {"split": "test", "index": index}} for index, (a, b) in enumerate([(3, 4), (20, 22)])]
    data = tmp_path / "gsm8k" / "test.parquet"
    data.parent.mkdir()
    parquet.write_table(pa.Table.from_pylist(rows), data)

    def answer(body):
        a, b = map(int, re.findall(r"\d+", body["messages"][-1]["content"]))
        return {"reply": f"So the answer is $\\boxed{{{a + b}}}$."}

    server = LLMServer(policy=answer).start()
    try:
        command = line.replace("~/data/gsm8k/test.parquet", str(data)).replace(printed, f"--base-url {server.url}")
        proc = bash(f"{command} --output-dir {tmp_path / 'out'}", ROOT, timeout=600)
    finally:
        server.stop()
    assert proc.returncode == 0, proc.stderr[-3000:]
    [run_dir] = (tmp_path / "out").iterdir()
    finals = assert_exactly_once(run_dir, {"openai/gsm8k/test/0#0", "openai/gsm8k/test/1#0"})
    assert {(r["status"], r["mode"], tuple(r["tags"])) for r in finals.values()} == {
        ("success", "math", ("openai/gsm8k",))}, finals


def test_the_shell_task_printed_over_three_lines_runs_as_one_line_of_a_task_file(tmp_path):
    [block] = re.findall(r"```json\n(.*?)```", readme_section("Shell tasks"), re.S)[:1]
    task = json.loads(block)
    data = tmp_path / "tasks.jsonl"
    data.write_text(json.dumps(task) + "\n")
    proc = bash(f"parallel-rollout run --data {data} --output-dir {tmp_path / 'out'} --run-id r", tmp_path,
                env=INSTALLED)
    assert proc.returncode == 0, proc.stderr[-3000:]
    record = assert_exactly_once(tmp_path / "out" / "r", {"count-lines#0"})["count-lines#0"]
    assert record["status"] == "success" and record["reward"] == 1.0, record
    # the record's eval as the section lists it
    assert record["eval"] == {"check_returncode": 0, "check_output": "", "check_error": "", "check_timeout": None}
    assert (tmp_path / "out" / "r" / record["trajectory"]).is_file()
