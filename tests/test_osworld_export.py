"""`runs export-osworld`: an osworld run's final trajectories in OSWorld's result layout, read
the way OSWorld's show_result.py reads it."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from parallel_rollout.cli import main
from llm_server import LLMServer, reply_with_counts
from readme_support import INSTALLED, bash, readme_lines
from test_osworld_openai import INFEASIBLE
from test_osworld_taskset import EXAMPLES, needs_set, osworld_folder

pytestmark = pytest.mark.skipif(
    not all(shutil.which(p) for p in ("Xvfb", "openbox", "xdotool", "wmctrl")),
    reason="the desktop packages are missing (./dev installs them)")


def cli(*args: str):
    return CliRunner().invoke(main, list(args), catch_exceptions=False)


def show_result(result_dir: Path, action_space: str, observation_type: str, model: str) -> dict[str, list[float]]:
    """What OSWorld's show_result.py (get_result) collects: domain -> the scores of the
    examples that have a result.txt."""
    target = result_dir / action_space / observation_type / model
    scores: dict[str, list[float]] = {}
    for domain in sorted(os.listdir(target)):
        for example in sorted(os.listdir(target / domain)):
            if "result.txt" in os.listdir(target / domain / example):
                scores.setdefault(domain, []).append(float((target / domain / example / "result.txt").read_text()))
    return scores


@pytest.fixture(scope="module")
def osworld_run(tmp_path_factory):
    """An osworld run of an OSWorld folder (two domains), two samples per task, by the CLI;
    the tests below only read it (each exports into a folder of its own)."""
    tmp = tmp_path_factory.mktemp("export")
    data = osworld_folder(tmp / "set", {
        "gives-up": {"domain": "os", "instruction": "cannot be done", "config": [],
                     "evaluator": {"func": "infeasible"}, "reference": ["FAIL"]},
        "also-gives-up": {"domain": "chrome", "instruction": "cannot be done either", "config": [],
                          "evaluator": {"func": "infeasible"}, "reference": ["FAIL"]},
        "acts-instead": {"domain": "chrome", "instruction": "was feasible", "config": [],
                         "evaluator": {"func": "infeasible"}, "reference": ["WAIT"]},
    })
    out = tmp / "out"
    result = cli("run", "--mode", "osworld", "--data", str(data), "--agent", "oracle", "--output-dir", str(out),
                 "--run-id", "r", "--group-size", "2", "--num-rollouts", "1", "--no-progress",
                 "--screen-width", "640", "--screen-height", "480")
    assert result.exit_code == 0, result.output
    return out, out / "r"


def test_the_readme_command_exports_what_osworlds_show_result_reads(osworld_run, tmp_path):
    out, run_dir = osworld_run
    [line] = readme_lines("Desktop tasks (osworld)", "", "parallel-rollout runs export-osworld")
    proc = bash(line.replace(" RUN ", f" {run_dir} "), tmp_path, env=INSTALLED)
    assert proc.returncode == 0, proc.stderr
    folder = Path("osworld_results") / "pyautogui" / "screenshot" / "oracle"
    assert f"exported 3 example(s) to {folder} (3 with result.txt; domains from " in proc.stdout
    folder = tmp_path / folder
    assert show_result(tmp_path / "osworld_results", "pyautogui", "screenshot", "oracle") == {
        "chrome": [0.0, 1.0], "os": [1.0]}  # acts-instead, also-gives-up; gives-up
    example = folder / "os" / "gives-up"
    attempt = run_dir / "trajectories" / "gives-up" / "0" / "attempt-0"
    assert sorted(p.name for p in example.iterdir()) == sorted(p.name for p in attempt.iterdir())
    steps = [json.loads(line) for line in (example / "traj.jsonl").read_text().splitlines()]
    assert steps[-1]["action"] == "FAIL" and (example / steps[-1]["screenshot_file"]).is_file()
    assert (example / "traj.jsonl").read_bytes() == (attempt / "traj.jsonl").read_bytes()
    (example / "result.txt").write_text("0.5\n")  # OSWorld's scripts may write there: a copy
    assert (attempt / "result.txt").read_text().strip() == "1.0"


def test_a_task_its_index_no_longer_lists_keeps_the_domain_the_run_read_it_from(osworld_run, tmp_path):
    """An index of the user's own, edited since the run (the next task to try): the examples it
    no longer lists went under `all/`, a domain of one example to show_result.py, though the run
    recorded reading examples/chrome/acts-instead.json."""
    out, run_dir = osworld_run
    settings = json.loads((run_dir / "config.json").read_text())["config"]
    index = Path(settings["data"]) / "evaluation_examples" / "test_all.json"
    kept = index.read_text()
    try:
        index.write_text(json.dumps({"os": ["gives-up"], "chrome": ["also-gives-up"]}))
        done = cli("runs", "export-osworld", str(run_dir), str(tmp_path / "res"))
    finally:
        index.write_text(kept)
    assert "exported 3 example(s)" in done.output, done.output
    assert show_result(tmp_path / "res", "pyautogui", "screenshot", "oracle") == {
        "chrome": [0.0, 1.0], "os": [1.0]}


def test_another_sample_goes_to_a_result_folder_of_its_own_and_nothing_is_overwritten(osworld_run, tmp_path):
    out, run_dir = osworld_run
    target = tmp_path / "results"
    # the two samples' files say the same (one second apart at most): tell them apart
    (run_dir / "trajectories" / "gives-up" / "1" / "attempt-0" / "sample-1.txt").write_text("1")
    assert cli("runs", "export-osworld", str(run_dir), str(target), "--sample", "1", "--model", "m#1").exit_code == 0
    example = target / "pyautogui" / "screenshot" / "m#1" / "os" / "gives-up"
    assert (example / "sample-1.txt").is_file() and (example / "result.txt").is_file()

    again = CliRunner().invoke(main, ["runs", "export-osworld", str(run_dir), str(target), "--sample", "1",
                                      "--model", "m#1"])
    assert again.exit_code == 2 and "already exists" in again.output and "--overwrite" in again.output
    (example / "result.txt").write_text("0.5\n")
    assert cli("runs", "export-osworld", str(run_dir), str(target), "--sample", "1", "--model", "m#1",
               "--overwrite").exit_code == 0
    assert (example / "result.txt").read_text().strip() == "1.0"

    missing = CliRunner().invoke(main, ["runs", "export-osworld", str(run_dir), str(target), "--sample", "2"])
    assert missing.exit_code == 2 and "no final attempt of sample 2 (samples: 0, 1)" in missing.output


def test_a_run_of_another_mode_or_no_run_is_refused_by_name(tmp_path):
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text(json.dumps({"id": "t", "problem": "1+1?", "answer": "2"}) + "\n")
    out = tmp_path / "out"
    ran = cli("run", "--mode", "math", "--data", str(tasks), "--agent", "oracle", "--output-dir", str(out),
              "--run-id", "m", "--no-progress")
    assert ran.exit_code == 0, ran.output
    refused = CliRunner().invoke(main, ["runs", "export-osworld", str(out / "m"), str(tmp_path / "res")])
    assert refused.exit_code == 2 and "a math run; only an osworld run" in refused.output
    nothing = CliRunner().invoke(main, ["runs", "export-osworld", str(tmp_path), str(tmp_path / "res")])
    assert nothing.exit_code == 2 and "not a run folder" in nothing.output
    assert not (tmp_path / "res").exists()


#: the model's replies, turn by turn: a look, then FAIL (OSWorld's infeasible task passes)
REPLIES = ("Let me look first.\n```code\nWAIT\n```", "The machine has no such device.\n```code\nFAIL\n```")
#: a model as Hugging Face names it
HF_MODEL = "Qwen/Qwen2.5-VL-7B-Instruct"


@pytest.fixture(scope="module")
def model_run(tmp_path_factory):
    """A run of OSWorld's own infeasible os task (an index of one's own) by the openai agent,
    its model named ``HF_MODEL``, against a local server that answers ``REPLIES``."""
    tmp = tmp_path_factory.mktemp("model-run")
    index = tmp / "one.json"
    index.write_text(json.dumps({INFEASIBLE[0]: [INFEASIBLE[1]]}))
    out = tmp / "out"
    server = LLMServer(policy=lambda body: reply_with_counts(
        body, REPLIES[sum(m["role"] == "assistant" for m in body["messages"])])).start()
    server.models.append(HF_MODEL)  # its /models lists the run's model, as a server that serves it does
    try:
        with pytest.MonkeyPatch.context() as env:
            env.delenv("OPENAI_API_KEY", raising=False)
            ran = cli("run", "--data", str(EXAMPLES), "--osworld-index", str(index), "--agent", "openai",
                      "--base-url", server.url, "--model", HF_MODEL, "--sleep-after-execution", "0.1",
                      "--num-rollouts", "1", "--output-dir", str(out), "--run-id", "r", "--no-progress",
                      "--screen-width", "640", "--screen-height", "480")
    finally:
        server.stop()
    assert ran.exit_code == 0, ran.output
    return out / "r", out / "r" / "trajectories" / INFEASIBLE[1] / "0" / "attempt-0"


@needs_set
def test_each_steps_response_is_the_model_reply_its_action_came_from(model_run):
    """traj.jsonl's "response", where OSWorld keeps the model's reply, was null at every step."""
    _, attempt = model_run
    steps = [json.loads(line) for line in (attempt / "traj.jsonl").read_text().splitlines()]
    assert [(s["action"], s["response"]) for s in steps] == [("WAIT", REPLIES[0]), ("FAIL", REPLIES[1])]
    turns = [json.loads(line) for line in attempt.with_suffix(".jsonl").read_text().splitlines()]
    assert [t.get("reply") for t in turns if "turn" in t] == list(REPLIES)  # the run's own trajectory


def test_a_reply_split_by_a_weight_update_is_one_response():
    """A partial rollout's reply the server re-tokenized is recorded in pieces (agents/calls.py):
    the step's response is the whole reply, after a plan call of the same turn that is not."""
    from parallel_rollout.agents.calls import split_retokenized, turn_of
    from parallel_rollout.envs.osworld.env import reply_text

    text = "I will type it.\n```python\npyautogui.write('hi')\n```"
    call = split_retokenized({"prompt_token_ids": [1], "token_ids": [5, 6, 7, 8], "logprobs": [0.0] * 4,
                              "versions": [0, 0, 1, 1], "reply": text}, [(2, 9, [1, 5, 6])], text)
    plan = {"prompt_token_ids": [1], "token_ids": [9], "reply": "a plan"}
    assert reply_text(turn_of([plan, call])) == text
    assert reply_text(turn_of([plan])) == "a plan" and reply_text({}) is None


