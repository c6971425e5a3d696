"""``gym`` mode: text grid games for RL, gymnasium's FrozenLake and ROLL's Sokoban; no VM.

Sokoban (``"game": "Sokoban"``) lives in ``sokoban`` (rules, rewards, rendering),
``sokoban_rooms`` (rooms from a seed) and ``sokoban_planner`` (the oracle); this module hands
its tasks there. The rest of this docstring is FrozenLake, ROLL's other example environment.

A FrozenLake task names the lake and the rules; the seed makes it reproducible (the map when
it is generated, and the slips on a slippery lake)::

    {"id": "fl-4x4-3", "mode": "gym", "game": "FrozenLake", "size": 4, "seed": 3,
     "is_slippery": false}
    {"id": "fl-classic", "mode": "gym", "map_name": "4x4", "is_slippery": true, "max_steps": 30}
    {"id": "fl-mine", "mode": "gym", "desc": ["SFF", "FHF", "FFG"]}

The map is ``desc`` when given, else gymnasium's named map ``map_name`` ("4x4", "8x8"),
else a random solvable ``size`` × ``size`` map (frozen with probability ``p``, 0.8 by
default) generated from the task's seed. ``max_steps`` (default size², at least 8) ends the
episode like a time limit.

One turn::

    observation (grid text, position, last move) ─► agent ─► reply text
    reply ─► action: the last <answer>…</answer>, else the last of Left/Down/Right/Up
          ─► gymnasium FrozenLakeEnv.step ─► next observation; done on a hole, the goal
             or max_steps; a reply with no action costs a turn and moves nothing

The reward is the env's own: 1.0 when the goal was reached, else 0.0. gymnasium is the
``[rl]`` extra, imported only when a map is generated or an episode starts. The oracle agent
plans a shortest path (BFS) from the current cell each turn, so it also finishes slippery
lakes when the slips allow it.
"""

from __future__ import annotations

import functools
import importlib.util
import re
import reprlib
from collections import deque
from typing import Any, Mapping

from ..task_json import as_written
from . import sokoban
from .base import Env, StepResult, reject_none, require

#: action names in gymnasium's numbering (LEFT=0, DOWN=1, RIGHT=2, UP=3)
ACTIONS = ("Left", "Down", "Right", "Up")
_MOVES = {0: (0, -1), 1: (1, 0), 2: (0, 1), 3: (-1, 0)}
_ANSWER = re.compile(r"<answer>\s*([A-Za-z0-9]+)\s*</answer>", re.IGNORECASE)
_WORD = re.compile(r"\b(left|down|right|up)\b", re.IGNORECASE)
_GAMES = ("FrozenLake", "Sokoban")
#: what the first observation of a FrozenLake episode explains
FROZENLAKE_RULES = (
    "You are playing FrozenLake. The lake is a grid: S is the start, F frozen ice (safe), H a hole "
    "(the game ends, you lose), G the goal (you win). P marks where you stand. Each turn, choose one "
    "move: Left, Down, Right or Up. Moving off the grid leaves you where you are; on a slippery lake "
    "you may slide sideways. Reply with your move as <answer>Right</answer>.")
#: the sizes a generated map may have
_SIZES = range(2, 17)
#: what an action is, for the error an action of another kind gets
_TAKES = ("a gym action is a move's name (Left, Down, Right, Up) or a reply with <answer>MOVE</answer> "
          "(on a FrozenLake also gymnasium's action number 0-3)")


def parse_action(reply: Any) -> int | None:
    """The action index a reply stands for, or None: an int 0-3, an action name, the last
    ``<answer>NAME</answer>``, else the last direction word of the text."""
    if isinstance(reply, int) and not isinstance(reply, bool):
        return reply if 0 <= reply < len(ACTIONS) else None
    if not isinstance(reply, str):
        return None
    answers = _ANSWER.findall(reply)
    text = answers[-1] if answers else reply
    if text.strip().isdigit():
        value = int(text.strip())
        return value if value < len(ACTIONS) else None
    words = _WORD.findall(text)
    return ACTIONS.index(words[-1].capitalize()) if words else None


