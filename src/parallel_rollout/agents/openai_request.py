"""What the ``openai`` agent sends, by the OpenAI client's conventions.

* **Where.** ``--base-url`` when given, else ``OPENAI_BASE_URL`` from the environment (as the
  official client reads it), else OpenAI's own API (``resolve_base_url``).
* **The key.** ``OPENAI_API_KEY``. It is required only by OpenAI's own API
  (``api.openai.com``). A local server (localhost, 127.0.0.0/8, ::1, a unix socket) never
  needs one, nor does any other server a URL names: a placeholder is sent when it is unset,
  since vLLM, SGLang, llama.cpp … usually ignore it (``needs_key``, ``api_key``).
* **The token limit.** OpenAI's reasoning models (o1, o3, o4…, gpt-5…) reject ``max_tokens``
  with a 400 and want ``max_completion_tokens``. The agent sends that name to models whose
  name says so (``token_limit_name``); for any other model, a 400 that names both parameters
  switches the request and it is sent again once (``adopt_completion_tokens``). The switch is
  remembered per endpoint and model for the rest of the worker process, so one turn per
  worker pays for it, not every turn.
* **Generation parameters.** ``--sampling KEY=VALUE`` (``RunConfig.sampling``, ``[sampling]``
  in run.toml) and ``extra_body`` (a ``[extra_body]`` table) are merged into the request's
  JSON body as they are: ``top_p``, ``seed``, ``stop``, vLLM's ``top_k`` or
  ``chat_template_kwargs`` … (``body_extras``). An attempt's overrides (a scheduler's
  ``sampling=``) are merged over all of them (``sampled_fields``).
* **Several servers.** ``base_url`` may be a list (``resolve_base_urls``); OPENAI_BASE_URL
  stands in only when none is given. Which one a trajectory uses: ``servers.py``.
* **What can be sent.** A call's ``messages`` must be a list of message dicts and its
  ``tools`` a list of tool dicts (``chat_arguments``: a string would go as a list of its
  characters), and the body must be JSON as the client encodes it (``check_sendable``). Each is
  checked before the first request; what fails is the agent's error (TypeError or ValueError,
  naming what was given and where), never sent, retried or blamed on the endpoint.
"""

from __future__ import annotations

import datetime
import ipaddress
import json
import os
import threading
import urllib.error
import urllib.request
from typing import Any
from urllib.parse import urlsplit

from ..errors import ConfigError
from .episode import says_overflow

#: where requests go without --base-url or OPENAI_BASE_URL
DEFAULT_BASE_URL = "https://api.openai.com/v1"
#: sent as the key to a server that needs none when OPENAI_API_KEY is unset
PLACEHOLDER_KEY = "EMPTY"
#: hosts whose API always needs a real key
KEYED_HOSTS = frozenset({"api.openai.com"})
#: seconds a preflight waits for GET /models
PROBE_TIMEOUT_S = 5.0
#: model name prefixes of OpenAI's reasoning models, which take only max_completion_tokens
COMPLETION_TOKENS_PREFIXES = ("o1", "o3", "o4", "gpt-5")

#: (endpoint, model) pairs whose server refused max_tokens in this process
_adopted: set[tuple[str, str]] = set()
_adopted_lock = threading.Lock()


def resolve_base_url(flag: str | list[str] | None) -> str:
    """The endpoint's base URL: the flag (the first of several), else OPENAI_BASE_URL, else
    OpenAI's API."""
    return resolve_base_urls(flag)[0]


def resolve_base_urls(flag: str | list[str] | None) -> list[str]:
    """Every server's base URL: the flag's (one or several), else OPENAI_BASE_URL, else
    OpenAI's API."""
    urls = [flag] if isinstance(flag, str) else list(flag or ())
    urls = [url.rstrip("/") for url in urls if url]
    return urls or [(os.environ.get("OPENAI_BASE_URL") or DEFAULT_BASE_URL).rstrip("/")]


def is_local(url: str) -> bool:
    """Whether ``url`` names this machine: localhost, a loopback address or a unix socket."""
    parts = urlsplit(url)
    if "unix" in parts.scheme:
        return True
    host = (parts.hostname or "").lower()
    if host == "localhost" or host.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def needs_key(url: str) -> bool:
    """Whether the endpoint at ``url`` refuses requests without a real OPENAI_API_KEY."""
    return not is_local(url) and (urlsplit(url).hostname or "").lower() in KEYED_HOSTS


def api_key(url: str) -> str | None:
    """The key to send to ``url``: OPENAI_API_KEY, a placeholder where none is needed, or
    None when the endpoint needs one and none is set."""
    key = os.environ.get("OPENAI_API_KEY")
    if key:
        return key
    return None if needs_key(url) else PLACEHOLDER_KEY


