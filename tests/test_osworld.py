"""osworld mode: the shipped desktop tasks through a shared pool, a random agent, real
screenshots, clean resets, bounded guest calls, and the action/evaluator tables."""

from __future__ import annotations

import json
import shutil
import time

import pytest

from conftest import ROOT, assert_exactly_once, read_results, write_tasks
from desktop_support import BIG_TERMINAL, HEIGHT, WIDTH, assert_typing_shows
from parallel_rollout.config import build_config
from parallel_rollout.envs.osworld import actions as acts
from parallel_rollout.envs.osworld import evaluators as ev
from parallel_rollout.errors import TaskFileError
from parallel_rollout.guest.client import GuestClient
from parallel_rollout.pool.providers.base import ProviderOptions
from parallel_rollout.pool.providers.process import ProcessProvider
from parallel_rollout.runner import Runner
from parallel_rollout.tasks import load_tasks
from parallel_rollout.trajectories import read_turns
from parallel_rollout.envs import task_validators

TASKS = ROOT / "benchmarks" / "osworld_tasks.jsonl"

pytestmark = pytest.mark.skipif(
    not all(shutil.which(p) for p in ("Xvfb", "openbox", "xterm", "mousepad", "pcmanfm", "xdotool", "wmctrl",
                                       "soffice")),
    reason="the desktop packages are missing (./dev installs them)")


def shipped() -> list[dict]:
    return [json.loads(line) for line in TASKS.read_text().splitlines() if line.strip()]


def run(tmp_path, data, run_id, **flags):
    base = dict(mode="osworld", data=str(data), agent="oracle", num_rollouts=3, num_vms=2,
                use_vm_pool=True, output_dir=str(tmp_path / "out"), run_id=run_id, progress=False,
                screen_width=WIDTH, screen_height=HEIGHT, action_space="computer_13")
    base.update(flags)
    return Runner(build_config(base)).run()


# ------------------------------------------------------------------------ end to end


@pytest.mark.slow
def test_oracle_passes_every_shipped_task_through_a_shared_pool(tmp_path):
    tasks = shipped()
    assert len(tasks) >= 15
    assert {t["snapshot"] for t in tasks} == {"terminal", "editor", "files", "office"}
    outcome = run(tmp_path, TASKS, "oracle")
    assert outcome.exit_code == 0, outcome.message
    finals = assert_exactly_once(outcome.run_dir, {f"{t['id']}#0" for t in tasks})
    failed = {k: (r["status"], r.get("eval"), r.get("failure")) for k, r in finals.items()
              if r["status"] != "success"}
    assert not failed
    assert outcome.summary["vm"]["resets"] >= len(tasks)
    # OSWorld's trajectory layout next to the worker's attempt file
    folder = outcome.run_dir / "trajectories" / "terminal-echo-file" / "0" / "attempt-0"
    lines = [json.loads(l) for l in (folder / "traj.jsonl").read_text().splitlines()]
    assert [l["step_num"] for l in lines] == [1, 2, 3] and lines[-1]["done"]
    assert lines[1]["action"]["action_type"] == "TYPING"
    for line in lines:
        assert (folder / line["screenshot_file"]).read_bytes().startswith(b"\x89PNG")
    assert (folder / "result.txt").read_text().strip() == "1.0"


def test_an_a11y_tree_run_saves_each_steps_screenshot_as_osworld_does(tmp_path):
    """--observation-type a11y_tree shows the agent the tree and no image, but OSWorld's
    run.py saves a screenshot per step whatever the observation type: step_N.png, named by
    traj.jsonl's screenshot_file, is there for every step (none was saved, the field null)."""
    task = next(t for t in shipped() if t["id"] == "terminal-mkdir")
    data = write_tasks(tmp_path / "tasks.jsonl", [task])
    outcome = run(tmp_path, data, "a11y", num_rollouts=1, num_vms=1, observation_type="a11y_tree")
    assert outcome.exit_code == 0, outcome.message
    folder = outcome.run_dir / "trajectories" / "terminal-mkdir" / "0" / "attempt-0"
    lines = [json.loads(line) for line in (folder / "traj.jsonl").read_text().splitlines()]
    assert lines and lines[-1]["done"]
    assert [line["screenshot_file"] for line in lines] == [f"step_{line['step_num']}.png" for line in lines]
    for name in ["step_0.png", *(line["screenshot_file"] for line in lines)]:
        assert (folder / name).read_bytes().startswith(b"\x89PNG"), name
    turns = read_turns(outcome.run_dir / "trajectories" / "terminal-mkdir" / "0" / "attempt-0.jsonl")
    observations = [turn["observation"] for turn in turns]
    assert observations and all(o["screenshot_path"] is None and o["accessibility_tree"] for o in observations)


