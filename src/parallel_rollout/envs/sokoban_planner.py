"""The Sokoban oracle's planner: A* over player moves, with a node budget.

A state is the player's cell and the set of box cells; a move steps the player one cell,
pushing the box in front of it when the cell behind that box is free. The cost is one per
move (as the env counts steps), so a plan found is a shortest one. The estimate is the sum
over boxes of the distance to the nearest target (every push moves one box one cell, so it
never overestimates). Pushes onto a dead cell (one from which no push can reach a target)
are never tried::

    room rows (XSB) ─► walls, targets, boxes, player ─► A* (≤ budget expansions)
                    ─► ["Up", "Right", …]  or None (no plan within the budget)

``plan`` is what the oracle agent replays and what decides which generated rooms are shipped
(a room without a plan within the budget is never shipped).
"""

from __future__ import annotations

import functools
import heapq
import itertools
from typing import Sequence

#: the moves in ROLL's action order, as (name, row step, column step)
MOVES = (("Up", -1, 0), ("Down", 1, 0), ("Left", 0, -1), ("Right", 0, 1))
#: states expanded before the planner gives up
DEFAULT_BUDGET = 200_000


@functools.lru_cache(maxsize=256)
def plan(rows: tuple[str, ...], budget: int = DEFAULT_BUDGET) -> tuple[str, ...] | None:
    """The moves of a shortest solution of the room, or None when there is none within
    ``budget`` expanded states. ``rows`` are XSB text enclosed by walls."""
    cols = len(rows[0])
    cells = "".join(rows)
    walls = frozenset(i for i, ch in enumerate(cells) if ch == "#")
    targets = frozenset(i for i, ch in enumerate(cells) if ch in ".*+")
    boxes = frozenset(i for i, ch in enumerate(cells) if ch in "$*")
    player = next(i for i, ch in enumerate(cells) if ch in "@+")
    steps = [(name, dr * cols + dc) for name, dr, dc in MOVES]
    live = _live_cells(walls, targets, [step for _, step in steps])
    if not boxes <= live:
        return None

    def estimate(boxes: frozenset[int]) -> int:
        return sum(min(abs(b // cols - t // cols) + abs(b % cols - t % cols) for t in targets) for b in boxes)

    start = (player, boxes)
    came_from: dict[tuple[int, frozenset[int]], tuple[tuple[int, frozenset[int]], str] | None] = {start: None}
    cost = {start: 0}
    order = itertools.count()  # ties: first come, first served (heapq never compares states)
    frontier = [(estimate(boxes), next(order), start)]
    expanded = 0
    while frontier:
        _, _, state = heapq.heappop(frontier)
        player, boxes = state
        if boxes <= targets:
            return _path(came_from, state)
        expanded += 1
        if expanded > budget:
            return None
        for name, step in steps:
            nxt = player + step
            if nxt in walls:
                continue
            moved = boxes
            if nxt in boxes:
                beyond = nxt + step
                if beyond in walls or beyond in boxes or beyond not in live:
                    continue
                moved = (boxes - {nxt}) | {beyond}
            child = (nxt, moved)
            if child not in cost or cost[child] > cost[state] + 1:
                cost[child] = cost[state] + 1
                came_from[child] = (state, name)
                heapq.heappush(frontier, (cost[child] + estimate(moved), next(order), child))
    return None


def _live_cells(walls: frozenset[int], targets: frozenset[int], steps: Sequence[int]) -> frozenset[int]:
    """Cells from which a box can be pushed onto some target (pulled back from the targets:
    a box reaches ``cell`` from ``cell - step`` when the player can stand at
    ``cell - 2 * step``)."""
    live = set(targets)
    frontier = list(targets)
    while frontier:
        cell = frontier.pop()
        for step in steps:
            before, stand = cell - step, cell - 2 * step
            if before not in live and before not in walls and stand not in walls and stand >= 0:
                live.add(before)
                frontier.append(before)
    return frozenset(live)


def _path(came_from, state) -> tuple[str, ...]:
    moves: list[str] = []
    while came_from[state] is not None:
        state, name = came_from[state]
        moves.append(name)
    return tuple(reversed(moves))
