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

And an object of a class the task's prompt defines (a ``TreeNode``, a ``ListNode``, a
dataclass; an ``Enum``'s member) as that class's object (``{"o": ["object", name, its
attributes]}``, ``["enum", name, member]``): the tests passed one and "cannot cross" failed
every answer. Only a class of :data:`CLASSES` (in the judge: what the prompt defines, never
the tests; in the answer's process: its program's, which holds the prompt) and only its
attributes: the answer's process sends data, which the class's own code then reads.
"""
import builtins
import collections
import enum

#: the default factories of a defaultdict that cross (by name): builtin types
FACTORIES = frozenset({"int", "float", "complex", "str", "bytes", "bool", "list", "dict", "set",
                       "frozenset", "tuple"})
#: the dict kinds of ``collections``, by name
DICTS = {"OrderedDict": collections.OrderedDict, "Counter": collections.Counter,
         "defaultdict": collections.defaultdict}
#: name -> class, of the classes whose objects cross as themselves (set by each side)
CLASSES = {}


def owned(x):
    """Whether ``x`` is an object of one of :data:`CLASSES` (and of no other class but object)
    that crosses by its attributes (numbered, and kept where the tests passed it, as a list)."""
    return hasattr(x, "__dict__") and all(c is object or CLASSES.get(c.__name__) is c for c in type(x).__mro__)


def filled(made, empty, items):
    """``empty`` (a list, dict or set) numbered in ``made`` before what it holds is made, as
    the sender numbered it, then filled with ``items()``; returned."""
    made.append(empty)
    if isinstance(empty, dict):
        set_items(empty, items())
    else:
        (list.extend if isinstance(empty, list) else set.update)(empty, items())
    return empty


def set_items(mapping, items):
    """``mapping``'s keys set to ``items``' values, one by one: not ``dict.update`` (an
    OrderedDict keeps its order apart: it looked empty) nor ``Counter.update`` (which adds)."""
    for key, value in items:
        mapping[key] = value


def collection(x, one):
    """``[kind, extra, items]`` of ``x`` when it is one of those collections (``one`` encodes
    what it holds), else None."""
    kind = type(x)
    if owned(x):
        return ["object", kind.__name__, [[k, one(v)] for k, v in vars(x).items()]]
    if isinstance(x, enum.Enum) and CLASSES.get(kind.__name__) is kind:
        return ["enum", kind.__name__, x.name]
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
    if kind in ("object", "enum"):
        cls = CLASSES[str(extra)]
        if kind == "enum":
            if not issubclass(cls, enum.Enum):
                raise TypeError(f"{cls.__name__} is no Enum")
            return cls[str(items)]
        made.append(object.__new__(cls))
        obj = made[-1]
        if not owned(obj):
            raise TypeError(f"an object of {cls.__name__} cannot cross")
        vars(obj).update((str(k), one(w)) for k, w in items)
        return obj
    if kind == "namedtuple":
        return collections.namedtuple(str(extra[0]), [str(f) for f in extra[1]])(*[one(i) for i in items])
    if kind == "deque":
        return collections.deque([one(i) for i in items], extra if type(extra) is int else None)
    factory = getattr(builtins, extra) if extra in FACTORIES else None
    empty = collections.defaultdict(factory) if kind == "defaultdict" else DICTS[kind]()
    return filled(made, empty, lambda: [(one(k), one(w)) for k, w in items])
