"""The retry policy of one model call: which failures a retry may fix, and how long to wait.

``tenacity`` runs the retries (``retrying``): a ``before`` hook tells the client which
attempts are retries (it counts a request and its retry into the episode's usage once the
request is sent), a predicate retries only ``Retryable`` failures, and the wait
honours what the server asked for. A call is retried up to ``--max-retries`` times on 429,
5xx, 408/409, timeouts, connection errors and malformed bodies (not JSON, no choices, no
message, null content). The wait honours the server's ``retry-after-ms`` / ``Retry-After``
(seconds or an HTTP date); otherwise it backs off exponentially with "equal jitter" (half the
step fixed, half random), so many env loops hitting one rate limit do not retry in step.
A key the endpoint refuses (401, 403) or a model or path it does not know (404, 405) is
``EndpointRefused``: the run's settings are wrong, not the reply (``refusal``). Other 4xx
fail at once: retrying cannot fix them.

The official ``openai`` client does the HTTP with its own retries turned off
(``max_retries=0``): its retry loop has no hook to count requests and retries, and it would
not retry a malformed body.
"""

from __future__ import annotations

import datetime
import email.utils
import random
import time
from typing import Callable, Mapping

import tenacity

from . import streaming
from .episode import RETRYABLE_STATUS, AgentError, ContextOverflow, EndpointRefused
from .wire import MalformedResponse, excerpt, is_overflow, not_an_api_answer

#: longest server-requested wait honoured; a longer one is cut to this (a retry that comes
#: early costs one more 429, a wait past the task timeout would cost the attempt)
MAX_RETRY_AFTER_S = 120.0
#: HTTP statuses that refuse the run's settings, whatever is asked: OpenAI answers a bad key
#: 401 (403 for a key without access) and an unknown model 404 (model_not_found); vLLM 404
#: ("The model `x` does not exist.") and, with --api-key, 401; Ollama 404 ("model \"x\" not
#: found, try pulling it first"); SGLang 401 with --api-key (it answers any model name); a
#: base URL without /v1 is a 404 anywhere; 405 (a POST the URL does not take: a static web
#: server, a gateway's other route) says the same of the path: it was the attempt's error, graded 0
REFUSING_STATUS = frozenset({401, 403, 404, 405})


class Retryable(Exception):
    """A failed request a retry may fix; ``retry_after``: the wait the server asked for."""

    def __init__(self, problem: str, retry_after: float | None = None, server_down: bool = False,
                 unavailable: bool = False, may_have_restarted: bool = False) -> None:
        super().__init__(problem)
        self.retry_after = retry_after
        #: the server refused or reset the connection (worth moving to another)
        self.server_down = server_down
        #: the server did not answer (down, overloaded, too slow), as against an answer that
        #: was malformed: when the retries run out, the first is ModelUnavailable
        self.unavailable = unavailable or server_down
        #: the failure a restart makes (the connection refused or reset, hung up on, a 5xx: a
        #: proxy's while the server behind it restarts), not a slow answer (a timeout, a 429):
        #: a fleet's server asks its /models again before its next request (ServerPool.ask_again)
        self.may_have_restarted = may_have_restarted or server_down


#: how a batch run goes on after each refusal, the tail of ``refusal``'s advice, and how a
#: trainer's RolloutScheduler does (``rl.config.in_the_trainers_words`` says the one as the
#: other): a scheduler's model and endpoint are fixed as a run's are, and the key is read by
#: its workers, which start with it; a get_batch after the model is served there gets a batch
GOING_ON = {
    ", with a new --run-id (a run's endpoint is fixed)":
        " and make a new RolloutScheduler with it (a scheduler's endpoint is fixed: close this one)",
    ", with a new --run-id (a run's model and endpoint are fixed)":
        " and make a new RolloutScheduler with them (a scheduler's model and endpoint are fixed: close this one)",
    "or serve that model there and resume": "or serve that model there and call get_batch again",
    "(one with access to this model), then resume":
        "(one with access to this model), then close this RolloutScheduler and make a new one (its workers "
        "read the key as they start)",
}
_ENDPOINT_FIXED, _MODEL_FIXED, _SERVE_IT, _NEW_KEY = GOING_ON


def refusal(status: int, model: str, base_url: str) -> str:
    """What to fix when the endpoint answered ``status`` (one of REFUSING_STATUS)."""
    if status == 405:
        return (f"{base_url} takes no POST of the API there: it is not an OpenAI-compatible endpoint's URL "
                f"(most servers serve the API under /v1); fix --base-url{_ENDPOINT_FIXED}")
    if status == 404:
        return (f"the endpoint does not know the model {model!r} (--model) or the path (--base-url "
                f"{base_url}; most servers serve the API under /v1): give --model a name its "
                f"{base_url}/models lists or fix --base-url{_MODEL_FIXED}, {_SERVE_IT}")
    return f"the endpoint refuses the API key: set OPENAI_API_KEY to a key it accepts {_NEW_KEY}"