@needs_set
def test_a_model_name_with_a_slash_nests_folders_as_osworld_does(model_run, tmp_path):
    """A model named as Hugging Face names it exports to the folders OSWorld's run.py makes of
    it (os.path.join), where show_result.py looks (it was refused as "no folder name"); a name
    that would leave the result folder is refused, saying how to name the folder."""
    run_dir, attempt = model_run
    domain, task_id = INFEASIBLE
    results = tmp_path / "results"
    exported = cli("runs", "export-osworld", str(run_dir), str(results))
    assert exported.exit_code == 0, exported.output
    assert show_result(results, "pyautogui", "screenshot", HF_MODEL) == {domain: [1.0]}
    assert (results / "pyautogui" / "screenshot" / "Qwen" / "Qwen2.5-VL-7B-Instruct" / domain / task_id
            / "traj.jsonl").read_bytes() == (attempt / "traj.jsonl").read_bytes()
    for name in ("../escape", "a/../../escape", str(tmp_path / "abs"), ""):
        refused = CliRunner().invoke(main, ["runs", "export-osworld", str(run_dir), str(tmp_path / "res"),
                                            "--model", name])
        assert refused.exit_code == 2, refused.output
        assert f"the model's name {name!r} cannot be the <model> folder of OSWorld's layout" in refused.output
        assert "name the folder with --model NAME" in refused.output
    assert not (tmp_path / "res").exists() and not (tmp_path / "escape").exists()


