"""What a config or postconfig step's parameter value must be, checked as the task loads.

Each step module names its steps' parameters' kinds in a ``VALUES`` table beside its
``STEPS`` (``setup.VALUES`` joins them): a number of seconds, 0 or more, for a ``sleep``'s
``seconds`` and a wait's ``timeout``; a string for a path, a URL or a window's name; a
command as a string or a list of strings; a list of objects with string ``url`` and ``path``
for a ``download``'s ``files`` … A value of another kind failed only as the step ran, after
the VM was leased and the steps before it done (``float("abc")``, a number as a path), or
did what the task did not mean (an ``until``'s ``"returncode": "0"`` never equals the exit
status: the command ran again until its timeout). A kind's :meth:`problem` says what follows
``parameter 'NAME'`` in the refusal, the value as the task file writes it (JSON): ``is "30", a
string: give a number of seconds, 0 or more``, or, in a list of objects, ``[0] 'url' is 3, a
number: give a string``.

A number given as a string (``"seconds": "2"``) is refused too, though ``float()`` here would
read it: OSWorld's own controller hands it to ``time.sleep`` as is, which raises; its tasks
write numbers.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from typing import Any, Callable

from ...task_json import kind_of
from ..base import MAX_TIMEOUT_S
from .rule_keys import KINDS, flag_problem, unread_hint

__all__ = ["COMMAND", "FLAG", "NUMBER", "SECONDS", "TEXT", "TEXTS", "WHOLE", "Kind", "Objects", "one_of", "texts_of"]


def _shown(value: Any) -> str:
    """A value as a refusal quotes it: as the task file writes it, in JSON (``"5"``, ``["a"]``,
    ``true``), cut short, and its kind; null alone."""
    if value is None:
        return "null"
    text = json.dumps(value, ensure_ascii=False, default=str)
    return f"{text if len(text) <= 60 else text[:57] + '...'}, {kind_of(value)}"


@dataclass(frozen=True)
class Kind:
    """A parameter's value kind: its test and how the refusal names what to give."""

    test: Callable[[Any], bool]
    says: str

    def problem(self, value: Any) -> str | None:
        """None if ``value`` is of this kind, else what it is and what to give."""
        return None if self.test(value) else f"is {_shown(value)}: give {self.says}"


class _Flag:
    """A value read as a flag (``if shell:``), as Python reads it, in OSWorld too: a string
    other than "true" reads as true, as do a list or an object unless empty (``[false]``
    too) and a number other than 0; null reads as false (the step's default). Each of these
    but 0, 1 and null is surely not what its task meant."""

    says = "true or false"

    @staticmethod
    def problem(value: Any) -> str | None:
        said = flag_problem(value)
        if said:
            return f"is {said}"
        if isinstance(value, (list, dict)):
            return (f"is {_shown(value)}, which reads as {json.dumps(bool(value))} (a list or an object reads as "
                    "true unless empty, as in OSWorld): give true or false")
        if KINDS["number"][0](value) and value not in (0, 1):
            return (f"is {_shown(value)}, which reads as true (any number but 0 does, as in OSWorld): give true "
                    "or false")
        return None


@dataclass(frozen=True)
class Objects:
    """A list of objects (one object with ``one``), each holding the ``needs`` keys and maybe
    the ``optional`` ones, each of its kind; other keys are not read, or, ``closed``, refused
    (a googledrive delete's ``"qurey"`` deleted every file of the Drive). ``one`` takes null
    (no object, the parameter's default)."""

    needs: dict[str, Any]
    optional: dict[str, Any] = field(default_factory=dict)
    one: bool = False
    closed: bool = False

    @property
    def says(self) -> str:
        return self._object if self.one else f"a list of objects, each with {self._keys}"

    @property
    def _keys(self) -> str:
        return _listed(list(self.needs or self.optional), "and" if self.needs else "or")

    @property
    def _object(self) -> str:
        return f"an object with {self._keys}"

    def problem(self, value: Any) -> str | None:
        """None if ``value`` holds such objects, else the first wrong one, by its place."""
        if self.one:
            return None if value is None else self.item_problem(value, "")
        if not isinstance(value, list):
            return f"is {_shown(value)}: give {self.says}"
        return next((problem for place, item in enumerate(value)
                     if (problem := self.item_problem(item, f"[{place}] "))), None)

    def item_problem(self, item: Any, place: str) -> str | None:
        """What is wrong with one object, after ``place`` (``"[2] "``, or "" for ``one``)."""
        if not isinstance(item, dict):
            return f"{place}is {_shown(item)}: give {self._object}"
        known = [*self.needs, *self.optional]
        unread = next((key for key in item if key not in known), None) if self.closed else None
        if unread is not None:
            return f"{place}has the key {unread!r}, which is not read ({unread_hint(unread, known)})"
        for key, kind in {**self.needs, **self.optional}.items():
            if key not in item:
                if key in self.needs:
                    return f"{place}needs the key {key!r}"
                continue
            problem = kind.problem(item[key])
            if problem:
                return f"{place}{key!r} {problem}"
        return None


def _listed(names: list[str], joined: str = "or") -> str:
    """``'a', 'b' or 'c'``."""
    quoted = list(map(repr, names))
    return f"{', '.join(quoted[:-1])} {joined} {quoted[-1]}" if len(quoted) > 1 else "".join(quoted)


def _number(value: Any) -> bool:
    """A finite number: an integer past a float's range (JSON's 1 and 400 zeros) is none, as
    ``float()``, ``time.sleep`` and a timeout read it (OverflowError), not a crash of the load."""
    try:
        return KINDS["number"][0](value) and math.isfinite(value)
    except OverflowError:
        return False


def _texts(value: Any) -> bool:
    return isinstance(value, list) and all(isinstance(text, str) for text in value)


def one_of(*names: str) -> Kind:
    """A string that is one of ``names`` (the values the step's code knows)."""
    said = _listed(list(names))
    return Kind(lambda value: isinstance(value, str) and value in names, said if len(names) == 1 else f"one of {said}")


def texts_of(*names: str) -> Kind:
    """A list of strings, each one of ``names``."""
    return Kind(lambda value: _texts(value) and all(text in names for text in value),
                f"a list of {_listed(list(names))}")


TEXT = Kind(*KINDS["string"])
WHOLE = Kind(*KINDS["integer"])
TEXTS = Kind(_texts, "a list of strings")
NUMBER = Kind(_number, "a number")
#: a wait's seconds: one past what a thread's wait takes (``MAX_TIMEOUT_S``, about 292 years: a
#: sleep step's 1e300) raised OverflowError as the step or the getter ran
SECONDS = Kind(lambda value: _number(value) and 0 <= value <= MAX_TIMEOUT_S,
               f"a number of seconds, 0 or more (at most {MAX_TIMEOUT_S}, about 292 years)")
#: a command as the guest runs it: a shell line, or the program and its arguments
COMMAND = Kind(lambda value: isinstance(value, str) and bool(value.strip()) or _texts(value) and bool(value),
               "a command: a string, or a list of strings (the program and its arguments)")
FLAG = _Flag()
