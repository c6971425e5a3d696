"""The page side of the web mode's guest driver (``browser.py``): reading the page as the agent
sees it with MiniWoB's reward globals (``observe``) and carrying out one action over the DevTools
protocol (``act``: clicks, typing, keys, scrolls, selections). Standard library only: in the guest
this source comes after ``cdp.py``'s and before ``browser.py``'s, in one program
(``env.driver_source``); ``evaluate`` runs an expression in the page.
"""

import json
import time


# -- reading the page --------------------------------------------------------------------------

_DOM_JS = r"""
(function () {
  var root = core.getDOMInfo(), out = [], texts = {};
  function walk(node, parent, depth) {
    var item = {ref: node.ref, parent: parent, depth: depth, tag: node.tag.toLowerCase(),
                left: Math.round(node.left), top: Math.round(node.top),
                width: Math.round(node.width), height: Math.round(node.height)};
    if (node.text) item.text = node.text;
    if (node.value !== undefined && node.value !== '') item.value = node.value;
    if (node.id) item.id = node.id;
    if (node.classes && typeof node.classes === 'string') item.classes = node.classes;
    if (node.focused) item.focused = true;
    var el = node.ref > 0 ? core.previousDOMInfo[node.ref] : null;
    if (el && el.tagName === 'SELECT') {
      item.options = Array.prototype.map.call(el.options, function (o) { return o.text.trim(); });
      if (el.selectedIndex >= 0) item.value = el.options[el.selectedIndex].text.trim();
    }
    if (node.tag === 't') texts[node.ref] = [node.left + node.width / 2, node.top + node.height / 2];
    out.push(item);
    node.children.forEach(function (c) { walk(c, node.ref, depth + 1); });
  }
  walk(root, null, 0);
  window.__prTextCenters = texts;
  return JSON.stringify(out);
})()
"""

_STATE_JS = ("JSON.stringify({done: WOB_DONE_GLOBAL, reward: WOB_REWARD_GLOBAL, "
             "raw_reward: WOB_RAW_REWARD_GLOBAL, reason: WOB_REWARD_REASON, "
             "utterance: core.getUtterance(), episode: WOB_EPISODE_ID})")


def evaluate(ws, expression):
    result = ws.call("Runtime.evaluate", expression=expression, returnByValue=True, awaitPromise=True)
    if result.get("exceptionDetails"):
        details = result["exceptionDetails"]
        text = (details.get("exception") or {}).get("description") or details.get("text")
        raise RuntimeError(f"page script failed: {text}")
    return result.get("result", {}).get("value")


def observe(ws, req):
    """The page as the agent sees it, and MiniWoB's reward globals."""
    state = json.loads(evaluate(ws, _STATE_JS))
    state["dom"] = [] if state["done"] else json.loads(evaluate(ws, _DOM_JS))
    if req.get("screenshot"):
        state["screenshot"] = ws.call("Page.captureScreenshot", format="png")["data"]
    return state


# -- acting ------------------------------------------------------------------------------------

_KEYS = {
    "enter": ("Enter", "Enter", 13, "\r"), "tab": ("Tab", "Tab", 9, ""),
    "backspace": ("Backspace", "Backspace", 8, ""), "delete": ("Delete", "Delete", 46, ""),
    "escape": ("Escape", "Escape", 27, ""), "space": (" ", "Space", 32, " "),
    "arrowup": ("ArrowUp", "ArrowUp", 38, ""), "arrowdown": ("ArrowDown", "ArrowDown", 40, ""),
    "arrowleft": ("ArrowLeft", "ArrowLeft", 37, ""), "arrowright": ("ArrowRight", "ArrowRight", 39, ""),
    "home": ("Home", "Home", 36, ""), "end": ("End", "End", 35, ""),
    "pageup": ("PageUp", "PageUp", 33, ""), "pagedown": ("PageDown", "PageDown", 34, ""),
}
_MODIFIERS = {"alt": 1, "ctrl": 2, "control": 2, "meta": 4, "cmd": 4, "shift": 8}


def _mouse(ws, x, y, button="left", clicks=1):
    ws.call("Input.dispatchMouseEvent", type="mouseMoved", x=x, y=y)
    for count in range(1, clicks + 1):
        ws.call("Input.dispatchMouseEvent", type="mousePressed", x=x, y=y, button=button, clickCount=count)
        ws.call("Input.dispatchMouseEvent", type="mouseReleased", x=x, y=y, button=button, clickCount=count)


