"""The osworld download cache: http(s) URLs of ``download`` steps and ``cloud_file`` getters are
fetched once (from a loopback HTTP server here), kept under a name keyed by the URL, and
delivered into the guest through the agent."""

from __future__ import annotations

import functools
import json
import shutil
import threading
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from types import SimpleNamespace

import pytest

from parallel_rollout.envs.osworld import downloads
from parallel_rollout.envs.osworld import setup as steps
from parallel_rollout.envs.osworld.getters import GETTERS
from parallel_rollout.tasks import Task
from llm_server import llm_server  # noqa: F401  (the fixture: a local model server)
from test_guest import agent  # noqa: F401  (the fixture: a running agent, no desktop)


@pytest.fixture
def served(tmp_path):
    """A loopback HTTP server for tmp_path/www that counts GETs per path."""
    folder = tmp_path / "www"
    folder.mkdir()
    hits: dict[str, int] = {}

    class Handler(SimpleHTTPRequestHandler):
        def do_GET(self):  # noqa: N802 (http.server's name)
            hits[self.path] = hits.get(self.path, 0) + 1
            super().do_GET()

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(Handler, directory=str(folder)))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield SimpleNamespace(url=f"http://127.0.0.1:{server.server_address[1]}", folder=folder, hits=hits)
    server.shutdown()
    server.server_close()


def test_a_url_is_fetched_once_and_kept_under_its_own_name(served, tmp_path):
    cache = tmp_path / "cache"
    (served.folder / "a").mkdir()
    (served.folder / "b").mkdir()
    (served.folder / "a" / "data.xlsx").write_bytes(b"first")
    (served.folder / "b" / "data.xlsx").write_bytes(b"second")
    first = downloads.fetch(f"{served.url}/a/data.xlsx", cache)
    again = downloads.fetch(f"{served.url}/a/data.xlsx", cache)
    other = downloads.fetch(f"{served.url}/b/data.xlsx", cache)
    assert first == again == downloads.cache_path(f"{served.url}/a/data.xlsx", cache)
    assert first.name == other.name == "data.xlsx" and first != other
    assert (first.read_bytes(), other.read_bytes()) == (b"first", b"second")
    assert served.hits == {"/a/data.xlsx": 1, "/b/data.xlsx": 1}


