"""Sokoban in the ``gym`` mode: ROLL's ``SokobanEnv`` rules, rewards and text rendering.

A task (``"game": "Sokoban"``) either gives its ``room`` as XSB rows or has one generated
from its seed by reverse play (``sokoban_rooms``; the same room ROLL generates for that
seed)::

    {"id": "s1", "mode": "gym", "game": "Sokoban", "dim_room": [6, 6], "num_boxes": 1,
     "search_depth": 300, "max_steps": 10, "seed": 7}
    {"id": "s2", "mode": "gym", "game": "Sokoban", "room": ["#####", "#@$.#", "#####"]}

One turn::

    reply ─► move: the last <answer>…</answer> naming Up/Down/Left/Right (any case), else
             the last such word of the text; none: a no-op step (ROLL's action 0)
          ─► push the box in front when the cell behind it is free, else step if free
          ─► reward (gym-sokoban's table, as ROLL returns it):
               -0.1 every step, +1 a box pushed onto a target, -1 a box pushed off one,
               +10 when every box is on a target; plus ``format_penalty`` (default 0)
               for a reply without a move
          ─► done when every box is on a target (success) or after ``max_steps`` steps

The episode's reward is the sum of its step rewards (what ROLL's trajectory collects);
success is every box on a target. The grid is drawn with ``grid_vocab`` (meaning → one
character; ROLL's symbols by default; ROLL's own ``grid_vocab``, symbol → meaning, and its
``grid_lookup``, code 0-6 → symbol, are read too, so its env_config can be pasted) and the
first observation carries the instructions with the legend. The oracle plans from the observation's ``state`` (XSB rows) each turn.
"""

from __future__ import annotations

import re
from typing import Any, Mapping

from ..task_json import as_written, value_said
from .base import require
from .sokoban_planner import MOVES, plan
from .sokoban_rooms import generate_room

ACTIONS = tuple(name for name, _, _ in MOVES)
_STEPS = {name: (dr, dc) for name, dr, dc in MOVES}
#: gym-sokoban's rewards, which ROLL's SokobanEnv returns unchanged
STEP_PENALTY, BOX_ON_TARGET, BOX_OFF_TARGET, ALL_ON_TARGET = -0.1, 1.0, -1.0, 10.0
#: ROLL's symbols, meaning → character (its GRID_LOOKUP / GRID_VOCAB)
DEFAULT_VOCAB = {"wall": "#", "empty": "_", "target": "O", "box on target": "√", "box": "X",
                 "player": "P", "player on target": "S"}
#: ROLL's cell codes (the keys of its GRID_LOOKUP), meaning by code
_CODES = dict(enumerate(DEFAULT_VOCAB))
#: the XSB character of each meaning (the task's ``room`` and the observation's ``state``)
_XSB = {"wall": "#", "empty": "_", "target": ".", "box on target": "*", "box": "$",
        "player": "@", "player on target": "+"}
_MEANING = {ch: meaning for meaning, ch in _XSB.items()} | {" ": "empty", "-": "empty"}
#: ROLL's SokobanEnv defaults, for fields a task leaves out
DEFAULTS = {"dim_room": [10, 10], "num_boxes": 4, "max_steps": 20, "search_depth": 300}
_FROZENLAKE_FIELDS = ("desc", "map_name", "size", "p", "is_slippery")
_ANSWER = re.compile(r"<answer>\s*(.*?)\s*</answer>", re.IGNORECASE | re.DOTALL)
_WORD = re.compile(r"\b(up|down|left|right)\b", re.IGNORECASE)
INSTRUCTIONS = (
    "You are playing Sokoban. You are the player, and your goal is to push every box onto a "
    "target. Moving into a box pushes it one cell in that direction, if the cell beyond it is "
    "free; boxes cannot be pushed into walls or other boxes, and cannot be pulled. "
    "Each turn, answer with one move in the form <answer>Right</answer>.")


def parse_move(reply: Any) -> str | None:
    """The move a reply names (Up, Down, Left, Right), or None: the last
    ``<answer>MOVE</answer>``, else the last direction word of the text."""
    if not isinstance(reply, str):
        return None
    answers = _ANSWER.findall(reply)
    if answers:
        name = answers[-1].strip().capitalize()
        return name if name in ACTIONS else None
    words = _WORD.findall(reply)
    return words[-1].capitalize() if words else None


