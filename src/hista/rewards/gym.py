"""Verifier ``gym``: a reasoning-gym task's own scorer on the model's final answer (SPEC §6), and
the adapter to reasoning-gym that the ``gym:`` task source (:mod:`hista.tasks.gym`) shares.

``pip install 'hista[gym]'`` brings ``reasoning-gym`` (Apache-2.0); it is imported on first use.

A ``gym`` record's answer is a JSON object ``{"task", "options", "entry", "partial"}``: the task's
name, its options as the spec wrote them (strings, parsed again by :func:`config_values`), the
task's own entry (``question``, ``answer``, ``metadata``, which its scorer reads) and whether the
reward keeps the task's partial credit.

Extraction: every ``gym:`` problem asks for the final answer inside ``\\boxed{}``, as hista's
system prompt does (reasoning-gym's own answers need no box: hista adds the request). The answer
is, in order: the content of the last complete box (:func:`hista.rewards.math.last_boxed`, one
linear scan; nested braces such as a set's are matched); the content of the last closed
``<answer>...</answer>`` tag (reasoning-gym's convention, for prompts that ask for it); else what
the ``math`` verifier's fallback reads at the end of the completion ("the answer is 10", a
final number or expression; :func:`hista.rewards.math.extract_math_answer` on a bounded tail),
as the ``math`` verifier does for models that do not box. None of them: 0, "no answer found".
Only one answer is ever scored, so listing candidates gains nothing. An answer longer than
:data:`MAX_ANSWER_CHARS` is not scored.

Scoring: the task's ``score_answer(answer, entry)``, in [0, 1]. reasoning-gym gives partial
credit (0.01 for a wrong number, the gold's share of a longer answer that contains it), so the
reward is binary by default, 1.0 only for a score of 1; a record made with ``partial=true``
keeps the score. The scorer is dataset code run on model output, so it runs in a worker process
of its own (:func:`serve`, one per process that verifies, started on first
use and reused): each call is bounded by :data:`SCORE_TIMEOUT_S`, and a call past it kills the
worker (the next call starts a new one) and scores 0 with the reason. An error in the scorer
scores 0 with its name. Nothing raises into training, and the host-side work is one scan of
the completion plus a bounded answer.
"""

from __future__ import annotations

import atexit
import dataclasses
import enum
import json
import logging
import os
import select
import subprocess
import sys
import threading
import time
from typing import Any, Optional

from ..errors import InputError
from . import register
from .math import extract_math_answer, last_answer_tag, last_boxed, shown

__all__ = ["INSTALL", "MAX_ANSWER_CHARS", "SCORE_TIMEOUT_S", "config_values", "dataset", "final_answer",
           "option_defaults",
           "reasoning_gym", "score", "serve", "task_categories", "verify_gym"]

logger = logging.getLogger(__name__)

INSTALL = "pip install 'hista[gym]' (reasoning-gym==0.1.25)"
#: seconds one call of a task's scorer may take before its worker is killed and the call scores 0
SCORE_TIMEOUT_S = 5.0
#: seconds a new worker may take to import reasoning-gym and say it is ready
STARTUP_TIMEOUT_S = 120.0
#: longest answer (characters between the tags) handed to a scorer
MAX_ANSWER_CHARS = 10_000
#: what separates the items of a list option (``operators=+;-``): not a comma, which separates the
#: specs of ``--suite`` and ``--tasks`` lists
LIST_SEPARATOR = ";"
#: configuration fields that are not options: hista sets them
NOT_OPTIONS = ("seed", "size")


# --------------------------------------------------------------------------- reasoning-gym

def reasoning_gym():
    """The ``reasoning_gym`` module; an InputError saying how to install it when it is missing."""
    try:
        import reasoning_gym as rg
    except ImportError:
        raise InputError(f"gym: tasks need reasoning-gym; {INSTALL}", field="spec") from None
    return rg


def _classes(task: str) -> tuple[type, type]:
    datasets = reasoning_gym().factory.DATASETS
    if task not in datasets:
        raise InputError(f"gym: unknown task {task!r}; `hista tasks list` shows reasoning-gym's "
                         f"{len(datasets)} tasks", field="spec")
    return datasets[task]


