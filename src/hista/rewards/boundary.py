"""The two sides of the ``python-tests`` verifier's trust boundary, and the plain data
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

The encoding is hista's own, read by a strict decoder in linear time: a tag byte, then
``N``/``T``/``F`` (None, True, False); ``i<hex>;`` (int); ``d<float.hex()>;`` (float);
``u<n>:<n bytes of UTF-8>`` (str, lone surrogates kept); ``b<n>:<n bytes>`` (bytes);
``[``, ``(``, ``{``, ``<`` and ``/`` with ``<n>:`` and n items (list, tuple, set, frozenset;
n key-value pairs for a dict). A message is 8 bytes of length, then one encoded value.

This module is the source both sides run (the sandbox's interpreter, with nothing to import but
built-in modules, so that neither side pays for loading ``json`` or ``re``): the verifier ships
it with the call ``judge()`` or ``serve(name)`` appended. It imports nothing of hista, so
hista's own tests import it to check the encoding.
"""

import builtins
import os
import sys

#: deepest nesting of containers a value may have
MAX_DEPTH = 100
#: longest message on the pipe, in bytes
MAX_MESSAGE = 16 * 1024 * 1024
#: longest exception message passed on, in characters
MAX_EXCEPTION_TEXT = 1000
#: the verdict line the judge prints last: ``VERDICT pass N`` or ``VERDICT fail REASON``
VERDICT = "hista-verdict:"
_TAGS = {list: b"[", tuple: b"(", set: b"{", frozenset: b"<", dict: b"/"}
_TYPES = {tag: kind for kind, tag in _TAGS.items()}


class PlainDataError(ValueError):
    """A value that is not plain data (module docstring), or bytes that do not decode to one."""


def encode(value) -> bytes:
    """``value`` in the encoding of the module docstring; PlainDataError naming the first part
    that is not plain data."""
    out: list = []
    _put(value, out, 0, frozenset())
    return b"".join(out)


def _put(value, out: list, depth: int, path: frozenset) -> None:
    kind = type(value)
    if value is None or kind is bool:
        out.append(b"N" if value is None else b"T" if value else b"F")
    elif kind is int:
        out.append(b"i%x;" % value)
    elif kind is float:
        out.append(b"d" + value.hex().encode("ascii") + b";")
    elif kind is str or kind is bytes:
        data = value.encode("utf-8", "surrogatepass") if kind is str else value
        out += [b"u%d:" % len(data) if kind is str else b"b%d:" % len(data), data]
    elif kind in _TAGS:
        if depth >= MAX_DEPTH:
            raise PlainDataError(f"nesting deeper than {MAX_DEPTH}")
        if id(value) in path:
            raise PlainDataError(f"a {kind.__name__} that contains itself")
        out.append(_TAGS[kind] + b"%d:" % len(value))
        path = path | {id(value)}
        for item in (x for pair in value.items() for x in pair) if kind is dict else value:
            _put(item, out, depth + 1, path)
    else:
        raise PlainDataError(f"a {_name(kind)}")


def _name(kind: type) -> str:
    module = getattr(kind, "__module__", "")
    name = str(getattr(kind, "__qualname__", "?"))[:60]
    return name if module == "builtins" else f"{name} ({str(module)[:40]})"


def decode(data: bytes):
    """The value :func:`encode` turned into ``data``; PlainDataError for anything else."""
    try:
        value, end = _get(data, 0, 0)
    except (TypeError, ValueError, OverflowError) as exc:  # unhashable members, bad digits or UTF-8
        raise PlainDataError(str(exc)[:120] if isinstance(exc, PlainDataError) else
                             f"bytes that do not decode ({type(exc).__name__})") from None
    if end != len(data):
        raise PlainDataError("bytes after the value")
    return value


def _get(data: bytes, i: int, depth: int):
    """The value that starts at ``data[i]`` and the index after it."""
    tag = data[i:i + 1]
    i += 1
    if not tag:
        raise PlainDataError("a message that ends early")
    if tag in (b"N", b"T", b"F"):
        return {b"N": None, b"T": True, b"F": False}[tag], i
    if tag in (b"i", b"d"):
        end = data.find(b";", i)
        if end < 0:
            raise PlainDataError("a number without its end")
        text = data[i:end].decode("ascii")
        return (int(text, 16) if tag == b"i" else float.fromhex(text)), end + 1
    colon = data.find(b":", i, i + 12)
    if tag not in (b"u", b"b", *_TYPES) or colon < 0 or not data[i:colon].isdigit():
        raise PlainDataError(f"unknown tag {tag!r}, or a length without its end")
    count, i = int(data[i:colon]), colon + 1
    if tag in (b"u", b"b"):
        if i + count > len(data):
            raise PlainDataError("a string longer than the message")
        raw = data[i:i + count]
        return (raw.decode("utf-8", "surrogatepass") if tag == b"u" else raw), i + count
    kind = _TYPES[tag]
    if depth >= MAX_DEPTH:
        raise PlainDataError(f"nesting deeper than {MAX_DEPTH}")
    n = 2 * count if kind is dict else count
    if n > len(data) - i:  # every item takes a byte at least
        raise PlainDataError("more items than the message holds")
    items = []
    for _ in range(n):
        item, i = _get(data, i, depth + 1)
        items.append(item)
    return (dict(zip(items[::2], items[1::2])) if kind is dict else kind(items)), i


