"""OSWorld's rarer guest routes on an agent without a desktop: ``/setup/download_file`` from a
loopback HTTP server, ``/desktop_path``, ``/execute_with_verification``, and "no desktop"
(503) told apart from "no such route" (404)."""

from __future__ import annotations

import functools
import threading
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer

import pytest

from test_guest import agent  # noqa: F401  (the fixture: a running agent, no desktop)


@pytest.fixture
def files_server(tmp_path):
    """A loopback HTTP server for tmp_path/www; yields (base url, folder)."""
    folder = tmp_path / "www"
    folder.mkdir()
    handler = functools.partial(SimpleHTTPRequestHandler, directory=str(folder))
    handler.log_message = lambda *args: None
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}", folder
    server.shutdown()
    server.server_close()


@pytest.mark.parametrize("method, path", [
    ("GET", "/screenshot"), ("GET", "/terminal"), ("POST", "/wallpaper"),
    ("POST", "/setup/change_wallpaper"), ("POST", "/screen_size")])
def test_a_desktop_route_without_a_desktop_is_503_not_404(agent, method, path):
    client, _ = agent
    response = client.request(method, path, json={"path": "/x"} if method == "POST" else None,
                              check=False)
    assert response.status == 503, response.text
    assert "no desktop" in response.json()["message"]
    missing = client.request(method, path + "_nope", check=False)
    assert missing.status == 404 and "no such route" in missing.json()["message"]


def test_desktop_path_is_the_users_desktop_folder(agent):
    client, home = agent
    answer = client.request("POST", "/desktop_path").json()
    assert answer == {"desktop_path": str(home / "Desktop")}


def test_download_file_fetches_the_url_into_the_path(agent, files_server):
    client, home = agent
    url, folder = files_server
    data = bytes(range(256)) * 4000
    (folder / "big.bin").write_bytes(data)
    answer = client.request("POST", "/setup/download_file",
                            json={"url": f"{url}/big.bin", "path": "~/deep/er/big.bin"})
    assert answer.text == f"File downloaded successfully: {len(data)} bytes"
    assert (home / "deep" / "er" / "big.bin").read_bytes() == data
    missing = client.request("POST", "/setup/download_file",
                             json={"url": f"{url}/nope.bin", "path": "~/nope.bin"}, check=False)
    assert missing.status == 500 and "Failed to download" in missing.json()["message"]
    assert not (home / "nope.bin").exists()
    bad = client.request("POST", "/setup/download_file", json={"path": "~/x"}, check=False)
    assert bad.status == 400 and "Path or URL not supplied!" in bad.json()["message"]


@pytest.mark.parametrize("route", ["/execute_with_verification", "/setup/execute_with_verification"])
def test_execute_with_verification_waits_for_the_check(agent, route):
    client, home = agent
    # the check only holds once the background job has written the file (~0.5 s later)
    passed = client.request("POST", route, json={
        "command": "(sleep 0.5; touch ~/made) >/dev/null 2>&1 &", "shell": True,
        "verification": {"command_success": f"test -f {home}/made"},
        "max_wait_time": 5, "check_interval": 0.1}).json()
    assert passed["status"] == "success" and passed["verification"] == "passed"
    assert passed["returncode"] == 0 and 0.3 < passed["wait_time"] < 5
    failed = client.request("POST", route, json={
        "command": ["echo", "hi"], "verification": {"command_success": "false"},
        "max_wait_time": 0.5, "check_interval": 0.1}, check=False)
    assert failed.status == 500
    assert failed.json() == {"status": "verification_failed", "output": "hi\n", "error": "",
                             "returncode": 0, "verification": "failed", "wait_time": 0.5}
    no_display = client.request("POST", route, json={
        "command": ["true"], "verification": {"window_exists": "Firefox"}}, check=False)
    assert no_display.status == 503 and "no desktop" in no_display.json()["message"]
