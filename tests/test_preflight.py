"""``--dry-run`` is a preflight: each missing prerequisite is named and the exit is 2.

Every test runs the CLI in a subprocess as a user would, with the environment (PATH, the
OPENAI_* variables) the case needs: no key for OpenAI's API, an endpoint on a closed
loopback port with ``--check-endpoint``, a PATH without bwrap / docker / QEMU, a disk with
too little room, a broken task file. The census is printed in every case; nothing starts and
no run folder is made.
"""

from __future__ import annotations

import os
import re
import shutil
import socket
import subprocess
import sys

import pytest
from click.testing import CliRunner

from conftest import shell_task, small_tmpfs, write_tasks
from llm_server import llm_server  # noqa: F401 - fixture
from parallel_rollout.cli import main
from parallel_rollout.exit_codes import EXIT_USAGE


def dry_run(tmp_path, *args, env=None, path=None):
    """``parallel-rollout run --dry-run …`` over three shell tasks, OPENAI_* unset."""
    base = {k: v for k, v in os.environ.items() if not k.startswith("OPENAI_")}
    if path is not None:
        base["PATH"] = path
    data = write_tasks(tmp_path / "tasks.jsonl", [shell_task(f"t{i}") for i in range(3)])
    argv = [sys.executable, "-m", "parallel_rollout.cli", "run", "--mode", "shell", "--data", str(data),
            "--output-dir", str(tmp_path / "out"), "--dry-run", *args]
    done = subprocess.run(argv, capture_output=True, text=True, env={**base, **(env or {})}, timeout=120)
    assert done.stdout.strip().splitlines()[-1:] == ["runnable 3 of 3 tasks"] or "tasks:" in done.stderr
    assert not (tmp_path / "out").exists()  # a preflight makes no run folder
    return done


