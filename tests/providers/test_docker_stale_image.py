"""A docker guest image built by another version (its guest agent or recipe changed since: a
new tag) is named in the error that says to build the current one: it said only that the
current one "is not built", while ``docker image ls`` showed parallel-rollout-guest images."""

from __future__ import annotations

from click.testing import CliRunner

from conftest import shell_task, write_tasks
from parallel_rollout.cli import main
from parallel_rollout.pool.providers import docker


def test_a_guest_image_of_another_recipe_is_named_as_stale(docker_harness, tmp_path, monkeypatch):
    built = docker.image_tag()  # the prepared harness built it
    monkeypatch.setattr(docker, "IMAGE_RECIPE_VERSION", docker.IMAGE_RECIPE_VERSION + 1000)
    assert docker.image_tag() != built
    data = write_tasks(tmp_path / "tasks.jsonl", [shell_task("t0")])
    result = CliRunner().invoke(main, [
        "run", "--mode", "shell", "--data", str(data), "--provider-name", "docker",
        "--output-dir", str(tmp_path / "out"), "--run-id", docker_harness.new_run_id(), "--no-progress"])
    assert result.exit_code == 2, result.output
    assert f"the docker guest image {docker.image_tag()} is not built" in result.output, result.output
    assert f"{built}, built from another guest agent or recipe" in result.output, result.output
    assert "image build --provider docker" in result.output, result.output