def _key(ws, combo):
    parts = [p for p in combo.replace("-", "+").split("+") if p] if len(combo) > 1 else [combo]
    modifiers = sum(_MODIFIERS.get(p.lower(), 0) for p in parts[:-1])
    name = parts[-1]
    if name.lower() in _KEYS:
        key, code, vk, text = _KEYS[name.lower()]
    elif len(name) == 1:
        key, text = name, name
        code = f"Key{name.upper()}" if name.isalpha() else (f"Digit{name}" if name.isdigit() else "")
        vk = ord(name.upper()) if name.isalnum() else 0
    else:
        raise ValueError(f"unknown key {name!r}")
    if modifiers & ~8:
        text = ""  # ctrl+a selects, it types nothing
    down = {"type": "keyDown" if text else "rawKeyDown", "key": key, "code": code,
            "windowsVirtualKeyCode": vk, "modifiers": modifiers}
    if text:
        down["text"] = down["unmodifiedText"] = text
    ws.call("Input.dispatchKeyEvent", **down)
    ws.call("Input.dispatchKeyEvent", type="keyUp", key=key, code=code, windowsVirtualKeyCode=vk,
            modifiers=modifiers)


def _element_center(ws, ref):
    ref = int(ref)
    center = evaluate(ws, f"""(function () {{
      if ({ref} < 0) {{ var c = (window.__prTextCenters || {{}})[{ref}]; return c || null; }}
      var el = core.previousDOMInfo[{ref}]; if (!el) return null;
      var r = el.getBoundingClientRect(); return [r.left + r.width / 2, r.top + r.height / 2];
    }})()""")
    if center is None:
        raise ValueError(f"no element with ref {ref} on the page (refs come from the last observation)")
    return center


def _inside_viewport(ws, x, y):
    """ValueError when (x, y) is off the page's viewport: a click there reaches nothing."""
    width, height = evaluate(ws, "[window.innerWidth, window.innerHeight]")
    if not (0 <= x < width and 0 <= y < height):
        raise ValueError(f"the point ({x}, {y}) is outside the page's viewport ({width}x{height}): the click "
                         "reaches nothing")


def act(ws, action):
    """Carry out one action (a dict already checked by the host)."""
    kind = action["action"]
    if kind == "click":
        if "ref" in action and int(action["ref"]) > 0:
            ok = evaluate(ws, f"core.previousDOMInfo[{int(action['ref'])}] !== undefined "
                           f"&& core.elementClick({int(action['ref'])})")
            if ok is not True:
                raise ValueError(f"no element with ref {action['ref']} on the page "
                                 "(refs come from the last observation)")
        else:
            x, y = _element_center(ws, action["ref"]) if "ref" in action else (action["x"], action["y"])
            _inside_viewport(ws, x, y)
            _mouse(ws, x, y, clicks=action.get("clicks", 1))
    elif kind == "type":
        if "ref" in action:
            # a field takes the text; anything else (the page's body, a label) would drop it
            taken = evaluate(ws, f"(function () {{ var el = core.previousDOMInfo[{int(action['ref'])}];"
                              " if (!el) return 'missing';"
                              " var tag = el.tagName.toLowerCase();"
                              " if (!(el.isContentEditable || tag === 'textarea' || (tag === 'input' &&"
                              " !/^(button|submit|reset|checkbox|radio|file|image|hidden)$/.test(el.type))))"
                              " return '<' + tag + '>'; el.focus(); return true; })()")
            if taken == "missing":
                raise ValueError(f"no element with ref {action['ref']} on the page (refs come from the last observation)")
            if taken is not True:
                raise ValueError(f"element {action['ref']} ({taken}) takes no text: type into an input, a textarea "
                                 "or an editable element")
            if action.get("clear", True):
                evaluate(ws, f"(function () {{ var el = core.previousDOMInfo[{int(action['ref'])}];"
                          " if ('value' in el) el.value = ''; return true; })()")
        for char in action["text"]:
            if char == "\n":
                _key(ws, "Enter")
            else:
                ws.call("Input.dispatchKeyEvent", type="keyDown", key=char, text=char, unmodifiedText=char)
                ws.call("Input.dispatchKeyEvent", type="keyUp", key=char)
    elif kind == "press":
        _key(ws, action["key"])
    elif kind == "scroll":
        x, y = _element_center(ws, action["ref"]) if "ref" in action else (action.get("x", 80), action.get("y", 130))
        ws.call("Input.dispatchMouseEvent", type="mouseWheel", x=x, y=y,
                deltaX=action.get("dx", 0), deltaY=action.get("dy", 0))
    elif kind == "select":
        ok = evaluate(ws, f"""(function () {{
          var el = core.previousDOMInfo[{int(action['ref'])}], want = {json.dumps(str(action['option']))};
          if (!el || !el.options) return false;
          for (var i = 0; i < el.options.length; i++) {{
            if (el.options[i].text.trim() === want || el.options[i].value === want) {{
              el.selectedIndex = i; el.dispatchEvent(new Event('input', {{bubbles: true}}));
              el.dispatchEvent(new Event('change', {{bubbles: true}})); return true; }}
          }}
          return false; }})()""")
        if ok is not True:
            raise ValueError(f"element {action['ref']} is not a list with the option {action['option']!r}")
    elif kind == "wait":
        pass
    else:
        raise ValueError(f"unknown action {kind!r}")
    time.sleep(max(0.0, float(action.get("ms", 0))) / 1000 + 0.03)
