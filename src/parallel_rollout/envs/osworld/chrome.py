"""The guest's Chrome (or Chromium) over the DevTools protocol, spoken to from inside the
guest: OSWorld's chrome steps and getters connect to its remote-debugging port (9222, which
OSWorld's tasks forward to Chrome's 1337); here a small standard-library program runs in the
guest through ``/run_python`` and uses that port on the guest's loopback, so nothing but the
guest agent needs to be reachable from the host.

The guest program is the web mode's driver with its DevTools client (``envs/web/cdp.py``: a
websocket client and a loopback HTTP GET) followed by the operations below; each call prints one JSON
line after :data:`MARKER`. Operations: ``pages`` (the open tabs: id, title, url), ``open``
(new tabs on URLs, waiting for each to load, optionally closing the tab that was first),
``close`` (tabs by id), ``read`` (a URL opened in a new tab: title, final url and HTML,
then the tab is closed), ``html`` (the HTML of an open tab), ``pdf`` (a URL printed to PDF in a new
tab), ``infos`` (texts and attributes read after clicks, in a new tab), ``browse``
(fills and clicks through a site, following the tab a click opens), ``query`` (DOM queries run in the open tab showing a URL) and ``form`` (a URL opened in a new tab, then selectors waited
for and filled or clicked in turn).
"""

from __future__ import annotations

import json
import os
from typing import Any

MARKER = "__PARALLEL_ROLLOUT_OSWORLD_CHROME__"
#: the guest ports tried for DevTools, in order (OSWorld's forwarded one, Chrome's own);
#: ``$PARALLEL_ROLLOUT_OSWORLD_CDP_PORTS`` (comma-separated) replaces them
PORTS = (9222, 1337)
#: seconds to wait for Chrome's DevTools port (OSWorld retries for ~75 s)
CONNECT_TIMEOUT_S = 60.0
#: seconds a page may take to load
LOAD_TIMEOUT_S = 60.0

#: the page-side query runner of the ``query`` operation (see :func:`query`)
QUERY_JS = r"""(queries) => queries.map((q) => {
  const trim = (t) => (t || "").trim();
  const all = (css) => { try { return Array.from(document.querySelectorAll(css)); } catch (e) { return []; } };
  const first = (path) => {
    try {
      const node = document.evaluate(path, document, null, XPathResult.FIRST_ORDERED_NODE_TYPE, null).singleNodeValue;
      if (node) return node;
    } catch (e) {}
    try { return document.querySelector(path); } catch (e) { return null; }
  };
  if (q.kind === "texts") return all(q.selector).map((e) => trim(e.textContent));
  if (q.kind === "direct_texts") {
    const e = all(q.selector)[0];
    return e ? Array.from(e.childNodes).filter((n) => n.nodeType === Node.TEXT_NODE)
                                       .map((n) => trim(n.textContent)).filter(Boolean) : [];
  }
  if (q.kind === "child_texts")
    return all(q.selector).filter((e) => e.querySelector(q.child)).map((e) => trim(e.querySelector(q.child).textContent));
  if (q.kind === "child_inner_texts")
    return all(q.selector).filter((e) => e.querySelector(q.child)).map((e) => trim(e.querySelector(q.child).innerText));
  if (q.kind === "xpath_text") { const e = first(q.xpath); return e ? trim(e.textContent) : ""; }
  if (q.kind === "xpath_value") { const e = first(q.xpath); return e && e.value ? trim(e.value) : ""; }
  if (q.kind === "label") {
    const want = q.text.toLowerCase();
    const hits = all("body *").filter((e) => (e.textContent || "").toLowerCase().includes(want));
    const inner = hits.filter((e) => !Array.from(e.children).some((c) => hits.includes(c)));
    return inner.length ? trim(inner[0].textContent) : "";
  }
  return null;
})"""