def generated_from_seed(payload: Mapping[str, Any]) -> bool:
    """Whether a gym task's map is generated from its seed (a Sokoban task without ``room``,
    a lake without ``desc`` or ``map_name``): an unseeded one plays a new map per seed."""
    if payload.get("game", "FrozenLake") == "Sokoban":
        return "room" not in payload
    return "desc" not in payload and "map_name" not in payload


def lake_map(payload: Mapping[str, Any], seed: int | None) -> list[str]:
    """The task's map as rows of S/F/H/G."""
    if "desc" in payload:
        return list(payload["desc"])
    from gymnasium.envs.toy_text import frozen_lake

    if "map_name" in payload:
        return list(frozen_lake.MAPS[payload["map_name"]])
    return frozen_lake.generate_random_map(size=payload.get("size", 4), p=payload.get("p", 0.8),
                                           seed=0 if seed is None else seed)


def shortest_path(desc: list[str], start: tuple[int, int] | None = None) -> list[int] | None:
    """Actions of a shortest path from ``start`` (the S cell by default) to G that steps on
    no hole (a breadth-first search), or None when there is none."""
    rows, cols = len(desc), len(desc[0])
    if start is None:
        start = next((r, c) for r in range(rows) for c in range(cols) if desc[r][c] == "S")
    previous: dict[tuple[int, int], tuple[tuple[int, int], int] | None] = {start: None}
    frontier = deque([start])
    while frontier:
        cell = frontier.popleft()
        if desc[cell[0]][cell[1]] == "G":
            path: list[int] = []
            while previous[cell] is not None:
                cell, action = previous[cell]  # type: ignore[misc]
                path.append(action)
            return path[::-1]
        for action, (dr, dc) in _MOVES.items():
            nxt = (cell[0] + dr, cell[1] + dc)
            if 0 <= nxt[0] < rows and 0 <= nxt[1] < cols and nxt not in previous and desc[nxt[0]][nxt[1]] != "H":
                previous[nxt] = (cell, action)
                frontier.append(nxt)
    return None


@functools.lru_cache(maxsize=64)
def safest_moves(desc: tuple[str, ...], sweeps: int = 200) -> dict[tuple[int, int], int]:
    """Per cell, the move that maximises the chance of reaching G on a slippery lake, where a
    move goes the chosen way or either way across it, a third each (value iteration)."""
    rows, cols = len(desc), len(desc[0])
    cells = [(r, c) for r in range(rows) for c in range(cols)]

    def land(cell: tuple[int, int], action: int) -> tuple[int, int]:
        dr, dc = _MOVES[action]
        return (min(max(cell[0] + dr, 0), rows - 1), min(max(cell[1] + dc, 0), cols - 1))

    def worth(cell: tuple[int, int], action: int, value: dict[tuple[int, int], float]) -> float:
        return sum(value[land(cell, (action + turn) % 4)] for turn in (-1, 0, 1)) / 3

    value = {cell: 1.0 if desc[cell[0]][cell[1]] == "G" else 0.0 for cell in cells}
    for _ in range(sweeps):
        for cell in cells:
            if desc[cell[0]][cell[1]] in "FS":
                value[cell] = max(worth(cell, a, value) for a in _MOVES)
    return {cell: max(_MOVES, key=lambda a: worth(cell, a, value)) for cell in cells}