@pytest.mark.slow  # ~25-60 s: every shipped desktop task, 4 turns each; the oracle's run stays
def test_a_random_agent_fails_nearly_every_task(tmp_path):
    tasks = shipped()
    outcome = run(tmp_path, TASKS, "random", agent="desktop_support:RandomAgent", max_turns=4)
    finals = assert_exactly_once(outcome.run_dir, {f"{t['id']}#0" for t in tasks})
    assert all(r["status"] in ("success", "failure", "max_turns") for r in finals.values()), \
        {k: r.get("failure") for k, r in finals.items()}
    assert outcome.summary["successes"] <= 1


def test_a_hanging_open_times_out_and_the_run_goes_on(tmp_path):
    good = next(t for t in shipped() if t["id"] == "terminal-mkdir")
    # "cat" is a program on PATH that never opens a window: open_file waits for one in vain
    hang = {**good, "id": "never-opens", "open_timeout": 2,
            "config": [{"type": "open", "parameters": {"path": "cat"}}]}
    data = write_tasks(tmp_path / "tasks.jsonl", [hang, good])
    started = time.monotonic()
    outcome = run(tmp_path, data, "hang", num_rollouts=2, num_vms=1, max_retries=1)
    assert time.monotonic() - started < 60
    finals = assert_exactly_once(outcome.run_dir, {"never-opens#0", "terminal-mkdir#0"})
    assert finals["terminal-mkdir#0"]["status"] == "success"
    stuck = finals["never-opens#0"]  # before the agent's first turn: no score, not a 0
    assert stuck["status"] == "setup_failed" and stuck["infrastructure"] and stuck["attempt"] == 1
    assert "config step 1 (open)" in stuck["failure"]["message"]
    assert "within 2s" in stuck["failure"]["message"]
    assert outcome.exit_code == 1 and outcome.summary["ungraded"] == 1


def test_a_task_whose_own_files_are_missing_is_never_graded_until_they_are_there(tmp_path):
    """A file a task names that cannot be had (offline, not in the download cache) is no
    score: before the agent acts (a config step) or as the gold side of the check (an
    expected getter). Such samples were graded `error`, reward 0, and the run exited 0
    with a rate that counted them; now the run exits 1 and a resume, once the files are
    there, grades them."""
    from click.testing import CliRunner

    from parallel_rollout.cli import main

    good = next(t for t in shipped() if t["id"] == "terminal-mkdir")
    seeded = {**good, "id": "seeded", "config": [
        {"type": "download", "parameters": {"files": [{"url": "input.txt", "path": "~/input.txt"}]}},
        *good["config"]]}
    gold = {**good, "id": "gold", "evaluator": {
        "func": "compare_text_file",
        "result": {"type": "cloud_file", "path": "answer.txt", "dest": "answer.txt"},
        "expected": {"type": "cloud_file", "path": "gold.txt", "dest": "gold.txt"}}}
    data = write_tasks(tmp_path / "tasks.jsonl", [seeded, gold])
    (tmp_path / "answer.txt").write_text("42\n")
    argv = ["run", "--mode", "osworld", "--data", str(data), "--agent", "oracle", "--num-rollouts", "2",
            "--num-vms", "1", "--use-vm-pool", "--output-dir", str(tmp_path / "out"), "--run-id", "files",
            "--screen-width", str(WIDTH), "--screen-height", str(HEIGHT), "--action-space", "computer_13",
            "--max-retries", "1", "--no-progress"]
    first = CliRunner().invoke(main, argv)
    assert first.exit_code == 1, first.output
    assert "2 sample(s) were never graded" in first.output and "setup_failed 2" in first.output
    records = read_results(tmp_path / "out" / "files")
    assert not any(r["final"] for r in records)  # never graded: no record that counts
    finals = {r["key"]: r for r in records if r.get("never_graded")}
    assert {k: (r["status"], r["infrastructure"]) for k, r in finals.items()} == {
        "seeded#0": ("setup_failed", True), "gold#0": ("setup_failed", True)}
    assert "input.txt" in finals["seeded#0"]["failure"]["message"]
    assert "gold.txt" in finals["gold#0"]["failure"]["message"]
    # not retried: no other VM has a file the task names (it was retried --max-retries times)
    assert sorted(r["attempt"] for r in records if r["key"] == "gold#0") == [0]
    assert {r["task_fault"] for r in finals.values()} == {"file_missing"}

    (tmp_path / "input.txt").write_text("seed\n")
    (tmp_path / "gold.txt").write_text("42\n")
    again = CliRunner().invoke(main, ["run", "--output-dir", str(tmp_path / "out"), "--run-id", "files",
                                      "--resume", "--no-progress"])
    assert again.exit_code == 0, again.output
    finals = {r["key"]: r for r in read_results(tmp_path / "out" / "files") if r.get("final")}
    assert {k: (r["status"], r["attempt"]) for k, r in finals.items()} == {
        "seeded#0": ("success", 1), "gold#0": ("success", 1)}