_OPERATIONS = r'''
import urllib.parse


def _osworld_connect(ports, timeout):
    global CDP_PORT
    # a host's second desktop agent runs its tasks' Chrome and socat on ports of its own
    # (guest/desktop_routes.py's claim_devtools_ports) and names them here: 9222=P,1337=Q
    ours = dict(pair.split("=", 1) for pair in
                os.environ.get("PARALLEL_ROLLOUT_DEVTOOLS_PORTS", "").split(",") if "=" in pair)
    ports = [int(ours.get(str(port), port)) for port in ports]
    deadline = time.time() + timeout
    while True:
        for port in ports:
            try:
                status, body = http_get(port, "/json/version", 2.0)
                if status == 200:
                    CDP_PORT = port
                    return Socket(json.loads(body)["webSocketDebuggerUrl"], timeout=30)
            except (OSError, ValueError, KeyError):
                pass
        if time.time() > deadline:
            raise RuntimeError("Chrome's DevTools port (%s) did not answer within %g s; start Chrome "
                               "with --remote-debugging-port" % (", ".join(map(str, ports)), timeout))
        time.sleep(0.5)


def _osworld_pages():
    return [{"id": t["id"], "title": t.get("title", ""), "url": t.get("url", ""),
             "ws": t.get("webSocketDebuggerUrl")}
            for t in http_json("/json/list", 20.0) if t.get("type") == "page"]  # slow when loaded


def _osworld_wait_loaded(target, timeout):
    deadline = time.time() + timeout
    while time.time() < deadline:
        page = [p for p in _osworld_pages() if p["id"] == target]
        if not page:
            return
        try:
            ws = Socket(page[0]["ws"], timeout=10)
            state = ws.call("Runtime.evaluate", returnByValue=True,
                            expression="[document.readyState, location.href]")
            ws.sock.close()
            ready, href = state.get("result", {}).get("value") or ["", ""]
            # a new tab shows about:blank (complete) before its URL's document arrives
            if ready == "complete" and href != "about:blank":
                return
        except (OSError, RuntimeError, ValueError):
            pass
        time.sleep(0.3)


def _osworld_html(ws_url):
    ws = Socket(ws_url, timeout=30)
    try:
        result = ws.call("Runtime.evaluate", returnByValue=True, expression=
                         "(document.doctype ? new XMLSerializer().serializeToString(document.doctype) : '')"
                         " + document.documentElement.outerHTML")
        return result.get("result", {}).get("value") or ""
    finally:
        ws.sock.close()


def _osworld_form(ws_url, steps, timeout):
    """Fill and click through a page's form: each step waits for its selector, then fills
    it with ``value`` or clicks it."""
    ws = Socket(ws_url, timeout=30)
    try:
        for step in steps:
            selector = json.dumps(step["selector"])
            deadline = time.time() + step.get("timeout", timeout)
            while True:
                found = ws.call("Runtime.evaluate", returnByValue=True, expression=
                                "!!document.querySelector(%s)" % selector)
                if found.get("result", {}).get("value"):
                    break
                if time.time() > deadline:
                    raise RuntimeError("no %s on the page within %g s" % (step["selector"], timeout))
                time.sleep(0.3)
            if "value" in step:
                script = ("(e => {e.focus(); e.value = %s; e.dispatchEvent(new Event('input', {bubbles: true}));"
                          " e.dispatchEvent(new Event('change', {bubbles: true}));})(document.querySelector(%s))"
                          % (json.dumps(step["value"]), selector))
            else:
                script = "document.querySelector(%s).click()" % selector
            ws.call("Runtime.evaluate", expression=script)
    finally:
        ws.sock.close()


def _osworld_infos(ws_url, target, req):
    """OSWorld's info_from_website: per info, back on the URL, click through all but the
    last selector, then read the last one's innerText or an attribute."""
    ws = Socket(ws_url, timeout=30)

    def value(expression):
        return ws.call("Runtime.evaluate", expression=expression, returnByValue=True).get("result", {}).get("value")

    def wait_for(selector, timeout=10.0):
        deadline = time.time() + timeout
        while not value("!!document.querySelector(%s)" % json.dumps(selector)):
            if time.time() > deadline:
                raise RuntimeError("no %s on the page within %g s" % (selector, timeout))
            time.sleep(0.2)

    infos = []
    try:
        for info in req["infos"]:
            if value("location.href") != req["url"]:
                ws.call("Page.navigate", url=req["url"])
                time.sleep(0.5)
                _osworld_wait_loaded(target, req["load_timeout"])
            action = info.get("action", "inner_text")
            selectors = info["selector"] if action.startswith("click_and_") else [info["selector"]]
            for selector in selectors[:-1]:
                wait_for(selector)
                value("document.querySelector(%s).click()" % json.dumps(selector))
                time.sleep(0.5)
                _osworld_wait_loaded(target, req["load_timeout"])
            wait_for(selectors[-1])
            element = "document.querySelector(%s)" % json.dumps(selectors[-1])
            if action in ("inner_text", "click_and_inner_text"):
                infos.append(value(element + ".innerText"))
            elif action in ("attribute", "click_and_attribute"):
                infos.append(value("%s.getAttribute(%s)" % (element, json.dumps(info["attribute"]))))
            else:
                raise ValueError("info action %r is not supported" % action)
    finally:
        ws.sock.close()
    return infos


def _osworld_browse(browser, req):
    """Steps on a page, following pop-ups: fill, click, click_popup (the tab the click opens
    becomes the page), click_any (the first selector that shows up), texts (CSS match
    texts, the last step's answer)."""
    first = browser.call("Target.createTarget", url=req["url"])["targetId"]
    targets, answer = [first], None
    try:
        _osworld_wait_loaded(first, req["load_timeout"])
        ws = Socket([p for p in _osworld_pages() if p["id"] == first][0]["ws"], timeout=60)

        def value(expression):
            # as a user's input: a click may open a tab (pop-up blockers let it)
            return ws.call("Runtime.evaluate", expression=expression, returnByValue=True,
                           userGesture=True).get("result", {}).get("value")

        def wait_for(selector, timeout):
            deadline = time.time() + timeout
            while not value("!!document.querySelector(%s)" % json.dumps(selector)):
                if time.time() > deadline:
                    return False
                time.sleep(0.3)
            return True

        for step in req["steps"]:
            kind, timeout = step["kind"], step.get("timeout", req["load_timeout"])
            if kind == "click_any":
                hit = next((sel for sel in step["selectors"] if wait_for(sel, timeout)), None)
                if hit:
                    value("document.querySelector(%s).click()" % json.dumps(hit))
                continue
            if not wait_for(step["selector"], timeout):
                raise RuntimeError("no %s on the page within %g s" % (step["selector"], timeout))
            element = "document.querySelector(%s)" % json.dumps(step["selector"])
            if kind == "fill":
                value("(e => {e.focus(); e.value = %s; e.dispatchEvent(new Event('input', {bubbles: true}));})(%s)"
                      % (json.dumps(step["value"]), element))
            elif kind == "click":
                value(element + ".click()")
            elif kind == "click_popup":
                before = {p["id"] for p in _osworld_pages()}
                value(element + ".click()")
                deadline = time.time() + timeout
                while True:
                    new = [p for p in _osworld_pages() if p["id"] not in before]
                    if new:
                        break
                    if time.time() > deadline:
                        raise RuntimeError("clicking %s opened no tab" % step["selector"])
                    time.sleep(0.3)
                targets.append(new[0]["id"])
                _osworld_wait_loaded(new[0]["id"], req["load_timeout"])
                ws.sock.close()
                ws = Socket(new[0]["ws"], timeout=60)
            elif kind == "texts":
                answer = value("Array.from(document.querySelectorAll(%s)).map(e => (e.textContent || '').trim())"
                               % json.dumps(step["selector"]))
        ws.sock.close()
    finally:
        for target in targets:
            try:
                browser.call("Target.closeTarget", targetId=target)
            except Exception:
                pass
    return answer


def osworld_main(req):
    try:
        answer = _osworld_run(req)
    except Exception as exc:  # noqa: BLE001 - everything goes back to the host
        answer = {"fatal": "%s: %s" % (type(exc).__name__, exc)}
    sys.stdout.write("\n" + MARKER + json.dumps(answer) + "\n")
    sys.stdout.flush()


def _osworld_run(req):
    browser = _osworld_connect(req["ports"], req["connect_timeout"])
    op = req["op"]
    if op == "pages":
        answer = _osworld_pages()
    elif op == "open":
        first = _osworld_pages()
        for index, url in enumerate(req["urls"]):
            target = browser.call("Target.createTarget", url=url)["targetId"]
            _osworld_wait_loaded(target, req["load_timeout"])
            if index == 0 and req.get("close_first") and first:
                browser.call("Target.closeTarget", targetId=first[0]["id"])
        answer = _osworld_pages()
    elif op == "close":
        for target in req["ids"]:
            browser.call("Target.closeTarget", targetId=target)
        answer = _osworld_pages()
    elif op == "read":
        target = browser.call("Target.createTarget", url=req["url"])["targetId"]
        _osworld_wait_loaded(target, req["load_timeout"])
        page = [p for p in _osworld_pages() if p["id"] == target][0]
        answer = {"title": page["title"], "url": page["url"], "content": _osworld_html(page["ws"])}
        browser.call("Target.closeTarget", targetId=target)
    elif op == "pdf":
        target = browser.call("Target.createTarget", url=req["url"])["targetId"]
        try:
            _osworld_wait_loaded(target, req["load_timeout"])
            page = [p for p in _osworld_pages() if p["id"] == target][0]
            ws = Socket(page["ws"], timeout=60)
            try:
                answer = ws.call("Page.printToPDF")["data"]
            finally:
                ws.sock.close()
        finally:
            browser.call("Target.closeTarget", targetId=target)
    elif op == "infos":
        target = browser.call("Target.createTarget", url=req["url"])["targetId"]
        try:
            _osworld_wait_loaded(target, req["load_timeout"])
            page = [p for p in _osworld_pages() if p["id"] == target][0]
            answer = _osworld_infos(page["ws"], target, req)
        finally:
            browser.call("Target.closeTarget", targetId=target)
    elif op == "browse":
        answer = _osworld_browse(browser, req)
    elif op == "html":
        page = [p for p in _osworld_pages() if p["id"] == req["id"]][0]
        answer = _osworld_html(page["ws"])
    elif op == "query":
        def same(url):
            return urllib.parse.unquote(url).rstrip("/")
        pages = [p for p in _osworld_pages() if same(p["url"]) == same(req["url"])]
        if not pages:
            answer = None
        else:
            _osworld_wait_loaded(pages[0]["id"], req["load_timeout"])
            ws = Socket(pages[0]["ws"], timeout=30)
            try:
                script = "(%s)(%s)" % (QUERY_JS, json.dumps(req["queries"]))
                result = ws.call("Runtime.evaluate", expression=script, returnByValue=True)
                answer = {"url": pages[0]["url"], "results": result.get("result", {}).get("value")}
            finally:
                ws.sock.close()
    elif op == "form":
        target = browser.call("Target.createTarget", url=req["url"])["targetId"]
        _osworld_wait_loaded(target, req["load_timeout"])
        page = [p for p in _osworld_pages() if p["id"] == target][0]
        _osworld_form(page["ws"], req["steps"], req["load_timeout"])
        answer = _osworld_pages()
    else:
        raise ValueError("unknown operation %r" % op)
    browser.sock.close()
    return answer
'''


