"""A user's own plugins, named as ``module:Class`` (``--mode user_plugins:DoubleEnv``): a mode
with no VM, an agent that calls only its ModelClient, and the abstract classes a user gets
when a method is missing. Tests of module imports that fail or take long write modules of
their own into a folder (tests/test_plugins_user.py)."""

from __future__ import annotations

from parallel_rollout.agents.base import Agent
from parallel_rollout.envs.base import Env, StepResult, require


class DoubleEnv(Env):
    """A task ``{"id", "n"}``: one turn; reward 1 when the action is 2n."""

    name = "double"
    vm_scope = None
    default_max_turns = 1
    turn_limit_status = "failure"

    @staticmethod
    def validate_task(payload) -> None:
        """n is an integer."""
        require(payload, "n", int)

    @staticmethod
    def reference_actions(task):
        """Twice n."""
        return [2 * task.get("n")]

    def reset(self, task, vm):
        """The number to double."""
        self.task, self.answer = task, None
        return {"n": task.get("n")}

    def step(self, action):
        """Keep the answer; one turn."""
        self.answer = action
        return StepResult({}, done=True)

    def evaluate(self):
        """1 for twice n."""
        return float(str(self.answer).strip() == str(2 * self.task.get("n"))), {"answer": self.answer}


class OwnWordsEnv(DoubleEnv):
    """DoubleEnv refusing a task without ``n`` in its own words, as a plugin may, not
    ``require``'s."""

    @staticmethod
    def validate_task(payload) -> None:
        """n is given."""
        if "n" not in payload:
            raise ValueError("missing field 'n'")


class NestedWordsEnv(DoubleEnv):
    """DoubleEnv whose ``n`` is in an object, ``{"given": {"n": 2}}``, an optional field of it
    (``nested_fields``) refused in the mode's own words when missing."""

    nested_fields = {"given": frozenset({"n"})}

    @staticmethod
    def validate_task(payload) -> None:
        """given.n is given."""
        if "n" not in payload.get("given", {}):
            raise ValueError("missing field 'given.n'")


class ModelAgent(Agent):
    """Asks its ModelClient (``self.model``) for the answer: --model, --base-url and
    --temperature are its settings as much as the openai agent's."""

    def reset(self, task) -> None:
        self.task = task

    def act(self, observation):
        return self.model.chat([{"role": "user", "content": f"twice {observation['n']}?"}]).text


class NoStepEnv(Env):
    """DoubleEnv without ``step``: abstract, it cannot be made."""

    vm_scope = None

    def reset(self, task, vm):
        return {}

    def evaluate(self):
        return 0.0, {}


class NoActAgent(Agent):
    """An agent without ``act``: abstract, it cannot be made."""

    def reset(self, task) -> None:
        self.task = task


class NoReturnAgent(Agent):
    """An ``act`` that forgot its ``return``: every action is None."""

    options = frozenset()

    def reset(self, task) -> None:
        self.task = task

    def act(self, observation):
        self.seen = observation


class OddUsageAgent(Agent):
    """Answers DoubleEnv right, and reports a usage no JSON line can hold: a NaN, an object, a set."""

    options = frozenset()

    def reset(self, task) -> None:
        self.task = task

    def act(self, observation):
        return 2 * observation["n"]

    def usage(self):
        return {"requests": 1, "cost": float("nan"), "obj": object(), "seen": {1}}


class TokenizerArgAgent(ModelAgent):
    """An agent whose ``__init__`` wants more than the run gives (``cls(config)``)."""

    def __init__(self, config, tokenizer) -> None:
        super().__init__(config)
        self.tokenizer = tokenizer


class ConfigLessEnv(DoubleEnv):
    """A mode whose ``__init__`` takes no config: the run cannot make it."""

    def __init__(self) -> None:
        pass


class OptionalArgAgent(ModelAgent):
    """An ``__init__`` whose extra argument has a default: the run makes it as ``cls(config)``."""

    options = frozenset()

    def __init__(self, config, tokenizer=None) -> None:
        super().__init__(config)
        self.tokenizer = tokenizer

    def act(self, observation):
        return 2 * observation["n"]


class NoSuperAgent(ModelAgent):
    """An ``__init__`` of its own that never calls ``super().__init__(config)``."""

    def __init__(self, config) -> None:
        self.asked = 0


class ActionIdAgent(Agent):
    """Answers ROLL's Sokoban action id for Up (1), a number where the gym mode takes text."""

    options = frozenset()

    def reset(self, task) -> None:
        self.task = task

    def act(self, observation):
        return 1


class DictMoveAgent(ActionIdAgent):
    """Answers a dict, an action of no gym game."""

    def act(self, observation):
        return {"move": "Right"}


class LakeNumberAgent(ActionIdAgent):
    """Answers 7, a number past gymnasium's FrozenLake actions 0-3."""

    def act(self, observation):
        return 7


class ObservationKeysAgent(Agent):
    """Writes the keys of each observation it is handed, one JSON list a line, to the file
    ``$OBSERVED_KEYS`` names; acts ``ACTIONS[mode][turn]``, then each mode's way to stop."""

    options = frozenset()
    ACTIONS = {"shell": [{"command": "echo hi"}, "DONE"], "rag": [{"search": "dog", "k": 2}, {"answer": "dog"}]}

    def reset(self, task) -> None:
        self.mode, self.turn = task.mode, 0

    def act(self, observation):
        import json
        import os

        with open(os.environ["OBSERVED_KEYS"], "a", encoding="utf-8") as keys:
            keys.write(json.dumps(sorted(observation)) + "\n")
        actions = self.ACTIONS.get(self.mode, ["DONE"])
        self.turn += 1
        return actions[min(self.turn, len(actions)) - 1]
