"""Verifier ``gym``: a reasoning-gym task's own scorer on the model's final answer, and
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

Scoring: the answer first passes hista's check for its task (:mod:`hista.rewards.gym_checks`:
parsed, never run, on the host; an answer the task does not allow scores 0 with the reason), then
the task's ``score_answer(answer, entry)``, in [0, 1], or hista's own scoring for the tasks whose
scorer pays answers that do not solve (:data:`hista.rewards.gym_checks.RESCORED`).
reasoning-gym gives partial credit (0.01 for a wrong number, the gold's share of a longer answer
that contains it), so the reward is binary by default, 1.0 only for a score of 1; a record made
with ``partial=true`` keeps the score.

The scorers and the generators are dataset code run on model output and user options, so they
run in a service in the sandbox (:mod:`hista.rewards.gym_server`, started through
:func:`hista.rewards.sandbox.start_service` on first use, one per process that verifies or
loads problems): each call runs in a process of its own forked from it, so nothing a call does
reaches a later one, bounded by :data:`SCORE_TIMEOUT_S` (:data:`GENERATE_TIMEOUT_S` for a
generator) and the service's memory limits. A call past its bound, a scorer's error and a
process that ended without a reply score 0 with the reason; a reply is plain JSON, and a score
must be a finite number in [0, 1]. Nothing raises into training, and the host-side work is one
scan of the completion plus a bounded answer.
"""

from __future__ import annotations

import atexit
import importlib.util
import json
import logging
import math
import os
import select
import sysconfig
import threading
import time
from pathlib import Path
from typing import Any, Optional

from ..errors import InputError
from . import gym_checks, gym_server, register, sandbox
from .math import extract_math_answer, last_answer_tag, last_boxed, shown

__all__ = ["INSTALL", "MAX_ANSWER_CHARS", "SCORE_TIMEOUT_S", "category", "config_values", "final_answer", "generate",
           "option_defaults", "reasoning_gym", "score", "stop_service", "task_categories", "verify_gym"]

logger = logging.getLogger(__name__)

INSTALL = "pip install 'hista[gym]' (reasoning-gym==0.1.25)"
#: seconds one call of a task's scorer may take before its worker is killed and the call scores 0
SCORE_TIMEOUT_S = 5.0
#: seconds one call of a task's generator may take (one request: at most 64 entries)
GENERATE_TIMEOUT_S = 60.0
#: seconds a new service may take to import reasoning-gym and say it is ready
STARTUP_TIMEOUT_S = 120.0
#: seconds the host waits for a reply beyond a call's own bound before it ends the service
REPLY_MARGIN_S = 10.0
#: address space of the service's processes (MB); each call may use 1 GB more than the server
SERVICE_MEMORY_MB = 4096
#: longest answer (characters between the tags) handed to a scorer
MAX_ANSWER_CHARS = 10_000


# --------------------------------------------------------------------------- reasoning-gym

def reasoning_gym():
    """The ``reasoning_gym`` module; an InputError saying how to install it when it is missing."""
    try:
        import reasoning_gym as rg
    except ImportError:
        raise InputError(f"gym: tasks need reasoning-gym; {INSTALL}", field="spec") from None
    return rg


def task_categories() -> dict[str, str]:
    """reasoning-gym's task names, sorted, and each one's category (``arithmetic``, ``logic``, …:
    the package folder its generator lives in)."""
    return {name: category(name) for name in sorted(reasoning_gym().factory.DATASETS)}


def category(task: str) -> str:
    """``task``'s category (:func:`task_categories`)."""
    return reasoning_gym().factory.DATASETS[task][0].__module__.split(".")[1]


def option_defaults(task: str) -> dict[str, Any]:
    """The options of ``task`` (its configuration's fields but seed and size) and their defaults."""
    reasoning_gym()
    try:
        return gym_server.option_defaults(task)
    except gym_server.BadOption as exc:
        raise InputError(str(exc), field=exc.field) from None


def config_values(task: str, options: dict[str, str]) -> dict[str, Any]:
    """The typed values of ``options`` (name -> the spec's string) for ``task``'s configuration;
    an InputError naming an unknown option (listing the valid ones) or a bad value."""
    reasoning_gym()
    try:
        return gym_server.config_values(task, options)
    except gym_server.BadOption as exc:
        raise InputError(str(exc), field=exc.field) from None


# --------------------------------------------------------------------------- the service

def _import_paths() -> list[str]:
    """The folders the service imports reasoning-gym and its requirements from: this
    interpreter's site-packages and the one reasoning-gym is installed in."""
    spec = importlib.util.find_spec("reasoning_gym")
    found = [os.path.dirname(os.path.dirname(spec.origin))] if spec is not None and spec.origin else []
    paths = sysconfig.get_paths()
    return list(dict.fromkeys(os.path.realpath(p) for p in [*found, paths["purelib"], paths["platlib"]]))


