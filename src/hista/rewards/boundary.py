"""The two sides of the ``python-tests`` verifier's trust boundary (SPEC §6), and the plain data
that crosses it.

The problem's test code is trusted (it comes from the dataset); the completion's code is not.
They never share a process: :func:`judge` runs the test code in one sandbox, where the function
under test is a :class:`Function` that forwards each call over a pipe; :func:`serve` runs the
completion's module in another sandbox and answers each call by calling the real function.
What crosses is plain data only, checked by :func:`decode` on arrival: values of exactly the
types None, bool, int, float, str, bytes, and lists, tuples, dicts, sets and frozensets of
them (an instance of a subclass, a cycle, nesting deeper than ``MAX_DEPTH`` or any other type is
refused), and an exception's class names and message. The judge raises an exception of the
nearest built-in class the completion's exception derives from, so a test that expects
``ValueError`` still passes; a reply that is not plain data, a process that ends or a call that
never returns ends the judge at once with a verdict no test code can catch.

This module is the source both sides run (the sandbox's interpreter, standard library only):
the verifier ships it with the call ``judge()`` or ``serve()`` appended. It imports nothing of
hista, so hista's own tests import it to check the encoding.
"""

import base64
import builtins
import json
import os
import sys

#: deepest nesting of containers a value may have
MAX_DEPTH = 100
#: longest message on the pipe, in bytes
MAX_MESSAGE = 16 * 1024 * 1024
#: longest exception message passed on, in characters
MAX_EXCEPTION_TEXT = 1000
#: ints beyond ±2**53 travel as hexadecimal text (exact, and linear to convert)
_EXACT = 2 ** 53
_TAGS = {list: "l", tuple: "t", set: "s", frozenset: "f"}
_TYPES = {tag: kind for kind, tag in _TAGS.items()}


class PlainDataError(ValueError):
    """A value that is not plain data (module docstring), or a message that does not decode."""


def encode(value, depth: int = 0, path: frozenset = frozenset()):
    """``value`` as JSON-ready data (module docstring): None, bools, strs and floats stay;
    ints beyond 2**53 become ``["I", hex]``, bytes ``["b", base64]``, containers
    ``[tag, *items]`` (dicts ``["d", key, value, ...]``). Raises PlainDataError naming the
    offending type."""
    kind = type(value)
    if value is None or kind in (bool, str, float):
        return value
    if kind is int:
        return value if -_EXACT < value < _EXACT else ["I", format(value, "x")]
    if kind is bytes:
        return ["b", base64.b64encode(value).decode("ascii")]
    if kind not in _TAGS and kind is not dict:
        raise PlainDataError(f"a {_name(kind)}")
    if depth >= MAX_DEPTH:
        raise PlainDataError(f"nesting deeper than {MAX_DEPTH}")
    if id(value) in path:
        raise PlainDataError(f"a {kind.__name__} that contains itself")
    path = path | {id(value)}
    if kind is dict:
        return ["d", *(encode(x, depth + 1, path) for item in value.items() for x in item)]
    return [_TAGS[kind], *(encode(x, depth + 1, path) for x in value)]


def _name(kind: type) -> str:
    module = getattr(kind, "__module__", "")
    name = str(getattr(kind, "__qualname__", "?"))[:60]
    return name if module == "builtins" else f"{name} ({str(module)[:40]})"


def decode(data, depth: int = 0):
    """The value :func:`encode` turned into ``data``; PlainDataError for anything else."""
    kind = type(data)
    if data is None or kind in (bool, str, float, int):
        return data
    if kind is not list or not data or type(data[0]) is not str:
        raise PlainDataError(f"unexpected {kind.__name__} in a message")
    if depth >= MAX_DEPTH:
        raise PlainDataError(f"nesting deeper than {MAX_DEPTH}")
    tag, items = data[0], data[1:]
    try:
        if tag == "I" and len(items) == 1 and type(items[0]) is str:
            return int(items[0], 16)
        if tag == "b" and len(items) == 1 and type(items[0]) is str:
            return base64.b64decode(items[0], validate=True)
        values = [decode(x, depth + 1) for x in items]
        if tag == "d" and len(values) % 2 == 0:
            return dict(zip(values[::2], values[1::2]))
        if tag in _TYPES:
            return _TYPES[tag](values)
    except (TypeError, ValueError) as exc:  # unhashable keys or members, bad digits
        raise PlainDataError(f"a {tag!r} item does not decode: {type(exc).__name__}") from None
    raise PlainDataError(f"unknown tag {tag[:20]!r} in a message")


def dumps(message) -> bytes:
    """One message, a line of JSON (containers already encoded)."""
    return json.dumps(message, separators=(",", ":")).encode("ascii") + b"\n"


def loads(line: bytes):
    """The message of one line; PlainDataError when it is not JSON."""
    try:
        return json.loads(line)
    except (ValueError, RecursionError) as exc:
        raise PlainDataError(f"a message is not JSON ({type(exc).__name__})") from None


# ------------------------------------------------------------------------------ the judge


def _fail(reason: str) -> None:
    """Print the failing verdict and end the judge now: ``os._exit`` runs no handler, so no
    ``try``/``except`` of the test code sees it."""
    sys.stdout.write(json.dumps({"verdict": "fail", "reason": reason}) + "\n")
    sys.stdout.flush()
    os._exit(3)


