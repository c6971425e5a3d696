"""A team's own agents, as plugins (``client_agents:ToolLakeAgent``): their own prompt and
tool, their own conversation, and nothing of the openai agent; they call the policy only
through ``self.model`` (the ModelClient every agent has). ``AsyncToolLakeAgent`` is the same
harness written with ``async def`` and ``await self.model.achat``."""

from __future__ import annotations

import json
from typing import Any

from parallel_rollout.agents import Agent

MOVE = {"type": "function", "function": {
    "name": "move", "description": "Move one square on the lake.",
    "parameters": {"type": "object", "properties": {"direction": {"enum": ["Left", "Down", "Right", "Up"]}},
                   "required": ["direction"]}}}


class ToolLakeAgent(Agent):
    """FrozenLake by the ``move`` tool; records the tool calls exactly as it received them."""

    def reset(self, task) -> None:
        """A conversation of the team's own making."""
        self.messages: list[dict[str, Any]] = [{"role": "system", "content": "Reach G with the move tool."}]
        self.received: list[Any] = []

    def _ask(self, observation: dict[str, Any]) -> None:
        last = self.received[-1] if self.received else None
        if last:  # answer the last call by its id, as the tools API wants
            self.messages.append({"role": "tool", "tool_call_id": last[0]["id"], "content": observation["grid"]})
        else:
            self.messages.append({"role": "user", "content": observation["grid"]})

    def _take(self, reply) -> str:
        self.received.append(reply.tool_calls)
        self.messages.append({"role": "assistant", "content": reply.text or None, "tool_calls": reply.tool_calls})
        return json.loads(reply.tool_calls[0]["function"]["arguments"])["direction"]

    def act(self, observation: dict[str, Any]) -> str:
        """One ``self.model.chat`` call; the call's direction is the move."""
        self._ask(observation)
        return self._take(self.model.chat(self.messages, tools=[MOVE]))

    def turn_record(self) -> dict[str, Any]:
        """The model client's record of the turn, and what this agent was handed."""
        return {**super().turn_record(), "agent_received": self.received[-1] if self.received else None}


class AsyncToolLakeAgent(ToolLakeAgent):
    """The same harness, async: ``reset`` and ``act`` are coroutines."""

    async def reset(self, task) -> None:
        """As ToolLakeAgent's."""
        ToolLakeAgent.reset(self, task)

    async def act(self, observation: dict[str, Any]) -> str:
        """One awaited ``self.model.achat`` call."""
        self._ask(observation)
        return self._take(await self.model.achat(self.messages, tools=[MOVE]))


class BuggyAgent(Agent):
    """A team's agent whose own code fails at every turn, before it asks the model."""

    def reset(self, task) -> None:
        """Nothing to set up."""

    def act(self, observation: dict[str, Any]) -> str:
        """The agent's bug, not the model's."""
        raise ValueError("the agent's own bug")


class UnsendableAgent(Agent):
    """A team's agent with a bug in the request it builds: a message content JSON cannot
    carry (``UnsendableAgent.content``), or messages that are no list of dicts
    (``StringMessagesAgent``)."""

    content: Any = object()

    def reset(self, task) -> None:
        """Nothing to set up."""

    def act(self, observation: dict[str, Any]) -> str:
        """One chat call whose request cannot be sent."""
        return self.model.chat(self.messages()).text

    def messages(self) -> Any:
        """What the call is given."""
        return [{"role": "user", "content": self.content}]


class StringMessagesAgent(UnsendableAgent):
    """Gives ``chat`` a string where a list of message dicts goes."""

    def messages(self) -> Any:
        """A string, not a list."""
        return "a string"


class HalfAgent(Agent):
    """A team's agent that forgot ``act``: abstract, so no worker can make one."""

    def reset(self, task) -> None:
        """Nothing to set up."""


class TokenizerArgAgent(ToolLakeAgent):
    """A team's agent whose ``__init__`` wants its tokenizer too: no worker can make it as
    ``cls(config)``."""

    def __init__(self, config, tokenizer) -> None:
        super().__init__(config)
        self.tokenizer = tokenizer


class PlanActAgent(Agent):
    """Two model calls a turn, one conversation: a "plan" call, then an "act" call that sees
    the plan as the assistant's last message (both calls' sampled tokens are training data)."""

    def reset(self, task) -> None:
        """A conversation of the team's own making."""
        self.messages: list[dict[str, Any]] = [{"role": "system", "content": "Reach G. Plan, then move."}]

    def act(self, observation: dict[str, Any]) -> str:
        """The plan call, then the act call, whose <answer> is the move."""
        self.messages.append({"role": "user", "content": observation["grid"]})
        plan = self.model.chat(self.messages)
        self.messages += [{"role": "assistant", "content": plan.text}, {"role": "user", "content": "Now move."}]
        reply = self.model.chat(self.messages)
        self.messages.append({"role": "assistant", "content": reply.text})
        return reply.text.split("<answer>")[-1].split("</answer>")[0]


