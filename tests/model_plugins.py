"""``module:Class`` agents that call the model, as plugin authors write them, for
tests/test_plugins_model.py: one that says it calls the model, one that catches every error
of its model call, one with an HTTP client of its own that says when the endpoint is down.
They answer ``user_plugins:DoubleEnv``'s tasks (twice n)."""

from __future__ import annotations

import json
import urllib.error
import urllib.request

from parallel_rollout.agents import Agent, ModelUnavailable

from user_plugins import ModelAgent


class DeclaredModelAgent(ModelAgent):
    """Says it calls the model: its settings are checked at start without --model."""

    uses_model = True


class CatchAllAgent(ModelAgent):
    """A defensive agent: any failure of the model call ends the episode with a guess."""

    def act(self, observation):
        try:
            return super().act(observation)
        except Exception:  # noqa: BLE001 - what the test is about
            return "0"


class OwnClientAgent(Agent):
    """Calls the endpoint its task names (``url``) with a client of its own, not
    ``self.model``; an endpoint that does not answer is its state, not the policy's answer,
    which the agent says with ModelUnavailable."""

    options = frozenset()

    def reset(self, task) -> None:
        self.url = task.get("url")

    def act(self, observation):
        body = json.dumps({"model": "m", "messages": [{"role": "user", "content": f"twice {observation['n']}?"}]})
        request = urllib.request.Request(f"{self.url}/chat/completions", data=body.encode(),
                                         headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(request, timeout=5) as answer:
                return json.loads(answer.read())["choices"][0]["message"]["content"]
        except (urllib.error.URLError, OSError) as exc:
            raise ModelUnavailable(f"my endpoint did not answer: {exc}") from exc


class ChatRouteAgent(ModelAgent):
    """Says it calls ``self.model.chat``: the endpoint check asks for the chat route only."""

    model_calls = frozenset({"chat"})


class RouteNamedAgent(ModelAgent):
    """Names a route where ``model_calls`` wants a call (a typo of the attribute's meaning)."""

    model_calls = frozenset({"/chat/completions"})
