"""What the ``py`` judge (``py_judge.py``) and the answer's process (``py_answer.py``) both
use to pass values, run in each of them from this file's text (``CODEC``, which ``envs/py.py``
sets before the judge's text and the judge hands to the answer's process): the standard
library's collections as themselves, not as the plain dict, tuple or list they hold.

A ``Counter`` crossed as a dict (``c['missing']`` raised, ``most_common`` was missing), an
``OrderedDict`` as a dict (its ``==`` ignored order: an answer in the wrong order passed a
test of an ``OrderedDict``), a ``deque`` not at all ("cannot be checked"), a named tuple as
a tuple (``p.x`` raised). Each is sent as ``{"o": [kind, extra, items]}``: a ``defaultdict``'s
``default_factory`` when it is a builtin type (``int``, ``list`` …), a ``deque``'s
``maxlen``, a named tuple's name and fields.
"""
import builtins
import collections

#: the default factories of a defaultdict that cross (by name): builtin types
FACTORIES = frozenset({"int", "float", "complex", "str", "bytes", "bool", "list", "dict", "set",
                       "frozenset", "tuple"})
#: the dict kinds of ``collections``, by name
DICTS = {"OrderedDict": collections.OrderedDict, "Counter": collections.Counter,
         "defaultdict": collections.defaultdict}


def filled(made, empty, items):
    """``empty`` (a list, dict or set) numbered in ``made`` before what it holds is made, as
    the sender numbered it, then filled with ``items()``; returned."""
    made.append(empty)
    fill = list.extend if isinstance(empty, list) else dict.update if isinstance(empty, dict) else set.update
    fill(empty, items())
    return empty


def collection(x, one):
    """``[kind, extra, items]`` of ``x`` when it is one of those collections (``one`` encodes
    what it holds), else None."""
    kind = type(x)
    fields = getattr(kind, "_fields", None)  # a named tuple's (public, despite its underscore)
    if isinstance(x, tuple) and kind is not tuple and isinstance(fields, tuple):
        return ["namedtuple", [kind.__name__, [str(f) for f in fields]], [one(v) for v in x]]
    if kind.__module__ != "collections":
        return None
    if kind is collections.deque:
        return ["deque", x.maxlen, [one(v) for v in x]]
    if DICTS.get(kind.__name__) is kind:
        factory = getattr(getattr(x, "default_factory", None), "__name__", None)
        return [kind.__name__, factory if factory in FACTORIES else None,
                [[one(k), one(v)] for k, v in x.items()]]
    return None


def collection_of(v, one, made):
    """The collection ``[kind, extra, items]`` names (``one`` decodes what it holds; a dict
    is numbered in ``made``, see :func:`filled`)."""
    kind, extra, items = v
    if kind == "namedtuple":
        return collections.namedtuple(str(extra[0]), [str(f) for f in extra[1]])(*[one(i) for i in items])
    if kind == "deque":
        return collections.deque([one(i) for i in items], extra if type(extra) is int else None)
    factory = getattr(builtins, extra) if extra in FACTORIES else None
    empty = collections.defaultdict(factory) if kind == "defaultdict" else DICTS[kind]()
    return filled(made, empty, lambda: [(one(k), one(w)) for k, w in items])