def test_a_task_skipped_as_unsupported_is_scored_0_by_osworlds_scripts_as_by_the_run(tmp_path):
    """--skip-unsupported scores a skipped task 0 so the rate is over the whole set: the export
    gives it its result.txt, so show_result.py's rate is the run's, not that of the rest."""
    data = osworld_folder(tmp_path / "set", {
        "gives-up": {"domain": "os", "instruction": "cannot be done", "config": [],
                     "evaluator": {"func": "infeasible"}, "reference": ["FAIL"]},
        "lacks-a-metric": {"domain": "gimp", "instruction": "b", "config": [], "evaluator": {
            "func": "no_such_metric_at_all", "result": {"type": "vm_file", "path": "/tmp/x", "dest": "x"}}},
    })
    out = tmp_path / "out"
    ran = cli("run", "--test_config_base_dir", str(data), "--skip-unsupported", "--agent", "oracle",
              "--result_dir", str(out), "--run-id", "r", "--num-rollouts", "1", "--no-progress",
              "--screen-width", "640", "--screen-height", "480")
    assert ran.exit_code == 0, ran.output
    assert json.loads((out / "r" / "summary.json").read_text())["success_rate"] == 0.5
    done = cli("runs", "export-osworld", str(out / "r"), str(tmp_path / "res"))
    assert "exported 2 example(s)" in done.output and "(2 with result.txt;" in done.output, done.output
    assert show_result(tmp_path / "res", "pyautogui", "screenshot", "oracle") == {"gimp": [0.0], "os": [1.0]}


