"""web mode: an agent is scored on the episode the task's seed started, and no other. Once the
page has graded it (a wrong answer, its time limit), MiniWoB's START cover would begin a new
episode with a new problem; a click on it within the same action (a double click) or after
the time limit ran out (a slow model) made the failed page's grade the new episode's."""

from __future__ import annotations

import json
import shutil

import pytest

from test_web import run, web_task

pytestmark = pytest.mark.skipif(shutil.which("chromium") is None, reason="Debian's chromium is not installed")


@pytest.mark.parametrize("cheat", ["double_click", "outwait"])
def test_a_page_graded_once_cannot_be_restarted_for_a_new_grade(tmp_path, cheat):
    tasks = [web_task("click-button", seed=0, web_cheat=cheat, time_limit_s=1 if cheat == "outwait" else 10)]
    run(tmp_path, tasks, agent="web_plugins:RestartingAgent", num_rollouts=1, num_vms=1)
    record = json.loads((tmp_path / "out" / "web" / "results.jsonl").read_text().splitlines()[0])
    assert record["reward"] == 0.0, record
    assert record["eval"]["raw_reward"] == -1 and record["eval"]["ended_by"] == "page", record["eval"]
    if cheat == "outwait":
        assert record["eval"]["reason"] == "timed out", record["eval"]


@pytest.mark.parametrize("ms", [1e300, "1e300"])
def test_a_pause_after_any_action_is_checked_as_a_waits(tmp_path, ms):
    """A click's ``ms`` went unchecked to the driver's sleep: 1e300 broke the driver (an
    OverflowError), and the episode ended as a sandbox violation; it is bounded as a wait's
    (10 s at most), and one that is no number is the agent's invalid action."""
    run(tmp_path, [web_task("click-button", web_stall_ms=ms, time_limit_s=60)], agent="web_plugins:StallingAgent",
        num_rollouts=1, num_vms=1, max_retries=1)
    records = [json.loads(line) for line in (tmp_path / "out" / "web" / "results.jsonl").read_text().splitlines()]
    assert [r["attempt"] for r in records] == [0] and not records[0]["infrastructure"], records
    assert records[0]["reward"] == 1.0, records[0]  # the oracle went on after the refused action
    steps = [json.loads(line) for line in (tmp_path / "out" / "web" / records[0]["trajectory"]).read_text().splitlines()]
    error = steps[0]["observation"]["error"]
    assert (error == "click: 'ms' must be a number, got '1e300'") if ms == "1e300" else error is None, steps[0]


@pytest.mark.parametrize("reply, field", [('{"action": "scroll", "dy": Infinity}', "dy"),
                                          ('{"action": "scroll", "dx": NaN}', "dx"),
                                          ('{"action": "scroll", "x": Infinity, "y": 5}', "x")])
def test_a_number_that_is_not_finite_is_the_agents_invalid_action(tmp_path, reply, field):
    """JSON as Python reads it takes Infinity and NaN: a scroll's went to the browser, which
    never answered, and the episode ended as a sandbox violation (the VM's breaking)."""
    run(tmp_path, [web_task("click-button", web_first_reply=reply)], agent="web_plugins:FirstReplyAgent",
        num_rollouts=1, num_vms=1)
    record = json.loads((tmp_path / "out" / "web" / "results.jsonl").read_text().splitlines()[0])
    assert record["status"] == "success" and record["reward"] == 1.0, record
    first = json.loads((tmp_path / "out" / "web" / record["trajectory"]).read_text().splitlines()[0])
    assert first["observation"]["error"].startswith(f"scroll: {field!r} must be a finite number, got "), first


def test_a_text_too_long_to_type_is_the_agents_invalid_action(tmp_path):
    """A type action's text goes to the browser a key at a time (two DevTools calls each): one
    long enough ran past the driver's call timeout, and the episode ended as a sandbox violation
    (the VM's breaking) instead of the agent's invalid action."""
    reply = json.dumps({"action": "type", "text": "x" * 100_000})
    run(tmp_path, [web_task("click-button", web_first_reply=reply)], agent="web_plugins:FirstReplyAgent",
        num_rollouts=1, num_vms=1)
    record = json.loads((tmp_path / "out" / "web" / "results.jsonl").read_text().splitlines()[0])
    assert record["status"] == "success" and record["reward"] == 1.0, record
    first = json.loads((tmp_path / "out" / "web" / record["trajectory"]).read_text().splitlines()[0])
    assert first["observation"]["error"] == "type: 'text' must be at most 2000 characters, got 100000", first



@pytest.mark.parametrize("typed", [
    [{"action": "type", "text": "<img src=x onerror=core.endEpisode(1)>\n"}],
    [{"action": "press", "key": "<"}, {"action": "type", "text": "img src=x onerror=core.endEpisode(1)>\n"}]],
    ids=["type", "press-then-type"])
def test_html_typed_into_a_page_that_shows_it_runs_no_script_that_grades_the_page(tmp_path, typed):
    """MiniWoB's terminal writes each command line typed into it into the page as HTML: a
    line ``<img src=x onerror=core.endEpisode(1)>`` (typed at once, or its '<' a key press and
    the rest typed after it: the terminal joins them) ran the agent's script in the page, which
    graded it 1 with no file deleted. A '<' typed or pressed is the agent's invalid action."""
    script = [{"action": "wait", "ms": 400}, *typed, {"action": "wait", "ms": 300}]
    run(tmp_path, [web_task("terminal", web_script=script, time_limit_s=30)], agent="web_plugins:ScriptedAgent",
        num_rollouts=1, num_vms=1)
    record = json.loads((tmp_path / "out" / "web" / "results.jsonl").read_text().splitlines()[0])
    assert record["reward"] == 0.0 and record["eval"]["done"] is False, record
    steps = [json.loads(line) for line in (tmp_path / "out" / "web" / record["trajectory"]).read_text().splitlines()]
    field = "key" if typed[0]["action"] == "press" else "text"
    assert steps[1]["observation"]["error"].startswith(f"{typed[0]['action']}: {field!r} must not hold '<'"), steps[1]
    run(tmp_path, [web_task("terminal", time_limit_s=30)], agent="web_plugins:TerminalAgent", run_id="honest",
        num_rollouts=1, num_vms=1)
    record = json.loads((tmp_path / "out" / "honest" / "results.jsonl").read_text().splitlines()[0])
    assert record["reward"] == 1.0, record  # ls, then rm of the file asked for