def test_a_vm_killed_from_outside_while_grading_is_retried_not_scored_0(tmp_path, monkeypatch):
    """A getter whose VM dies under it (killed from the host) raised an error the metric loop
    took for the agent's output failing: reward 0, final. It is the lease's to judge now: a
    VM killed from outside is vm_error (VMKilled), retried on another VM, which passes."""
    from click.testing import CliRunner

    from parallel_rollout.cli import main

    monkeypatch.setenv("PR_CHAOS_DIR", str(tmp_path))
    monkeypatch.syspath_prepend(str(ROOT / "tests"))
    good = next(t for t in shipped() if t["id"] == "terminal-mkdir")
    data = write_tasks(tmp_path / "tasks.jsonl", [{k: v for k, v in good.items() if k != "mode"}])
    result = CliRunner().invoke(main, [
        "run", "--mode", "chaos_plugins:KillInGradingEnv", "--data", str(data), "--agent", "oracle",
        "--num-rollouts", "1", "--num-vms", "1", "--use-vm-pool", "--output-dir", str(tmp_path / "out"),
        "--run-id", "graded-kill", "--screen-width", str(WIDTH), "--screen-height", str(HEIGHT),
        "--action-space", "computer_13", "--no-progress"])
    assert result.exit_code == 0, (result.output, result.exception)
    attempts = read_results(tmp_path / "out" / "graded-kill")
    assert [(r["status"], r["final"]) for r in attempts] == [("vm_error", False), ("success", True)], attempts
    assert attempts[0]["failure"]["type"] == "VMKilled", attempts[0]["failure"]
    assert "killed from outside" in attempts[0]["failure"]["message"], attempts[0]["failure"]


# ------------------------------------------------------------------ a desktop VM itself


@pytest.fixture
def desktop_vm(tmp_path):
    provider = ProcessProvider("osw-vm", ProviderOptions(desktop=True, screen_width=WIDTH,
                                                         screen_height=HEIGHT))
    info = provider.start("vm0")
    holder = {"info": info}
    try:
        yield provider, holder
    finally:
        provider.stop(holder["info"])


def _wait_window(client: GuestClient, title: str, present: bool = True) -> None:
    deadline = time.monotonic() + 15
    while (f'name="{title}"' in client.accessibility_tree()) != present:
        assert time.monotonic() < deadline, f"window {title!r} present={not present} after 15 s"
        time.sleep(0.1)