class GymEnv(Env):
    """FrozenLake through gymnasium, or Sokoban, one episode per task; the agent sends one
    move a turn."""

    name = "gym"
    vm_scope = None

    task_fields = frozenset({"game", "desc", "map_name", "size", "p", "is_slippery", "max_steps", "room", "dim_room",
                             "num_boxes", "search_depth", "grid_vocab", "grid_lookup", "format_penalty"})
    #: the seed draws a slippery lake's slips: an agent that had it would replay them
    #: (gymnasium's ``reset(seed=…)``) and plan around slips it knew in advance
    seed_is_secret = True

    @staticmethod
    def validate_task(payload: Mapping[str, Any]) -> None:
        """The game, the map fields and the rules."""
        game = payload.get("game", "FrozenLake")
        if game not in _GAMES:
            raise ValueError(f"field 'game' must be one of {', '.join(_GAMES)}, got {as_written(game)}")
        if game == "Sokoban":
            sokoban.validate(payload)
            return
        require(payload, "is_slippery", bool, optional=True)
        require(payload, "desc", list, optional=True)
        require(payload, "map_name", str, optional=True)
        require(payload, "p", (int, float), optional=True)
        for name in ("size", "max_steps"):
            require(payload, name, int, optional=True)
        if sum(name in payload for name in ("desc", "map_name", "size")) > 1:
            raise ValueError("give one of the fields 'desc', 'map_name' and 'size', not several")
        if "desc" in payload:
            _check_desc(payload["desc"])
        if "map_name" in payload and payload["map_name"] not in ("4x4", "8x8"):
            raise ValueError(f"field 'map_name' must be 4x4 or 8x8, got {as_written(payload['map_name'])}")
        if "size" in payload and payload["size"] not in _SIZES:
            raise ValueError(f"field 'size' must be {_SIZES.start}-{_SIZES.stop - 1}, got {payload['size']}")
        if "p" in payload and not 0 < payload["p"] <= 1:
            raise ValueError(f"field 'p' must be in (0, 1], got {payload['p']}")
        if "max_steps" in payload and payload["max_steps"] < 1:
            raise ValueError("field 'max_steps' must be at least 1")

    @classmethod
    def prepare_run(cls, tasks) -> None:
        """Refuse the run at once when gymnasium (the ``[rl]`` extra) is missing: the
        install's fault, said once, not each task's."""
        from ..errors import ConfigError

        if importlib.util.find_spec("gymnasium") is None:
            raise ConfigError("the gym mode needs gymnasium: pip install 'parallel-rollout[rl]'")

    @staticmethod
    def reference_actions(task) -> list[Any]:
        """A shortest path from S to G (exact on a non-slippery lake); Sokoban: the planner's
        shortest solution."""
        if task.get("game") == "Sokoban":
            return sokoban.reference_moves(task.payload, task.seed)
        path = shortest_path(lake_map(task.payload, task.seed))
        if path is None:
            raise ValueError(f"task {task.id!r}: the lake has no path from S to G")
        return [ACTIONS[a] for a in path]

    @staticmethod
    def replan(task, observation: Mapping[str, Any]) -> Any:
        """The oracle's next move from where the observation says the player stands: the
        shortest path's first move, or on a slippery lake the move most likely to reach G.
        Sokoban: the first move of a plan from the observed state."""
        if task.get("game") == "Sokoban":
            return sokoban.replan(observation)
        desc, position = observation["grid_map"], tuple(observation["position"])
        if task.get("is_slippery", False):
            return ACTIONS[safest_moves(tuple(desc))[position]]
        path = shortest_path(desc, position)
        return ACTIONS[path[0]] if path else ACTIONS[0]

    def reset(self, task, vm) -> dict[str, Any]:
        """Build the lake and place the player on S (Sokoban: build or generate the room)."""
        self._sokoban = sokoban.SokobanGame(task.payload, task.seed) if task.get("game") == "Sokoban" else None
        if self._sokoban is not None:
            return self._sokoban.reset()
        from gymnasium.envs.toy_text.frozen_lake import FrozenLakeEnv

        self._desc = lake_map(task.payload, task.seed)
        self._game = FrozenLakeEnv(desc=self._desc, is_slippery=bool(task.get("is_slippery", False)))
        self._state, _ = self._game.reset(seed=task.seed)
        size = len(self._desc) * len(self._desc[0])
        self._max_steps = task.get("max_steps", max(8, size))
        self._steps = self._invalid = 0
        self._reward = 0.0
        self._actions: list[str | None] = []
        self._ended: str | None = None
        return {**self._observation(last=None, error=None), "instructions": FROZENLAKE_RULES}

    def step(self, action: Any) -> StepResult:
        """One move; a reply without a move costs the turn. An action that is no text (nor,
        on a lake, a number 0-3) is the agent's error: a dict, or a ROLL action id 1-4 given to
        Sokoban, played as a reply without a move spent every turn as the policy's failure;
        so is a lake's number outside 0-3 (7), which was played as a reply without a move."""
        reject_none(action, _TAKES)
        lake_index = isinstance(action, int) and not isinstance(action, bool) and self._sokoban is None
        if not (isinstance(action, str) or lake_index):
            raise ValueError(f"{_TAKES}, got {type(action).__name__} {reprlib.repr(action)}")
        if lake_index and not 0 <= action < len(ACTIONS):  # not a reply without a move
            numbers = ", ".join(f"{number} {name}" for number, name in enumerate(ACTIONS))
            raise ValueError(f"a FrozenLake action number is gymnasium's 0-{len(ACTIONS) - 1} "
                             f"({numbers}), got int {action}")
        if self._sokoban is not None:
            return StepResult(*self._sokoban.step(action))
        self._steps += 1
        index = parse_action(action)
        error = None
        if index is None:
            self._invalid += 1
            error = f"no move found in your reply; answer with one of {', '.join(ACTIONS)} as <answer>MOVE</answer>"
            self._actions.append(None)
        else:
            self._state, reward, terminated, _, _ = self._game.step(index)
            self._reward += float(reward)
            self._actions.append(ACTIONS[index])
            if terminated:
                self._ended = "goal" if self._reward > 0 else "hole"
        if self._ended is None and self._steps >= self._max_steps:
            self._ended = "max_steps"
        observation = self._observation(last=ACTIONS[index] if index is not None else None, error=error)
        return StepResult(observation, done=self._ended is not None,
                          info={"reward": self._reward, "ended": self._ended})

    def evaluate(self) -> tuple[float, dict[str, Any]]:
        """The env's reward: 1.0 on the goal, else 0.0 (Sokoban: ROLL's episode return)."""
        if self._sokoban is not None:
            return self._sokoban.evaluate()
        return min(1.0, self._reward), {
            "ended": self._ended, "steps": self._steps, "invalid_actions": self._invalid,
            "position": list(self._position()), "actions": self._actions,
        }

    def _position(self) -> tuple[int, int]:
        return divmod(int(self._state), len(self._desc[0]))

    def _observation(self, last: str | None, error: str | None) -> dict[str, Any]:
        row, col = self._position()
        rows = [list(line) for line in self._desc]
        rows[row][col] = "P"
        return {"grid": "\n".join("".join(r) for r in rows), "grid_map": list(self._desc),
                "position": [row, col], "last_action": last, "error": error,
                "steps": self._steps, "max_steps": self._max_steps, "ended": self._ended}


def _check_desc(desc: list[Any]) -> None:
    if not desc or not all(isinstance(row, str) and row for row in desc):
        raise ValueError("field 'desc' must be a non-empty list of non-empty strings")
    if len({len(row) for row in desc}) != 1:
        raise ValueError("field 'desc' must have rows of one length")
    cells = "".join(desc)
    if set(cells) - set("SFHG"):
        raise ValueError(f"field 'desc' may hold only S, F, H and G, found {sorted(set(cells) - set('SFHG'))}")
    if cells.count("S") != 1 or "G" not in cells:
        raise ValueError("field 'desc' needs exactly one S and at least one G")


def frozenlake_path():
    """The shipped FrozenLake task set (``--data frozenlake``)."""
    from importlib import resources
    from pathlib import Path

    return Path(str(resources.files("parallel_rollout.envs") / "data" / "frozenlake.jsonl"))