class Room:
    """A room's walls and targets, and where the boxes and the player are."""

    def __init__(self, rows: list[str]) -> None:
        self.cols = len(rows[0])
        cells = {(r, c): _MEANING[ch] for r, row in enumerate(rows) for c, ch in enumerate(row)}
        self.shape = (len(rows), self.cols)
        self.walls = frozenset(cell for cell, meaning in cells.items() if meaning == "wall")
        self.targets = frozenset(cell for cell, meaning in cells.items() if "target" in meaning)
        self.boxes = {cell for cell, meaning in cells.items() if meaning.startswith("box")}
        self.player = next(cell for cell, meaning in cells.items() if meaning.startswith("player"))

    @property
    def boxes_on_target(self) -> int:
        """How many boxes stand on a target."""
        return len(self.boxes & self.targets)

    @property
    def solved(self) -> bool:
        """Every box on a target."""
        return self.boxes <= self.targets

    def move(self, name: str) -> bool:
        """One move: push the box in front if the cell beyond it is free, else step if the
        cell is free. Returns whether the player moved."""
        dr, dc = _STEPS[name]
        ahead = (self.player[0] + dr, self.player[1] + dc)
        if ahead in self.walls:
            return False
        if ahead in self.boxes:
            beyond = (ahead[0] + dr, ahead[1] + dc)
            if beyond in self.walls or beyond in self.boxes:
                return False
            self.boxes.remove(ahead)
            self.boxes.add(beyond)
        self.player = ahead
        return True

    def meaning(self, cell: tuple[int, int]) -> str:
        """What stands on a cell, in the vocabulary's words."""
        if cell in self.walls:
            return "wall"
        on_target = cell in self.targets
        if cell == self.player:
            return "player on target" if on_target else "player"
        if cell in self.boxes:
            return "box on target" if on_target else "box"
        return "target" if on_target else "empty"

    def render(self, vocab: Mapping[str, str]) -> list[str]:
        """The rows drawn with ``vocab`` (meaning → character)."""
        return ["".join(vocab[self.meaning((r, c))] for c in range(self.cols)) for r in range(self.shape[0])]


class SokobanGame:
    """One Sokoban episode for the gym env: reset → step … → evaluate."""

    def __init__(self, payload: Mapping[str, Any], seed: int | None) -> None:
        self.rows = task_room(payload, seed)
        self.room = Room(self.rows)
        self.num_boxes = len(self.room.boxes)
        self.vocab = vocabulary(payload)
        self.max_steps = payload.get("max_steps", DEFAULTS["max_steps"])
        self.format_penalty = float(payload.get("format_penalty", 0.0))
        self.steps = self.invalid = 0
        self.reward = 0.0
        self.actions: list[str | None] = []
        self.ended: str | None = None
        self._on_target = self.room.boxes_on_target

    def reset(self) -> dict[str, Any]:
        """The first observation, with the instructions and the legend."""
        observation = self._observation(last=None, moved=None, reward=None, error=None)
        legend = ", ".join(f"{self.vocab[m]}: {m}" for m in DEFAULT_VOCAB)
        observation["instructions"] = (f"{INSTRUCTIONS}\nThe symbols of the grid: {legend}.\n"
                                       f"Your moves: {', '.join(ACTIONS)}.")
        return observation

    def step(self, reply: Any) -> tuple[dict[str, Any], bool, dict[str, Any]]:
        """One move (a no-op for a reply without one) and its reward: (observation, done, info)."""
        self.steps += 1
        name = parse_move(reply)
        moved = name is not None and self.room.move(name)
        reward = STEP_PENALTY
        on_target = self.room.boxes_on_target
        if on_target > self._on_target:
            reward += BOX_ON_TARGET
        elif on_target < self._on_target:
            reward += BOX_OFF_TARGET
        self._on_target = on_target
        if self.room.solved:
            reward += ALL_ON_TARGET
            self.ended = "solved"
        elif self.steps >= self.max_steps:
            self.ended = "max_steps"
        error = None
        if name is None:
            self.invalid += 1
            reward += self.format_penalty
            error = f"no move found in your reply; answer with one of {', '.join(ACTIONS)} as <answer>MOVE</answer>"
        self.reward += reward
        self.actions.append(name)
        observation = self._observation(last=name, moved=moved, reward=reward, error=error)
        return observation, self.ended is not None, {"reward": reward, "return": self.reward, "ended": self.ended,
                                                     "moved": moved}

    def evaluate(self) -> tuple[float, dict[str, Any]]:
        """ROLL's episode return (the sum of step rewards); success: every box on a target."""
        return round(self.reward, 6), {
            "success": self.room.solved, "ended": self.ended, "steps": self.steps,
            "invalid_actions": self.invalid, "boxes_on_target": self.room.boxes_on_target,
            "num_boxes": self.num_boxes, "actions": self.actions, "room": self.rows,
        }

    def _observation(self, last: str | None, moved: bool | None, reward: float | None,
                     error: str | None) -> dict[str, Any]:
        return {"game": "Sokoban", "grid": "\n".join(self.room.render(self.vocab)),
                "state": self.room.render(_XSB), "last_action": last, "moved": moved, "reward": reward,
                "error": error, "boxes_on_target": self.room.boxes_on_target, "num_boxes": self.num_boxes,
                "steps": self.steps, "max_steps": self.max_steps, "ended": self.ended}


