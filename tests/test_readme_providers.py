"""The README's "Docker and QEMU providers" section run as printed: its docker commands, and
what `image build --help` says of the desktop image against what the section says."""

from __future__ import annotations

import json
import re
import subprocess
import sys

import pytest

from readme_support import INSTALLED, ROOT, bash, readme_lines, readme_section
from test_preflight import docker_answers

SECTION = "Docker and QEMU providers"


@pytest.mark.skipif(not docker_answers(), reason="needs a Docker daemon")
def test_the_docker_commands_run_as_printed(tmp_path):
    """The image build (cached: nothing to build) and the shell run on docker, as printed, in
    a folder of the user's with the shipped benchmarks. A guard: this held already."""
    build = readme_lines(SECTION, "", "parallel-rollout image build --provider docker")[0]
    run = readme_lines(SECTION, "", "./dev run --mode shell")[0]
    (tmp_path / "benchmarks").symlink_to(ROOT / "benchmarks")
    built = bash(build.split("#")[0], tmp_path, env=INSTALLED, timeout=1800)
    assert built.returncode == 0 and built.stdout.startswith("parallel-rollout-guest:"), built.stderr
    ran = bash(run.replace("./dev", str(ROOT / "dev"), 1), tmp_path, env=INSTALLED, timeout=900)
    assert ran.returncode == 0, ran.stderr[-2000:]
    run_id = re.search(r"^results: results/(\S+)/$", ran.stdout, re.M).group(1)
    summary = json.loads((tmp_path / "results" / run_id / "summary.json").read_text())
    assert summary["finished"] == summary["total_samples"] > 0 and summary["success_rate"] == 1.0, summary


def test_image_build_help_gives_the_desktop_images_size_the_readme_gives():
    """`image build --help` said the desktop image was 1.9 GB; the section (and docker image
    ls) say 2.03 GB."""
    size = re.search(r"\(([0-9.]+ GB) as a docker image", " ".join(readme_section(SECTION).split())).group(1)
    shown = subprocess.run([sys.executable, "-m", "parallel_rollout.cli", "image", "build", "--help"],
                           capture_output=True, text=True, env=INSTALLED, timeout=60, stdin=subprocess.DEVNULL)
    assert shown.returncode == 0, shown.stderr
    assert f"({size} as a docker image" in " ".join(shown.stdout.split()), shown.stdout