def test_a_run_whose_task_folder_is_gone_exports_each_example_under_its_domain(tmp_path):
    """Results copied off the machine that ran them (or the task set moved): the index cannot
    be read, and the domains are those of the task files the run recorded reading, not one
    `all/` that show_result.py would report as a single domain."""
    data = osworld_folder(tmp_path / "set", {
        "gives-up": {"domain": "os", "instruction": "cannot be done", "config": [],
                     "evaluator": {"func": "infeasible"}, "reference": ["FAIL"]},
        "acts-instead": {"domain": "chrome", "instruction": "was feasible", "config": [],
                         "evaluator": {"func": "infeasible"}, "reference": ["WAIT"]},
    })
    out = tmp_path / "out"
    ran = cli("run", "--test_config_base_dir", str(data), "--agent", "oracle", "--result_dir", str(out),
              "--run-id", "r", "--num-rollouts", "1", "--no-progress", "--screen-width", "640", "--screen-height", "480")
    assert ran.exit_code == 0, ran.output
    shutil.rmtree(data)
    done = cli("runs", "export-osworld", str(out / "r"), str(tmp_path / "res"))
    assert "domains from the task files the run recorded, its index not readable now" in done.output, done.output
    assert show_result(tmp_path / "res", "pyautogui", "screenshot", "oracle") == {"chrome": [0.0], "os": [1.0]}


