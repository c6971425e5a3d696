"""What a run checks of its agent before it starts: the model client's settings, for every
agent that calls the model through ``self.model``, then the agent's own ``check_config``.

Which agents call the model (``calls_model``): one whose ``options`` hold the model settings
(every agent's default, ``MODEL_OPTIONS``) and whose class says ``uses_model = True`` (the
``openai`` agent), or leaves it None (a ``module:Class`` agent's default) and is given
``--model`` or ``--base-url`` by the run. ``uses_model = False``, or ``options`` without the
model settings (the oracle, the command agent), never. What a run checks of them: every
endpoint URL's form, the key where the endpoint needs one (``OPENAI_API_KEY`` for OpenAI's
own API), the ``openai`` package, and a ``tokenizer`` folder that loads; each error names the
agent the run was given. A model-calling agent the rule does not catch (a plugin given no
model setting) meets the same missing key at its first request, which then stops the run as
``endpoint_refused`` (``ModelClient``) instead of grading the attempt.
"""

from __future__ import annotations

import logging
from typing import Any

from ..config_checks import check_base_url
from ..errors import ConfigError
from ..plugins import plugin_call
from . import openai_request

__all__ = ["calls_model", "check_agent", "check_model_settings", "may_call_model", "model_routes", "probe_endpoint"]

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
    return getattr(agent_cls, "uses_model", None) is True or bool(_MODEL_SIGNS & set(config.explicit))


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
    own = getattr(agent_cls, "check_config", None)
    if own is not None:
        plugin_call(f"agent {config.agent!r}: check_config", own, config)


def model_routes(config: Any) -> tuple[str, ...]:
    """The POST routes the run's requests take: the openai agent's one (``/chat/completions``,
    or ``/completions`` with a tokenizer); another agent's may take either (its
    ``self.model.generate`` sends token ids to ``/completions``), so either will do."""
    from .wire import Wire

    path = Wire(config).path
    return (path,) if config.agent == "openai" else tuple(dict.fromkeys((path, "/completions")))


def probe_endpoint(config: Any, models_required: bool = False, routes: tuple[str, ...] = ()) -> str:
    """``--check-endpoint`` for an agent that may call the model: GET /models of every server
    its model client would call; a note on what answered, or ConfigError naming the one that
    is unusable (unreachable, the key missing or refused, a model list without --model).

    A fleet's server that refuses the run's key, path or model, or does not answer, is what
    the run takes out of its rotation and goes on without: a warning naming it, while another
    server serves; a problem only when none serves, as the run then stops (exit 2): a
    ``ServerUnreachable`` when none answered. ``models_required``: see ``probe_models``;
    ``routes``: the POST routes the run's requests take (any of them will do), asked of each
    server whose /models passed (``probe_route``: a server with /models and no chat route)."""
    urls = openai_request.resolve_base_urls(config.base_url)
    notes, refused = [], []
    for url in urls:
        try:
            note = openai_request.probe_models(url, config.model, agent=config.agent, models_required=models_required)
            if routes:  # the note says whether /models listed the model ("answers with 2 model(s)")
                note += f", and {openai_request.probe_route(url, config.model, routes, listed=note.endswith(' model(s)'))}"
            notes.append(note)
        except openai_request.ServerRefused as exc:
            if len(urls) == 1:
                raise
            refused.append(exc)
    if refused and not notes:
        fixes = list(dict.fromkeys(exc.fix for exc in refused))
        none_up = all(isinstance(exc, openai_request.ServerUnreachable) for exc in refused)
        raise (openai_request.ServerUnreachable if none_up else openai_request.ServerRefused)(
            ", ".join(urls), "no server of the fleet serves the run, which would stop at its first request: "
            + "; ".join(exc.answer for exc in refused), "; ".join(fixes))
    for exc in refused:
        log.warning("%s; the run takes this server out of its rotation and goes on at the %d other(s) of "
                    "the fleet (to use it too, fix that there, or leave it out of --base-url)",
                    exc.answer, len(urls) - len(refused))
        notes.append(f"{exc.url} left out (warned)")
    return "; ".join(notes)