def test_a_screenshot_shows_what_the_oracle_typed(desktop_vm):
    provider, holder = desktop_vm
    client = GuestClient(holder["info"].address)
    assert client.screen_size() == (WIDTH, HEIGHT)
    client.launch(BIG_TERMINAL)
    _wait_window(client, "big")
    time.sleep(0.3)
    # the typed line lies in the terminal's top rows, nowhere below the window
    assert_typing_shows(client, settle_s=0.3)
    # and the terminal is what the window list says it is: a title the shell sets
    client.execute(["python", "-c", "import pyautogui; pyautogui.typewrite(" +
                    repr("\nprintf '\\033]0;typed-title\\007'\n") + ")"])
    _wait_window(client, "typed-title")
    assert client.cursor_position() == client.cursor_position()


def test_reset_leaves_no_window_file_or_process(desktop_vm):
    """Three resets in a row (the second and third wait for the standby the first started):
    what a task left is gone. How fast a reset is: benchmarks/perf/resets.py."""
    provider, holder = desktop_vm
    client = GuestClient(holder["info"].address)
    booted_home = client.execute("ls -A ~", shell=True)["output"].split()
    assert "leftover.txt" not in booted_home
    client.launch(["xterm", "-T", "leftover"])
    client.execute("echo x > ~/leftover.txt", shell=True)
    client.launch(["sleep", "300"])
    _wait_window(client, "leftover")
    client.open_file("~/leftover.txt", timeout=20)
    for _ in range(3):
        holder["info"] = provider.reset(holder["info"])
    client = GuestClient(holder["info"].address)
    tree = client.accessibility_tree()
    assert "<application" not in tree, tree
    # the home is as a boot leaves it again (Ubuntu's folders, what openbox writes at boot)
    assert client.execute("ls -A ~", shell=True)["output"].split() == booted_home
    procs = client.execute(["ps", "-eo", "comm"])["output"].split()
    assert not {"xterm", "sleep", "mousepad"} & set(procs), procs
    assert {"Xvfb", "openbox"} <= set(procs)


def test_recording_and_bounded_window_calls(desktop_vm):
    provider, holder = desktop_vm
    client = GuestClient(holder["info"].address)
    client.start_recording()
    client.launch(["xterm", "-T", "rec"])
    _wait_window(client, "rec")
    client.activate_window("rec", strict=True)
    client.close_window("rec")
    _wait_window(client, "rec", present=False)
    with pytest.raises(LookupError):
        client.close_window("no-such-window")
    video = client.end_recording()
    assert video[4:8] == b"ftyp"
    with pytest.raises(FileNotFoundError):
        client.open_file("~/missing.txt", timeout=1)


def test_a_recording_an_episode_cut_short_left_running_does_not_fail_the_next(desktop_vm, tmp_path):
    """--record on a machine no reset clears (a remote one, --reset-command none): an episode
    cut before its grading (--task-timeout, a model that stopped answering) never ended its
    recording, and every later episode's start was refused ('Recording is already in
    progress'), each attempt an error. The next start ends the stale recording first."""
    from parallel_rollout.envs.osworld.env import OSWorldEnv

    provider, holder = desktop_vm
    client = GuestClient(holder["info"].address)
    task = next(t for t in shipped() if t["id"] == "terminal-mkdir")
    data = write_tasks(tmp_path / "tasks.jsonl", [task])
    config = build_config(dict(mode="osworld", data=str(data), agent="oracle", record=True, screen_width=WIDTH,
                               screen_height=HEIGHT, action_space="computer_13"))
    [loaded] = load_tasks(str(data), default_mode="osworld", validators=task_validators())
    cut = OSWorldEnv(config)
    cut.trajectory_dir = str(tmp_path / "cut")
    cut.reset(loaded, client)  # recording; then the attempt is cut: no evaluate
    after = OSWorldEnv(config)
    after.trajectory_dir = str(tmp_path / "after")
    after.reset(loaded, client)
    after.step("DONE")
    after.evaluate()
    assert (tmp_path / "after" / "recording.mp4").read_bytes()[4:8] == b"ftyp"


# ------------------------------------------------------------------------ tables