def vocabulary(payload: Mapping[str, Any]) -> dict[str, str]:
    """The task's symbols, meaning → character: ROLL's, then its ``grid_lookup`` (code →
    symbol), then ``grid_vocab`` (meaning → symbol, or ROLL's way round: symbol → meaning)."""
    vocab = dict(DEFAULT_VOCAB)
    for code, symbol in payload.get("grid_lookup", {}).items():
        vocab[_CODES[int(code)]] = symbol
    return {**vocab, **_meaning_to_symbol(payload.get("grid_vocab", {}))}


def _meaning_to_symbol(vocab: Mapping[str, str]) -> dict[str, str]:
    """``grid_vocab`` as meaning → symbol; ROLL's (every value a meaning, no key one) inverted."""
    if (vocab and all(isinstance(v, str) and v in DEFAULT_VOCAB for v in vocab.values())
            and not set(vocab) & set(DEFAULT_VOCAB)):
        return {meaning: symbol for symbol, meaning in vocab.items()}
    return dict(vocab)


def task_room(payload: Mapping[str, Any], seed: int | None) -> list[str]:
    """The task's room: its ``room`` rows, else the room generated from its seed."""
    if "room" in payload:
        return list(payload["room"])
    rows, cols = payload.get("dim_room", DEFAULTS["dim_room"])
    return generate_room((rows, cols), payload.get("num_boxes", DEFAULTS["num_boxes"]),
                         0 if seed is None else seed, search_depth=payload.get("search_depth", DEFAULTS["search_depth"]))


def reference_moves(payload: Mapping[str, Any], seed: int | None) -> list[str]:
    """The planner's shortest solution of the task's room; ValueError when it finds none."""
    moves = plan(tuple(task_room(payload, seed)))
    if moves is None:
        raise ValueError("the planner finds no solution of this room within its node budget")
    return list(moves)


def replan(observation: Mapping[str, Any]) -> str:
    """The oracle's next move from the observation's state (Up when no plan exists). A plan
    is made once per room: every state along it is remembered with the moves left from there,
    so the following turns only look it up (a large room's search takes seconds)."""
    state = tuple(observation["state"])
    moves = _FOLLOW.get(state)
    if moves is None:
        moves = plan(state)
        if not moves:
            return ACTIONS[0]
        if len(_FOLLOW) > 10_000:
            _FOLLOW.clear()
        room = Room(list(state))
        for index, name in enumerate(moves):
            _FOLLOW[state] = moves[index:]
            room.move(name)
            state = tuple(room.render(_XSB))
    return moves[0]


#: state → the moves left of a plan through it (``replan``; shared by a worker's env loops)
_FOLLOW: dict[tuple[str, ...], tuple[str, ...]] = {}


def validate(payload: Mapping[str, Any]) -> None:
    """ValueError naming the field when a Sokoban task cannot be played."""
    for name in _FROZENLAKE_FIELDS:
        if name in payload:
            raise ValueError(f"field {name!r} is a FrozenLake field; a Sokoban task takes room, dim_room, "
                             "num_boxes, search_depth, max_steps, grid_vocab, grid_lookup and format_penalty")
    for name in ("num_boxes", "search_depth", "max_steps"):
        require(payload, name, int, optional=True)
    for name, least in (("num_boxes", 1), ("search_depth", 3), ("max_steps", 1)):
        if payload.get(name, least) < least:
            raise ValueError(f"field {name!r} must be at least {least}, got {value_said(payload[name])}")
    require(payload, "format_penalty", (int, float), optional=True)
    if "grid_vocab" in payload or "grid_lookup" in payload:
        _check_vocab(payload.get("grid_vocab", {}), payload.get("grid_lookup", {}))
    if "room" in payload:
        _check_room(payload)
        return
    dim = payload.get("dim_room", DEFAULTS["dim_room"])
    if (not isinstance(dim, list) or len(dim) != 2
            or not all(isinstance(n, int) and not isinstance(n, bool) and 3 <= n <= 30 for n in dim)):
        raise ValueError(f"field 'dim_room' must be [rows, columns], each 3-30, got {as_written(dim)}")
    boxes = payload.get("num_boxes", DEFAULTS["num_boxes"])
    inside = (dim[0] - 2) * (dim[1] - 2)
    if inside < boxes + 2:
        raise ValueError(f"field 'dim_room' {dim} has {inside} cell(s) inside its walls: too few for the player "
                         f"and num_boxes={boxes} boxes with their targets (at least num_boxes + 2)")