class _Worker:
    """The sandboxed service (:mod:`hista.rewards.gym_server`): JSON lines in, JSON lines out;
    closed, and started again on the next call, when it stops answering."""

    def __init__(self) -> None:
        self._service: Optional[sandbox.Service] = None
        self._buffer = b""
        self._lock = threading.Lock()

    def _start(self) -> None:
        reasoning_gym()
        paths = _import_paths()
        source = Path(gym_server.__file__).read_text(encoding="utf-8")
        self._service = sandbox.start_service(source, paths, readable=paths, memory_mb=SERVICE_MEMORY_MB)
        self._buffer = b""
        if self._line(STARTUP_TIMEOUT_S) != {"ready": True}:
            self.stop()
            raise RuntimeError("the reasoning-gym service did not start in the sandbox")

    def stop(self) -> None:
        if self._service is not None:
            self._service.close()
            self._service = None

    def _line(self, timeout: float) -> Optional[dict]:
        """The service's next line as JSON, or None past ``timeout`` seconds or at its end."""
        fd = self._service.stdout.fileno()
        deadline = time.monotonic() + timeout
        while b"\n" not in self._buffer:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([fd], [], [], left)[0]:
                return None
            chunk = os.read(fd, 1 << 16)
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
        """The service's reply to ``request`` (run within ``timeout`` seconds there)."""
        with self._lock:
            if self._service is None or not self._service.running():
                self.stop()
                self._start()
            try:
                self._service.stdin.write(json.dumps({**request, "timeout": timeout}).encode("utf-8") + b"\n")
                self._service.stdin.flush()
            except OSError:
                self.stop()
                return {"ended": "the sandbox ended"}
            reply = self._line(timeout + REPLY_MARGIN_S)
            if reply is None:
                self.stop()
                return {"ended": "the sandbox stopped answering"}
            return reply


_WORKER = _Worker()
atexit.register(_WORKER.stop)  # the service would end at its stdin's EOF anyway; no process is left behind


def stop_service() -> None:
    """End this process's reasoning-gym service, if one runs (the next call starts a new one, with
    the environment and settings of that moment)."""
    _WORKER.stop()


def _failure(reply: dict, timeout: float) -> Optional[str]:
    """Why ``reply`` holds no result, or None."""
    if reply.get("timeout"):
        return f"timed out after {timeout:g} s"
    if "ended" in reply:
        return f"ended without a reply: {str(reply['ended'])[:80]}"
    if "error" in reply:
        return f"error: {str(reply['error'])[:200]}"
    return None


def score(task: str, options: dict[str, str], entry: dict, answer: str,
          timeout: Optional[float] = None) -> tuple[Optional[float], str]:
    """``task``'s score of ``answer`` against ``entry``, computed in the sandboxed service: (score,
    "") or (None, why: a timeout, the scorer's error, its process's end). ``timeout``: seconds
    (default :data:`SCORE_TIMEOUT_S`)."""
    timeout = SCORE_TIMEOUT_S if timeout is None else timeout
    reply = _WORKER.call({"op": "score", "task": task, "options": options, "entry": entry, "answer": answer},
                         timeout)
    why = _failure(reply, timeout)
    if why is not None:
        return None, f"scorer {why}"
    value = reply.get("score")
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) \
            or not 0 <= value <= 1:
        return None, f"scorer returned {str(value)[:40]}, not a score in [0, 1]"
    return float(value), ""


def generate(task: str, options: dict[str, str], seed: int, size: int, start: int, stop: int
             ) -> tuple[list[dict], list[float], Optional[str]]:
    """Entries ``start`` to ``stop`` of reasoning-gym's dataset of ``task`` (``options``, ``seed``,
    ``size``), generated in the sandboxed service within :data:`GENERATE_TIMEOUT_S`, each as JSON
    carries it, with the task's score of its own gold answer; and why the generator failed at
    the next entry (None when it did not). An InputError when the options cannot make the task."""
    try:
        reply = _WORKER.call({"op": "generate", "task": task, "options": options, "seed": seed, "size": size,
                              "start": start, "stop": stop}, GENERATE_TIMEOUT_S)
    except (sandbox.SandboxUnavailable, RuntimeError) as exc:
        raise InputError(f"gym: reasoning-gym runs in the sandbox, which cannot start here: {exc}",
                         field="spec") from None
    if "field" in reply:
        raise InputError(str(reply.get("error")), field=str(reply["field"]))
    if "entries" not in reply:
        return [], [], _failure(reply, GENERATE_TIMEOUT_S) or "no entries in the reply"
    entries, gold, why = reply["entries"], reply.get("gold"), reply.get("error")
    if not (isinstance(entries, list) and isinstance(gold, list) and len(entries) == len(gold)
            and all(isinstance(e, dict) for e in entries)):
        return [], [], "the generator's reply is not a list of entries"
    return entries, [float(g) for g in gold], None if why is None else str(why)[:500]


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
    when the record asks for partial credit), with a reason. Never raises."""
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
    task, entry = record["task"], record["entry"]
    refused = gym_checks.refusal(task, given, entry)
    if refused is not None:
        return 0.0, f"answer refused: {refused}"
    if task in gym_checks.RESCORED:
        value, why = gym_checks.RESCORED[task](given, entry), ""
    else:
        try:
            value, why = score(task, record["options"], entry, given)
        except Exception as exc:  # the service could not start
            logger.debug("gym scorer failed", exc_info=True)
            return 0.0, f"scorer unavailable: {type(exc).__name__}: {str(exc)[:200]}"
    if value is None:
        return 0.0, why
    if record.get("partial") is True:
        return value, "correct" if value >= 1 else f"partial credit {value:.3g}: got {shown(given)}"
    if value >= 1:
        return 1.0, "correct"
    return 0.0, f"wrong answer: got {shown(given)} (task score {value:.3g})"
