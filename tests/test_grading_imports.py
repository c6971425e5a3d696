"""What a grading command's python imports from the folders the graded code writes
(guest/grading_bin/graded_imports.py): the hostile table's rows run the attacks in a sandbox
(a package, an extension module, unchecked bytecode in place of a check's own module), these
the edges on the host's own python, in a home under /tmp: what the answer left there is dated
before the grading command began, what the check wrote after."""

from __future__ import annotations

import os
import py_compile
import shutil
from stat import S_IWOTH
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from parallel_rollout.guest import agent_grading
from parallel_rollout.guest.agent_grading import grading_env
from parallel_rollout.pool.providers import qemu_image

IMPORT_X = "import sys; sys.path.append(sys.argv[1]); import x; print(x.X)"


def _grading_python(home, code: str, env: dict) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code, str(home)], cwd=home, env={**env, "HOME": str(home)},
                          capture_output=True, text=True, timeout=60)


def test_the_checks_module_is_imported_before_the_answers_package_beside_it(tmp_path):
    (tmp_path / "x").mkdir()
    (tmp_path / "x" / "__init__.py").write_text("X = 'the answer'\n")
    env = grading_env(str(tmp_path))
    # the answer's own package, alone, is imported as ever
    done = _grading_python(tmp_path, IMPORT_X, env)
    assert done.stdout == "the answer\n", (done.stdout, done.stderr)
    (tmp_path / "x.py").write_text("X = 'the check'\n")  # written since the grading command began
    done = _grading_python(tmp_path, IMPORT_X, env)
    assert done.stdout == "the check\n", (done.stdout, done.stderr)
    # a module both made before the grading command: Python's own order, the package first
    done = _grading_python(tmp_path, IMPORT_X, grading_env(str(tmp_path)))
    assert done.stdout == "the answer\n", (done.stdout, done.stderr)