class ChromeError(OSError):
    """Chrome's DevTools port did not answer, or an operation failed in the guest."""


def guest_program(request: dict) -> str:
    """The Python source run in the guest for one operation."""
    from ..web.env import driver_source

    return "\n".join([driver_source(), f"MARKER = {MARKER!r}", f"QUERY_JS = {QUERY_JS!r}", _OPERATIONS,
                      f"osworld_main(json.loads({json.dumps(json.dumps(request))}))", ""])


def call(vm, op: str, timeout: float | None = None, **params: Any) -> Any:
    """Run one operation in the guest; its answer."""
    ports = os.environ.get("PARALLEL_ROLLOUT_OSWORLD_CDP_PORTS")
    ports = [int(p) for p in ports.split(",")] if ports else list(PORTS)
    request = {"op": op, "ports": ports, "connect_timeout": CONNECT_TIMEOUT_S,
               "load_timeout": LOAD_TIMEOUT_S, **params}
    limit = timeout or CONNECT_TIMEOUT_S + LOAD_TIMEOUT_S * max(1, len(params.get("urls", [])) or 1) + 30
    result = vm.run_python(guest_program(request), timeout=limit, isolated=True)
    output = result.get("output") or ""
    for line in output.splitlines():
        if line.startswith(MARKER):
            answer = json.loads(line[len(MARKER):])
            if isinstance(answer, dict) and "fatal" in answer:
                raise ChromeError(f"chrome {op} in the guest failed: {answer['fatal']}")
            return answer
    detail = (result.get("error") or result.get("message") or output or "no output")[-1500:]
    raise ChromeError(f"chrome {op} in the guest failed: {detail}")


