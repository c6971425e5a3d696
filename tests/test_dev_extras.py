"""What ``./dev run …`` installs: the extras of the mode, data and backend the command names
(``./dev extras ARGS`` prints them and sets nothing up), so the README's first command gets
the base package alone."""

from __future__ import annotations

import gzip
import os
import subprocess

import pytest

from conftest import ROOT


def extras(*args: str, env: dict | None = None) -> list[str]:
    """The extras ``./dev run ARGS`` would install."""
    clean = {k: v for k, v in os.environ.items() if not k.startswith("PARALLEL_ROLLOUT_")}
    proc = subprocess.run(["bash", str(ROOT / "dev"), "extras", *args], capture_output=True, text=True,
                          env={**clean, **(env or {})}, timeout=30)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.split()


@pytest.mark.parametrize("args, expected", [
    (("--mode", "py", "--data", "humaneval", "--agent", "oracle", "--num-rollouts", "4", "--num-vms", "2",
      "--use-vm-pool"), []),
    (("--mode", "shell", "--provider-name", "docker"), []),
    (("--mode", "math", "--data", "benchmarks/math_tasks.jsonl"), ["math"]),
    (("--mode=gym", "--data", "frozenlake"), ["rl"]),
    (("--mode", "osworld", "--backend", "ray"), ["osworld", "ray"]),
    (("--mode", "web", "--data", "miniwob"), ["web"]),
    (("--mode", "rag", "--data", "rag"), ["rag"]),
    (("--mode", "math", "--data", "gsm8k/test.parquet"), ["math", "parquet"]),
])
def test_a_run_installs_the_extras_of_what_it_names(args, expected):
    assert extras(*args) == expected


def test_the_mode_may_come_from_a_variable_or_the_config_file(tmp_path):
    assert extras(env={"PARALLEL_ROLLOUT_MODE": "math"}) == ["math"]
    config = tmp_path / "run.toml"
    config.write_text('mode = "gym"\nbackend = "ray"  # a cluster\nnum-vms = 4\n')
    assert extras("--config", str(config)) == ["rl", "ray"]
    # TOML's literal strings are single-quoted
    config.write_text("mode = 'math'\ndata='tasks.parquet'  # a table\n")
    assert extras("--config", str(config)) == ["math", "parquet"]


@pytest.mark.parametrize("args", [[], ["help"]], ids=["none", "help"])
def test_dev_alone_or_help_prints_its_usage_and_sets_nothing_up(tmp_path, args):
    # a copy of the script in an empty folder: any setup would make tmp_path/.venv
    (tmp_path / "dev").write_bytes((ROOT / "dev").read_bytes())
    proc = subprocess.run(["bash", str(tmp_path / "dev"), *args], capture_output=True, text=True, timeout=30)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("usage: ./dev COMMAND")
    for command in ("./dev run", "./dev test", "./dev extras", "./dev OTHER"):
        assert command in proc.stdout
    assert "Error" not in proc.stderr and "[setup]" not in proc.stderr
    assert not (tmp_path / ".venv").exists()


@pytest.mark.parametrize("how", ["folder", "checkout", "run.py flags", "index flag"])
def test_an_osworld_task_set_without_mode_installs_the_osworld_extra(tmp_path, how):
    """--data an OSWorld folder (or OSWorld's flags) implies --mode osworld: its libraries too."""
    (tmp_path / "OSWorld" / "evaluation_examples" / "examples" / "os").mkdir(parents=True)
    args = {"folder": ("--data", str(tmp_path / "OSWorld" / "evaluation_examples")),
            "checkout": ("--data=OSWorld",),
            "run.py flags": ("--test_config_base_dir", "D", "--test_all_meta_path", "D/test_small.json"),
            "index flag": ("--data", "D", "--osworld-index", "mine.json")}[how]
    proc = subprocess.run(["bash", str(ROOT / "dev"), "extras", *args], capture_output=True, text=True,
                          cwd=tmp_path, timeout=30)
    assert proc.stdout.split() == ["osworld"], proc.stderr


def test_a_task_file_without_mode_installs_the_extras_of_the_mode_it_implies(tmp_path):
    """`--data benchmarks/math_tasks.jsonl` alone runs math (its tasks all name it), and a Parquet
    file in verl's layout alone runs math (README, "Parquet task files"): ./dev installed no
    math-verify for them, so in a fresh checkout the run was refused for the missing extra."""
    shipped = ROOT / "benchmarks"
    assert extras("--data", str(shipped / "math_tasks.jsonl")) == ["math"]
    assert extras("--data", str(shipped / "osworld_tasks.jsonl")) == ["osworld"]
    assert extras("--data", str(shipped / "shell_tasks.jsonl")) == []
    assert extras("--mode", "shell", "--data", str(shipped / "math_tasks.jsonl")) == []  # --mode wins, as in a run
    packed = tmp_path / "math.jsonl.gz"
    packed.write_bytes(gzip.compress((ROOT / "benchmarks" / "math_tasks.jsonl").read_bytes()))
    assert extras(f"--data={packed}") == ["math"]
    unnamed = tmp_path / "tasks.jsonl"  # tasks that name no mode: the default, shell
    unnamed.write_text('{"id": "a", "instruction": "x", "check": "true"}\n')
    assert extras("--data", str(unnamed), "--backend", "ray") == ["ray"]
    (tmp_path / "tasks.jsonl.gz").write_bytes(gzip.compress(unnamed.read_bytes()))
    assert extras("--data", str(tmp_path / "tasks.jsonl.gz")) == []
    (tmp_path / "eval.toml").write_text('data = "~/math.jsonl.gz"\n')  # ~ is the home there too
    assert extras("--config", str(tmp_path / "eval.toml"), env={"HOME": str(tmp_path)}) == ["math"]
    pq = pytest.importorskip("pyarrow.parquet")
    import pyarrow as pa
    verl = tmp_path / "test.parquet"
    pq.write_table(pa.table({"data_source": ["openai/gsm8k"], "prompt": [[{"role": "user", "content": "1+1?"}]],
                             "reward_model": [{"ground_truth": "2", "style": "rule"}]}), verl)
    assert extras("--data", str(verl)) == ["math", "parquet"]
    own = tmp_path / "own.parquet"
    pq.write_table(pa.table({"id": ["a"], "instruction": ["x"], "check": ["true"]}), own)
    assert extras("--data", str(own)) == ["parquet"]
