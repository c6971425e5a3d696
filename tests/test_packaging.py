"""What a wheel of the project holds, as pip builds it from the one PEP 621 pyproject.toml:
the MIT licence text, ``py.typed`` (PEP 561: users' type checkers read the annotations), the
console script, and math-verify only under the ``math`` extra (sympy is ~80 MB)."""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
import sysconfig
import zipfile
from email.parser import Parser
from pathlib import Path

import pytest

from conftest import ROOT
from readme_support import one_download_task_folder


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    """The project's wheel, as pip builds it (offline, from the checkout)."""
    folder = tmp_path_factory.mktemp("wheel")
    build = subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation",
                            "-w", str(folder), str(ROOT)], capture_output=True, text=True, timeout=300)
    assert build.returncode == 0, build.stderr
    (found,) = folder.glob("parallel_rollout-*.whl")
    return found


def test_the_wheel_ships_licence_types_script_and_a_lean_base(wheel):
    assert not (ROOT / "setup.cfg").exists() and not (ROOT / "setup.py").exists()  # one metadata file
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        info = next(n.split("/")[0] for n in names if n.endswith(".dist-info/METADATA"))
        metadata = Parser().parsestr(archive.read(f"{info}/METADATA").decode())
        entry_points = archive.read(f"{info}/entry_points.txt").decode()
        licence = archive.read(f"{info}/licenses/LICENSE").decode()
        # the grading wrappers, programs a grading command runs: executable once installed; the
        # files they read, never commands of a check's PATH
        wrappers = {name: archive.getinfo(f"parallel_rollout/guest/grading_bin/{name}").external_attr >> 16
                    for name in ("curl", "jq", "sqlite3", "file", "wget", "psql", "node", "git",
                                 "git_external_diff", "mvn", "gdb", "tmux", "less", "gpg", "identify", "convert", "magick", "compare",
                                 "composite", "mogrify", "montage", "stream", "import", "identify-im6", "identify-im6.q16", "magick_no_home.sh", "ssh", "scp", "sftp", "ssh_no_home.sh",
                                 "vim", "vi", "view", "ex", "vimdiff", "rvim", "rview", "vim.basic", "vim_no_home.sh", "npm", "npx", "npm_no_home.sh",
                                 "pytest", "py.test", "python3", "pytest_no_above.sh",
                                 "valgrind", "make", "gmake", "javac", "java", "prove", "cmake", "cmake_no_registry.cmake", "aspell", "enchant-2", "jshell", "tput", "infocmp", "clear", "tabs", "tset", "reset", "toe",
                                 "terminfo_no_home.sh", "soffice", "libreoffice", "soffice_no_home.sh", "gimp", "gimp-console",
                                 "gimp_no_home.sh", "wrap.sh", "wgetrc", "node_no_home.js",
                                 "git_no_programs.py", "module_folder_last.py", "sitecustomize.py", "pytest_judged.py", "pytest_judge",
                                 "graded_imports.py", "env", "graded_folders")}
    assert "parallel_rollout/py.typed" in names
    assert "parallel_rollout/guest/shim/pyautogui.py" in names  # package data the images copy
    data = ("wrap.sh", "wgetrc", "node_no_home.js", "git_no_programs.py", "magick_no_home.sh", "ssh_no_home.sh",
            "vim_no_home.sh", "npm_no_home.sh", "pytest_no_above.sh",
            "module_folder_last.py", "sitecustomize.py", "pytest_judged.py", "pytest_judge", "graded_imports.py",
            "cmake_no_registry.cmake", "graded_folders", "terminfo_no_home.sh", "soffice_no_home.sh", "gimp_no_home.sh")
    assert all(bool(mode & 0o111) is (name not in data) for name, mode in wrappers.items()), wrappers
    assert licence.startswith("MIT License") and metadata["License-Expression"] == "MIT"
    assert "parallel-rollout = parallel_rollout.cli:main" in entry_points
    requires = metadata.get_all("Requires-Dist")
    base = [r for r in requires if "extra ==" not in r]
    assert not any(r.startswith(("math-verify", "sympy", "ray", "gymnasium")) for r in base), base
    assert any(r.startswith("math-verify") and 'extra == "math"' in r for r in requires)
    assert {"math", "rl", "osworld", "web", "rag", "ray", "test"} <= set(metadata.get_all("Provides-Extra"))


def test_a_pip_install_lists_and_fills_the_osworld_cache_by_the_command_its_dry_run_names(wheel, tmp_path):
    """A user who installed the wheel (no checkout, so no scripts/osworld_cache.py) is told by
    the dry run of an OSWorld folder which command lists its uncached files, and that command
    works: `parallel-rollout osworld-cache missing DATA`, then `put` fills the cache. The note
    named `python .../scripts/osworld_cache.py`, a file a pip install does not have."""
    venv = tmp_path / "venv"  # a fresh venv holding the wheel; the dependencies are the test venv's
    env = {**{k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", "PARALLEL_ROLLOUT_PROG")},
           "PATH": f"{venv / 'bin'}:/usr/bin:/bin", "PARALLEL_ROLLOUT_OSWORLD_CACHE": str(tmp_path / "cache")}
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=60)
    done = subprocess.run([sys.executable, "-m", "pip", "--python", str(venv / "bin" / "python"), "install", "-q", "--no-compile",
                           "--no-deps", "--no-index", str(wheel)], capture_output=True, text=True, timeout=120,
                          env={**env, "PATH": os.environ["PATH"]})
    assert done.returncode == 0, done.stderr
    purelib = Path(subprocess.check_output([venv / "bin" / "python", "-c",
                                            "import sysconfig; print(sysconfig.get_path('purelib'))"], text=True, env=env).strip())
    (purelib / "deps.pth").write_text(sysconfig.get_path("purelib") + "\n")  # a plain path: not the checkout's src
    folder, url = one_download_task_folder(tmp_path)
    where = subprocess.check_output([venv / "bin" / "python", "-c", "import parallel_rollout; print(parallel_rollout.__file__)"],
                                    text=True, env=env)
    assert Path(where).is_relative_to(purelib), where  # the installed package, not the checkout's
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    dry = subprocess.run(["parallel-rollout", "run", "--data", str(folder), "--dry-run", "--agent", "openai",
                          "--base-url", "http://127.0.0.1:9/v1"], capture_output=True, text=True, timeout=120,
                         env=env, cwd=elsewhere)
    assert dry.returncode == 0, dry.stderr
    [note] = [line for line in dry.stdout.splitlines() if "not in the download cache" in line]
    command = note.split("setup_failed; ", 1)[1].removesuffix(" lists them")
    assert command == f"parallel-rollout osworld-cache missing {folder}", note

    def shell(line: str) -> str:
        done = subprocess.run(line, shell=True, capture_output=True, text=True, timeout=60, env=env, cwd=tmp_path)
        assert done.returncode == 0, done.stderr
        return done.stdout

    assert shell(command) == f"os/t1\t{url}\n"
    put = Path(shell(f"parallel-rollout osworld-cache put {shlex.quote(url)} budget.xlsx").strip())
    assert put.is_relative_to(tmp_path / "cache") and put.read_bytes() == b"PK\x03\x04 a workbook"
    assert shell(command) == ""
    assert shell(f"{venv / 'bin' / 'python'} -m parallel_rollout osworld-cache missing {folder}") == ""
