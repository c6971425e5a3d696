"""The ``py`` mode's answer process: runs the answer's program and calls its function as the
judge (``py_judge.py``) asks, over two pipes, one JSON line each way. Not imported: the judge
starts it as ``python3 -c`` this file's text (``CHILD``, which ``envs/py.py`` sets before the
judge's text), with the two pipes' fds as its arguments. Everything here is the answer's to
change: nothing it sends is trusted by the judge, which reads it as plain data.
"""
import builtins, decimal, fractions, json, numbers, os, sys, traceback
#: id -> where in the arguments, of each list, dict and set the call's arguments hold: what
#: the answer returns of them is sent as that place, so the tests get their own object back
REFS = {}
#: the iterators the answer returned (a generator, map, zip …): run on here as the tests ask
ITERS = []
def places(args, kwargs):
    found = {}
    def walk(x, path):
        if type(x) in (list, dict, set) or CODEC["owned"](x):
            if id(x) in found:
                return
            found[id(x)] = path
        if CODEC["owned"](x):
            for k, v in vars(x).items():
                walk(v, path + [{"attr": k}])
        elif type(x) in (list, tuple):
            for i, v in enumerate(x):
                walk(v, path + [i])
        elif type(x) is dict:
            for k, v in x.items():
                walk(v, path + [{"key": enc(k)}])
    for i, v in enumerate(args):
        walk(v, [i])
    for k, v in kwargs.items():
        walk(v, [k])
    return found
#: bits past which an int crosses as hex: its decimal text is past what a Python may convert
#: (int_max_str_digits, 640 digits at least), and hex is converted in linear time
BIG = 2000
#: py_codec.py's functions (its text is this process's third argument): collections as themselves
CODEC = {}
def enc(x, seen=None):
    """``seen``: id -> number of each list, dict and set met so far, in the order met: one met
    again is sent as {"a": its number}, so that what two places hold is one object there too"""
    seen = {} if seen is None else seen
    if x is None or isinstance(x, (bool, str)):
        return x
    if isinstance(x, int):
        return x if x.bit_length() <= BIG else {"x": format(int(x), "x")}
    if (type(x) in (list, dict, set) or CODEC["owned"](x)) and id(x) in REFS:
        return {"r": REFS[id(x)]}
    if isinstance(x, (list, dict, set)) or CODEC["owned"](x):
        if id(x) in seen:
            return {"a": seen[id(x)]}
        seen[id(x)] = len(seen)
    special = CODEC["collection"](x, lambda v: enc(v, seen))
    if special is not None:
        return {"o": special}
    if isinstance(x, float):
        return {"f": float.__repr__(x)}
    if isinstance(x, list):
        return [enc(v, seen) for v in x]
    if isinstance(x, tuple):
        return {"t": [enc(v, seen) for v in x]}
    if isinstance(x, (set, frozenset)):  # a frozenset as one: a set's items, a dict's key
        return {"z" if isinstance(x, frozenset) else "s": [enc(v, seen) for v in x]}
    if isinstance(x, dict):
        return {"d": [[enc(k, seen), enc(v, seen)] for k, v in x.items()]}
    if isinstance(x, bytes):
        return {"b": x.hex()}
    if isinstance(x, complex):
        return {"c": [float.__repr__(x.real), float.__repr__(x.imag)]}
    # numbers of other types, as their values (what == in the tests' own process compares):
    # numpy's scalars (np.int64 is no int, np.float64's repr is 'np.float64(2.5)'), Fraction,
    # Decimal; a numpy scalar of another kind (np.bool_, np.str_) by its Python value
    if isinstance(x, numbers.Integral):
        return enc(int(x))
    if isinstance(x, fractions.Fraction):
        return {"q": [enc(int(x.numerator)), enc(int(x.denominator))]}
    if isinstance(x, decimal.Decimal):
        return {"m": str(x)}
    if isinstance(x, numbers.Real):
        return {"f": float.__repr__(float(x))}
    if isinstance(x, numbers.Complex):
        return enc(complex(x))
    if type(x).__module__ == "numpy" and getattr(x, "ndim", None) == 0:
        return enc(x.item())
    if isinstance(x, range):
        return {"g": [enc(x.start), enc(x.stop), enc(x.step)]}
    for tag, view in (("k", {}.keys()), ("i", {}.items()), ("v", {}.values())):
        if isinstance(x, type(view)):
            return {tag: [enc(v, seen) for v in x]}
    if hasattr(type(x), "__next__") and hasattr(type(x), "__iter__"):
        ITERS.append(x)
        return {"n": len(ITERS) - 1}
    raise TypeError(f"a return value of type {type(x).__name__} cannot be checked")
