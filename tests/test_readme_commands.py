"""The README's first command, run exactly as printed, the way a user types it: through ``./dev``
from the repository's root, in a shell, with no stdin. It must set itself up (here the venv
exists already: the suite runs under it), run HumanEval's 164 problems with the oracle through
a pool of 2 sandboxes, print where its results are and a summary, and exit 0."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

from conftest import assert_exactly_once

ROOT = Path(__file__).resolve().parents[1]


def readme_commands() -> list[str]:
    """The two commands the README opens with (its first bash block)."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    block = re.search(r"```bash\n(.*?)```", text, re.S).group(1)
    return [line.strip() for line in block.splitlines() if line.strip()]


def test_the_readme_opens_with_a_run_and_the_test_command():
    run, test = readme_commands()
    assert run.startswith("./dev run ") and test == "./dev test"
    assert (ROOT / ".ci" / "run").read_text().splitlines()[-1].strip() == "exec ./dev test"


def test_the_readme_first_command_runs_as_printed():
    run = readme_commands()[0]
    results = ROOT / "results"
    before = set(p.name for p in results.iterdir()) if results.is_dir() else set()
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST")}
    proc = subprocess.run(["bash", "-c", run], cwd=ROOT, env=env, stdin=subprocess.DEVNULL,
                          capture_output=True, text=True, timeout=600)
    made = sorted(set(p.name for p in results.iterdir()) - before)
    try:
        assert proc.returncode == 0, proc.stderr[-3000:]
        assert len(made) == 1, (made, proc.stderr[-2000:])
        run_dir = results / made[0]
        finals = assert_exactly_once(run_dir, {f"HumanEval/{i}#0" for i in range(164)})
        assert {r["status"] for r in finals.values()} == {"success"}
        assert {r["eval"]["kind"] for r in finals.values()} == {"passed"}
        summary = json.loads((run_dir / "summary.json").read_text())
        assert summary["status_counts"] == {"success": 164}
        assert summary["vm"]["provider"] == "process" and summary["vm"]["size"] == 2
        assert summary["vm"]["resets"] == 164  # one execution, one lease, one reset each
        # the user is told where the results are
        assert str(run_dir.relative_to(ROOT)) in proc.stdout + proc.stderr
    finally:
        for name in made:
            shutil.rmtree(results / name, ignore_errors=True)