def test_a_sample_graded_without_the_evaluators_result_is_scored_by_osworlds_scripts_as_by_the_run(
        tmp_path, monkeypatch):
    """An attempt past --task-timeout is final with reward 0 (so is an agent's error): the
    evaluator never wrote its result.txt, and the export left the example without one, so
    show_result.py took it for unfinished and its rate was over the other examples only (here
    100% where the run says 50%). It gets the run's score, as a skipped task does."""
    from conftest import ROOT

    monkeypatch.syspath_prepend(str(ROOT / "tests"))
    data = osworld_folder(tmp_path / "set", {
        "gives-up": {"domain": "os", "instruction": "cannot be done", "config": [],
                     "evaluator": {"func": "infeasible"}, "answers": ["FAIL"]},
        "thinks-too-long": {"domain": "chrome", "instruction": "cannot be done either", "config": [],
                            "evaluator": {"func": "infeasible"}, "answers": ["FAIL"], "think_s": 120},
    })
    out = tmp_path / "out"
    ran = cli("run", "--test_config_base_dir", str(data), "--agent", "py_agents:ScriptedAnswerAgent",
              "--task-timeout", "10", "--result_dir", str(out), "--run-id", "r", "--num-rollouts", "2",
              "--no-progress", "--screen-width", "640", "--screen-height", "480")
    summary = json.loads((out / "r" / "summary.json").read_text())
    assert summary["success_rate"] == 0.5 and summary["status_counts"].get("task_timeout") == 1, ran.output
    done = cli("runs", "export-osworld", str(out / "r"), str(tmp_path / "res"), "--model", "m")
    assert "exported 2 example(s)" in done.output and "(2 with result.txt;" in done.output, done.output
    assert show_result(tmp_path / "res", "pyautogui", "screenshot", "m") == {"chrome": [0.0], "os": [1.0]}
    cut = out / "r" / "trajectories" / "thinks-too-long" / "0" / "attempt-0"
    assert cut.is_dir() and not (cut / "result.txt").exists()  # the run's own files are left as they are


def test_the_commands_that_read_runs_take_osworld_result_dir(tmp_path):
    """A run started with OSWorld's --result_dir R is listed, reported and compared with
    --result_dir R too (it was click's bare "No such option '--result_dir'"); export-osworld,
    whose RESULT_DIR is OSWorld's result folder it writes, refuses it saying which is which."""
    (tmp_path / "R").mkdir()
    for words in (["runs", "list"], ["report", "nope"], ["compare", "nope", "nope2"]):
        said = {flag: CliRunner().invoke(main, [*words, flag, str(tmp_path / "R")]) for flag in
                ("--output-dir", "--result_dir")}
        assert said["--result_dir"].exit_code == said["--output-dir"].exit_code, said["--result_dir"].output
        assert said["--result_dir"].output == said["--output-dir"].output, said["--result_dir"].output
    refused = CliRunner().invoke(main, ["runs", "export-osworld", "nope", str(tmp_path / "out"), "--result_dir",
                                        str(tmp_path / "R")])
    assert refused.exit_code == 2, refused.output
    assert "--result_dir" in refused.output and "--output-dir" in refused.output and "RESULT_DIR" in refused.output
    assert not (tmp_path / "out").exists()


@needs_set
def test_a_run_given_osworlds_result_dir_says_the_command_that_writes_its_layout_there(tmp_path):
    """An OSWorld user's run.py line, then show_result.py on the same --result_dir: the run
    writes ``<result_dir>/<run-id>/``, where show_result.py finds no ``<action_space>/…`` and
    says 'New experiment, no result yet.', and the run's end said nothing of
    export-osworld. It names the command, as typed, that fills the layout there; OSWorld's
    scoring of what it writes is the run's success rate (two infeasible tasks passed by the
    oracle, one it has no reference for, skipped and scored 0)."""
    import sys

    from parallel_rollout.envs.osworld.references import reference_of

    feasible_without = next(i for i in json.loads((EXAMPLES / "test_all.json").read_text())["os"]
                            if reference_of(i) is None)
    (tmp_path / "mine.json").write_text(json.dumps(
        {"os": [INFEASIBLE[1], "a462a795-fdc7-4b23-b689-e8b6df786b78", feasible_without]}))
    line = (f"{sys.executable} -m parallel_rollout run --test_config_base_dir {EXAMPLES} --test_all_meta_path "
            "mine.json --result_dir ./results --agent oracle --skip-unsupported --num_envs 2 --run-id r "
            "--no-progress --screen_width 640 --screen_height 480")
    ran = bash(line, tmp_path, env=INSTALLED)
    assert ran.returncode == 0, ran.stdout + ran.stderr
    [hint] = [said for said in ran.stdout.splitlines() if "export-osworld" in said]
    assert hint.startswith("OSWorld's layout, which its show_result.py reads (./results/pyautogui/screenshot/"
                           "oracle/<domain>/<example id>/): "), hint
    command = hint.split("/): ", 1)[1]
    assert command == f"{sys.executable} -m parallel_rollout runs export-osworld results/r ./results", hint
    done = bash(command, tmp_path, env=INSTALLED)
    assert done.returncode == 0, done.stdout + done.stderr
    scores = show_result(tmp_path / "results", "pyautogui", "screenshot", "oracle")
    assert sorted(scores["os"]) == [0.0, 1.0, 1.0], scores
    summary = json.loads((tmp_path / "results" / "r" / "summary.json").read_text())
    # summary.json keeps four decimals
    assert summary["success_rate"] == pytest.approx(sum(scores["os"]) / len(scores["os"]), abs=1e-4), summary


