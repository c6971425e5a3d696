"""A result no JSON line can hold, through the CLI: every such value is named by where it
is, whatever kind it is, and the sample fails as ``unstorable_result`` with its usage kept."""

from __future__ import annotations

from click.testing import CliRunner

from conftest import read_results, write_tasks
from parallel_rollout.cli import main


def test_every_value_a_result_cannot_hold_is_named_and_the_usage_kept(tmp_path):
    """An object in usage() gave `error` 'UnserializableResult: … Object of type object is not
    JSON serializable', naming no field and dropping the usage, where a NaN alone gave
    `unstorable_result` naming its field."""
    data = write_tasks(tmp_path / "tasks.jsonl", [{"id": "d2", "n": 2}])
    result = CliRunner().invoke(main, ["--mode", "user_plugins:DoubleEnv", "--agent", "user_plugins:OddUsageAgent",
                                       "--data", str(data), "--output-dir", str(tmp_path / "out"), "--run-id", "odd",
                                       "--no-progress"])
    assert result.exit_code == 0, (result.output, result.exception)
    [record] = read_results(tmp_path / "out" / "odd")
    assert record["status"] == "unstorable_result" and record["final"] and not record["infrastructure"], record
    message = record["failure"]["message"]
    for named in ("field 'usage'['cost'] is nan", "field 'usage'['obj'] is of type object",
                  "field 'usage'['seen'] is of type set"):
        assert named in message, message
    assert record["failure"]["type"] == "UnstorableResult"
    assert record["usage"] == {"requests": 1, "cost": None, "obj": None, "seen": None}
    assert record["trajectory"] and record["duration_s"] is not None
