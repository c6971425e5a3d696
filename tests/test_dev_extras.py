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


#: what ./dev reads with before it installs anything, linked into the folder that is the PATH of
#: the test below: the desktop's apps and Chromium are then missing, as on a fresh host
_DEV_TOOLS = ("dirname", "sed", "tr", "grep", "awk", "tail", "gzip", "head", "ls", "cat", "paste")


def _apt_installs(tmp_path, *args: str, env: dict | None = None) -> list[str]:
    """The system packages ``./dev ARGS`` asks for on a host that has none of the desktop's
    apps, as it says them to a user who is not root (an ``id`` that says uid 1000): it stops
    there, before any setup, with the exit status of a run whose prerequisite is missing, 2
    (it was 1, a run aborted that --resume continues)."""
    import shutil

    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    for tool in _DEV_TOOLS:
        found = shutil.which(tool)
        if found and not (bin_dir / tool).exists():
            (bin_dir / tool).symlink_to(found)
    (bin_dir / "id").write_text("#!/bin/sh\necho 1000\n")
    (bin_dir / "id").chmod(0o755)
    clean = {k: v for k, v in os.environ.items() if not k.startswith("PARALLEL_ROLLOUT_") and k != "PATH"}
    proc = subprocess.run([shutil.which("bash"), str(ROOT / "dev"), *args], capture_output=True, text=True,
                          env={**clean, **(env or {}), "PATH": str(bin_dir)}, cwd=tmp_path, timeout=60)
    assert proc.returncode == 2 and "missing system packages: " in proc.stderr, proc.stderr
    return proc.stderr.split("missing system packages: ", 1)[1].split(";", 1)[0].split()


def test_a_run_on_vms_of_their_own_installs_no_desktop_apps_on_this_host(tmp_path):
    """The desktop's apps (GIMP, VLC, LibreOffice, Xvfb …) and the web mode's Chromium run in the
    VM: on this host only the process provider's sandboxes use them (they see its /usr). A run on
    remote machines, docker or QEMU VMs installed them all here (as a user not root, it stopped
    with "missing system packages" until they were); OSWorld's OCR metric, which runs here, stays."""
    desktop = {"gimp", "vlc", "thunderbird", "xvfb", "openbox", "libreoffice-writer", "chromium"}
    remote = _apt_installs(tmp_path, "run", "--mode", "osworld", "--provider-name", "remote",
                           "--vm-address", "127.0.0.1:5000")
    assert "tesseract-ocr" in remote and not desktop & set(remote), remote
    assert not desktop & set(_apt_installs(tmp_path, "run", "--mode=web", "--provider_name=docker")), "docker"
    # run's --provider, as image build spells it, is --provider-name
    for spelling in (["--provider", "docker"], ["--provider=docker"]):
        assert not desktop & set(_apt_installs(tmp_path, "run", "--mode", "web", *spelling)), spelling
    (tmp_path / "run.toml").write_text('mode = "web"\nprovider-name = "remote"\n')
    assert not desktop & set(_apt_installs(tmp_path, "run", "--config", "run.toml", "--mode", "web")), "config"
    # the process provider's sandboxes run them from this host: installed, as before
    assert desktop <= set(_apt_installs(tmp_path, "run", "--mode", "osworld"))



@pytest.mark.parametrize("how", ["config", "folder", "task file", "variable", "qemu"])
def test_a_run_installs_the_system_packages_of_the_mode_and_provider_it_implies(tmp_path, how):
    """The system packages follow what the run reads, as the extras do: a mode or provider
    named by the --config file or a PARALLEL_ROLLOUT_* variable, or a mode its --data implies
    (an OSWorld folder, a task file whose tasks name it), installed no desktop, no Chromium and
    no QEMU: the run then stopped at its preflight for a program ./dev is there to install."""
    (tmp_path / "eval.toml").write_text('mode = "shell"\nprovider-name = "qemu"\n' if how == "qemu"
                                        else 'mode = "osworld"\n')
    (tmp_path / "OSWorld" / "evaluation_examples" / "examples" / "os").mkdir(parents=True)
    (tmp_path / "tasks.jsonl").write_text('{"id": "a", "mode": "web", "env": "click-button", "seed": 0}\n')
    args, env, wanted = {
        "config": (("--config", "eval.toml"), {}, {"xvfb", "openbox", "libreoffice-writer", "chromium"}),
        "folder": (("--data", "OSWorld/evaluation_examples"), {}, {"xvfb", "openbox", "chromium"}),
        "task file": (("--data", "tasks.jsonl"), {}, {"chromium"}),
        "variable": ((), {"PARALLEL_ROLLOUT_MODE": "web"}, {"chromium"}),
        "qemu": (("--config", "eval.toml"), {}, {"qemu-system-x86", "qemu-utils"}),
    }[how]
    asked = set(_apt_installs(tmp_path, "run", *args, env=env))
    assert wanted <= asked, asked


def test_the_command_line_wins_over_a_variable_and_the_config_file_as_in_the_run(tmp_path):
    """./dev read the last --data and --provider-name of the flags, the variables and the config
    file, in that order: the config file's won over the command line's, the reverse of the run's
    order, so `--config eval.toml --data math_tasks.jsonl` installed no math-verify for a math
    run, and a config's docker provider kept the desktop's apps from an osworld run on process."""
    shipped = ROOT / "benchmarks"
    (tmp_path / "eval.toml").write_text(f'data = "{shipped / "shell_tasks.jsonl"}"\nprovider-name = "docker"\n')
    config = str(tmp_path / "eval.toml")
    assert extras("--config", config, "--data", str(shipped / "math_tasks.jsonl")) == ["math"]
    assert extras("--data", str(shipped / "shell_tasks.jsonl"),
                  env={"PARALLEL_ROLLOUT_DATA": str(shipped / "math_tasks.jsonl")}) == []
    asked = _apt_installs(tmp_path, "run", "--config", "eval.toml", "--mode", "osworld", "--provider-name", "process")
    assert {"xvfb", "openbox"} <= set(asked), asked