def missing_key_message(url: str, agent: str = "openai") -> str:
    """What to say when ``url`` needs a key and OPENAI_API_KEY is unset (``agent``: the
    run's --agent, whose model client would call it)."""
    return (f"--agent {agent} needs OPENAI_API_KEY in the environment to call {url}; set it, "
            "or point --base-url (or OPENAI_BASE_URL) at another OpenAI-compatible server")


def token_limit_name(endpoint: str, model: str) -> str:
    """The request field that carries --max-tokens for this endpoint and model."""
    if (endpoint, model) in _adopted:
        return "max_completion_tokens"
    name = model.rsplit("/", 1)[-1].lower()
    return "max_completion_tokens" if name.startswith(COMPLETION_TOKENS_PREFIXES) else "max_tokens"


def adopt_completion_tokens(request: dict[str, Any], endpoint: str, status: int, body: str) -> bool:
    """After an error answer: when it is the 400 that refuses ``max_tokens`` in favour of
    ``max_completion_tokens``, rename the field in ``request``, remember the switch for this
    endpoint and model, and return True (send it again); False otherwise, and for vLLM's
    "'max_tokens' or 'max_completion_tokens' is too large" (a context past the model's: both
    names are accepted, and the switch would be remembered for nothing; context_room.py)."""
    if status != 400 or "max_tokens" not in request or says_overflow(body):
        return False
    if "max_completion_tokens" not in body and "unsupported_parameter" not in body:
        return False
    request["max_completion_tokens"] = request.pop("max_tokens")
    with _adopted_lock:
        _adopted.add((endpoint, str(request.get("model"))))
    return True


def body_extras(config: Any) -> dict[str, Any]:
    """The fields merged into every request body: ``sampling``, then ``extra_body``."""
    return {**(getattr(config, "sampling", None) or {}), **(getattr(config, "extra_body", None) or {})}


def sampled_fields(config: Any, overrides: dict[str, Any] | None = None) -> tuple[dict[str, Any], dict[str, Any]]:
    """(the request's own sampling fields: temperature, max_tokens; the body extras) of the run
    config with an attempt's ``overrides`` (a scheduler's ``sampling=``) merged over them:
    an override of temperature or max_tokens replaces the config's, any other joins the
    extras, replacing the same key of ``sampling``/``extra_body``."""
    overrides = dict(overrides or {})
    own = {name: getattr(config, name, None) for name in ("temperature", "max_tokens")}
    for name in ("temperature", "max_tokens"):
        if name in overrides:
            own[name] = overrides.pop(name)
    if "max_completion_tokens" in overrides:
        own["max_tokens"] = overrides.pop("max_completion_tokens")
    extras = body_extras(config)
    for name in ("temperature", "max_tokens", "max_completion_tokens"):
        if own.get("temperature" if name == "temperature" else "max_tokens") is not None:
            extras.pop(name, None)  # the override wins over the config's table
    return {k: v for k, v in own.items() if v is not None}, {**extras, **overrides}


def chat_arguments(messages: Any, tools: Any) -> tuple[list[dict[str, Any]], list[dict[str, Any]] | None]:
    """``chat``'s messages and tools as they are sent: lists of dicts (a tuple is taken as a
    list); TypeError naming what was given otherwise (a string would go as its characters,
    a dict as its keys, a generator empty on the second read)."""
    example = "[{'role': 'user', 'content': '…'}]"
    if not isinstance(messages, (list, tuple)):
        raise TypeError(f"chat(): messages must be a list of message dicts such as {example}, got {_shown(messages)}")
    for index, message in enumerate(messages):
        if not isinstance(message, dict):
            raise TypeError(f"chat(): messages[{index}] must be a message dict such as {example[1:-1]}, "
                            f"got {_shown(message)}")
    if tools is not None and (not isinstance(tools, (list, tuple)) or not all(isinstance(t, dict) for t in tools)):
        raise TypeError(f"chat(): tools must be a list of tool dicts ({{'type': 'function', 'function': …}}) "
                        f"or None, got {_shown(tools)}")
    return list(messages), (list(tools) if tools is not None else None)


def check_sendable(request: dict[str, Any]) -> None:
    """Raise, before anything is sent, when the body of ``request`` (the call's keyword
    arguments: ``extra_body`` merged in, ``extra_headers`` not part of it) is not JSON as the
    OpenAI client encodes it (no NaN, datetimes and pydantic models allowed): the same
    TypeError or ValueError, saying where in the body and what it holds."""
    body = {k: v for k, v in request.items() if k not in ("extra_body", "extra_headers")}
    body.update(request.get("extra_body") or {})
    try:
        _dumps(body)
    except (TypeError, ValueError) as exc:
        where, value = _unsendable(body, "")
        raise type(exc)(f"the model request cannot be sent (nothing went to the endpoint): "
                        f"{where or 'its body'} holds {_shown(value)}: {exc}") from None


