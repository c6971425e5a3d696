"""web mode: MiniWoB++ pages in Chromium inside process-sandbox VMs, the oracle's solvers, the
openai agent's prompt and parser, resets that leave no browser state, bad input."""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path

import psutil
import pytest

from conftest import assert_exactly_once, write_tasks
from llm_server import completion, llm_server  # noqa: F401 - fixture
from parallel_rollout.agents import prompts
from parallel_rollout.config import build_config
from parallel_rollout.envs.web import catalog, oracle
from parallel_rollout.envs.web.actions import ActionError, parse_action
from parallel_rollout.envs.web.env import WebEnv
from parallel_rollout.guest.client import GuestClient
from parallel_rollout.errors import TaskFileError
from parallel_rollout.runner import Runner
from parallel_rollout.tasks import load_tasks
from parallel_rollout.envs.registry import task_validators
from readme_support import ROOT, bash, readme_lines

pytestmark = pytest.mark.skipif(shutil.which("chromium") is None, reason="Debian's chromium is not installed")

#: a few environments of different kinds for the default run: one click, a form, checkboxes, a list
QUICK = ("click-button", "enter-text", "click-checkboxes", "choose-list")


def web_task(env, seed=0, **extra):
    return {"id": f"{env}-{seed}", "mode": "web", "env": env, "seed": seed, **extra}


def run(tmp_path, tasks, run_id="web", **flags):
    data = write_tasks(tmp_path / f"{run_id}.jsonl", tasks) if isinstance(tasks, list) else tasks
    base = dict(mode="web", data=str(data), agent="oracle", num_rollouts=2, num_vms=2, use_vm_pool=True,
                output_dir=str(tmp_path / "out"), run_id=run_id, progress=False)
    base.update(flags)
    return Runner(build_config(base)).run()


# -- no VM: the task set, bad input, actions, prompt -------------------------------------------


def test_shipped_set_has_20_envs_with_a_solver_each_and_3_seeds():
    tasks = load_tasks("miniwob", default_mode="web", validators=task_validators())
    envs = {t.get("env") for t in tasks}
    assert len(envs) >= 20 and envs <= set(oracle.SOLVERS)
    assert {t.seed for t in tasks} == {0, 1, 2} and len(tasks) == 3 * len(envs)
    assert set(envs) <= set(catalog.environments())


def test_unknown_environment_is_refused_naming_file_and_line(tmp_path):
    path = write_tasks(tmp_path / "bad.jsonl", [web_task("click-button"), web_task("click-buton")])
    with pytest.raises(TaskFileError, match=r"bad\.jsonl:2: .*unknown MiniWoB\+\+ environment 'click-buton'.*click-button"):
        load_tasks(str(path), default_mode="web", validators=task_validators())
    path = write_tasks(tmp_path / "bad2.jsonl", [{"id": "a", "mode": "web", "seed": 1}])
    with pytest.raises(TaskFileError, match=r"bad2\.jsonl:1: .*'env'"):
        load_tasks(str(path), default_mode="web", validators=task_validators())
    path = write_tasks(tmp_path / "bad3.jsonl", [web_task("click-button", time_limit_s=-1)])
    with pytest.raises(TaskFileError, match=r"bad3\.jsonl:1: .*time_limit_s"):
        load_tasks(str(path), default_mode="web", validators=task_validators())


