"""A mode whose extra is not installed: the run is refused once, before it starts, saying
which extra to install, not once per task as if each task were wrong. Run through the CLI
with the extra's package hidden (``sys.modules[name] = None``: what an install without the
extra finds)."""

from __future__ import annotations

import sys

import pytest
from click.testing import CliRunner

from parallel_rollout.cli import main


@pytest.mark.parametrize("package, data, extra", [
    ("gymnasium", "frozenlake", "rl"),
    ("gymnasium", "sokoban", "rl"),
    ("bm25s", "rag", "rag"),
])
def test_a_mode_without_its_extra_is_refused_once_naming_the_extra(tmp_path, monkeypatch, package, data, extra):
    from parallel_rollout.envs.rag import corpus

    monkeypatch.setitem(sys.modules, package, None)
    # an index an earlier test of this process loaded would be taken without bm25s
    monkeypatch.setattr(corpus, "_OPEN", {})
    for dry_run in ((), ("--dry-run",)):
        result = CliRunner().invoke(main, ["--data", data, "--output-dir", str(tmp_path / "out"),
                                           "--no-progress", *dry_run])
        assert result.exit_code == 2, (result.output[-2000:], result.exception)
        hint = f"pip install 'parallel-rollout[{extra}]'"
        assert result.output.count(hint) == 1, result.output[-2000:]
        assert "bad task records" not in result.output, result.output[-2000:]
        assert not list((tmp_path / "out").glob("*/results.jsonl")), "nothing ran"
