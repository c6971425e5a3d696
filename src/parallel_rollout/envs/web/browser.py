"""The browser driver that runs inside the VM: Chromium headless, spoken to over the DevTools
protocol (CDP) on a loopback port. Standard library only: this file's source is sent to the
guest with each ``/run_python`` call, after ``cdp.py``'s (the DevTools client: a websocket client
and a loopback HTTP GET) and followed by one call of ``main(request)``::

    host (WebEnv) ──/run_python: this source + main({...})──► guest python3
                                                                 │ websocket, 127.0.0.1:PORTS["cdp"]
                                                                 ▼
                                                   chromium --headless --no-sandbox
                                                     └─ http://127.0.0.1:PORTS["http"]/<env>.html
                                                        (PAGE_SERVER: http.server, in the VM)

``start`` unpacks the MiniWoB files into the VM's home, starts the loopback file server and
Chromium, each on a port the OS gives (``PORTS``, which ``start`` answers and later requests
carry; its profile under the home, in the agent's own folder (``agent_folder``), emptied first: on a machine no reset clears, the last
episode's cookies and local storage are gone all the same), opens the task's page, seeds MiniWoB's random generator and starts the episode.
``act`` carries out one action and ``observe`` reads the page (``page.py``); ``eval`` (tests, debugging)
evaluates an expression in it; ``stop`` ends the server and Chromium (``PIDS``). Each answers one JSON line after
``MARKER``: the utterance, the DOM as a flat element list, MiniWoB's reward globals, and a PNG
screenshot (base64) when asked.

Chromium runs with ``--no-sandbox``: its own sandbox needs user namespaces, which the VM's
sandbox (bubblewrap, a container) may refuse; the VM is the boundary.
"""

import base64
import json
import os
import resource
import shutil
import sys
import time

try:  # on the host, a package; in the guest cdp.py's and page.py's sources come first, in one program
    from .cdp import Socket, http_get  # (env.driver_source)
    from .page import act, evaluate, observe
except ImportError:
    pass

MARKER = "__PARALLEL_ROLLOUT_WEB__"
#: the episode's loopback ports, each one the OS gave when it started (``start`` answers them,
#: the host sends them back with every later request): Chromium's DevTools (``cdp``) and the
#: page server's (``http``). Fixed ports collided where two agents share a host (two remote
#: machines that are one, two runs at once) or one was taken (an OSWorld image's 9222 forward):
#: the second episode's browser and server could not bind, and it drove the first one's page
PORTS = {"cdp": None, "http": None}
#: the page server: serves ROOT on the listening socket it is handed (its fd, then ROOT)
PAGE_SERVER = """
import functools, http.server, socket, sys
sock = socket.socket(fileno=int(sys.argv[1]))
handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=sys.argv[2])
server = http.server.ThreadingHTTPServer(sock.getsockname(), handler, bind_and_activate=False)
server.socket.close()
server.socket = sock
server.serve_forever()
"""
#: the agent's name for itself in its commands' environment (``agent_server``: ``port-5001``):
#: two agents of one home (two remote machines that are one host, HOME shared) each keep their
#: episode's files in a folder of their own. With one folder, an episode's start (which ends an
#: earlier episode's browser) ended the other agent's browser mid-episode, and its stop too
AGENT_ENV = "PARALLEL_ROLLOUT_AGENT"


def agent_folder(environ=os.environ, home=None):
    """Where this agent's episodes keep their pages, profile, log and pids: ``~/.cache/web-agents/<agent>``,
    or the home's own names (``~/miniwob``, ``~/.cache/web-profile`` …) under a server that names
    no agent (OSWorld's)."""
    home = home or os.path.expanduser("~")
    key = "".join(c if c.isalnum() or c in "._-" else "_" for c in environ.get(AGENT_ENV, "")).lstrip(".")
    return os.path.join(home, ".cache", "web-agents", key) if key else None


_FOLDER = agent_folder()
ROOT = os.path.join(_FOLDER, "pages") if _FOLDER else os.path.join(os.path.expanduser("~"), "miniwob")
#: Chromium's profile, the log of the page server and Chromium, and the pids file: the page server
#: and Chromium this driver started, ``[[pid, start time], ...]``, which ``stop`` (the episode's end,
#: the next ``start``) ends, and no other process (a page server of the machine's own, another
#: agent's browser)
PROFILE, LOG, PIDS = (os.path.join(_FOLDER, name) if _FOLDER else
                      os.path.join(os.path.expanduser("~"), ".cache", "web-" + name)
                      for name in ("profile", "browser.log", "pids.json"))
CHROMIUM = ("chromium", "chromium-browser", "google-chrome")

# -- starting the browser ---------------------------------------------------------------------


class BrowserMissing(RuntimeError):
    """No Chromium in the VM, or none that can start: a missing prerequisite of the guest, not
    a broken VM."""


def find_chromium(search_path):
    """The first of CHROMIUM that is an executable in a folder of ``search_path`` (a PATH
    string), or None."""
    for name in CHROMIUM:
        for folder in search_path.split(":"):
            path = os.path.join(folder, name)
            if os.access(path, os.X_OK):
                return path
    return None