def test_cli_refuses_unknown_environment_before_anything_runs(tmp_path):
    path = write_tasks(tmp_path / "bad.jsonl", [web_task("enter-txt")])
    proc = subprocess.run([sys.executable, "-m", "parallel_rollout.cli", "run", "--mode", "web", "--data", str(path),
                           "--agent", "oracle", "--output-dir", str(tmp_path / "out")],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2
    assert f"{path}:1:" in proc.stderr and "enter-txt" in proc.stderr and "enter-text" in proc.stderr
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").rglob("results.jsonl"))


@pytest.mark.parametrize("text, expected", [
    ('{"action": "click", "ref": 4}', {"action": "click", "ref": 4, "clicks": 1}),
    ('click("12")', {"action": "click", "ref": 12, "clicks": 1}),
    ("mouse_click(80, 100.5)", {"action": "click", "x": 80, "y": 100.5, "clicks": 1}),
    ('fill("5", "hi there")', {"action": "type", "ref": 5, "text": "hi there"}),
    ('keyboard_press("ctrl+a")', {"action": "press", "key": "ctrl+a"}),
    ("scroll(0, 200)", {"action": "scroll", "dx": 0, "dy": 200}),
    ('select_option("7", "Peru")', {"action": "select", "ref": 7, "option": "Peru"}),
    ("noop()", {"action": "wait", "ms": 500}),
    ("DONE", {"action": "done"}),
])
def test_actions_parse_from_json_and_browsergym_calls(text, expected):
    assert parse_action(text) == expected


@pytest.mark.parametrize("bad, message", [
    ('{"action": "click"}', "must be a number"), ('{"action": "fly"}', "must be one of"),
    ('click("abc")', "'ref' must be"), ("os.system('x')", "unknown action call"),
    ('{"action": "type", "ref": 3}', "'text' must be a string"), ("click the button", "not an action"), (42, "got int"),
])
def test_bad_actions_say_what_is_wrong(bad, message):
    with pytest.raises(ActionError, match=re.escape(message)):
        parse_action(bad)


def test_prompt_renders_the_dom_and_the_parser_reads_replies():
    observation = {"utterance": 'Click on the "No" button.', "error": None, "dom": [
        {"ref": 1, "depth": 0, "tag": "body", "left": 0, "top": 0, "width": 500, "height": 210},
        {"ref": 4, "parent": 1, "depth": 1, "tag": "button", "text": 'say "No"', "left": 2, "top": 52,
         "width": 34, "height": 21, "focused": True}]}
    text = prompts.render("web", observation)
    assert 'Task: Click on the "No" button.' in text
    assert '  [4] button text="say \\"No\\"" @2,52 34x21 focused' in text
    assert prompts.parse("web", 'I will click it.\n```json\n{"action": "click", "ref": 4}\n```') == {"action": "click", "ref": 4}
    assert prompts.parse("web", 'Fill it: fill("5", "x")') == 'fill("5", "x")'
    assert prompts.parse("web", "DONE") == "DONE"
    assert prompts.system_prompt("web").startswith("You operate a web page")


# -- through the pool --------------------------------------------------------------------------


def _check_oracle_run(run_dir, tasks):
    finals = assert_exactly_once(run_dir, {f"{t['id']}#0" for t in tasks})
    failed = {k: (r["status"], r.get("eval"), r.get("failure")) for k, r in finals.items() if r["status"] != "success"}
    assert not failed
    assert all(r["reward"] > 0 and r["eval"]["done"] and r["eval"]["raw_reward"] > 0 for r in finals.values())
    return finals


@pytest.mark.slow
@pytest.mark.timeout(1800)  # ~500 s on 2 loaded cores: 96 browser starts on 2 VMs
def test_oracle_solves_every_shipped_task_with_3_seeds_on_a_shared_pool(tmp_path):
    """The README's command, as printed (only --output-dir added): 32 environments x 3 seeds."""
    tasks = catalog.default_tasks()
    assert (len({t["env"] for t in tasks}), len(tasks)) == (32, 96)  # as the README says
    [line] = readme_lines("Web tasks (web: MiniWoB++)", "", "./dev run --mode web --data miniwob")
    proc = bash(f"{line} --output-dir {tmp_path} --run-id readme", ROOT, timeout=1700)
    assert proc.returncode == 0, proc.stderr[-3000:]
    _check_oracle_run(tmp_path / "readme", tasks)


def test_cli_runs_the_oracle_through_the_pool_and_an_unsolvable_task_ends_at_its_time_limit(tmp_path):
    """A few environments of different kinds (a click, a form, checkboxes, a list) and one
    the oracle has no solver for, which must end with reward 0 when the page's time runs out."""
    tasks = [web_task(env, seed=5) for env in QUICK] + [web_task("tic-tac-toe", time_limit_s=3)]
    path = write_tasks(tmp_path / "t.jsonl", tasks)
    started = time.time()
    proc = subprocess.run([sys.executable, "-m", "parallel_rollout.cli", "run", "--mode", "web", "--data", str(path),
                           "--agent", "oracle", "--num-rollouts", "2", "--num-vms", "2", "--use-vm-pool",
                           "--output-dir", str(tmp_path / "out"), "--run-id", "cli", "--no-progress"],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]  # finished (one task failed: graded, not an abort)
    run_dir = tmp_path / "out" / "cli"
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["successes"] == len(QUICK)
    finals = assert_exactly_once(run_dir, {f"{t['id']}#0" for t in tasks})
    unsolved = finals.pop("tic-tac-toe-0#0")
    assert unsolved["status"] == "failure" and unsolved["reward"] == 0.0
    assert unsolved["eval"]["reason"] == "timed out" and unsolved["eval"]["raw_reward"] == -1
    assert all(r["status"] == "success" and r["reward"] > 0 and r["eval"]["done"] for r in finals.values())
    assert finals["click-checkboxes-5#0"]["turns"] >= 2  # ticks boxes, then submits
    assert time.time() - started < 240


# -- resets ------------------------------------------------------------------------------------

_STATE = ("JSON.stringify({local: localStorage.getItem('carried'), session: sessionStorage.getItem('carried'), "
          "cookie: document.cookie})")
_OPEN_PAGE = """
import socket
s = socket.create_connection(("127.0.0.1", PORT), timeout=10)
s.sendall(b"PUT /json/new?about:blank HTTP/1.1\\r\\nHost: 127.0.0.1\\r\\nConnection: close\\r\\n\\r\\n")
print(s.recv(4096).split(b"\\r\\n")[0].decode())
"""


def test_a_reset_leaves_no_browser_state_for_the_next_task(tmp_path):
    from parallel_rollout.envs.web.env import WebEnv
    from parallel_rollout.guest.client import GuestClient
    from parallel_rollout.pool.providers.process import ProcessProvider
    from parallel_rollout.tasks import Task

    base = Path(tempfile.mkdtemp(prefix="pr-web-"))  # short: a socket's path must fit
    provider = ProcessProvider("webreset", base_dir=base)
    info = provider.start("vm0")
    try:
        env = WebEnv(build_config({"mode": "web"}))
        env.reset(Task(id="a", mode="web", payload={"env": "click-button"}, seed=1), GuestClient(info.address))
        dirty = env._call({"op": "eval", "expression": "localStorage.setItem('carried', 'yes');"
                           "sessionStorage.setItem('carried', 'yes');"
                           "document.cookie = 'carried=yes; max-age=86400; path=/'; " + _STATE}, 30)
        assert json.loads(dirty["value"]) == {"local": "yes", "session": "yes", "cookie": "carried=yes"}
        opened = GuestClient(info.address).run_python(f"PORT = {env.ports['cdp']}\n{_OPEN_PAGE}")
        assert "200" in opened["output"], opened
        assert env._call({"op": "eval", "expression": "1"}, 30)["pages"] == 2
        # the same VM, reset as the pool resets it on release, then the next task
        info = provider.reset(info)
        env = WebEnv(build_config({"mode": "web"}))
        env.trajectory_dir = tmp_path / "traj"
        first = env.reset(Task(id="b", mode="web", payload={"env": "click-button", "screenshot": True}, seed=1),
                          GuestClient(info.address))
        clean = env._call({"op": "eval", "expression": _STATE}, 30)
        assert json.loads(clean["value"]) == {"local": None, "session": None, "cookie": ""}
        assert clean["pages"] == 1
        assert first["utterance"] and first["dom"]
        png = (tmp_path / "traj" / "step_0.png").read_bytes()  # the screenshot the task asked for
        assert png.startswith(b"\x89PNG") and first["screenshot_path"].endswith("step_0.png")
        assert isinstance(prompts.render("web", first), list)  # text and the image for the model
    finally:
        provider.stop(info)
        shutil.rmtree(base, ignore_errors=True)


def test_an_action_that_reaches_nothing_says_so(tmp_path):
    """A click off the viewport and text typed into the page's body did nothing and said
    error None, as a click that worked does: the agent could not tell."""
    from parallel_rollout.envs.web.env import WebEnv
    from parallel_rollout.guest.client import GuestClient
    from parallel_rollout.pool.providers.process import ProcessProvider
    from parallel_rollout.tasks import Task

    base = Path(tempfile.mkdtemp(prefix="pr-web-"))  # short: a socket's path must fit
    provider = ProcessProvider("webact", base_dir=base)
    info = provider.start("vm0")
    try:
        env = WebEnv(build_config({"mode": "web"}))
        first = env.reset(Task(id="a", mode="web", payload={"env": "enter-text"}, seed=1), GuestClient(info.address))
        body = next(el for el in first["dom"] if el["tag"] == "body")
        field = next(el for el in first["dom"] if el["tag"] == "input_text")
        off = env.step({"action": "click", "x": -5, "y": 99999}).observation
        assert off["error"].startswith("the point (-5, 99999) is outside the page's viewport ("), off["error"]
        typed = env.step({"action": "type", "ref": body["ref"], "text": "hello"}).observation
        assert typed["error"] == (f"element {body['ref']} (<body>) takes no text: type into an input, a "
                                  "textarea or an editable element")
        into_field = env.step({"action": "type", "ref": field["ref"], "text": "hello"}).observation
        assert into_field["error"] is None
        value = env._call({"op": "eval", "expression": f"core.previousDOMInfo[{field['ref']}].value"}, 30)
        assert value["value"] == "hello"
    finally:
        provider.stop(info)
        shutil.rmtree(base, ignore_errors=True)


# -- the openai agent, against the local test server ------------------------------------------

_LINE = re.compile(r"^( *)\[(-?\d+)\] (\S+)(.*?) @(-?\d+),(-?\d+) (\d+)x(\d+)( focused)?$")
_FIELDS = {"id": "id", "class": "classes", "text": "text", "value": "value", "options": "options"}


def read_rendered(text):
    """The observation back from the prompt's text: utterance and DOM list (refs, nesting)."""
    utterance = re.search(r"^Task: (.*)$", text, re.MULTILINE).group(1)
    dom, parents = [], []
    for line in text.splitlines():
        match = _LINE.match(line)
        if not match:
            continue
        depth = len(match.group(1)) // 2
        el = {"ref": int(match.group(2)), "tag": match.group(3), "depth": depth,
              "parent": parents[depth - 1] if depth else None,
              "left": int(match.group(5)), "top": int(match.group(6)),
              "width": int(match.group(7)), "height": int(match.group(8))}
        rest, decoder = match.group(4).strip(), json.JSONDecoder()
        while rest:
            name, _, rest = rest.partition("=")
            value, end = decoder.raw_decode(rest)
            el[_FIELDS[name]] = value
            rest = rest[end:].strip()
        parents[depth:] = [el["ref"]]
        dom.append(el)
    return {"utterance": utterance, "dom": dom, "done": False}


def as_call(action):
    """The BrowserGym-style string of an oracle action."""
    if action["action"] == "click":
        return f'click("{action["ref"]}")'
    if action["action"] == "type":
        return f'fill("{action["ref"]}", {json.dumps(action["text"])})'
    if action["action"] == "select":
        return f'select_option("{action["ref"]}", {json.dumps(action["option"])})'
    return f'noop({action.get("ms", 500)})'


_ENV_OF = (("button.", "click-button"), ("into the text field", "enter-text"),
           ("from the list", "choose-list"), ("and click Submit", "click-checkboxes"))


def web_model(body):
    """A model that reads the rendered page like the oracle and answers in turn as a ```json
    block and as a BrowserGym call."""
    assert body["messages"][0]["content"] == prompts.system_prompt("web")
    observation = read_rendered(body["messages"][-1]["content"])
    env = next(env for key, env in _ENV_OF if key in observation["utterance"])
    action = oracle.next_action(env, observation)
    turn = sum(1 for m in body["messages"] if m["role"] == "assistant")
    if turn % 2:
        return {"reply": f"I will do this next: {as_call(action)}"}
    return {"reply": f"Next:\n```json\n{json.dumps(action)}\n```"}


@pytest.mark.slow
def test_openai_agent_solves_episodes_through_the_prompt_and_parser(tmp_path, llm_server, monkeypatch):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    server = llm_server(policy=web_model)
    # a model's turns take longer than MiniWoB's 10 s allow: the tasks give it a minute
    tasks = [web_task(env, seed=4, time_limit_s=60) for env in ("click-checkboxes", "enter-text")]
    outcome = run(tmp_path, tasks, agent="openai", model="test-model", base_url=server.url)
    finals = _check_oracle_run(outcome.run_dir, tasks)
    assert len(server.requests) == sum(r["turns"] for r in finals.values())
    assert all(r["turns"] >= 2 for r in finals.values())  # both reply forms were used


# -- a guest without Chromium: a missing prerequisite, not a broken VM -------------------------

def test_a_host_without_chromium_fails_the_preflight_and_the_run_before_it_starts(tmp_path, monkeypatch):
    """The process provider's sandboxes use this host's Chromium: its absence is known before
    any VM boots, named by --dry-run and by the run (exit 2, no run folder)."""
    from click.testing import CliRunner

    from parallel_rollout.cli import main
    from parallel_rollout.envs.web import browser

    monkeypatch.setattr(browser, "CHROMIUM", ("no-such-chromium",))
    data = write_tasks(tmp_path / "web1.jsonl", [web_task("click-button")])
    args = ["run", "--mode", "web", "--data", str(data), "--output-dir", str(tmp_path / "out"), "--run-id", "w",
            "--no-progress"]
    dry = CliRunner().invoke(main, [*args, "--dry-run"])
    assert dry.exit_code == 2, dry.output
    assert "guest: the web mode needs Chromium" in dry.output and "no-such-chromium" in dry.output
    real = CliRunner().invoke(main, args)
    assert real.exit_code == 2 and "the web mode needs Chromium" in real.output, real.output
    assert not (tmp_path / "out" / "w").exists()


@contextmanager
def remote_agent(tmp_path, path):
    """A guest agent on a loopback port, as a remote machine runs it (no --reap-all), with
    ``path`` for its PATH; yields (its process, port). After the block: nothing it started
    is left alive (checked by pid)."""
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    server = subprocess.Popen([sys.executable, str(ROOT / "src/parallel_rollout/guest/server.py"), "--host",
                               "127.0.0.1", "--port", str(port)], env={"PATH": path, "HOME": str(tmp_path)},
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                assert time.monotonic() < deadline and server.poll() is None
                time.sleep(0.1)
        yield server, port
    finally:
        left = psutil.Process(server.pid).children(recursive=True) if server.poll() is None else []
        server.terminate()
        server.wait(timeout=30)
        for process in left:  # what a failing test left: not this test's to leave behind
            process.kill()


def live_descendants(pid):
    """The processes ``pid`` started (a subreaper: orphans too) that are alive."""
    alive = []
    for process in psutil.Process(pid).children(recursive=True):
        with contextlib.suppress(psutil.NoSuchProcess):
            if process.status() != psutil.STATUS_ZOMBIE:
                alive.append(process)
    return alive


def run_remote(tmp_path, data, port, run_id):
    return subprocess.run([sys.executable, "-m", "parallel_rollout.cli", "run", "--mode", "web", "--data",
                           str(data), "--provider-name", "remote", "--vm-address", f"127.0.0.1:{port}",
                           "--reset-command", "none", "--num-rollouts", "1", "--output-dir",
                           str(tmp_path / "out"), "--run-id", run_id, "--no-progress"],
                          capture_output=True, text=True, timeout=300)


def test_a_remote_guest_without_chromium_stops_the_run_at_its_first_episode(tmp_path):
    """A guest agent whose PATH has no Chromium: the run stops with exit 1 at the first
    attempt, saying so, with no VM marked dead and no retries spent on VM after VM; and
    nothing of the episode (its page server) is left running on the machine."""
    empty = tmp_path / "bin"
    empty.mkdir()
    with remote_agent(tmp_path, str(empty)) as (server, port):
        data = write_tasks(tmp_path / "web1.jsonl", [web_task("click-button"), web_task("enter-text")])
        proc = run_remote(tmp_path, data, port, "nochrome")
        assert live_descendants(server.pid) == []
    assert proc.returncode == 1, proc.stdout + proc.stderr[-2000:]
    assert "run stopped: web: start failed in the VM: BrowserMissing: no Chromium in the VM" in proc.stderr
    records = [json.loads(line) for line in (tmp_path / "out" / "nochrome" / "results.jsonl").read_text().splitlines()]
    assert [r["status"] for r in records] == ["guest_prerequisite_missing"] and not records[0]["final"]
    summary = json.loads((tmp_path / "out" / "nochrome" / "summary.json").read_text())
    assert summary["vm"]["marked_dead"] == 0 and summary["vm"]["replacements"] == 0


@pytest.mark.slow
def test_a_remote_guest_keeps_no_page_server_or_browser_after_the_run_nor_after_its_agent(tmp_path):
    """A remote machine is not reset by killing its processes (here --reset-command none):
    the page server and Chromium an episode started end with the episode, by pid; a page
    server the machine runs itself lives on. What a failed episode leaves (cut before its
    end) goes with the agent when the agent is stopped."""
    theirs = subprocess.Popen([sys.executable, "-m", "http.server", "0", "--bind", "127.0.0.1"],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=tmp_path)
    try:
        with remote_agent(tmp_path, os.environ["PATH"]) as (server, port):
            data = write_tasks(tmp_path / "web2.jsonl", [web_task("click-button")])
            proc = run_remote(tmp_path, data, port, "remote")
            assert proc.returncode == 0, proc.stdout + proc.stderr[-2000:]
            assert live_descendants(server.pid) == []
            records = [json.loads(line) for line in (tmp_path / "out" / "remote" / "results.jsonl").read_text().splitlines()]
            assert [r["reward"] for r in records] == [1.0]
            # an episode's start that no end followed (a worker killed at --task-timeout)
            client = GuestClient(f"http://127.0.0.1:{port}", timeout_s=60)
            env = WebEnv(build_config(dict(mode="web", data=str(data), agent="oracle")))
            env.trajectory_dir = str(tmp_path / "traj")
            env.reset(load_tasks(str(data), default_mode="web", validators=task_validators())[0], client)
            started = live_descendants(server.pid)
            commands = []
            for process in started:
                with contextlib.suppress(psutil.NoSuchProcess):  # Chromium's short-lived helpers
                    commands.append(process.cmdline())
            # the page server is a `python -c` script that imports http.server; Chromium runs --headless
            assert any("http.server" in " ".join(c) for c in commands) and any("--headless" in c for c in commands), \
                commands
            server.terminate()
            assert server.wait(timeout=30) == -signal.SIGTERM
            gone, alive = psutil.wait_procs(started, timeout=10)
            assert alive == [], alive
        assert theirs.poll() is None, "the machine's own page server was killed"
    finally:
        theirs.kill()
        theirs.wait()
