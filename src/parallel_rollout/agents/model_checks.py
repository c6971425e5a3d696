"""What a run checks of its agent before it starts: the model client's settings, for every
agent that calls the model through ``self.model``, then the agent's own ``check_config``.

Which agents call the model (``calls_model``): one whose ``options`` hold the model settings
(every agent's default, ``MODEL_OPTIONS``) and whose class says ``uses_model = True`` (the
``openai`` agent), or leaves it None (a ``module:Class`` agent's default) and is given
``--model`` or ``--base-url`` by the run (a trainer's own ``RunConfig``: one not the default).
Which routes its requests take (``model_routes``, asked by ``--check-endpoint`` and the RL
scheduler's check): those of the calls its class's ``model_calls`` names, else either. ``uses_model = False``, or ``options`` without the
model settings (the oracle, the command agent), never. What a run checks of them: every
endpoint URL's form, the key where the endpoint needs one (``OPENAI_API_KEY`` for OpenAI's
own API), the ``openai`` package, and a ``tokenizer`` folder that loads; each error names the
agent the run was given. A model-calling agent the rule does not catch (a plugin given no
model setting) meets the same missing key at its first request, which then stops the run as
``endpoint_refused`` (``ModelClient``) instead of grading the attempt.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
from typing import Any, Callable

from ..config_checks import check_base_url
from ..errors import ConfigError
from ..plugins import plugin_call
from . import openai_request

__all__ = ["calls_model", "check_agent", "check_model_settings", "may_call_model", "model_routes", "probe_endpoint",
           "fleet_verdict", "probe_fleet"]

log = logging.getLogger(__name__)

#: run settings that, given explicitly, say a plugin agent calls the model
_MODEL_SIGNS = frozenset({"model", "base_url"})


def may_call_model(agent_cls: Any) -> bool:
    """Whether the agent class may call the model through ``self.model``: it takes the model
    settings (``options``) and does not say ``uses_model = False``."""
    return "model" in agent_cls.options and getattr(agent_cls, "uses_model", None) is not False


def calls_model(agent_cls: Any, config: Any) -> bool:
    """Whether the run's agent calls the model, so that its settings are checked at start:
    ``uses_model = True``, or None with ``--model`` or ``--base-url`` given (see above)."""
    if not may_call_model(agent_cls):
        return False
    return getattr(agent_cls, "uses_model", None) is True or bool(_MODEL_SIGNS & _given(config))


def _given(config: Any) -> set[str]:
    """The settings the run was given: its explicit ones (a flag, a config file, run()'s
    keyword) and any that is not its field's default: a trainer's ``RunConfig(agent=…,
    base_url=…)`` has no explicit ones, and its plugin agent's endpoint went unchecked."""
    defaults = {f.name: f.default for f in dataclasses.fields(config)} if dataclasses.is_dataclass(config) else {}
    return set(config.explicit) | {name for name in _MODEL_SIGNS
                                   if name in defaults and getattr(config, name) != defaults[name]}


def check_model_settings(config: Any) -> None:
    """ConfigError before the run when ``self.model`` could not send a request: an endpoint
    URL without scheme or host, a key the endpoint needs and the environment lacks, no
    ``openai`` package, a ``tokenizer`` folder that does not load."""
    for url in openai_request.resolve_base_urls(config.base_url):
        check_base_url(url, "--base-url" if config.base_url else "OPENAI_BASE_URL")
        if openai_request.api_key(url) is None:
            raise ConfigError(openai_request.missing_key_message(url, config.agent))
    try:
        import openai  # noqa: F401
    except ImportError:
        raise ConfigError(f"--agent {config.agent} needs the 'openai' package: pip install openai") from None
    if getattr(config, "tokenizer", None):
        from .tokens import ChatTokenizer

        ChatTokenizer(config.tokenizer)  # loads it: a bad folder stops the run before it starts


def check_agent(config: Any, agent_cls: Any) -> None:
    """The run's checks of its agent: the model settings when it calls the model, then the
    class's own ``check_config`` (a plugin's runs through ``plugin_call``)."""
    if calls_model(agent_cls, config):
        check_model_settings(config)
    if may_call_model(agent_cls):
        declared_calls(agent_cls, config.agent)  # a model_calls that names no call, refused before the run
    own = getattr(agent_cls, "check_config", None)
    if own is not None:
        plugin_call(f"agent {config.agent!r}: check_config", own, config)


