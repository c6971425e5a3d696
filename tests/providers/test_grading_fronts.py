"""The grading wrappers' fronts in the docker and qemu guests' images
(pool/providers/grading_fronts.py), as in a process VM: a check that runs env, python3 or git by
its path reached the system's program past the wrappers there, and the answer's
~/test_check/ package, ~/fractions.py or usercustomize.py passed its failing tests (score 1).

The images are built as a user builds them (cached, rebuilt when their key changes); the qemu
image's tree is read from its disk (debugfs), the docker image's by a container of it.
"""

from __future__ import annotations

import shutil
import subprocess
import tarfile

import pytest

from hostile_tasks import SHELL_ROWS, check_finished, check_row, run_table
from parallel_rollout.pool.providers import docker, grading_fronts, images, python_front, qemu_image
from qemu_support import image  # noqa: F401 (the qemu guest image, built when missing)

#: the by-path rows the guest images (minbase and python3) can run: env and python3 by their paths
BY_PATH = ("rig_check_unittest_env_by_path", "rig_check_unittest_isolated_by_path", "rig_check_unittest_e_by_path",
           "rig_check_python_e_usercustomize_by_path", "rig_check_python_e_home_module_by_path",
           "rig_check_doctest_isolated_by_path",
           # env by its path from a check whose environment is cleared (exec -c): known by its session
           "rig_check_unittest_env_cleared_by_path",
           # python run with an environment of its own: started again by its encodings' front, before
           # `site` reads the answer's .pth (pool/providers/python_front.py)
           "rig_check_python_env_empty_pth", "rig_check_python_sys_executable_env_empty_pth",
           "rig_check_python_home_given_pth", "rig_check_python_exec_c_pth", "rig_check_python_versioned_exec_c_pth",
           # and one that reads its bytecode elsewhere: the front is in encodings' source too
           "rig_check_python_pycache_prefix_pth", "rig_check_python_x_pycache_prefix_pth",
           # the answer's pycs in a cache folder it guessed: encodings is read from the stdlib's zip,
           # and a grading python reads no bytecode there written before it began
           "rig_check_python_pycache_prefix_encodings_pyc", "rig_check_python_pycache_prefix_sitecustomize_pyc",
           "rig_check_python_x_pycache_prefix_stdlib_pyc")
SITECUSTOMIZE = "/etc/python3.11/sitecustomize.py"
ENCODINGS = "/usr/lib/python3.11/encodings/__init__.py"


def _rootfs_file(path: str) -> bytes:
    """``path`` of the guest's Debian tree as debootstrap made it (before the fronts)."""
    with tarfile.open(images.rootfs_tarball(**images.guest_recipe(), log=lambda line: None)) as archive:
        handle = archive.extractfile("." + path)
        assert handle is not None, path
        return handle.read()


def _expected() -> dict[str, bytes]:
    """Each fronted path of the guest image and what it must hold: the front, and the system's
    own at /opt/system-originals; python's encodings with its front's head before its first
    import and the front at its end."""
    env = "/usr/bin/env"
    return {env: (grading_fronts.GRADING_BIN / "system_front").read_bytes(),
            "/opt/system-originals/env": _rootfs_file(env),
            SITECUSTOMIZE: (grading_fronts.GRADING_BIN / "system_sitecustomize.py").read_bytes(),
            "/opt/system-originals/sitecustomize.py": _rootfs_file(SITECUSTOMIZE),
            ENCODINGS: python_front.fronted_source(_rootfs_file(ENCODINGS))}


@pytest.mark.slow
def test_the_qemu_images_tree_has_the_fronts_and_the_originals(image, tmp_path):
    if shutil.which("debugfs", path="/usr/sbin:/sbin:/usr/bin") is None:
        pytest.skip("debugfs (e2fsprogs) is not installed")
    raw = tmp_path / "disk.raw"
    subprocess.run([qemu_image.QEMU_IMG, "convert", "-q", "-f", "qcow2", "-O", "raw", str(image / "base.qcow2"),
                    str(raw)], check=True, timeout=300)
    debugfs = shutil.which("debugfs", path="/usr/sbin:/sbin:/usr/bin")
    for path, content in _expected().items():
        out = tmp_path / "out"
        subprocess.run([debugfs, "-R", f"dump -p {path} {out}", str(raw)], check=True, capture_output=True, timeout=60)
        assert out.read_bytes() == content, path
        assert out.stat().st_mode & 0o777 == (0o644 if path.endswith(".py") else 0o755), (path, oct(out.stat().st_mode))
        out.unlink()


