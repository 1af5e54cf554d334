"""The reasoning-gym service: a task's generator and scorer run in the sandbox, a fresh process per
call (:mod:`hista.rewards.gym` starts it and talks to it).

This file runs as a script inside the sandbox (:func:`hista.rewards.sandbox.start_service`), where
hista itself is not importable, so it uses the standard library and reasoning-gym only; the host
imports it too, for :func:`config_values`.

The server (:func:`serve`) imports reasoning-gym once, makes itself non-dumpable (no process of
the sandbox can read its memory or open its file descriptors) and a child subreaper, says
``{"ready": true}`` and then answers one JSON line per request line. Each request runs in a child
forked for it, which first closes every file descriptor it inherited but a pipe of its own,
lowers its CPU-time and memory limits, and then handles the request; the server reads the
child's reply from that pipe within the request's time bound, kills the child, and then every
process the child left behind (they are reparented to the server), and empties its scratch folder
(``$TMPDIR``, the sandbox's only writable one). So
nothing a call does (a patched module, a planted file, a background process) reaches a later call
or the server, and only the plain data checked by the host crosses back.

Requests: ``{"op": "score", "task", "options", "entry", "answer", "timeout"}`` answered
``{"score": x}``; ``{"op": "generate", "task", "options", "seed", "size", "start", "stop",
"timeout"}`` answered ``{"entries": [...], "gold": [...]}`` (entries ``start`` to ``stop`` of the
dataset, each after a JSON round trip, and the task's score of its own gold answer), or
``{"entries": [...], "error": why}`` when the generator fails at the next entry. Failures:
``{"error": "NameOfTheException"}``, ``{"timeout": true}``, ``{"ended": "how"}`` (the child died
without a reply).
"""

from __future__ import annotations

import dataclasses
import enum
import json
import os
import resource
import select
import shutil
import signal
import sys
import time
from typing import Any

#: what separates the items of a list option (``operators=+;-``): not a comma, which separates the
#: specs of ``--suite`` and ``--tasks`` lists
LIST_SEPARATOR = ";"
#: configuration fields that are not options: hista sets them
NOT_OPTIONS = ("seed", "size")
#: the largest reply a call may send back (bytes)
MAX_REPLY_BYTES = 64 * 1024 * 1024
#: address space a call may use on top of the server's (bytes)
CALL_MEMORY_BYTES = 1024 * 1024 * 1024
_PR_SET_DUMPABLE, _PR_SET_CHILD_SUBREAPER = 4, 36


class BadOption(ValueError):
    """An option of a task spec that is unknown or has a bad value; ``field`` names it."""

    def __init__(self, message: str, field: str) -> None:
        super().__init__(message)
        self.field = field


# --------------------------------------------------------------------------- options

def _classes(task: str) -> tuple[type, type]:
    import reasoning_gym

    datasets = reasoning_gym.factory.DATASETS
    if task not in datasets:
        raise BadOption(f"gym: unknown task {task!r}; `hista tasks list` shows reasoning-gym's "
                        f"{len(datasets)} tasks", "spec")
    return datasets[task]


def option_defaults(task: str) -> dict[str, Any]:
    """The options of ``task`` (its configuration's fields but seed and size) and their defaults."""
    _, config = _classes(task)
    out = {}
    for f in dataclasses.fields(config):
        if f.name in NOT_OPTIONS:
            continue
        if f.default is not dataclasses.MISSING:
            out[f.name] = f.default
        elif f.default_factory is not dataclasses.MISSING:
            out[f.name] = f.default_factory()
        else:
            out[f.name] = None
    return out


def _bool(raw: str) -> bool:
    words = {"true": True, "yes": True, "1": True, "false": False, "no": False, "0": False}
    if raw.lower() not in words:
        raise ValueError("expected true or false")
    return words[raw.lower()]


def _typed(raw: str, default: Any) -> Any:
    """``raw`` read as a value of the type of ``default`` (lists and tuples separated by
    :data:`LIST_SEPARATOR`)."""
    if isinstance(default, bool):
        return _bool(raw)
    if isinstance(default, enum.Enum):
        return type(default)(raw)
    if isinstance(default, (int, float, str)):
        return type(default)(raw)
    if isinstance(default, (list, tuple)):
        parts = [p.strip() for p in raw.split(LIST_SEPARATOR) if p.strip()]
        if not parts:
            raise ValueError(f"expected a list separated by {LIST_SEPARATOR!r}")
        return type(default)(_typed(p, default[0]) if default else p for p in parts)
    if default is None:
        try:
            return json.loads(raw)
        except ValueError:
            return raw
    raise ValueError(f"this option (a {type(default).__name__}) cannot be set from a spec")