def task_categories() -> dict[str, str]:
    """reasoning-gym's task names, sorted, and each one's category (``arithmetic``, ``logic``, …:
    the package folder its generator lives in)."""
    datasets = reasoning_gym().factory.DATASETS
    return {name: datasets[name][0].__module__.split(".")[1] for name in sorted(datasets)}


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
    """The typed values of ``options`` (name -> the spec's string) for ``task``'s configuration;
    an InputError naming an unknown option (listing the valid ones) or a bad value."""
    defaults = option_defaults(task)
    values = {}
    for name, raw in options.items():
        if name not in defaults:
            raise InputError(f"gym:{task}: unknown option {name!r}; valid options: "
                             f"{', '.join(defaults) or '(none)'}", field=name)
        try:
            values[name] = _typed(raw, defaults[name])
        except (ValueError, TypeError) as exc:
            raise InputError(f"gym:{task}: bad value {raw!r} for option {name!r} (default "
                             f"{defaults[name]!r}): {exc}", field=name) from None
    return values


def dataset(task: str, options: dict[str, str], seed: int, size: int):
    """reasoning-gym's dataset of ``task`` with ``options`` (the spec's strings), ``seed`` and
    ``size``, its configuration validated: an InputError with the task's own message otherwise."""
    cls, config = _classes(task)
    try:
        cfg = config(**config_values(task, options), seed=seed, size=size)
        if hasattr(cfg, "validate"):
            cfg.validate()
        return cls(config=cfg)
    except InputError:
        raise
    except Exception as exc:  # the task's own validation: assertions, ValueErrors
        raise InputError(f"gym:{task}: reasoning-gym rejects the options {options or '(defaults)'}: "
                         f"{exc or type(exc).__name__}", field="spec") from None


# --------------------------------------------------------------------------- the worker

class _Worker:
    """The scoring process: JSON lines in (``{task, options, entry, answer}``), JSON lines out
    (``{"score": x}`` or ``{"error": name}``); killed on a call past the time bound."""

    def __init__(self) -> None:
        self._proc: Optional[subprocess.Popen] = None
        self._buffer = b""
        self._lock = threading.Lock()

    def _start(self) -> None:
        env = dict(os.environ, OMP_NUM_THREADS="1")
        self._proc = subprocess.Popen([sys.executable, "-c", "import hista.rewards.gym as g; g.serve()"],
                                      stdin=subprocess.PIPE,
                                      stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env)
        self._buffer = b""
        if self._line(STARTUP_TIMEOUT_S) != {"ready": True}:
            self.stop()
            raise RuntimeError("the reasoning-gym scorer did not start")

    def stop(self) -> None:
        if self._proc is not None:
            self._proc.kill()
            self._proc.wait()
            for pipe in (self._proc.stdin, self._proc.stdout):
                pipe.close()
            self._proc = None

    def _line(self, timeout: float) -> Optional[dict]:
        """The worker's next line as JSON, or None past ``timeout`` seconds or at its end."""
        fd = self._proc.stdout.fileno()
        deadline = time.monotonic() + timeout
        while b"\n" not in self._buffer:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([fd], [], [], left)[0]:
                return None
            chunk = os.read(fd, 65536)
            if not chunk:
                return None
            self._buffer += chunk
        line, _, self._buffer = self._buffer.partition(b"\n")
        try:
            reply = json.loads(line)
        except ValueError:
            return {"error": "unreadable reply"}
        return reply if isinstance(reply, dict) else {"error": "unreadable reply"}

    def call(self, request: dict, timeout: float) -> dict:
        with self._lock:
            if self._proc is None or self._proc.poll() is not None:
                self._start()
            try:
                self._proc.stdin.write(json.dumps(request).encode("utf-8") + b"\n")
                self._proc.stdin.flush()
            except OSError:
                self.stop()
                return {"error": "the scorer process ended"}
            reply = self._line(timeout)
            if reply is None:
                self.stop()
                return {"timeout": True}
            return reply


_WORKER = _Worker()
atexit.register(_WORKER.stop)  # the worker would end at its stdin's EOF anyway; no process is left behind


