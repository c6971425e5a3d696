"""OSWorld's own clients against our guest agent in a desktop VM: ``PythonController`` and
``SetupController`` from the ``desktop-env`` package, talking HTTP over loopback TCP as they
talk to an OSWorld VM (a small TCP-to-unix-socket relay reaches the sandbox's agent).

``desktop_env/controllers/setup.py`` imports playwright (its Chrome tab steps), pydrive (its
Google Drive step), the proxy pool and the package's metric utilities at load; those get empty
stand-in modules here, since none of the methods tested below touches them. Every method that
talks to the guest runs as OSWorld wrote it.
"""

from __future__ import annotations

import functools
import io
import importlib.util
import shutil
import socket
import socketserver
import sys
import threading
import time
import types
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer

import pytest

from hypervisor_standin import relay
from parallel_rollout.guest.client import GuestClient
from parallel_rollout.pool.providers.base import ProviderOptions
from parallel_rollout.pool.providers.process import ProcessProvider

WIDTH, HEIGHT = 640, 480

pytestmark = [
    pytest.mark.skipif(importlib.util.find_spec("desktop_env") is None,
                       reason="desktop-env is not installed (./dev installs it for the tests)"),
    pytest.mark.skipif(not all(shutil.which(p) for p in ("Xvfb", "openbox", "xdotool", "wmctrl",
                                                         "xterm", "display")),
                       reason="the desktop packages are missing (./dev installs them)"),
]


class _Relay(socketserver.ThreadingMixIn, socketserver.TCPServer):
    """127.0.0.1:<port> -> the agent's unix socket, one connection each."""

    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, unix_path: str) -> None:
        self.unix_path = unix_path
        super().__init__(("127.0.0.1", 0), _RelayHandler)


class _RelayHandler(socketserver.BaseRequestHandler):
    def handle(self) -> None:
        upstream = socket.socket(socket.AF_UNIX)
        upstream.connect(self.server.unix_path)
        relay(self.request, upstream)


@pytest.fixture
def desktop():
    """(GuestClient, loopback port of the agent) for one desktop VM of the process provider."""
    provider = ProcessProvider("osw-ctl", ProviderOptions(desktop=True, screen_width=WIDTH,
                                                          screen_height=HEIGHT))
    info = provider.start("vm0")
    relay = _Relay(info.address.removeprefix("unix:"))
    threading.Thread(target=relay.serve_forever, daemon=True).start()
    try:
        yield GuestClient(info.address), relay.server_address[1]
    finally:
        relay.shutdown()
        relay.server_close()
        provider.stop(info)


@pytest.fixture
def setup_module_of_osworld(monkeypatch):
    """desktop_env.controllers.setup with stand-ins for what only its Chrome/Drive steps use."""
    stand_ins = {
        "playwright": {}, "playwright.sync_api": {"sync_playwright": None, "TimeoutError": TimeoutError},
        "pydrive": {}, "pydrive.auth": {"GoogleAuth": None},
        "pydrive.drive": {"GoogleDrive": None, "GoogleDriveFile": None, "GoogleDriveFileList": None},
        "desktop_env.evaluators": {}, "desktop_env.evaluators.metrics": {},
        "desktop_env.evaluators.metrics.utils": {"compare_urls": None},
    }
    missing = {root for root in ("playwright", "pydrive") if importlib.util.find_spec(root) is None}
    for name, attributes in stand_ins.items():
        if name.split(".")[0] in missing or name.startswith("desktop_env"):
            module = types.ModuleType(name)
            module.__dict__.update(attributes)
            monkeypatch.setitem(sys.modules, name, module)
    monkeypatch.delitem(sys.modules, "desktop_env.controllers.setup", raising=False)
    from desktop_env.controllers import setup

    return setup


def _fast(controller) -> None:
    controller.retry_times, controller.retry_interval = 1, 0.1


def test_python_controller_methods_work_against_the_agent(desktop, tmp_path):
    from desktop_env.controllers.python import PythonController

    client, port = desktop
    ctl = PythonController("127.0.0.1", port)
    _fast(ctl)
    assert ctl.get_vm_platform() == "Linux"
    assert ctl.get_vm_screen_size() == {"width": WIDTH, "height": HEIGHT}
    assert ctl.get_vm_desktop_path() == "/home/user/Desktop"
    assert ctl.get_screenshot().startswith(b"\x89PNG")
    assert "<desktop-frame" in ctl.get_accessibility_tree()
    assert ctl.get_terminal_output() is None  # xterm exposes no AT-SPI terminal
    client.write_file("/home/user/notes/a.txt", b"hello")
    assert ctl.get_file("/home/user/notes/a.txt") == b"hello"
    assert ctl.get_file("/home/user/nope.txt") is None
    tree = ctl.get_vm_directory_tree("/home/user/notes")
    assert tree["children"] == [{"type": "file", "name": "a.txt"}]
    ran = ctl.run_python_script("print(6 * 7)")
    assert ran["status"] == "success" and ran["output"].strip() == "42"
    bash = ctl.run_bash_script("echo $((2 + 3)); pwd", working_dir="/tmp")
    assert bash["status"] == "success" and bash["output"].split() == ["5", "/tmp"]
    # actions go through /execute as `python -c "import pyautogui; ..."` (our xdotool pyautogui)
    ctl.execute_action({"action_type": "MOVE_TO", "parameters": {"x": 123, "y": 45}})
    assert client.cursor_position() == (123, 45)
    ctl.execute_python_command("pyautogui.moveTo(200, 100)")
    assert client.cursor_position() == (200, 100)
    client.launch(["xterm", "-title", "ctl-term", "-class", "CtlTerm"])
    deadline = time.monotonic() + 20
    while ctl.get_vm_window_size("CtlTerm") is None:
        assert time.monotonic() < deadline, "xterm never appeared"
    size = ctl.get_vm_window_size("CtlTerm")
    assert size["width"] > 0 and size["height"] > 0
    assert ctl.start_recording() is None
    time.sleep(1.0)
    ctl.end_recording(str(tmp_path / "rec.mp4"))
    assert (tmp_path / "rec.mp4").stat().st_size > 1000