#: ``Agent.model_calls``'s words: the ModelClient call, and the route it takes (chat's: ``Wire.path``)
MODEL_CALLS = ("chat", "generate")


def declared_calls(agent_cls: Any, agent: str) -> tuple[str, ...] | None:
    """The agent class's ``model_calls`` (sorted), or None when it does not say; ConfigError
    naming the agent for a value that is none of ``MODEL_CALLS`` (a route, a typo)."""
    calls = getattr(agent_cls, "model_calls", None)
    if calls is None:
        return None
    calls = (calls,) if isinstance(calls, str) else calls
    wrong = [call for call in calls if call not in MODEL_CALLS]
    if wrong or not calls:
        raise ConfigError(f"agent {agent!r}: {agent_cls.__name__}.model_calls = {agent_cls.model_calls!r} names "
                          f"{', '.join(map(repr, wrong)) or 'no call'}: say which of self.model's calls the agent "
                          "makes, a set of 'chat' (chat, achat) and 'generate' (generate, agenerate), or None "
                          "when either")
    return tuple(sorted(set(calls)))


def model_routes(config: Any, agent_cls: Any) -> tuple[tuple[str, ...], ...]:
    """The POST routes the run's requests take, each a tuple of routes any one of which will
    do: the route of each call the agent's ``model_calls`` names (the openai agent's
    ``chat``: ``/chat/completions``, or ``/completions`` with a tokenizer; ``generate``:
    ``/completions``); an agent that does not say may take either."""
    from .wire import Wire

    path = Wire(config).path
    calls = declared_calls(agent_cls, config.agent)
    if calls is None:
        return (tuple(dict.fromkeys((path, "/completions"))),)
    return tuple((route,) for route in dict.fromkeys(path if call == "chat" else "/completions" for call in calls))


def _route_caller(config: Any, agent_cls: Any, route: str) -> str:
    """Who takes ``route`` in a plugin agent's run, for an error: its ``model_calls`` that
    take it ('' for a built-in agent, whose route is its own)."""
    from .base import AGENTS
    from .wire import Wire

    calls = declared_calls(agent_cls, config.agent)
    if calls is None or config.agent in AGENTS.builtin:
        return ""
    taking = [f"self.model.{call}" for call in calls
              if (Wire(config).path if call == "chat" else "/completions") == route]
    return (f", the route of the agent {config.agent}'s {' and '.join(taking)} "
            f"({agent_cls.__name__}.model_calls = {set(calls)!r})")


def probe_endpoint(config: Any, models_required: bool = False, agent_cls: Any = None) -> str:
    """``--check-endpoint`` for an agent that may call the model: GET /models of every server
    its model client would call; a note on what answered, or ConfigError naming the one that
    is unusable (unreachable, the key missing or refused, a model list without --model).
    ``probe_fleet`` says what it found and which servers to leave out."""
    return probe_fleet(config, models_required, agent_cls)[0]