def config_values(task: str, options: dict[str, str]) -> dict[str, Any]:
    """The typed values of ``options`` (name -> the spec's string) for ``task``'s configuration; a
    :class:`BadOption` naming an unknown option (listing the valid ones) or a bad value."""
    defaults = option_defaults(task)
    values = {}
    for name, raw in options.items():
        if name not in defaults:
            raise BadOption(f"gym:{task}: unknown option {name!r}; valid options: "
                            f"{', '.join(defaults) or '(none)'}", name)
        try:
            values[name] = _typed(raw, defaults[name])
        except (ValueError, TypeError) as exc:
            raise BadOption(f"gym:{task}: bad value {raw!r} for option {name!r} (default "
                            f"{defaults[name]!r}): {exc}", name) from None
    return values


def dataset(task: str, options: dict[str, str], seed: int, size: int):
    """reasoning-gym's dataset of ``task`` with ``options`` (the spec's strings), ``seed`` and
    ``size``, its configuration validated: a :class:`BadOption` (field ``spec``) with the task's
    own message otherwise."""
    cls, config = _classes(task)
    try:
        cfg = config(**config_values(task, options), seed=seed, size=size)
        if hasattr(cfg, "validate"):
            cfg.validate()
        return cls(config=cfg)
    except BadOption:
        raise
    except Exception as exc:  # the task's own validation: assertions, ValueErrors
        raise BadOption(f"gym:{task}: reasoning-gym rejects the options {options or '(defaults)'}: "
                        f"{exc or type(exc).__name__}", "spec") from None


# --------------------------------------------------------------------------- one call

def _jsonable(value: Any) -> Any:
    """A task entry's value as JSON can carry it (sets sorted, other objects as text)."""
    if isinstance(value, (set, frozenset)):
        return sorted(value, key=str)
    return str(value)


def _as_scored(task: str, entry: dict) -> dict:
    """``entry`` as its task's scorer compares it: the ARC tasks compare the answer's board (a
    tuple of tuples) with ``metadata["output"]``, which JSON carries as lists."""
    if task in ("arc_agi", "rearc") and isinstance(entry.get("metadata", {}).get("output"), list):
        board = tuple(tuple(row) for row in entry["metadata"]["output"])
        entry = {**entry, "metadata": {**entry["metadata"], "output": board}}
    return entry


_SCORERS: dict[str, Any] = {}


def _scorer(task: str, options: dict[str, str]):
    """The dataset whose scorer scores ``task`` with ``options``, made in the server once (from the
    gold record alone, before any call sees an answer) and kept, at most 64 of them."""
    key = json.dumps([task, options], sort_keys=True)
    if key not in _SCORERS:
        if len(_SCORERS) >= 64:
            _SCORERS.clear()
        _SCORERS[key] = dataset(task, options, seed=0, size=1)
    return _SCORERS[key]


def _score(request: dict) -> dict:
    data = _scorer(request["task"], request["options"])
    entry = _as_scored(request["task"], request["entry"])
    return {"score": float(data.score_answer(request["answer"], entry))}


def _generate(request: dict) -> dict:
    data = dataset(request["task"], request["options"], seed=request["seed"], size=request["size"])
    entries: list[dict] = []
    gold: list[float] = []
    for index in range(request["start"], request["stop"]):
        try:
            entry = json.loads(json.dumps(data[index], default=_jsonable))
        except Exception as exc:  # the task's own generator, e.g. options it does not check
            why = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
            return {"entries": entries, "gold": gold, "error": why[:500]}
        answer = entry.get("answer")
        entries.append(entry)
        gold.append(float(data.score_answer(answer, _as_scored(request["task"], entry)))
                    if isinstance(answer, str) else 0.0)
    return {"entries": entries, "gold": gold}


def _handle(request: dict) -> dict:
    try:
        return _generate(request) if request.get("op") == "generate" else _score(request)
    except BadOption as exc:
        return {"error": str(exc), "field": exc.field}
    except Exception as exc:  # the task's code on model output
        return {"error": type(exc).__name__}


