"""The ``py`` mode's judge: runs inside the VM, calls the answer in another process, prints
the verdict. Not imported on the host: ``envs/py.py`` sends this file's text, after the
task's ``PROGRAM``, ``TESTS``, ``ENTRY_POINT`` and ``PROMPT`` and the text of the answer's
process (``CHILD``: ``py_answer.py``), to ``/run_python``.

::

    judge (this process: the task's tests, check(candidate))
      │  calls: {"args": [...]} ──pipe──►  answer process (the program, exec'd)
      │  ◄──pipe── {"value": ...} | {"error": traceback}, + the arguments it changed
      │  ◄──pipe── the answer's stdout and stderr (kept for the output tail)
      ▼
    stdout: ONE JSON verdict {"kind", "detail", "output", "returncode"} (what the tests print
            goes to the output tail: fd 1 is that pipe while they run)

Why two processes: a verdict printed by the process that runs the answer can be printed by
the answer too (a fixed marker on stdout, a write to fd 1, a forged exit code). Here the
answer's process has no handle on the judge's stdout: its own stdout and stderr are a pipe
the judge reads, and the judge is not dumpable, so ``/proc/<judge>/fd``, ``/proc/<judge>/mem``
and ptrace are closed to a process of the same user. What the answer can still do is return
values, and those cross as plain data (JSON of None, bools, numbers, strings, lists, tuples,
sets, dicts, bytes; numpy's scalars, ``Fraction`` and ``Decimal`` as their values): an object
whose ``__eq__`` always says yes cannot cross. What a call changes in its arguments (a
list sorted in place, a dict filled) comes back with its answer and is made in the tests'
own objects (``_sync``), as one process would have left them: a test that an answer leaves
its input alone, or fills it, checks it here too; and a list, dict or set of the arguments
that the answer returns is the tests' own object (``candidate(x) is x``), not a copy. What the
answer raises reaches the tests as the builtin exception it names (or derives from: ``_raised``), but StopIteration (and
StopAsyncIteration) as a RuntimeError, as PEP 479 makes it out of a generator: it would end an
iteration of the tests' (``all(map(...))``) early, a pass for an answer that answers nothing. Killing the
judge leaves no verdict, which the host grades ``killed``. The answer's process is a fresh
interpreter, not a fork: it never holds the tests, and this script, which does, is no file
it could read: the agent hands it over as a sealed memfd (``/proc/self/fd/N``, which the
answer's process does not inherit), or, where memfds are missing, a temp file unlinked
before the answer starts.
"""
import builtins, collections, ctypes, decimal, fractions, json, os, subprocess, sys, threading, traceback

TAIL = 2000
#: seconds the answer's process may take to end once the tests are done (then it is killed)
GRACE_S = 1.0


class ChildDied(BaseException):
    """The answer's process ended on its own (os._exit, a signal, a memory limit). No
    Exception, which tests expecting an error catch (``except Exception: return``): an answer
    that ended its process there passed them, as the one that raises does."""


#: bits past which an int crosses as hex (``BIG`` of the answer's process): a bigger one's
#: decimal text is past what Python converts (int_max_str_digits), and a correct answer
#: returning 2**20000 died in its process, or a test passing 10**5000 raised, graded 0
_BIG = 2000


def _int(x):
    """An int the answer's process sent: a JSON number, or ``{"x": hex}`` when big."""
    if isinstance(x, dict) and len(x) == 1 and isinstance(x.get("x"), str):
        return int(x["x"], 16)
    if type(x) is not int:
        raise ValueError("the answer's process sent a number that is no integer")
    return x


#: py_codec.py's functions, run from its text (``CODEC``) by main(): collections as themselves
_CODEC = {}