@pytest.mark.parametrize("action, message", [
    ({"action_type": "CLICK", "parameters": {"x": 5000, "y": 1}}, "'x' must be within"),
    ({"action_type": "CLICK", "parameters": {"x": 5}}, "go together"),
    ({"action_type": "CLICK", "parameters": {"num_clicks": 4}}, "num_clicks"),
    ({"action_type": "CLICK", "parameters": {"button": "side"}}, "button"),
    ({"action_type": "MOVE_TO", "parameters": {}}, "missing parameter 'x'"),
    ({"action_type": "DRAG_TO", "parameters": {"x": 1}}, "missing parameter 'y'"),
    ({"action_type": "SCROLL", "parameters": {"dy": 1.5}}, "'dy' must be an integer"),
    ({"action_type": "TYPING", "parameters": {"text": 3}}, "'text' must be a string"),
    ({"action_type": "PRESS", "parameters": {"key": "hyper"}}, "key name"),
    ({"action_type": "HOTKEY", "parameters": {"keys": []}}, "non-empty list"),
    ({"action_type": "JUMP", "parameters": {}}, "unknown action_type"),
    ("pyautogui.click()", "a computer_13 action is a dict"),
])
def test_computer_13_validation(action, message):
    with pytest.raises(acts.ActionError, match=message):
        acts.to_code(action, "computer_13", 1920, 1080)


def test_all_16_action_types_translate():
    examples = {
        "MOVE_TO": {"x": 1, "y": 2}, "CLICK": {"x": 1, "y": 2, "button": "right", "num_clicks": 2},
        "MOUSE_DOWN": {}, "MOUSE_UP": {"button": "middle"}, "RIGHT_CLICK": {}, "DOUBLE_CLICK": {"x": 3, "y": 4},
        "DRAG_TO": {"x": 5, "y": 6}, "SCROLL": {"dx": 1, "dy": -2}, "TYPING": {"text": "a'b"},
        "PRESS": {"key": "enter"}, "KEY_DOWN": {"key": "shift"}, "KEY_UP": {"key": "shift"},
        "HOTKEY": {"keys": ["ctrl", "s"]},
    }
    for kind, params in examples.items():
        code = acts.computer13_to_code({"action_type": kind, "parameters": params})
        compile(code, kind, "exec")
    # flat parameters, as OSWorld also accepts
    assert acts.computer13_to_code({"action_type": "MOVE_TO", "x": 1, "y": 2}) == "pyautogui.moveTo(1, 2)"
    assert [acts.special(a) for a in ("WAIT", {"action_type": "FAIL"}, " DONE ")] == ["WAIT", "FAIL", "DONE"]
    assert len(set(examples) | set(acts.SPECIAL)) == 16


def test_pyautogui_space_and_less_than_fix():
    assert acts.to_code("pyautogui.press('<')", "pyautogui", 10, 10) == 'pyautogui.hotkey("shift", ",")'
    assert acts.to_code("pyautogui.typewrite('a<b')", "pyautogui", 10, 10) == \
        "pyautogui.typewrite('a'); pyautogui.hotkey(\"shift\", \",\"); pyautogui.typewrite('b')"
    assert acts.to_code({"command": "pyautogui.click()"}, "pyautogui", 10, 10) == "pyautogui.click()"


def test_scores_combine_like_osworld():
    assert ev.combine([1.0, 0.0], "and") == 0.0
    assert ev.combine([1.0, 0.5], "and") == 0.75
    assert ev.combine([0.0, 1.0], "or") == 1.0
    assert ev.combine([0.2, 0.4], "or") == 0.4
    assert ev.METRICS["check_include_exclude"]("a b", {"include": ["a"], "exclude": ["c"]}) == 1.0
    assert ev.METRICS["check_direct_json_object"]('{"k": 1, "j": 2}', {"expected": {"k": 1}}) == 1.0
    assert ev.METRICS["exact_match"](None, {"expected": ""}) == 0.0