class Function:
    """The function under test, as the test code sees it: each call is sent to the subject's
    process and its reply (a value or an exception) returned or raised here."""

    def __init__(self, name: str, rfd: int, wfd: int) -> None:
        self.__name__ = self.__qualname__ = name
        self.calls = 0
        self._replies = os.fdopen(rfd, "rb")
        self._calls = os.fdopen(wfd, "wb")

    def __call__(self, *args, **kwargs):
        self.calls += 1
        where = f"call {self.calls}"
        try:
            message = dumps(["call", encode(list(args)), encode(kwargs)])
        except PlainDataError as exc:
            _fail(f"{where}: the test's arguments cannot be sent to the function: {exc}")
        try:
            self._calls.write(message)
            self._calls.flush()
            line = self._replies.readline(MAX_MESSAGE + 1)
        except OSError:
            line = b""
        if not line:
            _fail(f"{where}: the function's process ended")
        if not line.endswith(b"\n"):
            _fail(f"{where}: a reply longer than {MAX_MESSAGE} bytes")
        try:
            value, error = _reply(loads(line))
        except PlainDataError as exc:
            _fail(f"{where}: the function's reply is not plain data: {exc}"[:300])
        if error is not None:
            raise error
        return value

    def __repr__(self) -> str:
        return f"<function {self.__name__}>"


def _reply(message) -> tuple:
    """(value, None) of an ``ok`` reply, (None, the exception) of a ``raise``; PlainDataError
    for a ``bad`` reply and anything else."""
    if type(message) is not list or not message:
        raise PlainDataError(f"a reply that is a {type(message).__name__}")
    kind, rest = message[0], message[1:]
    if kind == "ok" and len(rest) == 1:
        return decode(rest[0]), None
    if kind == "raise" and len(rest) == 2:
        return None, _exception(*rest)
    if kind == "bad" and len(rest) == 1 and type(rest[0]) is str:
        raise PlainDataError(rest[0])
    raise PlainDataError("a reply of an unknown form")


def _exception(names, message) -> Exception:
    """The exception the function raised: a class named as its own, derived from the first
    built-in exception class among its bases (``names``, its method resolution order)."""
    if type(names) is not list or not names or not all(type(n) is str for n in names) or type(message) is not str:
        raise PlainDataError("an exception of an unknown form")
    builtin = [getattr(builtins, n, None) for n in names]
    base = next((k for k in builtin if isinstance(k, type) and issubclass(k, Exception)), Exception)
    kind = base if names[0] == base.__name__ else type(names[0][:80], (base,), {})
    try:
        return kind(message[:MAX_EXCEPTION_TEXT])
    except Exception:  # a built-in class that wants other arguments (UnicodeDecodeError)
        return type(names[0][:80], (Exception,), {})(message[:MAX_EXCEPTION_TEXT])


def judge() -> None:
    """The trusted side: read the problem (JSON ``prompt``, ``test``, ``entry_point``,
    ``check``) from stdin, print ``ready``, run the prompt's code (imports, helpers), bind the
    entry point to a :class:`Function`, run the test code and ``check(entry_point)`` when
    ``check`` is set, and print the passing verdict. An assertion or error of the tests ends it
    with a traceback; no call to the function is a failure."""
    rfd, wfd = (int(x) for x in sys.argv[1:3])
    _not_dumpable()
    problem = json.loads(sys.stdin.buffer.read())
    print("ready", flush=True)
    function = Function(problem["entry_point"], rfd, wfd)
    namespace = {"__name__": "__main__"}
    try:
        exec(compile(problem["prompt"], "prompt.py", "exec"), namespace)
    except Exception as exc:
        _fail(f"the problem's prompt does not run: {type(exc).__name__}: {exc}"[:200])
    namespace[problem["entry_point"]] = function
    exec(compile(problem["test"], "test.py", "exec"), namespace)
    if problem["check"]:
        namespace["check"](function)
    if not function.calls:
        _fail("the tests never called the function")
    print(json.dumps({"verdict": "pass", "calls": function.calls}), flush=True)


def _not_dumpable() -> None:
    """No other process of this user may trace this one or open its ``/proc`` files (its input,
    its output pipe): ``prctl(PR_SET_DUMPABLE, 0)``, where ctypes can reach the C library."""
    try:
        import ctypes

        ctypes.CDLL(None).prctl(4, 0, 0, 0, 0)
    except (ImportError, OSError, AttributeError):
        pass


# ----------------------------------------------------------------------------- the subject


def serve(name: str) -> None:
    """The untrusted side: run ``main.py`` (the completion's module) as module ``solution``, then
    answer each call of its function ``name`` with ``["ok", value]``, ``["raise", class names,
    message]``, or ``["bad", why]`` when the value is not plain data. The module's own errors
    end the process with a traceback."""
    rfd, wfd = (int(x) for x in sys.argv[1:3])
    namespace = {"__name__": "solution"}
    with open("main.py", encoding="utf-8") as f:
        source = f.read()
    exec(compile(source, "solution.py", "exec"), namespace)
    function = namespace.get(name)
    if not callable(function):
        sys.exit(f"NameError: the code defines no function {name!r}")
    calls, replies = os.fdopen(rfd, "rb"), os.fdopen(wfd, "wb")
    for line in calls:
        _, args, kwargs = loads(line)
        try:
            result = function(*decode(args), **decode(kwargs))
        except Exception as exc:
            reply = ["raise", [k.__name__ for k in type(exc).__mro__], _text(exc)]
        else:
            try:
                reply = ["ok", encode(result)]
            except PlainDataError as exc:
                reply = ["bad", f"the function returned {exc}"]
        replies.write(dumps(reply))
        replies.flush()


def _text(exc: BaseException) -> str:
    try:
        return str(exc)[:MAX_EXCEPTION_TEXT]
    except Exception:
        return ""