def _enc(x, seen):
    """``x`` as JSON for the answer's process; ``seen``: id -> number of each list, dict and
    set met so far in the call's arguments, in the order met: one the tests pass twice
    (``candidate(xs, xs)``) is sent again as ``{"a": number}`` and is one object there too
    (as two copies, the answer's change through one was undone by the other's sync)."""
    if x is None or isinstance(x, (bool, str)):
        return x
    if isinstance(x, int):
        return x if x.bit_length() <= _BIG else {"x": format(int(x), "x")}
    if isinstance(x, (list, dict, set)) or _CODEC["owned"](x):
        if id(x) in seen:
            return {"a": seen[id(x)]}
        seen[id(x)] = len(seen)
    special = _CODEC["collection"](x, lambda v: _enc(v, seen))
    if special is not None:
        return {"o": special}
    if isinstance(x, float):
        return {"f": repr(x)}
    if isinstance(x, list):
        return [_enc(v, seen) for v in x]
    if isinstance(x, tuple):
        return {"t": [_enc(v, seen) for v in x]}
    if isinstance(x, (set, frozenset)):  # a frozenset as one (a set of them, a dict's key)
        return {"z" if isinstance(x, frozenset) else "s": [_enc(v, seen) for v in x]}
    if isinstance(x, dict):
        return {"d": [[_enc(k, seen), _enc(v, seen)] for k, v in x.items()]}
    if isinstance(x, bytes):
        return {"b": x.hex()}
    if isinstance(x, complex):
        return {"c": [repr(x.real), repr(x.imag)]}
    raise TypeError(f"the tests pass a {type(x).__name__}, which cannot cross to the answer")


#: set by main(): an iterator's handle -> its next item, StopIteration at its end
_step = []


def _remote(handle):
    """An iterator the answer returned (a generator, map, zip …), left in its process: each
    item is made there as the tests ask for it, as in their own process (``list(candidate())``,
    ``islice(candidate(), 5)`` of an endless one); it was "cannot be checked", a 0."""
    while True:
        try:
            item = _step[0](handle)
        except StopIteration:
            return
        yield item


def _dec(x, place=None, made=None):
    """A value the answer's process sent; ``place``: what its ``{"r": path}`` (one of the
    arguments the tests passed, or what they hold) is, for a return value; ``made``: its
    lists, dicts and sets so far, which ``{"a": n}`` names again (see ``_enc``)."""
    made, _made = [] if made is None else made, _CODEC["filled"]
    if isinstance(x, list):
        return _made(made, [], lambda: [_dec(v, place, made) for v in x])
    if not isinstance(x, dict) or len(x) != 1:
        return x
    (tag, v), = x.items()
    if tag == "r" and place is not None: return place(v)
    if tag == "a": return made[_int(v)]
    if tag == "f": return float(v)
    if tag == "t": return tuple(_dec(i, place, made) for i in v)
    if tag == "s": return _made(made, set(), lambda: [_dec(i, place, made) for i in v])
    if tag == "z": return frozenset(_dec(i, place, made) for i in v)
    if tag == "d": return _made(made, {}, lambda: [(_dec(k, place, made), _dec(w, place, made)) for k, w in v])
    if tag == "b": return bytes.fromhex(v)
    if tag == "c": return complex(float(v[0]), float(v[1]))
    if tag == "x": return _int(x)
    if tag == "q": return fractions.Fraction(_int(v[0]), _int(v[1]))
    if tag == "m": return decimal.Decimal(str(v))
    if tag == "n": return _remote(v)
    if tag == "o": return _CODEC["collection_of"](v, lambda i: _dec(i, place, made), made)
    if tag == "g": return range(*(_int(i) for i in v))  # a range, a dict's views: as they were
    if tag == "k": return dict.fromkeys(_dec(i, place, made) for i in v).keys()
    if tag == "i": return dict(_dec(i, place, made) for i in v).items()
    if tag == "v": return dict(enumerate(_dec(i, place, made) for i in v)).values()
    raise ValueError(f"unknown value tag {tag!r}")


def _catchable(kind):
    """Whether the tests may see ``kind`` raised by a call: an Exception, but StopIteration
    (and its async kin) no more than PEP 479 lets one out of a generator: raised in a call
    that map() or iter(f, end) makes, it would end the tests' iteration early (all(map(...))
    passed every answer); nor SystemExit, KeyboardInterrupt (no Exception)."""
    return isinstance(kind, type) and issubclass(kind, Exception) \
        and not issubclass(kind, (StopIteration, StopAsyncIteration))


