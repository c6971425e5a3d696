"""Sokoban rooms from a seed, by reverse play: gym-sokoban's generator as ROLL runs it.

Every room is solvable by construction: the boxes start on their targets and the player
pulls them away (a push played backwards), so pushing them back solves it::

    seed ─► random.Random(seed)           ─► room topology: a random walk stamps 3×3
          │                                  floor masks; the border stays wall
          └► numpy RandomState(seed)      ─► player and box targets on random floor cells
             reverse play (depth-first, ``search_depth`` moves deep, ≤ 300,000 states):
             pull boxes off their targets; the best state maximises
             (times the pulled box changed) × (total box displacement), all targets empty
             ─► a few random player steps (so the player is not always next to a box)

The same two random streams ROLL seeds (``all_seed``: Python's ``random`` and numpy's
legacy ``RandomState``) are drawn in the same order, so a seed gives the room ROLL's
``SokobanEnv.reset(seed)`` gives. One difference: when a seed yields no room (too few floor
cells, or no box could be moved), ROLL retries with ``hash(str(seed))``, which Python
randomises per process; here the next seed is drawn from ``random.Random(seed)``, so the
result is the same in every process.

A room is returned as rows of XSB text: ``#`` wall, ``_`` floor, ``.`` target, ``$`` box,
``*`` box on target, ``@`` player, ``+`` player on target.
"""

from __future__ import annotations

import random
from typing import Sequence

# Cell codes of gym-sokoban's room arrays; the reverse play marks a pulled box PULLED.
WALL, FLOOR, TARGET, PULLED, BOX, PLAYER = range(6)
#: the floor masks the topology walk stamps, centred on its position
_MASKS = [
    [[0, 0, 0], [1, 1, 1], [0, 0, 0]],
    [[0, 1, 0], [0, 1, 0], [0, 1, 0]],
    [[0, 0, 0], [1, 1, 0], [0, 1, 0]],
    [[0, 0, 0], [1, 1, 0], [1, 1, 0]],
    [[0, 0, 0], [0, 1, 1], [0, 1, 0]],
]
_WALK = [(1, 0), (0, 1), (-1, 0), (0, -1)]
#: reverse-play directions in gym-sokoban's order: up, down, left, right
_PULLS = [(-1, 0), (1, 0), (0, -1), (0, 1)]
#: how many seeds are tried before a room shape is declared impossible
_SEED_TRIES = 50
_MAX_STATES = 300_000


class RoomError(ValueError):
    """No room could be generated for these settings (too small a room for the boxes)."""


def generate_room(dim_room: Sequence[int], num_boxes: int, seed: int, search_depth: int = 300,
                  p_change_directions: float = 0.35, tries: int = 4) -> list[str]:
    """The room of ``seed`` as XSB rows; RoomError when ``_SEED_TRIES`` seeds in a row give
    none (the settings leave too little floor for the boxes)."""
    rows, cols = dim_room
    walk_steps = int(1.7 * (rows + cols))  # gym-sokoban's num_gen_steps
    for _ in range(_SEED_TRIES):
        room = _try_seed(rows, cols, num_boxes, seed, search_depth, walk_steps, p_change_directions, tries)
        if room is not None:
            return room
        seed = random.Random(seed).getrandbits(32)
    raise RoomError(f"no {rows}x{cols} room with {num_boxes} box(es) came out of {_SEED_TRIES} seeds: "
                    f"give a larger 'dim_room' or fewer 'num_boxes'")


def _try_seed(rows: int, cols: int, num_boxes: int, seed: int, search_depth: int, walk_steps: int,
              p_change_directions: float, tries: int) -> list[str] | None:
    import numpy  # the [rl] extra (gymnasium's dependency); only the placement draws use it

    py_random = random.Random(seed)
    np_random = numpy.random.RandomState(seed % 2 ** 32)
    mapping: dict[int, int] = {}
    for _ in range(tries):
        level = _topology(rows, cols, walk_steps, p_change_directions, py_random)
        if not _place(level, num_boxes, np_random):
            return None  # ROLL's RuntimeError: not enough floor
        structure = [FLOOR if cell == PLAYER else cell for cell in level]
        state = [BOX if cell == TARGET else cell for cell in level]
        state, mapping = _reverse_play(state, structure, cols, num_boxes, search_depth)
        state = [BOX if cell == PULLED else cell for cell in state]
        if _displacement(mapping, cols) > 0:
            break
    if _displacement(mapping, cols) == 0:
        return None  # ROLL's RuntimeWarning: no box could be moved
    probability = 0.8 if _displacement(mapping, cols) == 1 else 0.5
    _wander(state, structure, cols, probability, py_random)
    return _xsb(state, structure, cols)