def pages(vm) -> list[dict]:
    """The open tabs: [{id, title, url, ws}] (most recently active first, as Chrome lists them)."""
    return call(vm, "pages")


def open_tabs(vm, urls: list[str], close_first: bool = True) -> list[dict]:
    """Open each URL in a new tab (OSWorld closes the tab that was there after the first)."""
    return call(vm, "open", urls=list(urls), close_first=close_first)


def close_tabs(vm, ids: list[str]) -> list[dict]:
    return call(vm, "close", ids=list(ids))


def read(vm, url: str) -> dict:
    """{title, url, content} of ``url`` loaded in a new tab (closed afterwards)."""
    return call(vm, "read", url=url)


def html(vm, target: str) -> str:
    return call(vm, "html", id=target)


def fill_form(vm, url: str, steps: list[dict]) -> list[dict]:
    """Open ``url`` in a new tab and fill/click ``steps`` ({selector, value?}) in order."""
    return call(vm, "form", url=url, steps=steps)


def infos(vm, url: str, items: list[dict]) -> list:
    """OSWorld's info_from_website reads (innerText or attribute, after clicks) on ``url``
    in a new tab."""
    return call(vm, "infos", url=url, infos=items)


def browse(vm, url: str, steps: list[dict]) -> Any:
    """Open ``url`` in a new tab and carry out ``steps`` (see the guest's ``_osworld_browse``);
    the last ``texts`` step's texts. The tabs it opened are closed afterwards."""
    return call(vm, "browse", url=url, steps=steps, timeout=CONNECT_TIMEOUT_S + LOAD_TIMEOUT_S * (len(steps) + 2))


