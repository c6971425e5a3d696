"""py mode: what an answer returns is compared as the tests' own process would compare it.

The answer runs in a process of its own and its return values cross to the judge as plain
data. A correct answer returning a number of another type must pass as HumanEval's check
(one process) passes it: numpy's integers (not ``int``), numpy 2's floats (a ``float`` whose
repr is ``np.float64(2.5)``), ``Fraction`` and ``Decimal`` (compared exactly: 1/3 is not
0.333…); and what a call changes in its arguments (a list sorted in place) is seen by the
tests in their own objects, as in one process. numpy is not in this guest's Python, so its two scalar kinds are stood in by classes
that behave as they do (an ``Integral`` that is no ``int``, a ``float`` with numpy 2's repr).
"""

from __future__ import annotations

import shutil

import pytest
from click.testing import CliRunner

from conftest import read_results, write_tasks
from parallel_rollout.cli import main

pytestmark = pytest.mark.skipif(shutil.which("bwrap") is None, reason="needs bubblewrap")

NUMPY_LIKE = '''
import numbers
class int64:
    """as numpy's: an integral number that is no int"""
    def __init__(self, v): self.v = v
    def __int__(self): return self.v
    def __index__(self): return self.v
    def __eq__(self, other): return self.v == other
    def __hash__(self): return hash(self.v)
numbers.Integral.register(int64)
class float64(float):
    """as numpy 2's: a float whose repr is no float literal"""
    def __repr__(self): return f"np.float64({float(self)})"
'''

#: (entry point, prompt's imports, solution body, the check) of correct answers
CASES = {
    "numpy_int": ("count", "", "    return int64(len(xs))\n",
                  "    assert candidate([1, 2, 3]) == 3\n    assert candidate([]) == 0\n"),
    "numpy_float": ("mean", "", "    return float64(sum(xs) / len(xs))\n",
                    "    assert abs(candidate([1, 2, 3, 4]) - 2.5) < 1e-9\n"),
    "fraction": ("mean", "from fractions import Fraction\n", "    return Fraction(sum(xs), len(xs))\n",
                 "    assert candidate([1, 1, 2]) == Fraction(4, 3)\n"
                 "    assert candidate([1, 1, 2]) != 4 / 3\n"),
    "decimal": ("total", "from decimal import Decimal\n", "    return sum(Decimal(x) for x in xs)\n",
                "    assert candidate(['0.1', '0.2']) == Decimal('0.3')\n"),
    # ints whose decimal text is past Python's int_max_str_digits (4300): returned, passed, in
    # a Fraction; a correct answer's process died sending 2**20000, graded 0 ("killed")
    "big_int": ("count", "from fractions import Fraction\n",
                "    return 2 ** len(xs) if isinstance(xs, list) else Fraction(xs + 1, 3 ** 9000)\n",
                "    assert candidate([0] * 20000) == 2 ** 20000\n"
                "    assert candidate(10 ** 5000) == Fraction(10 ** 5000 + 1, 3 ** 9000)\n"),
    # frozensets, which a set holds and a dict is keyed by: they crossed as sets, unhashable
    # there, and a correct answer was graded 0 (its process died of a TypeError)
    "frozensets": ("count", "", "    return {frozenset(g) for g in xs}, {frozenset(g): len(g) for g in xs}\n",
                   "    groups, sizes = candidate([[1, 2], [3]])\n"
                   "    assert groups == {frozenset({1, 2}), frozenset({3})} and sizes[frozenset({3})] == 1\n"
                   "    assert candidate({frozenset({4})})[0] == {frozenset({4})}\n"),
    # what the answer raises, caught as in one process: its own ValueError, json's (a
    # ValueError too), the prompt's own class; they reached the tests as RuntimeError
    "own_exceptions": ("count", "import json\n",
                       "    class Negative(ValueError):\n        pass\n"
                       "    if xs is None:\n        raise InvalidInput('none')\n"
                       "    if isinstance(xs, str):\n        json.loads(xs)\n"
                       "    if xs < 0:\n        raise Negative('negative')\n    return xs\n",
                       "    for bad, error in ((-1, ValueError), ('{', ValueError), (None, InvalidInput)):\n"
                       "        try:\n            candidate(bad)\n        except error:\n            pass\n"
                       "        else:\n            assert False, bad\n"
                       "    assert candidate(2) == 2\n"),
    # an iterator (a generator, endless too; a map), a range, a dict's keys: what the tests
    # make of them (list, islice, sorted, ==) is what one process makes; "cannot be checked"
    "iterators": ("squares", "import itertools\n",
                  "    if xs == 'endless':\n        return (k * k for k in itertools.count())\n"
                  "    if xs == 'range':\n        return range(1, 10, 2)\n"
                  "    if xs == 'keys':\n        return {'a': 1, 'b': 2}.keys()\n    return map(str, xs)\n",
                  "    assert list(itertools.islice(candidate('endless'), 4)) == [0, 1, 4, 9]\n"
                  "    assert sorted(candidate([2, 1])) == ['1', '2'] and candidate([1]) != ['1']\n"
                  "    assert candidate('range') == range(1, 10, 2) and len(candidate('range')) == 5\n"
                  "    assert candidate('keys') == {'a', 'b'}\n"),
    # the standard library's collections as themselves, both ways: a Counter (its missing key
    # is 0, most_common), an OrderedDict (its order: it arrived empty), a defaultdict, a deque, a
    # named tuple; a Counter, an OrderedDict and a deque the call changed in place
    "collections": ("tally", "from collections import Counter, OrderedDict, defaultdict, deque, namedtuple\n",
                    "    if isinstance(xs, Counter):\n        xs['z'] += 1\n        return xs.most_common(1)\n"
                    "    if isinstance(xs, OrderedDict):\n        xs.move_to_end('a')\n        return OrderedDict(xs)\n"
                    "    if isinstance(xs, deque):\n        xs.appendleft(0)\n        return None\n"
                    "    P = namedtuple('P', 'x y')\n    groups = defaultdict(list)\n    groups[0].append(1)\n"
                    "    return Counter(xs), groups, deque(xs, 2), P(1, 2)\n",
                    "    counts, groups, last, p = candidate('abca')\n"
                    "    assert counts['q'] == 0 and counts.most_common(1) == [('a', 2)]\n"
                    "    assert groups[5] == [] and list(last) == ['c', 'a'] and p.y == 2 and p == (1, 2)\n"
                    "    c = Counter('zz')\n    assert candidate(c) == [('z', 3)] and c['z'] == 3\n"
                    "    o, d = OrderedDict(a=1, b=2), deque([1])\n"
                    "    assert candidate(o) == OrderedDict(b=2, a=1) and list(o) == ['b', 'a']\n"
                    "    assert candidate(d) is None and d == deque([0, 1])\n"),
    # objects of the prompt's classes, both ways: a tree changed in place, a dataclass, an Enum's
    # member, a node of a cycle (returned: the tests' own); they "cannot cross", every answer 0
    "prompt_classes": ("mirror", "", "    if isinstance(xs, Node):\n        for kid in xs.kids:\n"
                       "            kid.val *= 10\n        return xs.kids[0].next\n"
                       "    if isinstance(xs, Color):\n        return Color.BLUE\n    return Point(xs.y, xs.x)\n",
                       "    a, b = Node(1), Node(2)\n    a.next, b.next = b, a\n    root = Node(0, [a, b])\n"
                       "    assert candidate(root) is b and (a.val, b.val) == (10, 20) and b.next is a\n"
                       "    assert candidate(Point(1, 2)) == Point(2, 1) and candidate(Color.RED) is Color.BLUE\n"),
    # what a call changes in its arguments, the tests see in their own objects
    "sort_in_place": ("sort_rows", "", "    for row in xs:\n        row.sort()\n    xs.append([])\n",
                      "    xs = [[3, 1], [2, 0]]\n    first = xs[0]\n    assert candidate(xs) is None\n"
                      "    assert xs == [[1, 3], [0, 2], []] and first == [1, 3]\n"),
    # one list the tests hold in two places is one object to the answer too: a row sorted
    # through one place is sorted in both (as two copies the second's sync undid it)
    "one_row_twice": ("sort_rows", "", "    xs[0].sort()\n    return xs[1]\n",
                      "    row = [3, 1]\n    xs = [row, row]\n    assert candidate(xs) == [1, 3]\n"
                      "    assert row == [1, 3] and xs[1] is row\n"),
    "returns_its_argument": ("sort_rows", "", "    xs.sort()\n    return xs\n",
                             "    xs = [[2], [1]]\n    assert candidate(xs) is xs and xs == [[1], [2]]\n"
                             "    assert candidate([xs])[0] is xs\n"),
    "fill_a_dict": ("count", "", "    xs['n'] = len(xs)\n    xs.pop('gone')\n",
                    "    xs = {'gone': 1, 'a': [2]}\n    candidate(xs)\n    assert xs == {'a': [2], 'n': 2}\n"),
}