def unlisted(answer: str) -> str:
    """What to fix when the run's one server, asked its /models mid-run, lists another model
    (``answer``: the URL, what it lists and --model): restarted with it, or --model is wrong."""
    return f"{answer} (restarted serving another?); give --model one of them{_MODEL_FIXED}, {_SERVE_IT}"


def failure_of(exc: Exception, endpoint: str, model: str | None, base_url: str,
               timeout_s: float) -> Exception | None:
    """What a failed request is to the call: Retryable for what a retry may fix (5xx, 429,
    a timeout, a broken connection or stream, a malformed answer), EndpointRefused for the
    run's settings (REFUSING_STATUS), ContextOverflow for a prompt past the model's context,
    AgentError for another 4xx; None for a failure that is none of the endpoint's."""
    import openai

    if isinstance(exc, openai.APIStatusError):
        problem = f"HTTP {exc.status_code}: {excerpt(exc.response.text)}"
        if is_overflow(exc.status_code, exc.response.text):
            return ContextOverflow(f"{endpoint}: {problem}")
        if exc.status_code in REFUSING_STATUS:
            refused = EndpointRefused(f"{endpoint}: {problem}; {refusal(exc.status_code, model, base_url)}")
            refused.status = exc.status_code  # a fleet's other servers may still serve (ModelClient)
            refused.answer = f"{endpoint}: {problem}"  # what it said, without the single endpoint's fix
            return refused
        if exc.status_code not in RETRYABLE_STATUS:
            return AgentError(f"{endpoint}: {problem} (not retried)")
        return Retryable(problem, parse_retry_after(exc.response.headers), unavailable=True,
                         may_have_restarted=exc.status_code >= 500)
    if isinstance(exc, openai.APITimeoutError):
        return Retryable(f"no response within {timeout_s} s", unavailable=True)
    if isinstance(exc, openai.APIConnectionError):
        return Retryable(f"connection failed: {exc.__cause__ or exc}", server_down=True)
    if isinstance(exc, streaming.StreamBroken):  # cut, closed early, stalled: the endpoint's transport
        return Retryable(f"the reply stream broke: {exc}", unavailable=True, may_have_restarted=not exc.timed_out)
    if isinstance(exc, streaming.MalformedChunk):  # token ids and logprobs that do not pair: the endpoint's
        return Retryable(f"malformed response: {exc}", unavailable=True)
    if isinstance(exc, MalformedResponse):  # an HTML page for an answer: the endpoint's fault
        return Retryable(f"malformed response: {exc}", unavailable=not_an_api_answer(exc.content_type))
    return None


def retrying(max_retries: int, backoff_base_s: float, backoff_max_s: float,
             can_move: Callable[[], bool],
             before: Callable[[tenacity.RetryCallState], None],
             before_sleep: Callable[[tenacity.RetryCallState], None] | None = None,
             sleep: Callable[[float], None] = time.sleep) -> tenacity.Retrying:
    """The retry policy of one call: ``max_retries`` retries of ``Retryable`` failures; a
    refused or reset connection is not retried here when ``can_move()`` (another server is
    up: the caller moves on at once); ``before`` runs before every attempt, ``before_sleep``
    before the wait ahead of a retry, ``sleep`` waits it (a cancel's may end it early)."""
    half = backoff_base_s / 2
    backoff = (tenacity.wait_exponential(multiplier=half, max=backoff_max_s / 2)
               + tenacity.wait_random_exponential(multiplier=half, max=backoff_max_s / 2))

    def wait(state: tenacity.RetryCallState) -> float:
        retry_after = getattr(state.outcome.exception(), "retry_after", None)
        if retry_after is not None:
            # A little jitter on top still spreads loops that got the same Retry-After.
            return min(retry_after, MAX_RETRY_AFTER_S) * (1 + 0.1 * random.random())
        return backoff(state)

    return tenacity.Retrying(
        stop=tenacity.stop_after_attempt(max_retries + 1),
        wait=wait,
        retry=tenacity.retry_if_exception(lambda exc: isinstance(exc, Retryable) and not (
            exc.server_down and can_move())),
        before=before,
        before_sleep=before_sleep,
        sleep=sleep,
        reraise=True,
    )


def parse_retry_after(headers: Mapping[str, str]) -> float | None:
    """Seconds the server asked us to wait (``retry-after-ms``, or ``Retry-After`` as seconds
    or an HTTP date), or None."""
    value = headers.get("retry-after-ms")
    if value is not None:
        try:
            return max(0.0, float(value) / 1000)
        except ValueError:
            pass
    value = headers.get("retry-after")
    if value is None:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError):
        return None
    if when.tzinfo is None:  # "-0000" dates parse naive; HTTP dates are GMT
        when = when.replace(tzinfo=datetime.timezone.utc)
    return max(0.0, when.timestamp() - time.time())