def _which_chromium():
    found = find_chromium(os.environ.get("PATH", "/usr/bin:/bin"))
    if found is None:
        raise BrowserMissing("no Chromium in the VM (looked for chromium, chromium-browser, google-chrome "
                             "on PATH); install Debian's chromium package in the image")
    limit = resource.getrlimit(resource.RLIMIT_AS)[0]  # Chromium starts under 1 TiB, not under 16 GiB
    if limit != resource.RLIM_INFINITY and limit < 2**40:  # it crashed: VM after VM marked dead
        raise BrowserMissing(f"Chromium cannot start in the VM: its address space is limited to {limit >> 20} MB "
                             "(RLIMIT_AS: ulimit -v, the process provider's --vm-memory-mb where no memory cgroup "
                             "bounds the sandbox), far less than Chromium reserves; lift it (leave --vm-memory-mb unset: "
                             "in a new --run-id, as a resume keeps the run's settings)")
    return found


def _started(pid):
    """The start time of process ``pid`` (field 22 of its stat), or None when it is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            return int(fh.read().rsplit(b")", 1)[1].split()[19])
    except (OSError, IndexError, ValueError):
        return None


def _spawn(argv, pass_fds=()):
    """Start ``argv`` in a session of its own, its output into LOG, without the desktop's
    session bus: on a machine whose agent has a desktop (``--desktop``, its AT-SPI bus on),
    headless Chromium joined the accessibility bus and its ``Page.navigate`` never answered, so
    no web episode started there (``TimeoutError: timed out``)."""
    import subprocess

    os.makedirs(os.path.dirname(LOG), exist_ok=True)
    log = open(LOG, "ab")
    env = {name: value for name, value in os.environ.items() if name != "DBUS_SESSION_BUS_ADDRESS"}
    proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log, stderr=log, pass_fds=pass_fds,
                            start_new_session=True, cwd=os.path.expanduser("~"), env=env)
    _remember(proc.pid)


def _remember(pid):
    """Add ``pid`` (with its start time) to the processes ``stop`` ends."""
    os.makedirs(os.path.dirname(PIDS), exist_ok=True)
    with open(PIDS + ".tmp", "w") as fh:
        json.dump(_ours() + [[pid, _started(pid)]], fh)
    os.replace(PIDS + ".tmp", PIDS)


def _ours():
    try:
        with open(PIDS) as fh:
            return json.load(fh)
    except (OSError, ValueError):
        return []


def stop():
    """End the process groups this driver started (each its own session: Chromium's helpers
    go with it) whose leader is still the process it started (a pid reused since is not
    ours), and a start still under way (a driver: its group, or itself where the agent did
    not make it one, as OSWorld's server does not); how many."""
    ended = 0
    for pid, started in _ours():
        if pid == os.getpid():
            continue  # this start's own stop, of what it started before it failed
        try:
            if started is not None and _started(pid) == started:
                try:
                    os.killpg(pid, 9)
                except ProcessLookupError:  # no group of its own
                    os.kill(pid, 9)
                ended += 1
        except OSError:
            pass
    if os.path.exists(PIDS):
        os.unlink(PIDS)
    return ended


def _wait(predicate, timeout, what):
    deadline = time.time() + timeout
    while True:
        try:
            value = predicate()
            if value:
                return value
        except (OSError, ValueError):
            pass
        if time.time() > deadline:
            tail = ""
            if os.path.exists(LOG):
                with open(LOG, "rb") as fh:
                    tail = fh.read()[-1500:].decode("utf-8", "replace")
            raise RuntimeError(f"{what} within {timeout:g} s; browser log tail: {tail}")
        time.sleep(0.05)


def _devtools(path):
    """The JSON the browser's DevTools answer at ``path``."""
    return json.loads(http_get(PORTS["cdp"], path)[1])


def _pages():
    return [t for t in _devtools("/json/list") if t.get("type") == "page"]


def _devtools_port():
    """The port Chromium's DevTools listen on, from the DevToolsActivePort file it writes in
    its profile once they do (``--remote-debugging-port=0``: the OS picks it); None before."""
    try:
        with open(os.path.join(PROFILE, "DevToolsActivePort")) as fh:
            first = fh.readline().strip()
    except OSError:
        return None
    return int(first) if first.isdigit() and int(first) > 0 else None


def _page_socket(timeout=10.0):
    """A connection to the task's page (the first page when none shows it yet)."""
    pages = _wait(_pages, timeout, "no page target on the DevTools port")
    ours = [t for t in pages if t.get("url", "").startswith(f"http://127.0.0.1:{PORTS['http']}/")]
    return Socket((ours or pages)[0]["webSocketDebuggerUrl"], timeout=timeout)


def start(req):
    """Unpack the files, start the server and Chromium, open the page, begin the episode."""
    import io
    import tarfile

    with tarfile.open(fileobj=io.BytesIO(base64.b64decode(req["bundle"])), mode="r:gz") as tar:
        # the files come from the host's miniwob package; "data" refuses links and absolute paths
        tar.extractall(ROOT, **({"filter": "data"} if hasattr(tarfile, "data_filter") else {}))
    stop()  # an earlier episode's, on a machine no reset cleared (a remote one)
    # this start too, until it ends: a stop meanwhile (the episode cut: its worker killed at
    # --task-timeout, the run stopped) ends it with what it started, where it waited out its
    # timeouts for a browser gone, and started one after that stop, which nothing ended
    _remember(os.getpid())
    # the log of this episode's server and browser, begun empty: a failed start quotes its own
    # tail, not an earlier episode's, and a machine no reset clears keeps no log that grows
    # with every episode it ever ran
    open(LOG, "wb").close()
    chromium = _which_chromium()  # before anything starts: a guest without it is left as it was
    # an empty profile, as a VM's reset leaves it: on a machine no reset clears (a remote one) the
    # last episode's cookies and local storage would be this one's. A link there (to another
    # disk), which rmtree leaves whole, is kept and the folder it names emptied (as best it can)
    shutil.rmtree(PROFILE, ignore_errors=True)
    os.makedirs(PROFILE, exist_ok=True)
    for entry in os.scandir(PROFILE):
        if entry.is_dir(follow_symlinks=False):
            shutil.rmtree(entry.path, ignore_errors=True)
        else:
            try:
                os.unlink(entry.path)
            except OSError:
                pass
    import socket

    with socket.socket() as listener:  # the page server's port: the OS's, bound here, so it is known
        listener.bind(("127.0.0.1", 0))
        listener.listen(64)
        PORTS["http"] = listener.getsockname()[1]
        _spawn([sys.executable, "-c", PAGE_SERVER, str(listener.fileno()), ROOT], pass_fds=(listener.fileno(),))
    width, height = req.get("width", 800), req.get("height", 600)
    _spawn([chromium, "--headless", "--no-sandbox", "--disable-gpu",
            "--disable-dev-shm-usage", "--no-first-run", "--no-default-browser-check",
            "--disable-extensions", "--disable-background-networking", "--disable-sync",
            "--disable-component-update", "--disable-breakpad", "--disable-crash-reporter",
            "--mute-audio", "--hide-scrollbars", f"--window-size={width},{height}",
            f"--user-data-dir={PROFILE}", "--remote-debugging-address=127.0.0.1",
            "--remote-debugging-port=0", "about:blank"])
    deadline = time.time() + req.get("boot_timeout", 40.0)
    PORTS["cdp"] = _wait(_devtools_port, deadline - time.time(), "Chromium did not say its DevTools port")
    _wait(lambda: _devtools("/json/version"), deadline - time.time(), "Chromium did not answer")
    url = f"http://127.0.0.1:{PORTS['http']}/{req['page']}"
    _wait(lambda: http_get(PORTS["http"], "/" + req["page"])[0] == 200, 10.0, "the file server did not answer")
    ws = _page_socket()
    ws.call("Page.enable")
    ws.call("Page.bringToFront")  # the page has focus: focus and blur events fire as for a user
    ws.call("Page.navigate", url=url)
    _wait(lambda: evaluate(ws, "typeof core !== 'undefined' && document.readyState === 'complete'"
                        " && document.getElementById('sync-task-cover') !== null"), 20.0,
          f"the MiniWoB page {url} did not load (complete, with MiniWoB's core and task cover)")
    setup = f"Math.seedrandom({json.dumps(str(req['seed']))});"
    if req.get("time_limit_ms"):
        setup += f"core.EPISODE_MAX_TIME = {int(req['time_limit_ms'])};"
    # one episode per page: once the page has graded it (an answer, its time limit), MiniWoB's
    # START cover would begin another, with a new problem, whose grade became this one's (a
    # double click: the wrong answer, then the cover; a click after the time limit ran out)
    evaluate(ws, setup + "core.startEpisodeReal(); core.startEpisodeReal = function () {}; true")
    _wait(lambda: evaluate(ws, "WOB_TASK_READY"), 10.0, "the MiniWoB task did not get ready")
    time.sleep(req.get("settle_s", 0.05))
    return {**observe(ws, req), "ports": dict(PORTS)}


def main(req):
    """Run one request and print its answer on a MARKER line."""
    PORTS.update(req.get("ports") or {})  # the episode's, which its start answered
    try:
        if req["op"] == "start":
            try:
                answer = start(req)
            except BaseException:
                stop()  # nothing of a start that failed runs on
                raise
        elif req["op"] == "stop":
            answer = {"stopped": stop()}
        else:
            ws = _page_socket()
            error = None
            if req["op"] == "act":
                try:
                    act(ws, req["action"])
                except (ValueError, RuntimeError) as exc:
                    error = str(exc)
            answer = observe(ws, req)
            answer["error"] = error
            if req["op"] == "eval":  # for tests and debugging: not an agent's action
                answer["value"] = evaluate(ws, req["expression"])
                answer["pages"] = len(_pages())
    except Exception as exc:  # noqa: BLE001 - everything goes back to the host
        answer = {"fatal": f"{type(exc).__name__}: {exc}", "missing": isinstance(exc, BrowserMissing)}
    sys.stdout.write("\n" + MARKER + json.dumps(answer) + "\n")
    sys.stdout.flush()