def test_metrics_stop_at_the_first_that_decides_the_score_as_osworlds_do(tmp_path):
    """OSWorld's evaluate returns at a metric of 0 under "and" and of 1 under "or", and never
    runs the getters of the rest; every metric was run here (a later getter that hangs or
    breaks the VM then cost the attempt a score OSWorld had already given)."""
    def check(conj: str, outputs: list[str]) -> dict:
        return {"func": ["exact_match"] * len(outputs), "conj": conj,
                "result": [{"type": "vm_command_line", "command": f"echo {word}"} for word in outputs],
                "expected": [{"type": "rule", "rules": {"expected": "hi\n"}}] * len(outputs)}

    base = {"mode": "osworld", "instruction": "nothing", "config": [], "reference": [{"action_type": "DONE"}]}
    tasks = [{**base, "id": "and-0-first", "evaluator": check("and", ["no", "hi"])},
             {**base, "id": "or-1-first", "evaluator": check("or", ["hi", "no"])},
             {**base, "id": "or-1-second", "evaluator": check("or", ["no", "hi"])}]
    outcome = run(tmp_path, write_tasks(tmp_path / "tasks.jsonl", tasks), "conj", num_rollouts=2, num_vms=2)
    finals = {r["task_id"]: r for r in read_results(outcome.run_dir) if r["final"]}
    assert {t: (r["reward"], r["eval"]["scores"]) for t, r in finals.items()} == {
        "and-0-first": (0.0, [0.0]), "or-1-first": (1.0, [1.0]), "or-1-second": (1.0, [0.0, 1.0])}, finals


RULE = {"type": "rule", "rules": {"expected": "a"}}  # exact_match compares with an expected state


@pytest.mark.parametrize("change, message", [
    ({"config": [{"type": "no_such_step", "parameters": {}}]}, "step no_such_step"),
    ({"evaluator": {"func": ["no_such_metric", "other_metric"], "result": [
        {"type": "vm_file", "path": "x"}, {"type": "no_such_getter"}]}},
     "getter no_such_getter, metric no_such_metric, metric other_metric"),
    ({"evaluator": {"func": "exact_match", "result": {"type": "no_such_getter"}}}, "getter no_such_getter"),
    ({"evaluator": {"func": ["exact_match", "exact_match"], "result": [{"type": "rule", "rules": {}}]}}, "as long as 'func'"),
    ({"reference": [{"action_type": "PRESS", "parameters": {"key": "nope"}}]}, "reference action 1"),
    ({"evaluator": {"func": "exact_match", "result": {"type": "vm_file", "multi": True, "path": ["a", "b"],
                                                      "dest": "a"}, "expected": RULE}}, "must be lists of the same length"),
    ({"evaluator": {"func": "exact_match", "result": {"type": "cloud_file", "multi": True, "path": ["a"],
                                                      "dest": ["a"], "gives": [1]}, "expected": RULE}}, "'gives'"),
])
def test_unsupported_pieces_fail_at_load_naming_the_task(tmp_path, change, message):
    task = {**shipped()[0], **change, "id": "bad-task"}
    data = write_tasks(tmp_path / "bad.jsonl", [task])
    with pytest.raises(TaskFileError, match="bad-task") as info:
        load_tasks(data, default_mode="osworld", validators=task_validators())
    assert message in str(info.value)


def test_openai_agent_messages_carry_the_screenshot_and_parse_both_spaces(tmp_path):
    from parallel_rollout.agents import prompts
    from parallel_rollout.agents.openai_agent import drop_old_images

    png = tmp_path / "step_0.png"
    png.write_bytes(b"\x89PNG fake")
    content = prompts.render("osworld", {"instruction": "do it", "screenshot_path": str(png),
                                         "accessibility_tree": "<desktop-frame/>"})
    assert content[0]["type"] == "text" and "<desktop-frame/>" in content[0]["text"]
    assert content[1]["image_url"]["url"].startswith("data:image/png;base64,")
    messages = [{"role": "user", "content": [dict(p) for p in content]} for _ in range(5)]
    drop_old_images(messages, 3)
    assert sum(p["type"] == "image_url" for m in messages for p in m["content"]) == 3
    assert prompts.parse("osworld", 'I click.\n```json\n{"action_type": "CLICK", "parameters": {}}\n```') == \
        {"action_type": "CLICK", "parameters": {}}
    assert prompts.parse("osworld", "```python\npyautogui.press('enter')\n```") == "pyautogui.press('enter')"
    assert prompts.parse("osworld", "All finished.\nDONE") == "DONE"