def test_concurrent_fetches_of_one_url_download_it_once(served, tmp_path):
    (served.folder / "big.bin").write_bytes(b"x" * 3_000_000)
    url = f"{served.url}/big.bin"
    results = []
    threads = [threading.Thread(target=lambda: results.append(downloads.fetch(url, tmp_path / "c")))
               for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert len(set(results)) == 1 and len(results) == 4
    assert results[0].stat().st_size == 3_000_000
    assert served.hits == {"/big.bin": 1}


def test_a_url_that_cannot_be_fetched_says_where_to_put_it(served, tmp_path):
    url = f"{served.url}/missing.pdf"
    with pytest.raises(downloads.DownloadError) as info:
        downloads.fetch(url, tmp_path / "cache")
    message = str(info.value)
    assert url in message and "404" in message
    assert str(downloads.cache_path(url, tmp_path / "cache")) in message
    assert not any(p.is_file() for p in (tmp_path / "cache").rglob("missing.pdf*"))
    # a file put there by hand is used without the network
    downloads.cache_path(url, tmp_path / "cache").write_bytes(b"%PDF by hand")
    assert downloads.fetch(url, tmp_path / "cache").read_bytes() == b"%PDF by hand"


def test_the_download_step_and_cloud_file_getter_use_the_cache(served, agent, tmp_path):
    client, home = agent
    (served.folder / "input.csv").write_text("a,b\n1,2\n")
    (served.folder / "gold.txt").write_text("expected")
    task = Task(id="t1", mode="osworld", payload={}, source=str(tmp_path / "t1.json:1"))
    env = SimpleNamespace(task=task, vm=client, cache_root=tmp_path / "cache",
                          cache_dir=str(tmp_path / "attempt"))
    steps.run_steps(env, [{"type": "download", "parameters": {"files": [
        {"url": f"{served.url}/input.csv", "path": "~/work/input.csv"}]}}], "config")
    assert (home / "work" / "input.csv").read_text() == "a,b\n1,2\n"
    local = GETTERS["cloud_file"](env, {"type": "cloud_file", "path": f"{served.url}/gold.txt",
                                        "dest": "gold.txt"})
    assert open(local).read() == "expected" and local.startswith(str(tmp_path / "attempt"))
    steps.run_steps(env, [{"type": "download", "parameters": {"files": [
        {"url": f"{served.url}/input.csv", "path": "~/again.csv"}]}}], "config")
    assert served.hits["/input.csv"] == 1
    with pytest.raises(steps.SetupError, match="t1.*missing.xlsx"):
        steps.run_steps(env, [{"type": "download", "parameters": {"files": [
            {"url": f"{served.url}/missing.xlsx", "path": "~/m.xlsx"}]}}], "config")


@pytest.mark.skipif(not all(shutil.which(p) for p in ("Xvfb", "openbox", "xdotool", "wmctrl")),
                    reason="the desktop packages are missing (./dev installs them)")
def test_the_run_end_says_where_to_put_a_file_it_could_not_download(served, tmp_path, monkeypatch):
    """OSWorld's file-cache URLs are long: the run's last words on a task whose input could not
    be downloaded keep the path to put the file at, whole, however long the URL."""
    from click.testing import CliRunner

    from parallel_rollout.cli import main
    from test_osworld_taskset import osworld_folder

    url = f"{served.url}/{'ubuntu_osworld_file_cache/resolve/main/os/' * 4}photos%20of%20a%20trip.zip"
    data = osworld_folder(tmp_path / "set", {"needs-a-file": {
        "domain": "os", "instruction": "unzip it", "evaluator": {"func": "infeasible"}, "reference": ["FAIL"],
        "config": [{"type": "download", "parameters": {"files": [{"url": url, "path": "/home/user/p.zip"}]}}]}})
    monkeypatch.setenv("PARALLEL_ROLLOUT_OSWORLD_CACHE", str(tmp_path / "cache"))
    done = CliRunner().invoke(main, [
        "run", "--test_config_base_dir", str(data), "--domain", "os", "--agent", "oracle", "--max-retries", "0",
        "--result_dir", str(tmp_path / "out"), "--no-progress", "--screen-width", "640", "--screen-height", "480"])
    assert done.exit_code == 1, done.output
    said = " ".join(done.output.split())
    assert "never graded" in said and f"put the file at {downloads.cache_path(url, tmp_path / 'cache')});" in said


@pytest.mark.skipif(not all(shutil.which(p) for p in ("Xvfb", "openbox", "xdotool", "wmctrl")),
                    reason="the desktop packages are missing (./dev installs them)")
def test_a_gold_file_that_cannot_be_had_ends_the_attempt_before_the_model_is_asked(served, tmp_path,
                                                                                   monkeypatch, llm_server):
    """The evaluation's files (a cloud_file gold, a postconfig's download) are had before the
    agent acts: one that cannot be downloaded ends each attempt setup_failed with no model
    call, where every retry ran the whole episode first and its grading then failed."""
    from click.testing import CliRunner

    from parallel_rollout.cli import main
    from test_osworld_taskset import osworld_folder

    (served.folder / "gold.txt").write_text("3\n")
    model = llm_server(policy=lambda body: {"reply": "DONE"})

    def task(gold: str, script: str) -> dict:
        return {"domain": "os", "instruction": "write 3 to ~/n.txt", "config": [], "evaluator": {
            "postconfig": [{"type": "download", "parameters": {"files": [
                {"url": f"{served.url}/{script}", "path": "/home/user/eval.sh"}]}}],
            "func": "compare_text_file", "result": {"type": "vm_file", "path": "/home/user/n.txt", "dest": "n.txt"},
            "expected": {"type": "cloud_file", "path": f"{served.url}/{gold}", "dest": "gold.txt"}}}

    (served.folder / "eval.sh").write_text("true\n")
    data = osworld_folder(tmp_path / "set", {"gold-missing": task("no-gold.txt", "eval.sh"),
                                             "script-missing": task("gold.txt", "no-eval.sh"),
                                             "all-there": task("gold.txt", "eval.sh")})
    monkeypatch.setenv("PARALLEL_ROLLOUT_OSWORLD_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("OPENAI_API_KEY", "test")
    out = tmp_path / "out"
    done = CliRunner().invoke(main, [
        "run", "--test_config_base_dir", str(data), "--agent", "openai", "--base_url", model.url, "--model", "m",
        "--max-retries", "1", "--result_dir", str(out), "--run-id", "r", "--num-rollouts", "1", "--no-progress",
        "--screen-width", "640", "--screen-height", "480"])
    assert done.exit_code == 1, done.output
    records = [json.loads(line) for line in (out / "r" / "results.jsonl").read_text().splitlines()]
    by_task = {r["task_id"]: r for r in records}
    assert by_task["all-there"]["final"] and by_task["all-there"]["reward"] == 0.0  # graded: the model said DONE
    for missing in ("gold-missing", "script-missing"):
        tries = [r for r in records if r["task_id"] == missing]
        assert [r["status"] for r in tries] == ["setup_failed"] * 2 and all(r["turns"] == 0 for r in tries)
    # one request, the graded task's: none for the attempts that could not be graded
    assert len(model.requests) == 1, [r["body"]["messages"][1] for r in model.requests]


def test_files_in_the_earlier_cache_layout_count_as_cached_and_are_used(tmp_path):
    """A cache filled by an earlier version (``<cache>/<task id>/<name>``, the name as its
    message spelled it: the URL's last segment, a query or %-escapes and all) is not to be
    filled again: ``osworld_cache.py missing`` lists only what is in neither layout, and a run
    without network takes the file from where it is."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    from parallel_rollout.envs.osworld.sources import local_source

    base = "http://127.0.0.1:1/resolve/main"  # nothing listens: no download can succeed
    escaped, queried, plain, absent = (f"{base}/Order_Sales_Serial%23.xlsx", f"{base}/history.sqlite?download=true",
                                       f"{base}/budget.xlsx", f"{base}/never_put.docx")
    folder = tmp_path / "evaluation_examples"
    (folder / "examples" / "os").mkdir(parents=True)
    (folder / "test_all.json").write_text(json.dumps({"os": ["t1"]}))
    files = [{"url": url, "path": f"/home/user/{n}"} for n, url in enumerate((escaped, queried, plain, absent))]
    (folder / "examples" / "os" / "t1.json").write_text(json.dumps({
        "id": "t1", "instruction": "open them", "config": [{"type": "download", "parameters": {"files": files}}],
        "evaluator": {"func": "infeasible"}}))
    cache = tmp_path / "cache"
    (cache / "t1").mkdir(parents=True)
    (cache / "t1" / "Order_Sales_Serial%23.xlsx").write_bytes(b"escaped")  # what the earlier message said
    (cache / "t1" / "history.sqlite?download=true").write_bytes(b"queried")
    (cache / "t1" / "budget.xlsx").write_bytes(b"plain")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path), downloads.CACHE_ENV: str(cache)}
    listed = subprocess.run([sys.executable, str(Path(__file__).parents[1] / "scripts" / "osworld_cache.py"),
                             "missing", str(folder)], capture_output=True, text=True, timeout=60, env=env)
    assert listed.returncode == 0, listed.stderr
    assert listed.stdout == f"os/t1\t{absent}\n"
    task = Task(id="t1", mode="osworld", payload={}, source=str(folder / "examples" / "os" / "t1.json:1"))
    assert [local_source(task, url, cache).read_bytes() for url in (escaped, queried, plain)] == [
        b"escaped", b"queried", b"plain"]
    with pytest.raises(steps.SourceMissing, match="never_put.docx"):
        local_source(task, absent, cache)


def test_putting_a_file_that_is_not_there_says_so_and_caches_nothing(tmp_path):
    """`osworld_cache.py put URL FILE` with a FILE that is not there: a message and exit 2,
    where it ended in a traceback and left the URL's folder made, empty."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path), downloads.CACHE_ENV: str(tmp_path / "cache")}
    done = subprocess.run([sys.executable, str(Path(__file__).parents[1] / "scripts" / "osworld_cache.py"), "put",
                           "https://example.com/a.xlsx", str(tmp_path / "no-such.xlsx")],
                          capture_output=True, text=True, timeout=60, env=env)
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
    assert f"no such file {tmp_path / 'no-such.xlsx'}" in done.stderr
    assert not (tmp_path / "cache").exists()


def test_the_cache_listing_takes_the_index_by_the_runs_flag_its_messages_name(tmp_path, monkeypatch, capsys):
    """`osworld-cache missing` takes the run's --osworld-index as well as --index: its loader's
    message for a task file given an index says --osworld-index, a flag the command refused."""
    from readme_support import one_download_task_folder

    from parallel_rollout.envs.osworld.cache_tool import main

    monkeypatch.setenv(downloads.CACHE_ENV, str(tmp_path / "cache"))
    folder, url = one_download_task_folder(tmp_path)
    assert main(["missing", str(folder / "examples" / "os" / "t1.json")], prog="osworld-cache") == 2
    said = capsys.readouterr().err  # one task's file: give the folder, and an index as --osworld-index
    assert "as --osworld-index" in said, said
    assert main(["missing", str(folder), "--osworld-index", "test_all.json"], prog="osworld-cache") == 0
    assert capsys.readouterr().out == f"os/t1\t{url}\n"


@pytest.mark.parametrize("args, said", [
    (("put", "budget.xlsx", "https://example.com/budget.xlsx"),
     "put: 'budget.xlsx' is not an http(s) URL (the URL comes first: put URL FILE)"),
    (("put", "budget", "budget.xlsx"), "put: 'budget' is not an http(s) URL;"),
    (("where", "ftp://example.com/budget.xlsx"), "where: 'ftp://example.com/budget.xlsx' is not an http(s) URL;"),
], ids=["put FILE URL", "put of a name", "where of an ftp URL"])
def test_the_cache_takes_only_the_http_urls_a_run_downloads(tmp_path, args, said):
    """`osworld-cache put budget.xlsx https://…` (the two swapped) cached the file under the key
    'budget.xlsx', which no run reads, and printed its path as if done; a key that is no http(s)
    URL is now refused, exit 2, and nothing is cached."""
    import os
    import subprocess
    import sys

    (tmp_path / "budget.xlsx").write_bytes(b"PK")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path), downloads.CACHE_ENV: str(tmp_path / "cache")}
    done = subprocess.run([sys.executable, "-m", "parallel_rollout", "osworld-cache", *args], capture_output=True,
                          text=True, timeout=60, env=env, cwd=tmp_path)
    assert done.returncode == 2 and said in done.stderr and "osworld-cache missing DATA lists" in done.stderr, \
        done.stderr
    assert not (tmp_path / "cache").exists()


def test_the_cache_listings_refusals_say_its_data_argument_not_runs_flag(tmp_path):
    """`osworld-cache missing` takes the data as its DATA argument; its refusals of the
    examples/ folder, one task's file, an index file or a path that is not there said "give …
    as --data: --data FOLDER", a flag the command refuses ("unrecognized arguments")."""
    import os
    import subprocess
    import sys

    from readme_support import one_download_task_folder

    folder, _ = one_download_task_folder(tmp_path)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path), downloads.CACHE_ENV: str(tmp_path / "cache")}
    for data, said in [(folder / "examples", f"as DATA: {folder}"),
                       (folder / "examples" / "os" / "t1.json", f"the task set's folder ({folder})"),
                       (folder / "test_all.json", f"as DATA and it as --osworld-index: {folder} --osworld-index"),
                       (tmp_path / "nothere", "no such folder (DATA: ")]:
        done = subprocess.run([sys.executable, "-m", "parallel_rollout", "osworld-cache", "missing", str(data)],
                              capture_output=True, text=True, timeout=60, env=env, cwd=tmp_path)
        assert done.returncode == 2 and said in done.stderr, (data, done.stderr)
        assert "--data" not in done.stderr, (data, done.stderr)
