"""What a wheel of the project holds, as pip builds it from the one PEP 621 pyproject.toml:
the MIT licence text, ``py.typed`` (PEP 561: users' type checkers read the annotations), the
console script, and math-verify only under the ``math`` extra (sympy is ~80 MB)."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from email.parser import Parser

from conftest import ROOT


def test_the_wheel_ships_licence_types_script_and_a_lean_base(tmp_path):
    assert not (ROOT / "setup.cfg").exists() and not (ROOT / "setup.py").exists()  # one metadata file
    build = subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation",
                            "-w", str(tmp_path), str(ROOT)], capture_output=True, text=True, timeout=300)
    assert build.returncode == 0, build.stderr
    (wheel,) = tmp_path.glob("parallel_rollout-*.whl")
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
                                 "git_external_diff", "mvn", "wrap.sh", "wgetrc", "node_no_home.js",
                                 "git_no_programs.py")}
    assert "parallel_rollout/py.typed" in names
    assert "parallel_rollout/guest/shim/pyautogui.py" in names  # package data the images copy
    data = ("wrap.sh", "wgetrc", "node_no_home.js", "git_no_programs.py")
    assert all(bool(mode & 0o111) is (name not in data) for name, mode in wrappers.items()), wrappers
    assert licence.startswith("MIT License") and metadata["License-Expression"] == "MIT"
    assert "parallel-rollout = parallel_rollout.cli:main" in entry_points
    requires = metadata.get_all("Requires-Dist")
    base = [r for r in requires if "extra ==" not in r]
    assert not any(r.startswith(("math-verify", "sympy", "ray", "gymnasium")) for r in base), base
    assert any(r.startswith("math-verify") and 'extra == "math"' in r for r in requires)
    assert {"math", "rl", "osworld", "web", "rag", "ray", "test"} <= set(metadata.get_all("Provides-Extra"))