def score(task: str, options: dict[str, str], entry: dict, answer: str,
          timeout: Optional[float] = None) -> tuple[Optional[float], str]:
    """``task``'s score of ``answer`` against ``entry`` in the worker process: (score, "") or
    (None, why: a timeout, the scorer's error). ``timeout``: seconds (default
    :data:`SCORE_TIMEOUT_S`)."""
    timeout = SCORE_TIMEOUT_S if timeout is None else timeout
    reply = _WORKER.call({"task": task, "options": options, "entry": entry, "answer": answer}, timeout)
    if reply.get("timeout"):
        return None, f"scorer timed out after {timeout:g} s"
    if "error" in reply:
        return None, f"scorer error: {reply['error']}"
    value = reply.get("score")
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value <= 1:
        return None, f"scorer returned {str(value)[:40]}, not a score in [0, 1]"
    return float(value), ""


def serve() -> None:
    """The scoring worker's loop (:class:`_Worker` starts it in a process of its own): requests
    on standard input, replies on the original standard output; anything the task code prints
    goes to standard error instead."""
    out = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)
    reasoning_gym()
    out.write(json.dumps({"ready": True}) + "\n")
    out.flush()
    scorers: dict[str, Any] = {}
    for line in sys.stdin:
        try:
            request = json.loads(line)
            key = json.dumps([request["task"], request["options"]], sort_keys=True)
            if key not in scorers:
                scorers[key] = dataset(request["task"], request["options"], seed=0, size=1)
            value = scorers[key].score_answer(request["answer"], request["entry"])
            reply = {"score": float(value)}
        except Exception as exc:  # the task's scorer on model output
            reply = {"error": type(exc).__name__}
        out.write(json.dumps(reply) + "\n")
        out.flush()


# --------------------------------------------------------------------------- the verifier

def _record(answer: Any) -> Optional[dict]:
    """The gym record in ``answer`` (a JSON string), or None when it is not one."""
    if not isinstance(answer, str):
        return None
    try:
        record = json.loads(answer)
    except ValueError:
        return None
    if not (isinstance(record, dict) and isinstance(record.get("task"), str)
            and isinstance(record.get("options"), dict) and isinstance(record.get("entry"), dict)
            and all(isinstance(k, str) and isinstance(v, str) for k, v in record["options"].items())):
        return None
    return record


def final_answer(completion: str) -> Optional[str]:
    """The answer a completion gives (module docstring: the last box, else the last
    ``<answer>`` tag, else the ``math`` verifier's fallback), or None."""
    given = last_boxed(completion)
    if given is None:
        given = last_answer_tag(completion)
    if given is None:
        found, source = extract_math_answer(completion)
        given = found if source == "fallback" else None
    return given


@register("gym")
def verify_gym(completion: Any, answer: Any) -> tuple[float, str]:
    """Score a completion of a ``gym:`` problem: its final answer (:func:`final_answer`) scored by
    the task's own scorer in the worker, 1.0 for a full score and 0.0 otherwise (the score itself
    when the record asks for partial credit), with a reason (SPEC §6). Never raises."""
    record = _record(answer)
    if record is None:
        return 0.0, "invalid gold answer: not a gym record"
    if not isinstance(completion, str):
        return 0.0, "completion is not a string"
    given = final_answer(completion)
    if given is None:
        return 0.0, "no answer found"
    if len(given) > MAX_ANSWER_CHARS:
        return 0.0, f"answer longer than {MAX_ANSWER_CHARS} characters"
    try:
        value, why = score(record["task"], record["options"], record["entry"], given)
    except Exception as exc:  # the worker could not start
        logger.debug("gym scorer failed", exc_info=True)
        return 0.0, f"scorer unavailable: {type(exc).__name__}"
    if value is None:
        return 0.0, why
    if record.get("partial") is True:
        return value, "correct" if value >= 1 else f"partial credit {value:.3g}: got {shown(given)}"
    if value >= 1:
        return 1.0, "correct"
    return 0.0, f"wrong answer: got {shown(given)} (task score {value:.3g})"