def _topology(rows: int, cols: int, steps: int, p_change: float, rng: random.Random) -> list[int]:
    """Floor (1) and wall (0) cells, row-major: a random walk that stamps floor masks."""
    level = [0] * (rows * cols)
    direction = rng.sample(_WALK, 1)[0]
    row, col = rng.randint(1, rows - 1), rng.randint(1, cols - 1)
    for _ in range(steps):
        if rng.random() < p_change:
            direction = rng.sample(_WALK, 1)[0]
        row = max(min(row + direction[0], rows - 2), 1)
        col = max(min(col + direction[1], cols - 2), 1)
        mask = rng.sample(_MASKS, 1)[0]
        for dr in range(3):
            for dc in range(3):
                level[(row - 1 + dr) * cols + col - 1 + dc] += mask[dr][dc]
    level = [FLOOR if cell > 0 else WALL for cell in level]
    for index in range(rows * cols):
        r, c = divmod(index, cols)
        if r in (0, rows - 1) or c in (0, cols - 1):
            level[index] = WALL
    return level


def _place(level: list[int], num_boxes: int, rng) -> bool:
    """Put the player and the box targets on random floor cells; False when the floor is too
    small for them."""
    floor = [i for i, cell in enumerate(level) if cell == FLOOR]
    if len(floor) <= num_boxes + 1:
        return False
    level[floor[rng.randint(len(floor))]] = PLAYER
    for _ in range(num_boxes):
        floor = [i for i, cell in enumerate(level) if cell == FLOOR]
        level[floor[rng.randint(len(floor))]] = TARGET
    return True


def _reverse_play(state: list[int], structure: list[int], cols: int, num_boxes: int,
                  search_depth: int) -> tuple[list[int], dict[int, int]]:
    """The best state a depth-first reverse play reaches: gym-sokoban's score, search order
    and limits (a state is expanded once, on its first visit)."""
    mapping = {index: index for index, cell in enumerate(structure) if cell == TARGET}
    explored: set[bytes] = set()
    best: list = [-1, state, mapping]
    moves = [dr * cols + dc for dr, dc in _PULLS]

    def visit(state, mapping, swaps, last_pull, ttl):
        ttl -= 1
        if ttl <= 0 or len(explored) >= _MAX_STATES:
            return None
        key = bytes(state)
        if key in explored:
            return None
        score = swaps * _displacement(mapping, cols) if state.count(TARGET) == num_boxes else 0
        if score > best[0]:
            best[:] = [score, list(state), dict(mapping)]
        explored.add(key)
        return [state, mapping, swaps, last_pull, ttl, 0]

    # An explicit stack instead of recursion: search_depth may exceed Python's recursion limit.
    stack = [visit(state, mapping, 0, -1, search_depth)]
    while stack:
        frame = stack[-1]
        if frame is None or frame[5] == len(moves):
            stack.pop()
            continue
        parent, parent_map, swaps, last_pull, ttl, action = frame
        frame[5] += 1
        child, child_map = list(parent), dict(parent_map)
        pull = _pull(child, structure, child_map, last_pull, moves[action])
        stack.append(visit(child, child_map, swaps + (pull != last_pull), pull, ttl))
    return best[1], best[2]


def _pull(state: list[int], structure: list[int], mapping: dict[int, int], last_pull: int, move: int) -> int:
    """One reverse move in place: the player steps to a free cell and pulls the box behind
    it, if any. Returns the target of the last pulled box."""
    player = state.index(PLAYER)
    step = player + move
    if state[step] in (FLOOR, TARGET):
        state[player], state[step] = structure[player], PLAYER
        behind = player - move
        if state[behind] in (PULLED, BOX):
            state[player], state[behind] = PULLED, structure[behind]
            for target, box in mapping.items():
                if box == behind:
                    mapping[target] = player
                    last_pull = target
    return last_pull


def _displacement(mapping: dict[int, int], cols: int) -> int:
    """Total Manhattan distance of the boxes from their targets."""
    total = 0
    for target, box in mapping.items():
        (tr, tc), (br, bc) = divmod(target, cols), divmod(box, cols)
        total += abs(tr - br) + abs(tc - bc)
    return total


def _wander(state: list[int], structure: list[int], cols: int, probability: float, rng: random.Random) -> None:
    """ROLL's last touch: with ``probability`` the player walks 1-3 steps (never back)."""
    if rng.random() > probability:
        return
    player = state.index(PLAYER)
    visited = [player]
    steps = 0
    while steps < 3:
        options = [player + dr * cols + dc for dr, dc in _PULLS]
        options = [cell for cell in options if state[cell] in (FLOOR, TARGET) and cell not in visited]
        if not options:
            break
        step = rng.choice(options)
        state[player], state[step] = structure[player], PLAYER
        player = step
        visited.append(player)
        steps += 1
        if steps >= 3 or rng.random() > 0.5:
            break


def _xsb(state: list[int], structure: list[int], cols: int) -> list[str]:
    cells = []
    for cell, fixed in zip(state, structure):
        on_target = fixed == TARGET
        if cell == WALL:
            cells.append("#")
        elif cell == PLAYER:
            cells.append("+" if on_target else "@")
        elif cell == BOX:
            cells.append("*" if on_target else "$")
        else:
            cells.append("." if on_target else "_")
    return ["".join(cells[i:i + cols]) for i in range(0, len(cells), cols)]