def _check_vocab(vocab: Any, lookup: Any) -> None:
    if not isinstance(vocab, Mapping):
        raise ValueError("field 'grid_vocab' must be an object mapping a meaning to its symbol")
    if not isinstance(lookup, Mapping):
        raise ValueError("field 'grid_lookup' must be an object mapping a cell code 0-6 to its symbol")
    odd = [code for code in lookup if str(code) not in {str(c) for c in _CODES}]
    if odd:
        raise ValueError(f"field 'grid_lookup' names {', '.join(map(as_written, odd))}; the codes are 0-6: "
                         + ", ".join(f"{code} {meaning}" for code, meaning in _CODES.items()))
    given = _meaning_to_symbol(vocab)
    unknown = sorted(set(given) - set(DEFAULT_VOCAB))
    if unknown:
        raise ValueError(f"field 'grid_vocab' names {', '.join(map(as_written, unknown))}; the meanings are "
                         f"{', '.join(map(as_written, DEFAULT_VOCAB))} (meaning → symbol, or symbol → meaning as in ROLL)")
    from_lookup = {_CODES[int(code)]: symbol for code, symbol in lookup.items()}
    clash = sorted(m for m in set(given) & set(from_lookup) if given[m] != from_lookup[m])
    if clash:
        raise ValueError(f"fields 'grid_lookup' and 'grid_vocab' give {as_written(clash[0])} different symbols: "
                         f"{as_written(from_lookup[clash[0]])} and {as_written(given[clash[0]])}")
    merged = vocabulary({"grid_vocab": vocab, "grid_lookup": lookup})
    for meaning, symbol in merged.items():
        if not isinstance(symbol, str) or len(symbol) != 1 or symbol.isspace():
            field = "grid_vocab" if meaning in given else "grid_lookup"
            raise ValueError(f"field '{field}': {as_written(meaning)} must be one visible character, "
                             f"got {as_written(symbol)}")
    meaning_of: dict[str, str] = {}
    for meaning, symbol in merged.items():
        if symbol in meaning_of:
            field = "grid_vocab" if given else "grid_lookup"
            raise ValueError(f"field '{field}' gives {as_written(meaning_of[symbol])} and {as_written(meaning)} "
                             f"one symbol, {as_written(symbol)}")
        meaning_of[symbol] = meaning


def _check_room(payload: Mapping[str, Any]) -> None:
    rows = payload["room"]
    if not isinstance(rows, list) or not rows or not all(isinstance(r, str) and r for r in rows):
        raise ValueError("field 'room' must be a non-empty list of non-empty strings (XSB rows)")
    if len({len(r) for r in rows}) != 1:
        raise ValueError("field 'room' must have rows of one length")
    cells = "".join(rows)
    odd = sorted(set(cells) - set(_MEANING))
    if odd:
        raise ValueError(f"field 'room' may hold only XSB symbols # _ . $ * @ + (space or - for floor), found {odd}")
    border = rows[0] + rows[-1] + "".join(r[0] + r[-1] for r in rows)
    if set(border) != {"#"}:
        raise ValueError("field 'room' must be enclosed: every border cell a wall '#'")
    if sum(cells.count(ch) for ch in "@+") != 1:
        raise ValueError("field 'room' needs exactly one player (@, or + on a target)")
    boxes, targets = sum(cells.count(ch) for ch in "$*"), sum(cells.count(ch) for ch in ".*+")
    if boxes < 1 or boxes != targets:
        raise ValueError(f"field 'room' needs as many targets as boxes (at least one), has {boxes} box(es) "
                         f"and {targets} target(s)")
    if "num_boxes" in payload and payload["num_boxes"] != boxes:
        raise ValueError(f"field 'num_boxes' is {payload['num_boxes']} but the room holds {boxes} box(es)")
    if "dim_room" in payload and payload["dim_room"] != [len(rows), len(rows[0])]:
        raise ValueError(f"field 'dim_room' is {payload['dim_room']} but the room is {len(rows)}x{len(rows[0])}")


def sokoban_path():
    """The shipped Sokoban rooms (``--data sokoban``): 100 per tag, each with its seed and
    rows, every one solved by the planner within its ``max_steps``
    (``scripts/make_sokoban_rooms.py`` writes them)."""
    return _shipped("sokoban.jsonl")


def sokoban_endless_path():
    """One unseeded task per Sokoban tag (``--data sokoban-endless``): the RL tags' source,
    where each group's seed picks its room."""
    return _shipped("sokoban_endless.jsonl")


def _shipped(name: str):
    from importlib import resources
    from pathlib import Path

    return Path(str(resources.files("parallel_rollout.envs") / "data" / name))
