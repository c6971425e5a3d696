"""The model endpoint asked before an engine's first get_batch (rl/endpoint_check.py): a wrong
URL is said at once, naming it and what came back, while a server that goes down after the
first batch keeps the failure budget's patience (rl/budget.py)."""

from __future__ import annotations

import re
import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from llm_server import LLMServer
from parallel_rollout.errors import ConfigError, RolloutError
from parallel_rollout.rl import EnvManagerConfig
from rl_support import TINY, lake_set, rl_config
from token_model import write_tokenizer


def _config(tmp_path, server, **changes):
    # short patience, so the old code's path (retries, then the failure budget) ends quickly too
    return rl_config(tmp_path, server, num_rollouts=1, envs_per_worker=2, max_retries=0, api_timeout_s=1.0, **changes)


def _lakes(tmp_path):
    return EnvManagerConfig(group_size=2, tags=["tiny"],
                            task_sets=lake_set(tmp_path, count=2, name="tiny", desc=TINY, max_steps=2))


class _Answering:
    """A local HTTP server that answers every GET and POST with one status and body (a web
    page, another service on the port): ``url`` as a base URL, like ``LLMServer``'s."""

    def __init__(self, status: int, content_type: str, body: str) -> None:
        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format, *args):  # noqa: A002 - the base class's name
                pass

            def _answer(self):
                self.rfile.read(int(self.headers.get("Content-Length") or 0))
                data = body.encode()
                self.send_response(status)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            do_GET = do_POST = _answer

        self.models: list[str] = []  # rl_config lists its model here; nothing serves it
        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(target=self._httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        self._thread.start()
        self.url = f"http://127.0.0.1:{self._httpd.server_address[1]}/v1"

    def stop(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(5)


class _Nothing:
    """A loopback port nothing listens on (connection refused)."""

    def __init__(self) -> None:
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            self.url = f"http://127.0.0.1:{probe.getsockname()[1]}/v1"
        self.models: list[str] = []


PAGE = "<html><head><title>Grafana</title></head><body>Not found</body></html>"


@pytest.mark.parametrize("status, content_type, body, says", [
    (404, "text/html", PAGE, "answered HTTP 404: '<html><head><title>Grafana"),
    (200, "text/html", PAGE, "answered no model list: '<html><head><title>Grafana"),
    (401, "application/json", '{"error": "unauthorized"}', "refused the key (HTTP 401)"),
], ids=["404-html", "html-page", "401-no-key"])
def test_a_server_that_is_no_model_endpoint_is_named_before_any_group_starts(tmp_path, schedulers, status,
                                                                               content_type, body, says):
    """Another service on the port: the old code started groups and raised only after a
    member failed (404 and 401: 'the run config's settings do not fit', in the CLI's words;
    an HTML page: after max_failed_groups groups of retries)."""
    server = _Answering(status, content_type, body)
    try:
        train = schedulers(_config(tmp_path, server), _lakes(tmp_path), max_failed_groups=3)
        with pytest.raises(ConfigError) as caught:
            train.get_batch(batch_size=2, step=0, timeout=60)
        message = str(caught.value)
        assert message.startswith("get_batch: the model endpoint check before the first batch: "), message
        assert server.url in message and says in message, message
        assert "check_endpoint=False" in message and "--" not in message, message  # its own words, not the CLI's
        assert train.stats()["groups_started"] == 0
    finally:
        server.stop()


def test_a_port_nothing_listens_on_is_named_after_the_calls_timeout_not_the_retries(tmp_path, schedulers):
    """The old code ran groups against it (each member's retries) and raised 'N groups in a
    row failed … is the model endpoint up?' only once max_failed_groups were spent: about
    210 s with the default settings."""
    nothing = _Nothing()
    train = schedulers(_config(tmp_path, nothing), _lakes(tmp_path), max_failed_groups=3)
    with pytest.raises(ConfigError) as caught:
        train.get_batch(batch_size=2, step=0, timeout=2)  # the wait for a server still starting: 2 s
    message = str(caught.value)
    assert re.search(rf"the model endpoint {re.escape(nothing.url)} is not reachable \(GET /models: .*Connection "
                     r"refused\) for 2 s \(get_batch's timeout, else 20 s", message), message
    assert train.stats()["groups_started"] == 0


def test_a_server_still_starting_within_the_wait_serves_the_first_batch(tmp_path, schedulers):
    """Listening but not yet serving (a model still loading) when get_batch begins: it asks
    again until the server answers, and the batch comes."""
    server = LLMServer(policy=lambda body: {"reply": "<answer>Right</answer>"})  # bound, not serving yet
    starter = threading.Timer(1.0, server.start)
    try:
        train = schedulers(_config(tmp_path, server), _lakes(tmp_path))
        starter.start()
        batch = train.get_batch(batch_size=2, step=0, timeout=60)
        assert len(batch) == 2 and server.model_listings >= 1
    finally:
        starter.join()
        server.stop()


def test_a_server_down_after_the_first_batch_meets_the_failure_budget_not_the_check(tmp_path, schedulers):
    """Once a batch came, the server going away (a restart) is met with the retries and
    max_failed_groups, as the README describes, not with the check's error at once."""
    server = LLMServer(policy=lambda body: {"reply": "<answer>Right</answer>"}).start()
    train = schedulers(_config(tmp_path, server), _lakes(tmp_path), max_failed_groups=2)
    assert len(train.get_batch(batch_size=2, step=0, timeout=60)) == 2
    started = train.stats()["groups_started"]
    server.stop()
    with pytest.raises(RolloutError, match=r"groups in a row failed \(max_failed_groups=2\).*is the model endpoint "
                                           rf"{re.escape(server.url)} up\?"):
        train.get_batch(batch_size=2, step=1, timeout=60)
    assert train.stats()["groups_started"] >= started + 2  # groups were tried against it


def test_check_endpoint_false_leaves_a_lazily_started_server_the_budgets_patience(tmp_path, schedulers):
    """A trainer that starts its policy server only later skips the check: its first
    get_batch meets the retries and the failure budget, as before."""
    nothing = _Nothing()
    train = schedulers(_config(tmp_path, nothing), _lakes(tmp_path), max_failed_groups=2, check_endpoint=False)
    with pytest.raises(RolloutError, match=r"groups in a row failed \(max_failed_groups=2\)"):
        train.get_batch(batch_size=2, step=0, timeout=60)
    assert train.stats()["groups_started"] >= 2


@pytest.mark.parametrize("tokens", [False, True], ids=["chat", "token-ids"])
def test_a_server_with_models_but_not_the_runs_route_is_named_in_the_run_configs_words(tmp_path, schedulers, tokens):
    """A completions-only server (or a proxy that forwards /models only) lists the model: the
    old code passed the check, started groups, and raised 'the run config's settings do not
    fit' in the CLI's words (--model, --base-url, a new --run-id, resume). With a tokenizer
    the requests go to /completions: a chat-only server is refused there."""
    server = LLMServer(policy=lambda body: {"reply": "<answer>Right</answer>"}).start()
    route = "/completions" if tokens else "/chat/completions"
    server.missing_routes.add("/v1" + route)
    changes = {"tokenizer": str(write_tokenizer(tmp_path / "tokenizer")), "max_model_len": 8192} if tokens else {}
    try:
        train = schedulers(_config(tmp_path, server, **changes), _lakes(tmp_path), max_failed_groups=3)
        with pytest.raises(ConfigError) as caught:
            train.get_batch(batch_size=2, step=0, timeout=60)
        message = str(caught.value)
        assert message.startswith("get_batch: the model endpoint check before the first batch: "
                                  f"{server.url}/models lists the model 'table' but POST {server.url}{route} "
                                  """answered HTTP 404: '{"detail": "Not Found"}'; """), message
        assert "fix RunConfig.base_url" in message, message
        assert ("give the run config a tokenizer" in message) is not tokens, message  # chat's other way out
        assert "--" not in message and "resume" not in message, message  # its own words, not the CLI's
        assert train.stats()["groups_started"] == 0 and server.requests == []  # no model request was sent
    finally:
        server.stop()


def test_a_base_url_without_the_api_prefix_is_named_with_the_one_to_give(tmp_path, schedulers):
    """``http://host:port`` for a server whose API is under /v1: the URL to give, as a field."""
    server = LLMServer(policy=lambda body: {"reply": "<answer>Right</answer>"}).start()
    try:
        root = server.url.removesuffix("/v1")
        train = schedulers(_config(tmp_path, server, base_url=root + "/"), _lakes(tmp_path), max_failed_groups=3)
        with pytest.raises(ConfigError, match=rf"{re.escape(root)} has no /models \(HTTP 404\) but {re.escape(server.url)} "
                                              rf"has: the API is under /v1 there; give RunConfig.base_url "
                                              rf"{re.escape(server.url)} "):
            train.get_batch(batch_size=2, step=0, timeout=60)
        assert train.stats()["groups_started"] == 0
    finally:
        server.stop()


def test_the_route_check_samples_nothing_and_a_served_route_passes(tmp_path, schedulers):
    """The route is asked with a body no server samples from (the test server, as vLLM,
    refuses it 400 before any step): the batch's replies are the policy's, one per turn."""
    server = LLMServer(policy=lambda body: {"reply": "<answer>Right</answer>"}).start()
    try:
        train = schedulers(_config(tmp_path, server), _lakes(tmp_path))
        assert len(train.get_batch(batch_size=2, step=0, timeout=60)) == 2
        assert server.bodiless == 1 and all("messages" in r["body"] for r in server.requests)
    finally:
        server.stop()


@pytest.mark.parametrize("agent, missing", [("ChatRouteAgent", "/chat/completions"),
                                            ("GenerateRouteAgent", "/completions")])
def test_the_route_a_plugin_agent_says_it_calls_is_asked_and_named_with_the_agent(tmp_path, schedulers, agent,
                                                                                  missing):
    """A plugin agent that does not say which of self.model's calls it makes passes a server
    with either route; one that says ``model_calls = {"chat"}`` against a completions-only
    server (vLLM serving a base model without a chat template) passed the check too, and every
    episode then failed at its first model call. Now its route is asked, and the error names
    the route and the agent before any group starts (``generate``'s route likewise)."""
    server = LLMServer(policy=lambda body: {"reply": "<answer>Right</answer>"}).start()
    server.missing_routes.add("/v1" + missing)
    try:
        train = schedulers(_config(tmp_path, server, agent=f"client_agents:{agent}"), _lakes(tmp_path),
                           max_failed_groups=3)
        with pytest.raises(ConfigError) as caught:
            train.get_batch(batch_size=2, step=0, timeout=60)
        message = str(caught.value)
        call = "chat" if missing == "/chat/completions" else "generate"
        assert message.startswith(
            "get_batch: the model endpoint check before the first batch: "
            f"{server.url}/models lists the model 'table' but POST {server.url}{missing} answered HTTP 404: "
            f"""'{{"detail": "Not Found"}}', the route of the agent client_agents:{agent}'s self.model.{call} """
            f"({agent}.model_calls = {{'{call}'}}); "), message
        assert "fix RunConfig.base_url" in message and "--" not in message, message  # the scheduler's words
        assert train.stats()["groups_started"] == 0 and server.requests == []  # no model request was sent
    finally:
        server.stop()


def test_a_plugin_agent_that_does_not_say_its_calls_passes_a_server_with_either_route(tmp_path, schedulers):
    """The default (``model_calls = None``): a chat-only server passes the check, as before,
    and the agent's chat calls are served."""
    move = {"id": "call0", "type": "function", "function": {"name": "move", "arguments": '{"direction": "Right"}'}}
    server = LLMServer(policy=lambda body: {"reply": None, "tool_calls": [move]}).start()
    server.missing_routes.add("/v1/completions")
    try:
        train = schedulers(_config(tmp_path, server, agent="client_agents:ToolLakeAgent"), _lakes(tmp_path))
        assert len(train.get_batch(batch_size=2, step=0, timeout=60)) == 2
        assert server.bodiless == 1
    finally:
        server.stop()


def test_a_model_calls_that_names_no_call_is_refused_as_the_scheduler_is_made(tmp_path, schedulers):
    """``model_calls = {"/chat/completions"}`` (a route, where a call of self.model goes):
    ``RolloutScheduler(...)`` refuses it, naming the agent and the attribute in the
    scheduler's words (not the CLI's ``--agent``), before its engine starts any worker; it
    was found only at the first get_batch's endpoint check, the engine's workers started."""
    server = LLMServer(policy=lambda body: {"reply": "<answer>Right</answer>"}).start()
    try:
        with pytest.raises(ConfigError) as caught:
            schedulers(_config(tmp_path, server, agent="client_agents:RouteNamedAgent"), _lakes(tmp_path))
        message = str(caught.value)
        assert message.startswith("RunConfig: agent 'client_agents:RouteNamedAgent': RouteNamedAgent.model_calls = "
                                  "frozenset({'/chat/completions'}) names '/chat/completions': say which of "
                                  "self.model's calls the agent makes"), message
        assert "--" not in message, message
        assert not (tmp_path / "out").exists() and server.requests == []  # nothing started, nothing asked
    finally:
        server.stop()