def closed_port() -> int:
    """A loopback port nothing listens on (bound, then closed)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def empty_path(tmp_path) -> str:
    """A PATH with no programs at all: no bwrap, docker or QEMU."""
    folder = tmp_path / "empty-bin"
    folder.mkdir(exist_ok=True)
    return str(folder)


@pytest.mark.skipif(shutil.which("bwrap") is None, reason="needs bubblewrap")
def test_everything_present_passes(tmp_path):
    done = dry_run(tmp_path)
    assert done.returncode == 0, done.stderr
    assert "preflight passed" in done.stderr and "process provider" in done.stderr and "MB free" in done.stderr
    assert "a new run folder" in done.stderr
    limited = dry_run(tmp_path, "--limit", "2")
    assert limited.returncode == 0, limited.stderr
    assert limited.stdout.strip().splitlines()[-2] == "--limit 2: the run takes the first 2 runnable tasks"


def test_no_key_for_openai_itself(tmp_path):
    done = dry_run(tmp_path, "--agent", "openai")
    assert done.returncode == EXIT_USAGE
    assert "agent: --agent openai needs OPENAI_API_KEY" in done.stderr


def test_an_unreachable_endpoint_with_check_endpoint(tmp_path):
    url = f"http://127.0.0.1:{closed_port()}/v1"
    done = dry_run(tmp_path, "--agent", "openai", "--base-url", url, "--check-endpoint")
    assert done.returncode == EXIT_USAGE
    assert f"endpoint: the model endpoint {url} is not reachable" in done.stderr
    # without --check-endpoint the endpoint is not asked, and a local URL needs no key
    if shutil.which("bwrap"):
        assert dry_run(tmp_path, "--agent", "openai", "--base-url", url).returncode == 0


@pytest.mark.skipif(shutil.which("bwrap") is None, reason="needs bubblewrap")
def test_a_reachable_endpoint_is_asked_once(tmp_path, llm_server):
    server = llm_server()
    server.models = ["test-model"]
    done = dry_run(tmp_path, "--agent", "openai", "--check-endpoint", "--model", "test-model",
                   env={"OPENAI_BASE_URL": server.url})
    assert done.returncode == 0, done.stderr
    assert server.model_listings == 1 and f"{server.url} answers with 1 model(s)" in done.stderr


@pytest.mark.parametrize("provider, says", [
    ("process", "bubblewrap (bwrap) is not installed"),
    ("docker", "the docker CLI is not installed"),
    ("qemu", "qemu-system-x86_64 is not installed; install it with: apt-get install qemu-system-x86"),
])
def test_a_missing_provider_program_is_named(tmp_path, provider, says):
    done = dry_run(tmp_path, "--provider-name", provider, path=empty_path(tmp_path))
    assert done.returncode == EXIT_USAGE
    assert f"provider: {says}" in done.stderr, done.stderr


@pytest.mark.skipif(shutil.which("docker") is None, reason="needs the docker CLI")
def test_no_docker_daemon_is_named(tmp_path):
    socket_path = tmp_path / "no-daemon.sock"
    done = dry_run(tmp_path, "--provider-name", "docker", env={"DOCKER_HOST": f"unix://{socket_path}"})
    assert done.returncode == EXIT_USAGE
    assert "provider: no Docker daemon answers at" in done.stderr, done.stderr


@pytest.mark.parametrize("command", [("vms", "sweep", "--provider-name", "docker"),
                                     ("image", "build", "--provider", "docker")], ids=["sweep", "image-build"])
@pytest.mark.parametrize("case", ["no daemon", "no CLI"])
def test_a_docker_sweep_without_docker_says_why(tmp_path, case, command):
    """`vms sweep --provider-name docker` (a cron job's clean-up) or `image build --provider
    docker` with no daemon answering or no docker CLI says so as a run does, exit 2: the sweep
    ended in a Python traceback, exit 1; the build said 'Error: image build failed: …', exit 1."""
    if case == "no daemon" and shutil.which("docker") is None:
        pytest.skip("needs the docker CLI")
    env = {**os.environ, "DOCKER_HOST": f"unix://{tmp_path / 'no-daemon.sock'}"}
    if case == "no CLI":
        env["PATH"] = empty_path(tmp_path)
    done = subprocess.run([sys.executable, "-m", "parallel_rollout.cli", *command],
                          capture_output=True, text=True, env=env, timeout=60)
    says = "no Docker daemon answers at" if case == "no daemon" else "the docker CLI is not installed"
    assert (done.returncode, done.stdout) == (EXIT_USAGE, ""), done.stderr
    assert done.stderr.startswith(f"Error: {says}") and "Traceback" not in done.stderr, done.stderr


def docker_answers() -> bool:
    """Whether a Docker daemon answers here (the image check needs one)."""
    if shutil.which("docker") is None:
        return False
    probe = subprocess.run(["docker", "version", "--format", "{{.Server.Version}}"], capture_output=True,
                           text=True, timeout=20)
    return probe.returncode == 0 and bool(probe.stdout.strip())


@pytest.mark.skipif(not docker_answers(), reason="needs a Docker daemon")
@pytest.mark.parametrize("snapshot", ["image", "container"])
def test_a_docker_snapshot_that_is_no_image_is_named_with_its_flag(tmp_path, snapshot):
    """A --snapshot-name that names no docker image (or a container, not yet committed) is
    refused naming the flag: it said 'docker snapshot image … does not exist', no flag."""
    name = f"parallel-rollout-no-such-image-{os.getpid()}"
    if snapshot == "container":  # created from the guest image, never started
        made = subprocess.run(["docker", "create", "--name", name, "--network", "none",
                               "parallel-rollout-guest:latest", "true"], capture_output=True, timeout=60)
        if made.returncode != 0:
            pytest.skip("needs the docker guest image (parallel-rollout image build --provider docker)")
    try:
        done = dry_run(tmp_path, "--provider-name", "docker", "--snapshot-name", name)
    finally:
        subprocess.run(["docker", "rm", "-f", name], capture_output=True, timeout=60)
    assert done.returncode == EXIT_USAGE
    said = {"image": f"--snapshot-name '{name}': no such docker image (docker image ls lists the images",
            "container": f"--snapshot-name '{name}' is a docker container, not an image; commit it first"}
    assert said[snapshot] in done.stderr, done.stderr


@pytest.mark.parametrize("snapshot", ["missing", "file"])
def test_a_process_snapshot_that_is_no_folder_is_named_with_its_flag(tmp_path, snapshot):
    """A --snapshot-name of the process provider that is no folder is refused naming the flag,
    as docker's is: it said "process provider snapshot 'x' is not a folder", no flag, and
    the same for a file as for a name that does not exist."""
    name = tmp_path / "home-seed"
    if snapshot == "file":
        name.write_text("a file, not the folder a home is copied from")
    done = dry_run(tmp_path, "--snapshot-name", str(name))
    assert done.returncode == EXIT_USAGE
    said = {"missing": f"--snapshot-name '{name}': no such folder ({name}); for the process provider a "
                       "snapshot is a folder whose content becomes the home",
            "file": f"--snapshot-name '{name}' is a file, not a folder ({name}); for the process provider"}
    assert said[snapshot] in " ".join(done.stderr.split()), done.stderr


@pytest.mark.skipif(shutil.which("qemu-system-x86_64") is None or shutil.which("qemu-img") is None,
                    reason="needs QEMU")
def test_a_missing_qemu_image_is_named(tmp_path):
    cache = tmp_path / "empty-cache"  # no image was ever built here
    done = dry_run(tmp_path, "--provider-name", "qemu", env={"PARALLEL_ROLLOUT_CACHE": str(cache)})
    assert done.returncode == EXIT_USAGE
    assert f"no qemu guest image in {cache}" in done.stderr, done.stderr


def test_every_missing_thing_is_named_at_once(tmp_path):
    config = tmp_path / "run.toml"
    config.write_text("min-free-disk-mb = 1000000000\n")  # a petabyte: no disk has that
    done = dry_run(tmp_path, "--agent", "openai", "--check-endpoint", "--config", str(config),
                   env={"OPENAI_BASE_URL": "https://api.openai.com/v1"}, path=empty_path(tmp_path))
    assert done.returncode == EXIT_USAGE
    assert "preflight found 4 problem(s)" in done.stderr, done.stderr
    for says in ("agent: --agent openai needs OPENAI_API_KEY", "endpoint: --agent openai needs OPENAI_API_KEY",
                 "provider: bubblewrap (bwrap) is not installed", "disk: "):
        assert says in done.stderr
    assert "MB free; a run wants at least 1000000000 MB" in done.stderr


def test_a_broken_task_file_is_named_with_the_rest(tmp_path):
    data = tmp_path / "bad.jsonl"
    data.write_text('{"id": "a", "mode": "shell", "instruction": "x", "check": "true"}\n{not json\n')
    done = dry_run(tmp_path, "--data", str(data), path=empty_path(tmp_path))
    assert done.returncode == EXIT_USAGE
    assert f"tasks: {data}:2:" in done.stderr and "provider: bubblewrap" in done.stderr
    assert done.stdout == ""  # no census (the README: no `runnable N of M tasks` line), not an empty line


def test_check_endpoint_needs_dry_run(tmp_path):
    data = write_tasks(tmp_path / "tasks.jsonl", [shell_task("t0")])
    done = subprocess.run([sys.executable, "-m", "parallel_rollout.cli", "run", "--data", str(data),
                           "--check-endpoint", "--output-dir", str(tmp_path / "out")],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == EXIT_USAGE and "add --dry-run" in done.stderr


@pytest.mark.parametrize("provider, says", [
    ("process", "bubblewrap (bwrap) is not installed"),
    ("docker", "the docker CLI is not installed"),
])
def test_a_run_without_its_provider_exits_2_as_nothing_ran(tmp_path, provider, says):
    """Not --dry-run: the run itself finds the missing program before its folder opens, so it
    exits 2 as the preflight would (1 means a run --resume continues, and there is none)."""
    data = write_tasks(tmp_path / "tasks.jsonl", [shell_task("t0")])
    done = subprocess.run([sys.executable, "-m", "parallel_rollout.cli", "run", "--mode", "shell", "--data",
                           str(data), "--provider-name", provider, "--output-dir", str(tmp_path / "out")],
                          capture_output=True, text=True, timeout=120, env={**os.environ, "PATH": empty_path(tmp_path)})
    assert done.returncode == EXIT_USAGE, done.stderr
    assert f"Error: {says}" in done.stderr and "--resume" not in done.stderr
    assert not (tmp_path / "out").exists()


def test_a_broken_task_file_and_a_missing_extra_are_named_together(tmp_path, monkeypatch):
    """One dry run names every missing thing: a task file's bad line and the mode's missing
    extra both (the extra was named only once the file was fixed)."""
    import importlib.util

    from parallel_rollout.config import build_config
    from parallel_rollout.preflight import preflight

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "math_verify" else real(name, *a))
    tasks = tmp_path / "math.jsonl"
    tasks.write_text('{"id": "m1", "problem": "1+1?", "answer": "2"}\n{"id": "m2", "problem": \n')
    found = preflight(build_config({"mode": "math", "data": str(tasks), "output_dir": str(tmp_path / "out")}))
    report = found.problem_report()
    assert f"tasks: {tasks}:2:" in report and "mode: the math mode grades with math-verify" in report, report


def test_a_run_checks_min_free_disk_at_start_as_the_dry_run_does(tmp_path):
    """min-free-disk-mb (config file) stops a real run before its folder opens, with the dry
    run's message and exit code: it was checked by --dry-run only, and the run went on."""
    config = tmp_path / "run.toml"
    config.write_text("min-free-disk-mb = 100000000\n")  # 100 TB: no disk here has that
    data = write_tasks(tmp_path / "tasks.jsonl", [shell_task("t0")])
    done = subprocess.run([sys.executable, "-m", "parallel_rollout.cli", "run", "--mode", "shell", "--data",
                           str(data), "--config", str(config), "--output-dir", str(tmp_path / "out"),
                           "--no-progress"], capture_output=True, text=True, timeout=120)
    assert done.returncode == EXIT_USAGE, done.stderr
    # the key as the user set it, where: min_free_disk_mb is its spelling in Python, not here
    assert f"MB free; a run wants at least 100000000 MB (min-free-disk-mb in {config})" in done.stderr, done.stderr
    assert not (tmp_path / "out").exists()
    dry = dry_run(tmp_path, "--config", str(config))
    assert dry.returncode == EXIT_USAGE
    # the same words (the MB free may move between the two: the disk is shared)
    message = re.search(r"disk: (.*MB \(min-free-disk-mb in .*)", dry.stderr).group(1)
    assert re.sub(r"has \d+ MB", "has N MB", message) in re.sub(r"has \d+ MB", "has N MB", done.stderr)


@pytest.mark.skipif(shutil.which("bwrap") is None, reason="needs bubblewrap")
def test_a_read_only_output_dir_fails_the_dry_run_as_it_fails_the_run(tmp_path):
    """--output-dir on a read-only mount: the run exits 2 ('cannot make the run folder'), and
    --dry-run said 'preflight passed … a new run folder' of it; it now names the folder."""
    with small_tmpfs(tmp_path / "ro", "1m") as ro:
        subprocess.run(["mount", "-o", "remount,ro", str(ro)], check=True)
        config = tmp_path / "run.toml"
        config.write_text("min-free-disk-mb = 0\n")  # the tmpfs is small: the disk is not the point
        out = ro / "out"
        argv = [sys.executable, "-m", "parallel_rollout.cli", "run", "--mode", "shell", "--data",
                str(write_tasks(tmp_path / "tasks.jsonl", [shell_task("t0")])), "--config", str(config),
                "--output-dir", str(out), "--no-progress"]
        run = subprocess.run(argv, capture_output=True, text=True, timeout=120)
        assert run.returncode == EXIT_USAGE and "Read-only file system" in run.stderr, run.stderr
        dry = subprocess.run([*argv, "--dry-run"], capture_output=True, text=True, timeout=120)
        assert dry.returncode == EXIT_USAGE, dry.stderr
        assert (f"--output-dir {out}: cannot write the run folder {out}/" in dry.stderr
                and f"the folder {ro} is not writable (Read-only file system)" in dry.stderr), dry.stderr
        assert "preflight passed" not in dry.stderr
        # with the free space it wants (512 MB), which the small mount has not: said read-only
        # too, not 'has 0 MB free' (the free space was checked first)
        for extra in ([], ["--dry-run"]):
            done = CliRunner().invoke(main, ["run", "--mode", "shell", "--data", str(tmp_path / "tasks.jsonl"),
                                             "--output-dir", str(out), "--no-progress", *extra])
            assert done.exit_code == EXIT_USAGE, done.output
            assert f"the folder {ro} is not writable (Read-only file system)" in done.output, done.output
            assert "MB free" not in done.output, done.output


def test_the_free_disk_a_run_wants_by_default_names_the_config_key_that_lowers_it(tmp_path):
    """Not set anywhere (512 MB) and more than a small disk has: the refusal names the config
    file's key that lowers it (the setting has no flag), not min_free_disk_mb, Python's word."""
    with small_tmpfs(tmp_path / "small", "1m") as small:
        for extra in ([], ["--dry-run"]):
            done = CliRunner().invoke(main, ["run", "--mode", "shell", "--no-progress", "--output-dir",
                                             str(small / "out"), "--data",
                                             str(write_tasks(tmp_path / "tasks.jsonl", [shell_task("t0")])), *extra])
            assert done.exit_code == EXIT_USAGE, done.output
            assert "a run wants at least 512 MB (min-free-disk-mb in a config file)" in done.output, done.output