def _dumps(value: Any) -> str:
    """``value`` as the OpenAI client's JSON (its encoder takes datetimes and pydantic models)."""
    def default(item: Any) -> Any:
        if isinstance(item, datetime.datetime):
            return item.isoformat()
        if hasattr(item, "model_dump"):
            return item.model_dump(mode="json")
        raise TypeError(f"Object of type {type(item).__name__} is not JSON serializable")

    return json.dumps(value, default=default, allow_nan=False)


def _unsendable(value: Any, where: str, seen: frozenset[int] = frozenset()) -> tuple[str, Any]:
    """The path (``messages[0]['content']``) and value of the first part of ``value`` JSON
    cannot carry; ``(where, value)`` when it is ``value`` itself (or a circular reference)."""
    if id(value) in seen:
        return where, value
    seen |= {id(value)}
    parts = (value.items() if isinstance(value, dict)
             else enumerate(value) if isinstance(value, (list, tuple)) else ())
    for key, item in parts:
        path = f"{where}[{key!r}]" if isinstance(value, dict) else f"{where}[{key}]"
        if not where and isinstance(value, dict):
            path = str(key)
        if isinstance(value, dict) and not isinstance(key, (str, int, float, bool, type(None))):
            return path, key
        try:
            _dumps(item)
        except (TypeError, ValueError, RecursionError):
            return _unsendable(item, path, seen)
    return where, value


def _shown(value: Any) -> str:
    """A value as an error names it: its type and a short repr."""
    text = repr(value)
    return f"{type(value).__name__} {text[:80] + '…' if len(text) > 80 else text}"


class ServerRefused(ConfigError):
    """``probe_models``: the server refuses the run's key, its path or its model (the run's
    requests would be answered 401/403/404: ``EndpointRefused``), or does not answer.
    ``answer`` is what it said, ``fix`` what to change; one server of a fleet is taken out by
    the run, which goes on."""

    def __init__(self, url: str, answer: str, fix: str) -> None:
        super().__init__(f"{answer}; {fix}")
        self.url, self.answer, self.fix = url, answer, fix


class ModelNotListed(ServerRefused):
    """``probe_models``: the server's model list lacks the run's model (another served there:
    SGLang and llama.cpp answer a request for any model name, so only this tells)."""


class ServerUnreachable(ServerRefused):
    """``probe_models``: nothing answered (a refused connection, no answer in time), or, when
    a model list is required or for a fleet's server, a 5xx: a server not (yet) up, unlike one
    that answers wrongly."""


def _answers(url: str, key: str, timeout: float) -> bool:
    """Whether GET ``url`` answers 200 (with the key)."""
    request = urllib.request.Request(url, headers={"Authorization": f"Bearer {key}"})
    try:
        with urllib.request.urlopen(request, timeout=timeout) as answer:
            return answer.status == 200
    except (urllib.error.URLError, OSError):
        return False