#: what a case's prompt defines besides (its tests do not)
PROMPT_DEFINES = {"own_exceptions": "class InvalidInput(Exception):\n    pass\n",
                  "prompt_classes": "import dataclasses, enum\nclass Node:\n    def __init__(self, val, kids=()):\n"
                                    "        self.val, self.kids, self.next = val, list(kids), None\n"
                                    "@dataclasses.dataclass\nclass Point:\n    x: int\n    y: int\n"
                                    "class Color(enum.Enum):\n    RED = 1\n    BLUE = 2\n"}


def _task(name: str) -> dict:
    entry, imports, body, check = CASES[name]
    prompt = f"{imports}{NUMPY_LIKE}{PROMPT_DEFINES.get(name, '')}\ndef {entry}(xs):\n    \"\"\"...\"\"\"\n"
    return {"id": name, "mode": "py", "prompt": prompt, "entry_point": entry,
            "test": f"{imports}def check(candidate):\n{check}", "canonical_solution": body}


def test_an_answer_returning_numpy_fraction_or_decimal_numbers_passes_as_in_one_process(tmp_path):
    data = write_tasks(tmp_path / "values.jsonl", [_task(name) for name in CASES])
    out = tmp_path / "out"
    result = CliRunner().invoke(main, ["run", "--mode", "py", "--data", str(data), "--agent", "oracle",
                                       "--num-rollouts", "2", "--num-vms", "1", "--use-vm-pool",
                                       "--output-dir", str(out), "--run-id", "values", "--no-progress"])
    records = {r["task_id"]: r for r in read_results(out / "values")}
    assert set(records) == set(CASES), result.output
    failed = {name: (r["status"], r.get("eval"))
              for name, r in records.items() if r["reward"] != 1}
    assert not failed, failed
    assert result.exit_code == 0, result.output


def test_a_wrong_fraction_still_fails_exactly(tmp_path):
    wrong = dict(_task("fraction"), canonical_solution="    return sum(xs) / len(xs)\n")
    data = write_tasks(tmp_path / "wrong.jsonl", [wrong])
    out = tmp_path / "out"
    CliRunner().invoke(main, ["run", "--mode", "py", "--data", str(data), "--agent", "oracle",
                              "--num-rollouts", "1", "--num-vms", "1", "--use-vm-pool",
                              "--output-dir", str(out), "--run-id", "wrong", "--no-progress"])
    (record,) = read_results(out / "wrong")
    assert record["reward"] == 0 and record["eval"]["kind"] == "assertion", record["eval"]
