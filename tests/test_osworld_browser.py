"""The chrome steps and getters against a real Chromium, spoken to from a real guest agent's
``/run_python`` (the agent and the browser run on this machine; pages come from a loopback
HTTP server): tabs open and close as OSWorld's steps do, the tab getters read them, history
visits land in the profile's database. The address-bar getter reads OSWorld's tree format."""

from __future__ import annotations

import http.server
import os
import shutil
import socket
import sqlite3
import subprocess
import threading
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from parallel_rollout.envs.osworld import chrome, setup
from parallel_rollout.envs.osworld.getters import GETTERS
from parallel_rollout.envs.osworld.getters.browser import active_url
from parallel_rollout.guest.client import GuestClient
from test_guest import _start_agent

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture
def browser_env(tmp_path, monkeypatch):
    if not CHROMIUM:
        pytest.skip("no chromium on this machine")
    site = tmp_path / "site"
    site.mkdir()
    for name in ("one", "two", "three"):
        (site / f"{name}.html").write_text(f"<html><head><title>Page {name}</title></head>"
                                           f"<body><p id=x>{name} body</p></body></html>")
    (site / "shop.html").write_text(
        "<html><body><div class=price> $12 </div><div class=price>$15</div>"
        "<div class=route>SEA<div class=sep></div>NYC</div><div class=card><h3> Tent </h3></div>"
        "<div class=card><p>none</p></div><ul class=cats><li class=catAllProducts><span>Boots</span></li>"
        "<li class=catAllProducts><span>Hats</span></li></ul><div class=tag>Red</div><div class=tag>Blue</div>"
        "<a id=more href='two.html'>more</a><form><input id=q value=' camping '></form><table><tr><td>Total</td><td>42</td></tr></table></body></html>")
    (site / "rec.html").write_text(
        "<html><body><input id=hero-search-input><button class=nav-search-button onclick=\""
        "document.getElementById('r').innerHTML='<a class=search-result-highlight--success target=_blank "
        "href=camp.html>'+document.getElementById('hero-search-input').value+'</a>'\">Go</button>"
        "<div id=r></div></body></html>")
    (site / "camp.html").write_text(
        "<html><body><button class=next-available onclick=\"document.getElementById('t').innerHTML="
        "'<th class=h>Site</th><th class=h>Loop</th><th class=h>Jun 5</th>'\">Next</button>"
        "<table><tr id=t></tr></table></body></html>")
    handler = lambda *a, **k: http.server.SimpleHTTPRequestHandler(*a, directory=str(site), **k)  # noqa: E731
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    home = tmp_path / "home"
    home.mkdir()
    agent = _start_agent(tmp_path / "agent.sock", home)
    port = free_port()
    profile = home / ".config" / "chromium"
    browser = subprocess.Popen([CHROMIUM, "--headless=new", "--no-sandbox", "--disable-gpu", "--no-first-run",
                                f"--remote-debugging-port={port}", f"--user-data-dir={profile}",
                                f"http://127.0.0.1:{server.server_port}/one.html"],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    monkeypatch.setenv("PARALLEL_ROLLOUT_OSWORLD_CDP_PORTS", str(port))
    vm = GuestClient(f"unix:{tmp_path / 'agent.sock'}", timeout_s=120)
    env = SimpleNamespace(vm=vm, task=SimpleNamespace(id="t", source=""), cache_dir=tmp_path / "cache",
                          cache_root=tmp_path / "dl")
    try:
        yield env, f"http://127.0.0.1:{server.server_port}", profile / "Default", browser
    finally:
        browser.kill()
        browser.wait()
        agent.kill()
        agent.wait()
        server.shutdown()


def wait_for(predicate, timeout=20.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.3)
    return predicate()


def test_tabs_open_close_and_are_read_like_osworld(browser_env):
    env, site, _, _ = browser_env
    assert wait_for(lambda: [t for t in GETTERS["open_tabs_info"](env, {}) if t["url"].endswith("/one.html")])
    setup.run_steps(env, [{"type": "chrome_open_tabs", "parameters": {
        "urls_to_open": [f"{site}/two.html", f"{site}/three.html"]}}], "config")
    tabs = GETTERS["open_tabs_info"](env, {})
    assert sorted(t["url"] for t in tabs) == [f"{site}/three.html", f"{site}/two.html"]  # the first tab closed
    assert {t["title"] for t in tabs} == {"Page two", "Page three"}
    setup.run_steps(env, [{"type": "chrome_close_tabs", "parameters": {
        "urls_to_close": [f"{site}/two.html"]}}], "config")
    assert [t["url"] for t in GETTERS["open_tabs_info"](env, {})] == [f"{site}/three.html"]
    page = chrome.read(env.vm, f"{site}/one.html")
    assert page["title"] == "Page one" and page["url"] == f"{site}/one.html"
    assert page["content"] == '<html><head><title>Page one</title></head><body><p id="x">one body</p></body></html>'
    assert [t["url"] for t in chrome.pages(env.vm)] == [f"{site}/three.html"]  # read closed its tab
    printed = GETTERS["pdf_from_url"](env, {"path": f"{site}/two.html", "dest": "two.pdf"})
    import fitz

    with fitz.open(printed) as document:  # the headless browser prints; its text is the page's
        assert "two body" in document[0].get_text()
    info = GETTERS["page_info"](env, {"url": f"{site}/two.html"})
    assert (info["title"], info["url"]) == ("Page two", f"{site}/two.html")


@pytest.mark.slow
def test_page_texts_are_read_as_osworld_reads_them(browser_env):
    from parallel_rollout.envs.osworld.getters.page_content import parse_page

    env, site, _, _ = browser_env
    url = f"{site}/shop.html?Color=red"
    chrome.open_tabs(env.vm, [url], close_first=False)
    assert parse_page(env.vm, url, {"category": "class", "class_singleObject": {"price": "first"},
                                    "class_multiObject": {"price": {"1": "second", "5": "sixth"}},
                                    "class_multiObject_child": {"route": {"0": "from", "1": "to"}},
                                    "class_multiObject_only_child": {"card": {"0": "card"}}}) == {
        "second": "$15", "sixth": "", "from": "SEA", "to": "NYC", "card": "Tent", "first": "$12"}
    assert parse_page(env.vm, url, {"category": "class", "class_multiObject_search_exist": {
        "tag": ["Red", "Green", "is_other_exist"]}}) == {"Red": True, "Green": False, "is_other_exist": True}
    assert parse_page(env.vm, url, {"category": "xpath", "xpathObject": {
        "/html/body/table/tbody/tr/td[2]": "total", "//div[@class='nope']": "none"}}) == {"total": "42", "none": ""}
    assert parse_page(env.vm, url, {"category": "input", "inputObject": {"//*[@id='q']": "query"}}) == {"query": "camping"}
    assert parse_page(env.vm, url, {"category": "class&url", "class_multiObject_li": {"cats": ["boots", "hats"]},
                                    "url_include_expected_multichoice": {"color=red": "red", "size=9": "nine"}}) == {
        "boots": True, "hats": True, "is_other_exist": False, "red": True, "nine": False}
    assert parse_page(env.vm, f"{site}/not-open.html", {"category": "xpath", "xpathObject": {"/html": "x"}}) == {}
    shop = f"{site}/shop.html"
    assert GETTERS["info_from_website"](env, {"url": shop, "infos": [
        {"action": "inner_text", "selector": ".price"}, {"action": "attribute", "selector": "#q", "attribute": "value"},
        {"action": "click_and_inner_text", "selector": ["#more", "#x"]}, {"action": "inner_text", "selector": ".tag"}],
        "backups": ["b"]}) == ["$12", " camping ", "two body", "Red"]
    assert GETTERS["info_from_website"](env, {"url": shop, "infos": [{"selector": ".missing"}],
                                              "backups": ["b"]}) == ["b"]


def test_the_recreation_walk_follows_the_new_tab(browser_env):
    env, site, _, _ = browser_env
    walk = GETTERS["gotoRecreationPage_and_get_html_content"]
    config = {"type": "gotoRecreationPage_and_get_html_content", "selector": "class", "class": "h",
              "order": "2", "url": f"{site}/rec.html"}
    assert walk(env, config) == {"expected": {"h": "Jun 5"}}
    assert walk(env, {**config, "order": "7"}) == {"expected": {"h": "__EVALUATION_FAILED__"}}
    assert [p["url"] for p in chrome.pages(env.vm)] == [f"{site}/one.html"]  # its tabs are closed


def test_history_visits_are_written_into_the_profile(browser_env):
    env, site, profile, browser = browser_env
    history = profile / "History"
    assert wait_for(history.exists)
    browser.terminate()  # as in OSWorld's task, the history is written before Chrome starts
    browser.wait()
    setup.run_steps(env, [{"type": "update_browse_history", "parameters": {"history": [
        {"url": "https://example.org/a", "title": "A", "visit_time_from_now_in_seconds": 3600}]}}], "config")
    with sqlite3.connect(history) as db:
        rows = db.execute("SELECT u.url, u.title, v.transition FROM urls u JOIN visits v ON v.url = u.id").fetchall()
    assert ("https://example.org/a", "A", 805306368) in rows
    got = GETTERS["history"](env, {"dest": "History"})
    assert any(row[0] == "https://example.org/a" for row in got)


def test_a_browser_that_never_answers_is_a_setup_error(tmp_path, monkeypatch):
    home = tmp_path / "home"
    home.mkdir()
    agent = _start_agent(tmp_path / "agent.sock", home)
    try:
        monkeypatch.setenv("PARALLEL_ROLLOUT_OSWORLD_CDP_PORTS", str(free_port()))
        monkeypatch.setattr(chrome, "CONNECT_TIMEOUT_S", 1.0)
        env = SimpleNamespace(vm=GuestClient(f"unix:{tmp_path / 'agent.sock'}", timeout_s=30),
                              task=SimpleNamespace(id="t9", source=""))
        with pytest.raises(setup.SetupError, match=r"t9.*chrome_open_tabs.*DevTools port .* did not answer"):
            setup.run_steps(env, [{"type": "chrome_open_tabs", "parameters": {"urls_to_open": ["x"]}}], "config")
        assert GETTERS["open_tabs_info"](env, {}) == []
        env.cache_dir = str(tmp_path / "cache")
        with open(GETTERS["pdf_from_url"](env, {"path": "http://x", "dest": "x.pdf"}), "rb") as handle:
            assert handle.read() == b"%PDF-1.4\n%EOF\n"  # OSWorld's stand-in when printing fails
    finally:
        agent.kill()
        agent.wait()


TREE = ('<desktop-frame xmlns:st="https://accessibility.ubuntu.example.org/ns/state">'
        '<application name="{app}"><frame name="x"><entry name="Address and search bar">{url}</entry>'
        '</frame></application></desktop-frame>')


@pytest.mark.parametrize("app, url, prefix, expected", [
    ("Google Chrome", "www.example.org/a?q=1", "https://", "https://www.example.org/a?q=1"),
    ("Chromium", "example.org", "", "example.org"),
    ("Firefox", "example.org", "https://", None),
    ("Chromium", "", "https://", None),
])
def test_active_url_is_read_from_the_address_bar(app, url, prefix, expected):
    assert active_url(TREE.format(app=app, url=url), prefix) == expected


def test_googledrive_and_login_without_credentials_are_setup_errors(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("PARALLEL_ROLLOUT_OSWORLD_SETTINGS", raising=False)
    env = SimpleNamespace(task=SimpleNamespace(id="gd", source=str(tmp_path / "examples" / "x.json")))
    with pytest.raises(setup.SetupError, match=r"gd.*googledrive/settings.yml.*PARALLEL_ROLLOUT_OSWORLD_SETTINGS"):
        setup.run_steps(env, [{"type": "googledrive", "parameters": {
            "settings_file": "evaluation_examples/settings/googledrive/settings.yml",
            "operation": ["delete"], "args": [{"query": "title = 'x'"}]}}], "config")
    with pytest.raises(setup.SetupError, match=r"gd.*google/settings.json"):
        setup.run_steps(env, [{"type": "login", "parameters": {
            "settings_file": "evaluation_examples/settings/google/settings.json", "platform": "googledrive"}}], "config")
    settings = tmp_path / "settings" / "google"
    settings.mkdir(parents=True)
    (settings / "settings.json").write_text('{"email": "a@b.c"}')
    monkeypatch.setenv("PARALLEL_ROLLOUT_OSWORLD_SETTINGS", str(tmp_path / "settings"))
    with pytest.raises(setup.SetupError, match="must hold 'email' and 'password'"):
        setup.run_steps(env, [{"type": "login", "parameters": {
            "settings_file": "evaluation_examples/settings/google/settings.json", "platform": "googledrive"}}], "config")
    assert os.environ["PARALLEL_ROLLOUT_OSWORLD_SETTINGS"] == str(tmp_path / "settings")
    assert Path(tmp_path / "settings" / "google" / "settings.json").is_file()