def test_setup_controller_steps_work_against_the_agent(desktop, setup_module_of_osworld, tmp_path):
    from desktop_env.controllers.python import PythonController
    from PIL import Image

    client, port = desktop
    www = tmp_path / "www"
    www.mkdir()
    red = _png(40, 30, (255, 0, 0))
    (www / "red.png").write_bytes(red)
    handler = functools.partial(SimpleHTTPRequestHandler, directory=str(www))
    handler.log_message = lambda *args: None
    files = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=files.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{files.server_address[1]}"
    local = tmp_path / "local.txt"
    local.write_text("uploaded by OSWorld")
    cache = tmp_path / "cache"
    cache.mkdir()
    ctl = setup_module_of_osworld.SetupController(
        "127.0.0.1", port, cache_dir=str(cache), client_password="password",
        screen_width=WIDTH, screen_height=HEIGHT)
    try:
        assert ctl.setup([
            {"type": "download", "parameters": {"files": [{"url": f"{url}/red.png",
                                                           "path": "/home/user/red.png"}]}},
            {"type": "upload_file", "parameters": {"files": [{"local_path": str(local),
                                                              "path": "/home/user/up/l.txt"}]}},
            {"type": "execute", "parameters": {"command": ["sh", "-c", "echo {SCREEN_WIDTH} > ~/w"],
                                               "stdout": "out.txt"}},
            {"type": "command", "parameters": {"command": "touch ~/by-command", "shell": True}},
            {"type": "execute_with_verification", "parameters": {
                "command": ["touch", "/home/user/verified"],
                "verification": {"command_success": "test -f /home/user/verified"},
                "max_wait_time": 5, "check_interval": 0.2}},
            {"type": "change_wallpaper", "parameters": {"path": "/home/user/red.png"}},
        ])
        # the wallpaper is painted on the (empty) root window and served back by /wallpaper
        screen = Image.open(io.BytesIO(client.screenshot())).convert("RGB")
        assert screen.getpixel((WIDTH - 5, HEIGHT - 5)) == (255, 0, 0)
        assert PythonController("127.0.0.1", port).get_vm_wallpaper() == red
        assert ctl.setup([
            {"type": "launch", "parameters": {"command": ["xterm", "-title", "setup-term"]}},
            {"type": "execute_with_verification", "parameters": {
                "command": ["true"], "verification": {"window_exists": "setup-term"},
                "max_wait_time": 20, "check_interval": 0.2}},
            {"type": "sleep", "parameters": {"seconds": 0.2}},
            {"type": "activate_window", "parameters": {"window_name": "setup-term"}},
            {"type": "open", "parameters": {"path": "/home/user/up/l.txt"}},
            {"type": "close_window", "parameters": {"window_name": "l.txt"}},
        ])
    finally:
        files.shutdown()
        files.server_close()
    assert client.read_file("/home/user/red.png") == red
    assert client.read_file("/home/user/up/l.txt") == b"uploaded by OSWorld"
    assert client.read_file("/home/user/w") == f"{WIDTH}\n".encode()
    assert (cache / "out.txt").read_text() == ""
    assert client.execute(["ls", "/home/user/by-command", "/home/user/verified"])["returncode"] == 0
    # close_window asks the window to close (wmctrl -c): the app closes it a moment later
    deadline = time.monotonic() + 15
    titles = client.execute(["wmctrl", "-l"])["output"]
    while "l.txt" in titles and time.monotonic() < deadline:
        time.sleep(0.2)
        titles = client.execute(["wmctrl", "-l"])["output"]
    assert "setup-term" in titles and "l.txt" not in titles, titles


def _png(width: int, height: int, rgb: tuple[int, int, int]) -> bytes:
    import struct
    import zlib

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    rows = b"".join(b"\x00" + bytes(rgb) * width for _ in range(height))
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0))
            + chunk(b"IDAT", zlib.compress(rows)) + chunk(b"IEND", b""))