def _raised(answer, prompt_errors):
    """The exception an answer's call raised, as the tests catch it in one process: the builtin
    of its name; the prompt's class of its name (``except InvalidInput``); else a class of its
    name on the nearest builtin it derives from (an answer's own ``class Negative(ValueError)``,
    json's JSONDecodeError: ``except ValueError`` catches it; it was a RuntimeError, and a
    correct answer failed); RuntimeError when that is not :func:`_catchable`."""
    name, message = str(answer.get("type")), answer.get("message", "")
    bases = answer.get("bases") if isinstance(answer.get("bases"), list) else []
    kind = getattr(builtins, name, None)
    if not isinstance(kind, type):
        kind = prompt_errors.get(name)
    if kind is None:
        base = next((k for k in (getattr(builtins, str(b), None) for b in bases)
                     if isinstance(k, type) and issubclass(k, BaseException)), None)
        if _catchable(base):
            try:
                kind = type(name, (base,), {"__module__": "__solution__"})
            except Exception:
                kind = base
    if not _catchable(kind):
        kind = RuntimeError
    try:
        return kind(message)
    except Exception:
        return RuntimeError(message)


def _sync(old, new, done=None):
    """Make ``old`` (a value the tests passed) hold ``new`` (it, as the answer's call left
    it), keeping the tests' objects (a list, a dict, a set, what a tuple holds) as the tests
    hold them: a list's items by place, a dict's by key (identity does not cross: an item the
    call moved within a list is seen where it went by value, not as the object the tests
    hold); an object of the prompt's classes by its attributes. True when ``old`` is such a
    container of ``new``'s kind. ``done``: the pairs synced so far (a linked list's cycle)."""
    done = set() if done is None else done
    if old is new or (id(old), id(new)) in done:
        return True
    done.add((id(old), id(new)))
    if _CODEC["owned"](old) and type(new) is type(old):
        return _sync(vars(old), vars(new), done)
    if type(old) is list and type(new) is list:
        kept = min(len(old), len(new))  # by place: an item the tests hold keeps its place
        for index, item in enumerate(new[:kept]):
            if not _sync(old[index], item, done):
                old[index] = item
        old[kept:] = new[kept:]
        return True
    if isinstance(old, dict) and type(new) is type(old):  # an OrderedDict, a Counter too
        merged = {key: old[key] if key in old and _sync(old[key], item, done) else item
                  for key, item in new.items()}
        old.clear()
        _CODEC["set_items"](old, merged.items())  # in the order the call left
        return True
    if type(old) in (set, collections.deque) and type(new) is type(old):
        old.clear()
        (old.update if type(old) is set else old.extend)(new)
        return True
    if type(old) is tuple and type(new) is tuple and len(old) == len(new):
        for item, changed in zip(old, new):
            _sync(item, changed, done)  # a tuple stays: what it holds may have changed
        return True
    return False


