"""The README's docker commands, run as printed (only --output-dir added), with the installed
``parallel-rollout`` on PATH: the image build (a no-op once the session's image exists), a run
of the shell benchmark through ``./dev`` on a pool of 2 containers, and the sweep of what
killed runs left."""

from __future__ import annotations

import json
import re

import pytest

from conftest import SHELL_TASKS, assert_exactly_once
from readme_support import INSTALLED, ROOT, bash, readme_lines, readme_section, run_every_shipped_desktop_task

SECTION = "Docker and QEMU providers"


def test_the_image_build_command_keeps_the_built_image(docker_harness):
    [line] = [l for l in readme_lines(SECTION, "", "parallel-rollout image build") if "--desktop" not in l]
    command = line.split("#", 1)[0]
    assert command.split() == ["parallel-rollout", "image", "build", "--provider", "docker"]
    proc = bash(command, ROOT, env=INSTALLED)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "nothing to build (--force rebuilds it)" in proc.stderr
    assert re.fullmatch(r"parallel-rollout-guest:\w+", proc.stdout.strip()), proc.stdout


def test_the_docker_run_command_runs_the_shell_benchmark(docker_harness, tmp_path):
    [line] = readme_lines(SECTION, "", "./dev run --mode shell")
    assert "--provider-name docker" in line
    proc = bash(f"{line} --output-dir {tmp_path}", ROOT)
    assert proc.returncode == 0, proc.stderr[-3000:]
    [run_dir] = tmp_path.iterdir()
    ids = [json.loads(t)["id"] for t in SHELL_TASKS.read_text().splitlines() if t.strip()]
    finals = assert_exactly_once(run_dir, {f"{i}#0" for i in ids})
    assert {r["status"] for r in finals.values()} == {"success"}
    summary = json.loads((run_dir / "summary.json").read_text())
    assert (summary["vm"]["provider"], summary["vm"]["size"]) == ("docker", 2)
    assert summary["vm"]["resets"] >= len(ids)
    assert not docker_harness.leftovers(summary["run_id"])


def test_the_docker_sweep_command(docker_harness):
    command = "parallel-rollout vms sweep --provider-name docker"
    assert f"(`{command}`" in readme_section(SECTION)
    proc = bash(command, ROOT, env=INSTALLED)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert re.fullmatch(r"removed \d+ docker VM\(s\)(: .*)?", proc.stdout.strip()), proc.stdout


@pytest.mark.slow  # the desktop image (~5.5 min to build when it is not cached), then a desktop per container
def test_the_docker_desktop_commands_pass_every_shipped_desktop_task(docker_harness, tmp_path):
    [build] = [l for l in readme_lines(SECTION, "", "parallel-rollout image build") if "--desktop" in l]
    build = build.split("#", 1)[0]
    assert build.split() == ["parallel-rollout", "image", "build", "--provider", "docker", "--desktop"]
    proc = bash(build, ROOT, env=INSTALLED, timeout=1800)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert re.fullmatch(r"parallel-rollout-desktop:\w+", proc.stdout.strip()), proc.stdout

    [line] = readme_lines(SECTION, "", "./dev run --mode osworld")
    assert "--provider-name docker" in line
    run_every_shipped_desktop_task(line, tmp_path)
    assert not docker_harness.leftovers("readme")