@needs_set
def test_the_command_a_resumed_run_names_replaces_the_examples_it_exported_before(tmp_path):
    """A run given --result_dir, its export as its end said, then the run resumed (or the same
    command run again, a new run of the same tasks): the end named the same command, which
    refused at once ('... already exists: export into an empty result folder, or pass
    --overwrite'). It says the examples are there and names the command with --overwrite."""
    import sys

    from parallel_rollout.envs.osworld.references import reference_of

    # a task the oracle has no reference for: skipped, scored 0, and no VM boots
    without = next(i for i in json.loads((EXAMPLES / "test_all.json").read_text())["os"] if reference_of(i) is None)
    (tmp_path / "mine.json").write_text(json.dumps({"os": [without]}))
    line = (f"{sys.executable} -m parallel_rollout run --test_config_base_dir {EXAMPLES} --test_all_meta_path "
            "mine.json --result_dir ./results --skip-unsupported --run-id r --no-progress")
    for again in ("", " --resume"):
        ran = bash(line + again, tmp_path, env=INSTALLED)
        assert ran.returncode == 0, ran.stdout + ran.stderr
        [hint] = [said for said in ran.stdout.splitlines() if "export-osworld" in said]
        done = bash(hint.split("): ", 1)[1], tmp_path, env=INSTALLED)
        assert done.returncode == 0, (hint, done.stdout + done.stderr)
    assert ("(./results/pyautogui/screenshot/oracle/<domain>/<example id>/; 1 of this run's examples is there "
            "already, which --overwrite replaces): ") in hint, hint
    assert hint.endswith(" runs export-osworld results/r ./results --overwrite"), hint
    assert show_result(tmp_path / "results", "pyautogui", "screenshot", "oracle") == {"os": [0.0]}


@needs_set
def test_a_run_given_osworlds_result_dir_where_no_sample_finished_names_no_export(tmp_path):
    """The model endpoint refused the run's key at its first answer: no sample has a final
    attempt, and ``runs export-osworld`` would refuse ('no final attempt'), yet the run's end
    named it. It names it only once a sample finished."""
    (tmp_path / "one.json").write_text(json.dumps({INFEASIBLE[0]: [INFEASIBLE[1]]}))
    server = LLMServer(policy=lambda body: {"status": 401, "message": "invalid api key"}).start()
    try:
        with pytest.MonkeyPatch.context() as env:
            env.delenv("OPENAI_API_KEY", raising=False)
            env.chdir(tmp_path)
            ran = cli("run", "--test_config_base_dir", str(EXAMPLES), "--test_all_meta_path", "one.json",
                      "--result_dir", "./results", "--agent", "openai", "--base-url", server.url, "--model",
                      "m", "--run-id", "r", "--no-progress", "--screen_width", "640", "--screen_height", "480")
    finally:
        server.stop()
    assert ran.exit_code == 2, ran.output
    assert "refused" in ran.output and "export-osworld" not in ran.output, ran.output