def failed(exc):
    return {"error": traceback.format_exc(), "type": type(exc).__name__, "message": str(exc),
            "bases": [c.__name__ for c in type(exc).__mro__ if getattr(builtins, c.__name__, None) is c]}
def dec(x, made):  # made: each list, dict and set made so far, in order ({"a": n}: the n-th)
    fill = CODEC["filled"]
    if isinstance(x, list):
        return fill(made, [], lambda: [dec(v, made) for v in x])
    if not isinstance(x, dict):
        return x
    (tag, v), = x.items()
    if tag == "a": return made[v]
    if tag == "f": return float(v)
    if tag == "t": return tuple(dec(i, made) for i in v)
    if tag == "s": return fill(made, set(), lambda: [dec(i, made) for i in v])
    if tag == "z": return frozenset(dec(i, made) for i in v)
    if tag == "d": return fill(made, {}, lambda: [(dec(k, made), dec(w, made)) for k, w in v])
    if tag == "b": return bytes.fromhex(v)
    if tag == "x": return int(v, 16)
    if tag == "o": return CODEC["collection_of"](v, lambda i: dec(i, made), made)
    return complex(float(v[0]), float(v[1]))


def main():
    exec(compile(sys.argv[3], "py_codec.py", "exec"), CODEC)
    rpc_in = os.fdopen(int(sys.argv[1]), "r")
    rpc_out = os.fdopen(int(sys.argv[2]), "w")
    def send(message):
        rpc_out.write(json.dumps(message) + "\n"); rpc_out.flush()
    job = json.loads(rpc_in.readline())
    try:
        code = compile(job["program"], "solution.py", "exec")
    except (SyntaxError, ValueError, RecursionError, MemoryError) as exc:  # too deep to compile too
        send({"syntax_error": "".join(traceback.format_exception_only(type(exc), exc))}); sys.exit(0)
    namespace = {"__name__": "__solution__"}
    try:
        exec(code, namespace)
        function = namespace[job["entry_point"]]
        CODEC["CLASSES"].update((k, v) for k, v in namespace.items() if isinstance(v, type))
    except BaseException as exc:
        send({"error": traceback.format_exc(), "type": type(exc).__name__}); sys.exit(0)
    send({"ready": True})
    for line in rpc_in:
        call = json.loads(line)
        if "next" in call:  # one more item of an iterator the answer returned
            try:
                answer = {"value": enc(next(ITERS[call["next"]]))}
            except StopIteration:
                answer = {"stop": True}
            except BaseException as exc:
                answer = failed(exc)
            sys.stdout.flush(); sys.stderr.flush()
            send(answer)
            continue
        made = []  # the arguments' lists, dicts and sets: what two of them hold is one object here too
        args, kwargs = dec(call["args"], made), {k: dec(v, made) for k, v in call["kwargs"]}
        try:
            result = function(*args, **kwargs)
            REFS.update(places(args, kwargs))
            answer = {"value": enc(result)}
        except BaseException as exc:
            answer = failed(exc)
        finally:
            REFS.clear()
        try:  # the arguments as the call left them: what it changed in place, the tests see
            seen = {}
            after = [enc(args, seen), [[k, enc(v, seen)] for k, v in kwargs.items()]]
            if after != [call["args"], call["kwargs"]]:
                answer["args"], answer["kwargs"] = after
        except BaseException as exc:
            answer = {"error": traceback.format_exc(), "type": "TypeError",
                      "message": f"an argument the answer changed holds what cannot be checked: {exc}"}
        sys.stdout.flush(); sys.stderr.flush()
        send(answer)


if __name__ == "__main__":
    main()