class PlanOnceAgent(Agent):
    """One model call for the whole episode: the first turn asks for a plan of moves, the
    later turns play it without calling the model."""

    def reset(self, task) -> None:
        """No plan yet."""
        self.plan: list[str] = []

    def act(self, observation: dict[str, Any]) -> str:
        """The plan's next move; the plan asked for on the first turn."""
        if not self.plan:
            reply = self.model.chat([{"role": "user", "content": observation["grid"]}])
            self.plan = reply.text.split("<answer>")[-1].split("</answer>")[0].split(",")
        return self.plan.pop(0)


class PlanInResetAgent(Agent):
    """One model call for the whole episode, made in ``reset``: the plan of moves, asked for
    before the first observation; every turn plays it without calling the model."""

    def reset(self, task) -> None:
        """Ask for the plan."""
        reply = self.model.chat([{"role": "user", "content": f"plan the moves of task {task.id}"}])
        self.plan = reply.text.split("<answer>")[-1].split("</answer>")[0].split(",")

    def act(self, observation: dict[str, Any]) -> str:
        """The plan's next move."""
        return self.plan.pop(0)


class FirstAnswerAgent(Agent):
    """Async: two candidate calls a turn, raced with ``asyncio.wait(FIRST_COMPLETED)``; the
    move is the first answer's, and ``act`` returns with the other call still under way."""

    async def reset(self, task) -> None:
        """Turns counted from 1."""
        self.turns = 0

    def prompt(self, observation: dict[str, Any], name: str) -> list[dict[str, Any]]:
        """This turn's request of the call ``name``: it says its turn and its name."""
        return [{"role": "user", "content": f"{observation['grid']}\nturn {self.turns} {name}"}]

    async def act(self, observation: dict[str, Any]) -> str:
        """Both candidates asked at once; the first answer moves (its call's name: ``moved_by``)."""
        import asyncio

        self.turns += 1
        calls = {asyncio.ensure_future(self.model.achat(self.prompt(observation, name))): name for name in ("a", "b")}
        done, _ = await asyncio.wait(calls, return_when=asyncio.FIRST_COMPLETED)
        won = next(iter(done))
        self.moved_by = calls[won]
        return won.result().text.split("<answer>")[-1].split("</answer>")[0]

    def turn_record(self) -> dict[str, Any]:
        """The model client's record of the turn, and which call's answer moved."""
        return {**super().turn_record(), "moved_by": getattr(self, "moved_by", None)}


class BackgroundCallAgent(FirstAnswerAgent):
    """Async: the move's call awaited, then a "critique" call fired as a background task that
    ``act`` never waits for."""

    async def act(self, observation: dict[str, Any]) -> str:
        """The move, and a call left running."""
        import asyncio

        self.turns += 1
        reply = await self.model.achat(self.prompt(observation, "a"))
        self.moved_by = "a"
        self.critique = asyncio.ensure_future(self.model.achat(self.prompt(observation, "b")))
        return reply.text.split("<answer>")[-1].split("</answer>")[0]


class BackgroundOnlyAgent(FirstAnswerAgent):
    """Async: a "b" call fired as a background task and the move made without it: every
    call of the turn outlives ``act``."""

    async def act(self, observation: dict[str, Any]) -> str:
        """A call left running; the move its own."""
        import asyncio

        self.turns += 1
        self.critique = asyncio.ensure_future(self.model.achat(self.prompt(observation, "b")))
        await asyncio.sleep(0)  # the call's coroutine runs: it is made in this turn
        return "Right"


class CutRaceAgent(FirstAnswerAgent):
    """Async: a "b" call, then, while it is under way, an "a" call, gathered; when "b" is cut
    (a LengthCut under ``on_length="end"``) ``act`` raises with "a" still waiting for its turn."""

    async def act(self, observation: dict[str, Any]) -> str:
        """Both calls' replies; the move is the "a" call's."""
        import asyncio

        self.turns += 1
        first = asyncio.ensure_future(self.model.achat(self.prompt(observation, "b")))
        await asyncio.sleep(0.2)  # "b" is sent first (were "a" sent first, it is simply answered before the cut)
        second = asyncio.ensure_future(self.model.achat(self.prompt(observation, "a")))
        replies = await asyncio.gather(first, second)
        return replies[1].text.split("<answer>")[-1].split("</answer>")[0]


class FailingRaceAgent(FirstAnswerAgent):
    """Async: the move's "a" call awaited, a "critique" call fired as a background task, then
    the agent's own bug raises while that call is still under way."""

    async def act(self, observation: dict[str, Any]) -> str:
        """Both calls made; the act raises before "b" answers."""
        import asyncio

        self.turns += 1
        await self.model.achat(self.prompt(observation, "a"))
        self.critique = asyncio.ensure_future(self.model.achat(self.prompt(observation, "b")))
        raise ValueError("the agent's own bug, after its calls")


class ChatRouteAgent(ToolLakeAgent):
    """ToolLakeAgent, saying that it calls ``self.model.chat`` (``model_calls``)."""

    model_calls = frozenset({"chat"})


class GenerateRouteAgent(ToolLakeAgent):
    """Says it calls ``self.model.generate`` only: its route is /completions."""

    model_calls = frozenset({"generate"})


class RouteNamedAgent(ToolLakeAgent):
    """Names a route where ``model_calls`` wants one of self.model's calls."""

    model_calls = frozenset({"/chat/completions"})
