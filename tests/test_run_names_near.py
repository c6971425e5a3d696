"""A run id that names no run folder, given to `report` or `compare`, is said with the runs of
--output-dir near it by name, as `run --compare-to` says it (report/gate.py): a misspelt
``nightly-2026-11-2`` said only "no such run folder"."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from parallel_rollout.cli import main


def _runs(out, *names):
    for name in names:
        (out / name).mkdir(parents=True)
        (out / name / "config.json").write_text(json.dumps({"mode": "shell"}))
    (out / "notes").mkdir()  # a folder that holds no run is no run to suggest


@pytest.mark.parametrize("command", [["report", "nightly-2026-11-2"], ["compare", "nightly-2026-11-2", "base"],
                                     ["compare", "base", "nightly-2026-11-2"]])
def test_a_misspelt_run_id_is_said_with_the_runs_near_it(tmp_path, command):
    out = tmp_path / "out"
    _runs(out, "base", "nightly-2026-11-21", "nightly-2026-11-22", "notes-run")
    done = CliRunner().invoke(main, [*command, "--output-dir", str(out)])
    said = " ".join(done.output.split())
    assert done.exit_code == 2, said
    assert (f"nightly-2026-11-2: no such run folder (nor {out / 'nightly-2026-11-2'}; the nearest by name: "
            "nightly-2026-11-22, nightly-2026-11-21)") in said, said


def test_a_misspelt_run_folder_path_is_said_with_the_runs_beside_it(tmp_path):
    out = tmp_path / "out"
    _runs(out, "base")
    done = CliRunner().invoke(main, ["report", str(out / "bsae")])
    said = " ".join(done.output.split())
    assert done.exit_code == 2, said
    assert f"{out / 'bsae'}: no such run folder (the nearest by name: base)" in said, said


def test_a_name_near_no_run_is_said_as_before(tmp_path):
    out = tmp_path / "out"
    _runs(out, "base")
    done = CliRunner().invoke(main, ["report", "zzz", "--output-dir", str(out)])
    said = " ".join(done.output.split())
    assert done.exit_code == 2 and f"zzz: no such run folder (nor {out / 'zzz'})" in said, said
    assert "nearest" not in said, said
