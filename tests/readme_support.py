"""The README's commands as text, and a shell to run them in the way a user does: tests that run
what the README prints take it from here, so a README edit that breaks a command fails them."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

from conftest import assert_exactly_once

ROOT = Path(__file__).resolve().parents[1]
#: the environment a user's shell has: the test session's, without pytest's own variables
ENV = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST")}
#: the suite runs under .venv: ``parallel-rollout`` is installed there
VENV_BIN = Path(sys.executable).parent
#: a user's shell with the project installed: ``parallel-rollout`` on PATH
INSTALLED = {**ENV, "PATH": f"{VENV_BIN}:{ENV['PATH']}"}


def one_download_task_folder(tmp_path: Path) -> tuple[Path, str]:
    """An OSWorld folder (``evaluation_examples``) of one task, os/t1, whose one download step
    fetches the URL returned; the file to put in the cache for it is ``tmp_path/budget.xlsx``."""
    url = "https://example.com/files/budget.xlsx"
    folder = tmp_path / "evaluation_examples"
    (folder / "examples" / "os").mkdir(parents=True)
    (folder / "test_all.json").write_text(json.dumps({"os": ["t1"]}))
    (folder / "examples" / "os" / "t1.json").write_text(json.dumps({
        "id": "t1", "instruction": "open it", "config": [
            {"type": "download", "parameters": {"files": [{"url": url, "path": "/home/user/budget.xlsx"}]}}],
        "evaluator": {"func": "infeasible"}}))
    (tmp_path / "budget.xlsx").write_bytes(b"PK\x03\x04 a workbook")
    return folder, url


def readme_section(title: str | None) -> str:
    """The text of the README's ``## title`` section (None: what comes before the first one)."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    if title is not None:
        text = text.split(f"\n## {title}\n", 1)[1]
    return text.split("\n## ", 1)[0]


def readme_lines(section: str | None, lang: str, start: str) -> list[str]:
    """The command lines of a section's ``lang`` code blocks that start with ``start``, with
    their continuation lines joined."""
    found = []
    for block in re.findall(rf"```{lang}\n(.*?)```", readme_section(section), re.S):
        for line in block.replace("\\\n", " ").splitlines():
            if line.strip().startswith(start):
                found.append(" ".join(line.split()))
    assert found, f"no `{start}` command in README section {section!r}"
    return found


def bash(line: str, cwd: Path, env: dict | None = None, timeout: float = 300) -> subprocess.CompletedProcess:
    """Run ``line`` in bash as a user types it: no stdin, output captured."""
    return subprocess.run(["bash", "-c", line], cwd=cwd, env=ENV if env is None else env,
                          stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=timeout)


def run_every_shipped_desktop_task(line: str, out: Path) -> None:
    """Run a README command over benchmarks/osworld_tasks.jsonl into ``out/readme``: it exits
    0 and every shipped desktop task succeeds, once."""
    proc = bash(f"{line} --output-dir {out} --run-id readme", ROOT, timeout=1700)
    assert proc.returncode == 0, proc.stderr[-3000:]
    shipped = ROOT / "benchmarks" / "osworld_tasks.jsonl"
    tasks = [json.loads(t) for t in shipped.read_text().splitlines() if t.strip()]
    finals = assert_exactly_once(out / "readme", {f"{t['id']}#0" for t in tasks})
    failed = {k: (r["status"], r.get("eval"), r.get("failure")) for k, r in finals.items() if r["status"] != "success"}
    assert not failed
