"""The model endpoint, checked before an engine's first ``get_batch``: a wrong URL said at once.

A failed group is retried, each member's request ``max_retries`` times for ``api_timeout_s``,
and only ``max_failed_groups`` of them in a row raise (``budget``): patience for a server that
restarts mid-run, minutes of it before a trainer pointed at a wrong port or at something
that is no model server hears so. So the first ``get_batch`` of an engine (whichever of its
schedulers calls first, before any group starts) asks the endpoint what ``--check-endpoint``
asks it (``agents.model_checks.probe_endpoint``: GET ``{base_url}/models`` with the key), and
more strictly: an answer that is no model list (a 404, an HTML page) is refused too, and so
is a server whose /models lists the model but whose route the requests take is not there
(``model_routes``; ``probe_route`` POSTs it a body without messages, which a server refuses unsampled).

* **Refused** (a 401/403 for the key, a 404, an HTML page, a model list without
  ``RunConfig.model``, a 404/405 of the chat route: a completions-only server, a proxy that
  forwards only some routes, a base URL short of the API's prefix): ``ConfigError`` at once,
  naming the URL and what came back.
* **Not up** (a refused connection, no answer in time, a 5xx of a proxy whose server is still
  loading): asked again every ``RETRY_S`` for up to ``ENDPOINT_WAIT_S`` seconds, or the
  call's own ``timeout`` when it gives one (a trainer whose server takes minutes to load
  passes ``get_batch(..., timeout=600)`` to its first call), then ``ConfigError``.

A fleet's server that answers but does not serve the model (``probe_fleet``: its /models
lists another; SGLang answers any model name, so no request would tell) is left out by every
worker for the engine's life: the check hands it to the engine (``Engine.servers_left_out``),
whose attempts carry it to their agents' ``ServerPool``.

Once the check has passed (or any model request got a reply) it is never asked again: a
server that restarts later meets the patience above, not this. A call that raised it leaves
it to the next call. ``RolloutScheduler(check_endpoint=False)`` skips it for the engine (a
policy server the trainer starts only after its first ``get_batch`` began, or one on
``--backend ray`` that only the cluster's nodes reach: the check asks from the trainer's
process), as does an agent that calls no model (``calls_model``).
"""

from __future__ import annotations

import threading
import time
from typing import Any

from ..agents import get_agent
from ..agents.model_checks import calls_model, probe_fleet
from ..agents.openai_request import ServerRefused, ServerUnreachable
from ..config import RunConfig
from ..errors import ConfigError

#: how long the first get_batch waits for an endpoint that is not up, without a timeout of its own
ENDPOINT_WAIT_S = 20.0
#: how often it asks again meanwhile
RETRY_S = 0.5
#: the CLI's flags in the probe's words, as a scheduler's RunConfig fields
_FIELDS = {"--base-url": "RunConfig.base_url", "--model": "RunConfig.model",
           "set tokenizer=": "give the run config a tokenizer"}


class EndpointCheck:
    """One engine's check of its model endpoint before its first batch (module docstring)."""

    def __init__(self, run_config: RunConfig, wanted: bool = True, engine: Any = None) -> None:
        self.run_config = run_config
        #: the engine whose attempts leave out the servers found not serving the model
        self.engine = engine
        #: still to be asked: not skipped, not passed yet, and the agent calls the model
        self.pending = wanted and calls_model(get_agent(run_config.agent), run_config)
        self._lock = threading.Lock()  # siblings' first calls in two threads ask it once

    def skip(self) -> None:
        """``check_endpoint=False``: the trainer starts its server later."""
        self.pending = False

    def check(self, timeout: float | None, replies: int) -> None:
        """Before a get_batch: ConfigError when the endpoint refuses, or is not up within the
        wait; nothing once it passed, or once the model answered (``replies``, the gate's)."""
        with self._lock:
            if self.pending and not replies:
                self._ask(ENDPOINT_WAIT_S if timeout is None else timeout)
            self.pending = False

    def _ask(self, wait_s: float) -> None:
        deadline = time.monotonic() + wait_s
        while True:
            try:
                _, left_out, unheard = probe_fleet(self.run_config, models_required=True,
                                                   agent_cls=get_agent(self.run_config.agent))
                if self.engine is not None:
                    self.engine.servers_left_out, self.engine.servers_unheard = left_out, unheard
                return
            except ServerUnreachable as exc:
                if time.monotonic() >= deadline:
                    raise ConfigError(_said(exc, f"for {wait_s:g} s (get_batch's timeout, else {ENDPOINT_WAIT_S:g} "
                                                 "s, bounds the wait for a server still starting)")) from None
                time.sleep(RETRY_S)
            except ServerRefused as exc:
                raise ConfigError(_said(exc, "")) from None


def _said(exc: ServerRefused, waited: str) -> str:
    """The probe's error in a scheduler's words (its RunConfig fields, not the CLI's flags)."""
    text = f"{exc.answer}{' ' + waited if waited else ''}; {exc.fix}"
    for flag, name in _FIELDS.items():
        text = text.replace(flag, name)
    return (f"get_batch: the model endpoint check before the first batch: {text} (a policy server started only "
            "later, or one that only a Ray cluster's nodes reach: RolloutScheduler(check_endpoint=False) skips "
            "this check)")


def endpoints(base_url: Any) -> str:
    """The model server(s) an error names."""
    return ", ".join(base_url) if isinstance(base_url, list) else base_url or ""
