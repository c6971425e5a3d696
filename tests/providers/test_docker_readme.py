"""The README's docker commands, run as printed (only --output-dir added), with the installed
``parallel-rollout`` on PATH: the image build (a no-op once the session's image exists), a run
of the shell benchmark through ``./dev`` on a pool of 2 containers, the sweep of what
killed runs left, and OSWorld's gsettings tasks on the desktop image; and what `image build --help`
says of the desktop image against what the section says."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys

import pytest

from conftest import OSWORLD_EXAMPLES, SHELL_TASKS, assert_exactly_once
from parallel_rollout.envs.osworld.references import references
from readme_support import INSTALLED, ROOT, bash, readme_lines, readme_section, run_every_shipped_desktop_task

SECTION = "Docker and QEMU providers"
EXAMPLES = OSWORLD_EXAMPLES


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


def build_the_desktop_image() -> None:
    """The README's desktop build command for docker, run as printed (a no-op once built)."""
    [build] = [l for l in readme_lines(SECTION, "", "parallel-rollout image build") if "--desktop" in l]
    build = build.split("#", 1)[0]
    assert build.split() == ["parallel-rollout", "image", "build", "--provider", "docker", "--desktop"]
    proc = bash(build, ROOT, env=INSTALLED, timeout=1800)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert re.fullmatch(r"parallel-rollout-desktop:\w+", proc.stdout.strip()), proc.stdout


@pytest.mark.slow  # the desktop image (~5.5 min to build when it is not cached), then a desktop per container
def test_the_docker_desktop_commands_pass_every_shipped_desktop_task(docker_harness, tmp_path):
    build_the_desktop_image()
    [line] = readme_lines(SECTION, "", "./dev run --mode osworld")
    assert "--provider-name docker" in line
    run_every_shipped_desktop_task(line, tmp_path)
    assert not docker_harness.leftovers("readme")


@pytest.mark.slow  # the desktop image, then four tasks on one container
@pytest.mark.skipif(EXAMPLES is None, reason="needs OSWorld's evaluation_examples (shared/osworld)")
def test_osworld_gsettings_tasks_pass_with_the_oracle_on_the_docker_desktop(docker_harness, tmp_path):
    """OSWorld's os tasks that set and read GNOME settings (gsettings, dconf) pass on docker as
    on the process provider, whose sandboxes see the host's gsettings: the image lacked
    gsettings, and every turn's observation was "/bin/sh: 1: gsettings: not found". Two of
    them expect a value other than the schema's default (idle-delay 0, show-banners false): a
    backend that keeps settings in the setting process's memory would fail them."""
    build_the_desktop_image()
    ids = [e["id"] for e in references().values() if e["why"] == "gsettings"]
    assert len(ids) == 4
    data = tmp_path / "evaluation_examples"
    (data / "examples" / "os").mkdir(parents=True)
    for task_id in ids:
        shutil.copy(EXAMPLES / "examples" / "os" / f"{task_id}.json", data / "examples" / "os")
    (data / "gsettings.json").write_text(json.dumps({"os": ids}))
    proc = bash(f"./dev run --mode osworld --data {data} --osworld-index gsettings.json "
                "--agent oracle --provider-name docker --num-rollouts 1 --num-vms 1 --use-vm-pool "
                f"--output-dir {tmp_path / 'runs'} --run-id gsettings", ROOT, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    finals = assert_exactly_once(tmp_path / "runs" / "gsettings", {f"{i}#0" for i in ids})
    failed = {k: (r["status"], r.get("eval"), r.get("failure")) for k, r in finals.items()
              if r["status"] != "success"}
    assert not failed
    assert not docker_harness.leftovers("gsettings")


def test_image_build_help_gives_the_desktop_images_size_the_readme_gives():
    """`image build --help` said the desktop image was 1.9 GB; the section (and docker image
    ls) say 2.03 GB."""
    size = re.search(r"\(([0-9.]+ GB) as a docker image", " ".join(readme_section(SECTION).split())).group(1)
    shown = subprocess.run([sys.executable, "-m", "parallel_rollout.cli", "image", "build", "--help"],
                           capture_output=True, text=True, env=INSTALLED, timeout=60, stdin=subprocess.DEVNULL)
    assert shown.returncode == 0, shown.stderr
    assert f"({size} as a docker image" in " ".join(shown.stdout.split()), shown.stdout