def pdf(vm, url: str) -> bytes:
    """``url`` loaded in a new tab and printed to PDF (Chrome prints only when headless)."""
    import base64

    return base64.b64decode(call(vm, "pdf", url=url))


def query(vm, url: str, queries: list[dict]) -> dict | None:
    """Run DOM queries in the open tab showing ``url`` (compared unquoted, without a trailing
    slash): {url, results}, None when no tab shows it. Query kinds: ``texts`` (trimmed
    textContent of every CSS match), ``direct_texts`` (the first match's own text nodes),
    ``child_texts`` / ``child_inner_texts`` (a ``child`` element's text in each match),
    ``xpath_text`` / ``xpath_value`` (the first XPath (or CSS) match's text or input value),
    ``label`` (the innermost element containing ``text``)."""
    return call(vm, "query", url=url, queries=queries)


#: Chrome's profile folders OSWorld reads, then Debian's Chromium
PROFILES = ("~/.config/google-chrome/Default", "~/.config/chromium/Default",
            "~/snap/chromium/common/chromium/Default")


def profile_dir(vm) -> str:
    """The guest's browser profile folder: the first of :data:`PROFILES` that exists (the
    first when none does yet)."""
    code = ("import os\n"
            f"paths = [os.path.expanduser(p) for p in {list(PROFILES)!r}]\n"
            "print(next((p for p in paths if os.path.isdir(p)), paths[0]))\n")
    result = vm.execute(["python3", "-c", code], timeout=30, isolated=True)
    path = (result.get("output") or "").strip()
    if not path:
        raise ChromeError(f"cannot find the browser profile in the guest: {result.get('error')}")
    return path