def probe_models(url: str, model: str, timeout: float = PROBE_TIMEOUT_S, agent: str = "openai",
                 models_required: bool = False, fleet: bool = False) -> str:
    """GET ``{url}/models`` as the client would (with the key): a note on what answered, or
    ConfigError saying why the endpoint is unusable (the key missing; unreachable, no answer in
    time: ``ServerUnreachable``; the key refused, a model list without ``model``:
    ``ServerRefused``). ``models_required``: an answer that is no model list (a 404, an HTML
    page: no OpenAI-compatible server there) is refused too, and a 5xx is a server not up.
    ``fleet``: a 5xx is a server not up (a proxy's 502/503 while the server behind it is down),
    so the fleet asks it again later (``ServerPool.first_visit``), not a server that answered."""
    if "unix" in urlsplit(url).scheme:
        return f"{url}: a unix socket, not probed"
    key = api_key(url)
    if key is None:
        raise ConfigError(missing_key_message(url, agent))
    request = urllib.request.Request(f"{url}/models", headers={"Authorization": f"Bearer {key}"})
    try:
        with urllib.request.urlopen(request, timeout=timeout) as answer:
            body = answer.read(1_000_000)
    except urllib.error.HTTPError as exc:
        if exc.code in (401, 403):
            raise ServerRefused(url, f"{url}/models refused the key (HTTP {exc.code})", "check OPENAI_API_KEY") from None
        if exc.code == 404 and _answers(f"{url.rstrip('/')}/v1/models", key, timeout):
            # every request of the run would be a 404 (EndpointRefused): the path, not the server
            raise ServerRefused(url, f"{url} has no /models (HTTP 404) but {url.rstrip('/')}/v1 has: the API is under /v1 "
                                "there", f"give --base-url {url.rstrip('/')}/v1") from None
        if models_required or (fleet and exc.code >= 500):
            refused = ServerUnreachable if exc.code >= 500 else ServerRefused
            raise refused(url, f"{url}/models answered HTTP {exc.code}: {_gist(exc.read(2000))}",
                          "check that an OpenAI-compatible server (vLLM, SGLang …) runs there") from None
        # some servers have no /models; one that answers at all is reachable
        return f"{url} answers (GET /models: HTTP {exc.code})"
    except (urllib.error.URLError, OSError) as exc:
        reason = getattr(exc, "reason", exc)
        raise ServerUnreachable(url, f"the model endpoint {url} is not reachable (GET /models: {reason})",
                                "check that it runs there") from None
    try:
        ids = [str(m.get("id")) for m in json.loads(body).get("data", []) if isinstance(m, dict)]
    except (ValueError, AttributeError):
        if models_required:
            raise ServerRefused(url, f"{url}/models answered no model list: {_gist(body)}",
                                "check that an OpenAI-compatible server (vLLM, SGLang …) runs there") from None
        return f"{url} answers (GET /models: not a model list)"
    if ids and model not in ids:  # its requests would be answered 404: EndpointRefused
        listed = ", ".join(ids[:10]) + (f" and {len(ids) - 10} more" if len(ids) > 10 else "")
        raise ModelNotListed(url, f"{url} does not list the model {model!r} (--model): it lists {listed}",
                             "give --model one of them")
    return f"{url} answers with {len(ids)} model(s)"


def probe_route(url: str, model: str, paths: tuple[str, ...], timeout: float = PROBE_TIMEOUT_S,
                listed: bool = True, taken_by: str = "") -> str:
    """POST ``{url}{path}`` (the route the run's requests take; ``paths``: any of them will do)
    a body no server samples from (the model, no messages or prompt), which a server with the
    route refuses (400, 422) without generating: a note on what answered, or ``ServerRefused``
    when none of the routes is there (404, 405: a completions-only server, a proxy that
    forwards only some routes, a base URL without the API's prefix) or the key is refused,
    ``ServerUnreachable`` when nothing answers or a 502/503/504 (a proxy whose server is not up).
    Asked after ``probe_models``, which checked the key is set; ``listed``: whether its /models
    listed the model (a server may have no /models); ``taken_by``: the error's words on who
    takes the route (a plugin agent's ``model_calls``)."""
    if "unix" in urlsplit(url).scheme:
        return f"{url}: a unix socket, not probed"
    missing = []
    for path in paths:
        request = urllib.request.Request(f"{url}{path}", data=json.dumps({"model": model}).encode(), method="POST",
                                         headers={"Authorization": f"Bearer {api_key(url)}",
                                                  "Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(request, timeout=timeout) as answer:
                return f"{url}{path} answers (HTTP {answer.status})"
        except urllib.error.HTTPError as exc:
            said = f"POST {url}{path} answered HTTP {exc.code}: {_gist(exc.read(2000))}"
            if exc.code in (401, 403):
                raise ServerRefused(url, f"{said} (the key refused)", "check OPENAI_API_KEY") from None
            if exc.code in (502, 503, 504):
                raise ServerUnreachable(url, said, "check that it runs there") from None
            if exc.code not in (404, 405):  # the route is there: it refused the body, as it should
                return f"{url}{path} answers (HTTP {exc.code})"
            missing.append(said)
        except (urllib.error.URLError, OSError) as exc:
            raise ServerUnreachable(url, f"the model endpoint {url} is not reachable (POST {path}: "
                                    f"{getattr(exc, 'reason', exc)})", "check that it runs there") from None
    fix = ("the server has no such route there (a server that serves other routes only, a proxy that forwards only "
           "some, or a --base-url without the prefix its API is under): fix --base-url")
    if paths == ("/chat/completions",):
        fix += (", or, for a server that serves only /completions, set tokenizer= (token ids "
                "then go to /completions)")
    has = f"{url}/models lists the model {model!r}" if listed else f"{url} answers"
    raise ServerRefused(url, f"{has} but {' and '.join(missing)}{taken_by}", fix)


def _gist(body: bytes) -> str:
    """The start of an answer's body, on one line, for an error."""
    text = " ".join(body.decode("utf-8", "replace").split())
    return repr(text[:160] + ("…" if len(text) > 160 else "")) if text else "an empty body"