def probe_fleet(config: Any, models_required: bool = False, agent_cls: Any = None,
                stopped: Callable[[], bool] = lambda: False) -> tuple[str, tuple[str, ...], tuple[str, ...]]:
    """``probe_endpoint``'s note, the servers the run leaves out (``ServerPool.leave_out``),
    and those that did not answer, which each worker asks at their first visit (``ServerPool.first_visit``).

    A fleet's server that answers but refuses the run's key, path or model (a model list
    without it: SGLang answers any model name, so only this tells) is left out for the whole
    run, never asked again; one that does not answer (not up yet) stays in the rotation, left
    out by its requests' failures for --server-cooldown at a time, and asked its /models when
    a request first reaches it (up later with another model, it is left out then). Each is a warning naming it
    while another server serves; a problem only when none serves, as the run then stops (exit
    2): a ``ServerUnreachable`` when none answered. ``models_required``: see ``probe_models``;
    ``agent_cls``: the run's agent, whose requests' POST routes (``model_routes``) are asked
    of each server whose /models passed (``probe_route``: a server with /models and no chat route);
    ``stopped``: a stop signal came (the run's own handler, which raises nothing): the answers
    not yet in are not waited for, and nothing is found (``"", (), ()``)."""
    urls = openai_request.resolve_base_urls(config.base_url)

    def probe(url: str) -> str | openai_request.ServerRefused:
        """One server's note, or why it does not serve the run."""
        try:
            note = openai_request.probe_models(url, config.model, agent=config.agent, models_required=models_required,
                                               fleet=len(urls) > 1)
            for either in model_routes(config, agent_cls) if agent_cls is not None else ():
                note += ", and " + openai_request.probe_route(  # the note says whether /models listed the model
                    url, config.model, either, listed=note.endswith(" model(s)"),
                    taken_by=_route_caller(config, agent_cls, either[0]))
            return note
        except openai_request.ServerRefused as exc:
            if len(urls) == 1:
                raise
            return exc

    answers = _ask_all(probe, urls, stopped)
    if answers is None:  # a stop signal: the run stops now, whatever the servers say
        return "", (), ()
    notes = [answer for answer in answers if isinstance(answer, str)]
    refused = [answer for answer in answers if not isinstance(answer, str)]
    if refused and not notes:
        fixes = list(dict.fromkeys(exc.fix for exc in refused))
        none_up = all(isinstance(exc, openai_request.ServerUnreachable) for exc in refused)
        raise (openai_request.ServerUnreachable if none_up else openai_request.ServerRefused)(
            ", ".join(urls), "no server of the fleet serves the run, which would stop at its first request: "
            + "; ".join(exc.answer for exc in refused), "; ".join(fixes))
    others = len(urls) - len(refused)
    for exc in refused:
        if isinstance(exc, openai_request.ServerUnreachable):
            log.warning("%s; the run goes on at the %d other(s) of the fleet and asks this server again as it "
                        "does a failing one: its requests leave it out for --server-cooldown at a time",
                        exc.answer, others)
        else:
            log.warning("%s; the run leaves this server out for the whole run: it is not asked again, and the run "
                        "goes on at the %d other(s) of the fleet (to use it too, fix that there and start the run "
                        "again, or leave it out of --base-url)", exc.answer, others)
        notes.append(f"{exc.url} left out (warned)")
    left_out = tuple(exc.url for exc in refused if not isinstance(exc, openai_request.ServerUnreachable))
    unheard = tuple(exc.url for exc in refused if isinstance(exc, openai_request.ServerUnreachable))
    return "; ".join(notes), left_out, unheard


def _ask_all(probe: Callable[[str], Any], urls: list[str], stopped: Callable[[], bool]) -> list[Any] | None:
    """``probe`` of every url at once, in threads of their own: a server down costs its probe's
    timeout, and 8 asked one after another held the run 40 s. The answers in ``urls``' order (the
    words keep --base-url's), an exception a probe raised raised here; None once ``stopped``.
    Daemon threads, so that a Ctrl-C (a handler that raises, or ``stopped``) ends the wait at once
    and the process's exit does not wait for a server that never answers (a thread pool's threads
    are joined at exit: a Ctrl-C's announced grace became the probe's timeout)."""
    answers: dict[int, tuple[bool, Any]] = {}

    def ask(i: int, url: str) -> None:
        try:
            answers[i] = (True, probe(url))
        except BaseException as exc:  # noqa: BLE001 - raised again on the asking thread
            answers[i] = (False, exc)

    threads = [threading.Thread(target=ask, args=(i, url), name="fleet-check", daemon=True)
               for i, url in enumerate(urls)]
    for thread in threads:
        thread.start()
    for thread in threads:
        while thread.is_alive():
            if stopped():
                return None
            thread.join(0.05)
    for ok, answer in (answers[i] for i in range(len(urls))):
        if not ok:
            raise answer
    return [answers[i][1] for i in range(len(urls))]


def fleet_verdict(config: Any, agent_cls: Any,
                  stopped: Callable[[], bool] = lambda: False) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """A batch run's check of its fleet (several ``--base-url``) as it starts, when its agent
    calls the model: the servers that answer but do not serve the model (``probe_fleet``),
    which its engine's attempts leave out (``Engine.servers_left_out``), and those that do not
    answer (``Engine.servers_unheard``); ``ServerRefused`` when no server serves it. A fleet
    none of whose servers answers yet is left to the run's requests (their retries and
    cool-downs), each server asked its /models at its first visit."""
    urls = tuple(openai_request.resolve_base_urls(config.base_url))
    if len(urls) < 2 or not calls_model(agent_cls, config):
        return (), ()
    try:
        return probe_fleet(config, agent_cls=agent_cls, stopped=stopped)[1:]
    except openai_request.ServerUnreachable:
        return (), urls