def _child(request: dict, reply_fd: int, keep: int) -> None:
    """In the forked child: keep only ``reply_fd`` and the standard error (``keep`` and below),
    lower the limits, answer ``request`` on ``reply_fd``, exit."""
    try:
        os.closerange(keep + 1, reply_fd)
        os.closerange(reply_fd + 1, 1 << 16)
        os.close(0)
        timeout = max(1, int(request.get("timeout", 5)) + 1)
        resource.setrlimit(resource.RLIMIT_CPU, (timeout, timeout))
        used = int(open("/proc/self/statm").read().split()[0]) * os.sysconf("SC_PAGE_SIZE")
        _, hard = resource.getrlimit(resource.RLIMIT_AS)
        soft = used + CALL_MEMORY_BYTES
        if hard == resource.RLIM_INFINITY or soft < hard:
            resource.setrlimit(resource.RLIMIT_AS, (soft, soft))
        data = json.dumps(_handle(request)).encode("utf-8")
        view = memoryview(data)
        while view:
            view = view[os.write(reply_fd, view):]
    finally:
        os._exit(0)


def _read_reply(fd: int, deadline: float) -> bytes | None:
    """Everything the child writes to ``fd`` until it closes it, or None past ``deadline`` (or when
    the reply grows past :data:`MAX_REPLY_BYTES`)."""
    chunks: list[bytes] = []
    size = 0
    while True:
        left = deadline - time.monotonic()
        if left <= 0 or not select.select([fd], [], [], left)[0]:
            return None
        chunk = os.read(fd, 1 << 16)
        if not chunk:
            return b"".join(chunks)
        chunks.append(chunk)
        size += len(chunk)
        if size > MAX_REPLY_BYTES:
            return None


def _children() -> list[int]:
    """The processes whose parent is this one."""
    me, out = os.getpid(), []
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                stat = open(f"/proc/{name}/stat").read()
            except OSError:
                continue
            if int(stat[stat.rindex(")") + 2:].split()[1]) == me:
                out.append(int(name))
    return out


def _clean_up(scratch: str) -> None:
    """Kill every process a call left behind (reparented here) and empty the folder ``scratch``."""
    while kids := _children():
        for pid in kids:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        for pid in kids:
            try:
                os.waitpid(pid, 0)
            except ChildProcessError:
                pass
    for name in os.listdir(scratch):
        path = os.path.join(scratch, name)
        if os.path.isdir(path) and not os.path.islink(path):
            shutil.rmtree(path, ignore_errors=True)
        else:
            try:
                os.unlink(path)
            except OSError:
                pass


def _ended(status: int) -> str:
    if os.WIFSIGNALED(status):
        number = os.WTERMSIG(status)
        return f"killed by signal {number} ({signal.Signals(number).name})"
    return f"exit status {os.waitstatus_to_exitcode(status)}"


def _call(request: dict, scratch: str) -> dict:
    """Run ``request`` in a fresh child (module docstring) and return its reply."""
    timeout = float(request.get("timeout", 5))
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(read_fd)
        _child(request, write_fd, 2)
    os.close(write_fd)
    try:
        raw = _read_reply(read_fd, time.monotonic() + timeout)
    finally:
        os.close(read_fd)
    try:
        os.kill(pid, signal.SIGKILL)
    except OSError:
        pass
    _, status = os.waitpid(pid, 0)
    _clean_up(scratch)
    if raw is None:
        return {"timeout": True}
    if not raw:
        return {"ended": _ended(status)}
    try:
        reply = json.loads(raw)
    except ValueError:
        return {"error": "unreadable reply"}
    return reply if isinstance(reply, dict) else {"error": "unreadable reply"}


def _prctl(option: int, value: int) -> None:
    import ctypes

    ctypes.CDLL(None, use_errno=True).prctl(option, value, 0, 0, 0)


def serve(paths: list[str]) -> None:
    """The server's loop (module docstring); ``paths``: folders to import reasoning-gym from."""
    out = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)  # what task code prints goes to the standard error, which the host discards
    for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ[var] = "1"
    scratch = os.environ["TMPDIR"]  # the only writable folder: the service's own
    os.environ.update(MPLCONFIGDIR=os.path.join(scratch, "matplotlib"), MPLBACKEND="Agg")
    sys.path[:1] = paths  # in place of this script's folder
    _prctl(_PR_SET_DUMPABLE, 0)
    _prctl(_PR_SET_CHILD_SUBREAPER, 1)
    import reasoning_gym  # noqa: F401  (imported once, before any fork)

    out.write(json.dumps({"ready": True}) + "\n")
    out.flush()
    for line in sys.stdin:
        try:
            request = json.loads(line)
            if request.get("op") == "score":
                _scorer(request["task"], request["options"])
            reply = _call(request, scratch)
        except BadOption as exc:
            reply = {"error": str(exc), "field": exc.field}
        except Exception as exc:  # a request that is not one, a task that cannot be made
            reply = {"error": type(exc).__name__}
        out.write(json.dumps(reply) + "\n")
        out.flush()


if __name__ == "__main__":
    serve(sys.argv[1:])