def send(stream, value) -> None:
    """Write one message (8 bytes of length, then ``value`` encoded) to a binary stream."""
    data = encode(value)
    stream.write(len(data).to_bytes(8, "big") + data)
    stream.flush()


def receive(stream):
    """The value of the next message of a binary stream; None at its end (EOFError when it ends
    inside a message); PlainDataError for one over ``MAX_MESSAGE`` bytes or one that does not
    decode."""
    head = stream.read(8)
    if not head:
        return None
    size = int.from_bytes(head, "big")
    if len(head) < 8 or size > MAX_MESSAGE:
        raise PlainDataError(f"a message of {size} bytes" if len(head) == 8 else "a cut message")
    data = stream.read(size)
    if len(data) < size:
        raise EOFError("a message cut short")
    return decode(data)


# ------------------------------------------------------------------------------ the judge


def _fail(reason: str) -> None:
    """Print the failing verdict and end the judge now: ``os._exit`` runs no handler, so no
    ``try``/``except`` of the test code sees it."""
    sys.stdout.write(f"\n{VERDICT} fail {' '.join(str(reason).split())}\n")
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
            send(self._calls, ("call", args, kwargs))
        except PlainDataError as exc:
            _fail(f"{where}: the test's arguments cannot be sent to the function: {exc}")
        except OSError:
            _fail(f"{where}: the function's process ended")
        try:
            reply = receive(self._replies)
            value, error = _reply(reply)
        except (OSError, EOFError):
            _fail(f"{where}: the function's process ended")
        except PlainDataError as exc:
            _fail(f"{where}: the function's reply is not plain data: {exc}")
        if error is not None:
            raise error
        return value

    def __repr__(self) -> str:
        return f"<function {self.__name__}>"


def _reply(message) -> tuple:
    """(value, None) of an ``ok`` reply, (None, the exception) of a ``raise``; EOFError for no
    reply; PlainDataError for a ``bad`` reply and anything else."""
    if message is None:
        raise EOFError("no reply")
    if type(message) is not tuple or not message:
        raise PlainDataError(f"a reply that is a {type(message).__name__}")
    kind, rest = message[0], message[1:]
    if kind == "ok" and len(rest) == 1:
        return rest[0], None
    if kind == "raise" and len(rest) == 2:
        return None, _exception(*rest)
    if kind == "bad" and len(rest) == 1 and type(rest[0]) is str:
        raise PlainDataError(rest[0][:200])
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
    """The trusted side: read the problem (a dict with ``prompt``, ``test``, ``entry_point``,
    ``check``, encoded) from stdin, print ``ready``, run the prompt's code (imports, helpers),
    bind the entry point to a :class:`Function`, run the test code and ``check(entry_point)``
    when ``check`` is set, and print the passing verdict. An assertion or error of the tests
    ends it with a traceback; no call to the function is a failure."""
    rfd, wfd = (int(x) for x in sys.argv[1:3])
    _not_dumpable()
    problem = decode(sys.stdin.buffer.read())
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
    print(f"\n{VERDICT} pass {function.calls}", flush=True)


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
    answer each call of its function ``name`` with ``("ok", value)``, ``("raise", class names,
    message)``, or ``("bad", why)`` when the value is not plain data. The module's own errors
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
    while (call := receive(calls)) is not None:
        _, args, kwargs = call
        try:
            result = function(*args, **kwargs)
        except Exception as exc:
            send(replies, ("raise", [k.__name__ for k in type(exc).__mro__], _text(exc)))
            continue
        try:
            send(replies, ("ok", result))  # encoded whole before a byte is written
        except PlainDataError as exc:
            send(replies, ("bad", f"the function returned {exc}"))


def _text(exc: BaseException) -> str:
    try:
        return str(exc)[:MAX_EXCEPTION_TEXT]
    except Exception:
        return ""