def test_bytecode_older_than_its_source_is_not_read(tmp_path):
    source = tmp_path / "x.py"
    source.write_text("X = 'the check'\n")
    stat = source.stat()
    # the answer's cache of other code, dated and sized to pass for the check's source's
    (tmp_path / "forged.py").write_text("X = 'forged'\n".ljust(len("X = 'the check'\n") - 1) + "\n")
    os.utime(tmp_path / "forged.py", ns=(stat.st_atime_ns, stat.st_mtime_ns))
    cache = py_compile.compile(str(tmp_path / "forged.py"), cfile=str(tmp_path / "__pycache__" / "x.pyc"))
    os.rename(cache, tmp_path / "__pycache__" / f"x.{sys.implementation.cache_tag}.pyc")
    env = grading_env(str(tmp_path))
    # a cache written after its source is read, as ever
    done = _grading_python(tmp_path, IMPORT_X, env)
    assert done.stdout == "forged\n", (done.stdout, done.stderr)
    # the check writes its source again, as it was, dated as it was: the cache is older now
    source.write_text("X = 'the check'\n")
    os.utime(source, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    done = _grading_python(tmp_path, IMPORT_X, env)
    assert done.stdout == "the check\n", (done.stdout, done.stderr)


def test_pytests_cache_of_a_rewritten_test_older_than_it_is_not_read(tmp_path):
    # the system's pytest, as in a sandbox: before pytest 8 it took its cache by its test's mtime and size
    python = "/usr/bin/python3"
    if subprocess.run([python, "-c", "import pytest"], capture_output=True).returncode != 0:
        pytest.skip("needs the system's pytest")
    test = tmp_path / "test_x.py"
    test.write_text("def test_a():\n    assert 1\n")
    stat = test.stat()
    plain = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}
    cached = subprocess.run([python, "-m", "pytest", "-q", "-p", "no:cacheprovider", "test_x.py"], cwd=tmp_path,
                            env=plain, capture_output=True, text=True, timeout=120)
    assert cached.returncode == 0 and list((tmp_path / "__pycache__").glob("test_x.*pytest*.pyc")), cached.stdout
    # the check's failing test, of that size, dated as the answer's cache says
    test.write_text("def test_a():\n    assert 0\n")
    os.utime(test, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    done = subprocess.run([python, "-m", "pytest", "-q", "-p", "no:cacheprovider", "test_x.py"], cwd=tmp_path,
                          env={**grading_env(str(tmp_path)), "HOME": str(tmp_path)}, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 1 and "1 failed" in done.stdout, (done.stdout, done.stderr)


def test_a_folder_every_user_may_write_beyond_tmp_is_the_graded_codes(tmp_path):
    # /run/lock (/var/lock) is writable by every user in a Debian image (the docker guest's): the
    # answer's package there shadowed a check's module of that name as in the home
    if not (os.path.isdir("/run/lock") and os.access("/run/lock", os.W_OK)):
        pytest.skip("needs a writable /run/lock")
    folder = Path(tempfile.mkdtemp(dir="/run/lock", prefix="graded-"))
    try:
        (folder / "test_check").mkdir()
        (folder / "test_check" / "__init__.py").write_text("import os\nos._exit(0)\n")
        env = {**grading_env(str(tmp_path)), "HOME": str(tmp_path)}
        (folder / "test_check.py").write_text("import unittest\nclass T(unittest.TestCase):\n"
                                              "    def test_a(self):\n        self.fail()\n")
        done = subprocess.run(["sh", "-c", "python3 -m unittest discover -p test_check.py"], cwd=folder, env=env,
                              capture_output=True, text=True, timeout=60)
        assert done.returncode == 1 and "FAILED" in done.stderr, (done.returncode, done.stderr)
    finally:
        shutil.rmtree(folder)


def test_the_folders_listed_are_those_the_guest_image_leaves_writable(tmp_path):
    # the cached qemu image's tree, the debootstrap tree the docker image is made of too
    base = qemu_image.image_dir() / "base.qcow2"
    if not base.is_file() or not shutil.which("qemu-img") or not shutil.which("debugfs") or os.geteuid() != 0:
        pytest.skip("needs a built qemu image, qemu-img and debugfs, as root")
    subprocess.run(["qemu-img", "convert", "-O", "raw", str(base), str(tmp_path / "disk")], check=True, timeout=300)
    (tmp_path / "tree").mkdir()
    subprocess.run(["debugfs", "-R", f"rdump / {tmp_path / 'tree'}", str(tmp_path / "disk")], check=True,
                   capture_output=True, timeout=300)
    writable = {"/" + str(folder.relative_to(tmp_path / "tree")) for folder in (tmp_path / "tree").rglob("*")
                if folder.is_dir() and not folder.is_symlink() and folder.stat().st_mode & S_IWOTH}
    assert "/tmp" in writable  # the tree was read as it is
    assert writable <= set(agent_grading.WRITABLE_FOLDERS), writable - set(agent_grading.WRITABLE_FOLDERS)


@pytest.mark.parametrize("python", ["PATH=/usr/bin:/bin python3", "/usr/bin/python3"])
def test_unittest_run_without_the_wrappers_puts_the_home_last(tmp_path, python):
    # a check's own PATH, or python3 by its path: no ./python3 wrapper, but the wrappers'
    # sitecustomize.py, which changes unittest's discover as ./module_folder_last.py does
    if not os.path.exists("/usr/bin/python3"):
        pytest.skip("needs /usr/bin/python3")
    (tmp_path / "fractions.py").write_text("import os\nos._exit(0)\n")  # the answer's
    (tmp_path / "sol.py").write_text("def f():\n    return 2\n")
    env = {**grading_env(str(tmp_path)), "HOME": str(tmp_path)}
    (tmp_path / "test_check.py").write_text("import fractions, unittest\nfrom sol import f\nclass T(unittest.TestCase):\n"
                                            "    def test_a(self):\n        self.assertEqual(f(), 3)\n")
    done = subprocess.run(["sh", "-c", f"{python} -m unittest discover -p test_check.py"], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=60)
    # the answer's own module the tests import is still found, after the system's
    assert done.returncode == 1 and "AssertionError: 2 != 3" in done.stderr, (done.returncode, done.stderr)