@pytest.mark.slow
def test_the_docker_images_tree_has_the_fronts_and_the_originals(docker_harness):
    tag = docker.image_tag()
    for path, content in _expected().items():
        done = subprocess.run(["docker", "run", "--rm", "--network", "none", "--entrypoint", "python3", tag, "-c", f"import sys; sys.stdout.buffer.write(open({path!r}, 'rb').read())"],
                              capture_output=True, timeout=120)
        assert done.returncode == 0 and done.stdout == content, (path, done.stderr[-500:])


def test_an_images_key_changes_with_the_fronted_programs(monkeypatch):
    """A cached image laid out with other fronts is rebuilt, never silently stale."""
    keys = {qemu_image.image_inputs(), docker.image_tag()}
    monkeypatch.setattr(grading_fronts, "NOT_FRONTED", (*grading_fronts.NOT_FRONTED, "jq"))
    assert "jq" not in grading_fronts.fronted_programs()
    assert not {qemu_image.image_inputs(), docker.image_tag()} & keys


@pytest.mark.parametrize("sh_is", ["dash", "bash"])
def test_an_images_bash_has_a_front_but_not_the_shell_the_fronts_run_in(tmp_path, sh_is):
    """bash by its path leads a grading command to grading_bin/bash (a check's `/bin/bash -lc`
    reads no startup file of the home); the image's /bin/sh, the fronts' own ``#!/bin/sh``, has
    none: its front would run itself. An image whose /bin/sh is bash keeps its bash as it is."""
    (tmp_path / "usr/bin").mkdir(parents=True)
    (tmp_path / "bin").symlink_to("usr/bin")
    for name in ("bash", "dash", "env"):
        (tmp_path / "usr/bin" / name).write_bytes(b"\x7fELF")
        (tmp_path / "usr/bin" / name).chmod(0o755)
    (tmp_path / "usr/bin/sh").symlink_to(sh_is)
    laid = grading_fronts.install_in_tree(tmp_path)
    assert laid.fronts["/usr/bin/env"] == "system_front"
    assert "/usr/bin/dash" not in laid.fronts and (tmp_path / "usr/bin/dash").read_bytes() == b"\x7fELF"
    if sh_is == "dash":
        assert laid.fronts["/usr/bin/bash"] == "system_front"
        assert (tmp_path / "opt/system-originals/bash").read_bytes() == b"\x7fELF"
    else:
        assert "/usr/bin/bash" not in laid.fronts and (tmp_path / "usr/bin/bash").read_bytes() == b"\x7fELF"


def _table(tmp_path_factory, provider_name: str, **flags) -> dict:
    left_out = {row: "not a by-path row" for row in SHELL_ROWS if row not in BY_PATH}
    return run_table(tmp_path_factory.mktemp(provider_name), left_out, provider_name=provider_name, **flags)


@pytest.fixture(scope="module")
def qemu_table(image, tmp_path_factory):
    return _table(tmp_path_factory, "qemu", vms=2, vm_memory_mb=384, boot_timeout_s=120.0)


@pytest.fixture(scope="module")
def docker_table(docker_harness, tmp_path_factory):
    return _table(tmp_path_factory, "docker")


@pytest.mark.slow
@pytest.mark.parametrize("name", BY_PATH)
def test_a_by_path_row_scores_0_on_qemu(qemu_table, name):
    check_row(qemu_table, name)


@pytest.mark.slow
@pytest.mark.parametrize("name", BY_PATH)
def test_a_by_path_row_scores_0_on_docker(docker_table, name):
    check_row(docker_table, name)


@pytest.mark.slow
def test_the_by_path_runs_finished(qemu_table, docker_table):
    check_finished(qemu_table)
    check_finished(docker_table)