def main():
    # set by the preamble envs/py.py writes before this file's text
    task = globals()
    PROGRAM, TESTS, ENTRY_POINT, PROMPT, CHILD, CODEC = (task[name] for name in (
        "PROGRAM", "TESTS", "ENTRY_POINT", "PROMPT", "CHILD", "CODEC"))
    exec(compile(CODEC, "py_codec.py", "exec"), _CODEC)
    # This script holds the tests: a temp file (no memfd in this guest) is gone before the
    # answer's process starts, so it cannot read them (a memfd's path fails here, harmlessly).
    try:
        os.unlink(sys.argv[0])
    except OSError:
        pass
    # Not dumpable: a process of the same user cannot open /proc/<judge>/fd or /mem, or
    # trace the judge (PR_SET_DUMPABLE = 4).
    try:
        ctypes.CDLL(None).prctl(4, 0, 0, 0, 0)
    except Exception:
        pass
    calls_r, calls_w = os.pipe()
    answers_r, answers_w = os.pipe()
    output_r, output_w = os.pipe()
    child = subprocess.Popen([sys.executable, "-c", CHILD, str(calls_r), str(answers_w), CODEC],
                             stdin=subprocess.DEVNULL, stdout=output_w, stderr=output_w,
                             pass_fds=(calls_r, answers_w))
    # the verdict's channel is the judge's own: what the tests print (a value the answer
    # returned, which it could make a passing verdict, then kill the judge before its own) goes
    # to the output tail with the answer's; an honest test's print made the verdict unreadable
    verdict_out = os.dup(1)
    os.dup2(output_w, 1)
    for fd in (calls_r, answers_w, output_w):
        os.close(fd)
    output = bytearray()

    def drain():
        while True:
            chunk = os.read(output_r, 65536)
            if not chunk:
                return
            output.extend(chunk)
            del output[:-4 * TAIL]

    reader = threading.Thread(target=drain, daemon=True)
    reader.start()
    calls = os.fdopen(calls_w, "w")
    answers = os.fdopen(answers_r, "r")
    died = []

    def exchange(message):
        try:
            calls.write(json.dumps(message) + "\n")
            calls.flush()
        except BrokenPipeError:
            pass
        line = answers.readline()
        if not line:
            died.append(True)  # killed, whatever the tests then catch (a bare except too)
            raise ChildDied()
        try:
            return json.loads(line)
        except ValueError:
            raise ValueError("the answer's process sent an unreadable reply") from None

    def candidate(*args, **kwargs):
        seen = {}
        answer = exchange({"args": _enc(list(args), seen),
                           "kwargs": [[k, _enc(v, seen)] for k, v in kwargs.items()]})
        # what the call changed in its arguments (a list sorted in place, a dict filled),
        # made in the tests' own objects, as a call in their process would have left them
        made = []
        for old, new in zip(args, _dec(answer.get("args") or [], None, made)):
            _sync(old, new)
        for name, new in answer.get("kwargs") or []:
            new = _dec(new, None, made)
            if name in kwargs:
                _sync(kwargs[name], new)
        def place(path):  # the object of the tests' arguments the answer returned (is)
            found = args[path[0]] if isinstance(path[0], int) else kwargs[path[0]]
            for step in path[1:]:
                found = found[step] if isinstance(step, int) else vars(found)[str(step["attr"])] \
                    if "attr" in step and _CODEC["owned"](found) else found[_dec(step["key"])]
            return found

        return reply(answer, place)

    def reply(answer, place=None):
        """What the answer's process answered: its value, or what it raised, raised here."""
        if "error" in answer:
            error = _raised(answer, prompt_errors)
            error.remote_traceback = answer["error"]
            raise error
        return _dec(answer["value"], place)

    def step(handle):
        answer = exchange({"next": handle})
        if answer.get("stop") is True:
            raise StopIteration
        return reply(answer)

    _step.append(step)
    candidate.__name__ = ENTRY_POINT
    prompt_errors = {}  # name -> an exception class the prompt defines (the program holds it too)
    verdict = None
    try:
        first = exchange({"program": PROGRAM, "entry_point": ENTRY_POINT})
        if "syntax_error" in first:
            verdict = ("syntax_error", first["syntax_error"])
        elif "error" in first:
            verdict = ("exception", first["error"])
        else:
            namespace = {"__name__": "__tests__"}
            try:
                exec(compile(PROMPT, "prompt.py", "exec"), namespace)
            except BaseException:
                namespace = {"__name__": "__tests__"}  # the tests may not need it
            prompt_errors.update((name, value) for name, value in namespace.items()
                                 if isinstance(value, type) and issubclass(value, Exception))
            _CODEC["CLASSES"].update((name, value) for name, value in namespace.items()
                                     if isinstance(value, type))  # the prompt's, not the tests'

            namespace[ENTRY_POINT] = candidate
            exec(compile(TESTS, "tests.py", "exec"), namespace)
            namespace["check"](candidate)
            verdict = ("passed", "")
    except ChildDied:
        pass
    except AssertionError:
        verdict = ("assertion", traceback.format_exc())
    except BaseException as exc:
        detail = getattr(exc, "remote_traceback", None) or traceback.format_exc()
        verdict = ("exception", detail)
    try:
        calls.close()
    except OSError:
        pass
    try:  # the tests' prints into the tail, then their pipe closed here: the reader's end is the answer's
        sys.stdout.flush()
    except (OSError, ValueError):
        pass
    null = os.open(os.devnull, os.O_WRONLY)
    os.dup2(null, 1)
    os.close(null)
    # the verdict is known: what the answer left running (a thread that never ends, a process
    # holding its output) gets a moment, not 5 s twice, which a task's timeout ran out in and
    # a passed answer was graded timeout
    try:
        code = child.wait(timeout=GRACE_S)
    except subprocess.TimeoutExpired:
        child.kill()
        code = child.wait()
    reader.join(timeout=GRACE_S)
    if verdict is None or died:
        verdict = ("killed", f"exit status {code}")
    text = output.decode("utf-8", "replace")[-TAIL:]
    with os.fdopen(verdict_out, "w") as out:
        out.write(json.dumps({"kind": verdict[0], "detail": verdict[1][-TAIL:],
                              "output": text, "returncode": code}))
    os._exit(0)


if __name__ == "__main__":
    main()
