"""Task source ``gym:TASK[?option=value&…]``: reasoning-gym's procedural tasks, offline.

``pip install 'hista[gym]'`` brings ``reasoning-gym`` (Apache-2.0): 106 seeded generators
(``basic_arithmetic``, ``chain_sum``, ``gsm_symbolic``, ``propositional_logic``, ``countdown``, …)
with a scorer each; ``hista tasks list`` names them. ``TASK`` is one of them and the options are
its configuration's fields (``gym:chain_sum?max_terms=3&max_digits=2``; list items are separated
by ``;``, ``operators=+;-``, since commas separate specs; booleans are true/false), checked by the
task's own validation; an unknown task or option is an InputError naming it. ``partial=true`` is
hista's own option: the ``gym`` verifier then keeps the task's partial credit instead of paying
1 for a full score only.

A problem is the task's question followed by :data:`ANSWER_TEXT`, which asks for the final
answer inside ``\\boxed{}``, as hista's system prompt does (the ``gym`` verifier reads the last
box, else the last ``<answer>`` tag, reasoning-gym's own convention, else the ``math``
verifier's fallback: :mod:`hista.rewards.gym`). Its answer is the JSON record the verifier
scores with (the task, the spec's options, the task's entry); ``field`` is the task's category
(``arithmetic``, ``logic``, …); ``meta`` holds the task and its gold answer.

Seeds and splits: the problems of (options, seed, split) come from reasoning-gym datasets of
:data:`CHUNK` entries whose seeds are a hash of (task, options, seed, split, chunk number),
read in order. An entry is kept for ``split`` only when its question hashes to that split
(:func:`hista.tasks._common.split_of_text`, the built-in generators' partition), so no
question is in two splits whatever the seeds, and not twice in one load; problem ``i`` is the
same whatever ``n`` is. An entry whose own gold answer does not score 1 with its task's scorer
(after the JSON round trip the verifier sees) is left out and counted in a warning. A task whose
options allow too few distinct questions for ``n`` fails with an InputError.
"""

from __future__ import annotations

import hashlib
import json
import logging
from pathlib import Path
from typing import Optional
from urllib.parse import unquote

from hista.errors import InputError
from hista.rewards import gym, gym_checks
from hista.tasks._common import MAX_ATTEMPTS, canonical_split, split_of_text
from hista.tasks.base import TaskSource, register

logger = logging.getLogger(__name__)

#: what follows every question: the answer format the ``gym`` verifier reads
ANSWER_TEXT = "\n\nGive your final answer inside \\boxed{}."
#: entries per reasoning-gym dataset read in order
CHUNK = 64
#: problems of a load when ``n`` is not given
DEFAULT_N = 1000


def listing() -> list[str]:
    """Lines naming reasoning-gym's tasks by category, for ``hista tasks list``; one
    line saying how to install it when it is missing."""
    try:
        categories = gym.task_categories()
    except InputError:
        return [f"gym:       reasoning-gym's tasks need {gym.INSTALL}"]
    by_category: dict[str, list[str]] = {}
    for task, category in categories.items():
        by_category.setdefault(category, []).append(task)
    return [f"gym ({category}): {', '.join(names)}" for category, names in sorted(by_category.items())]


def parse_spec(rest: str) -> tuple[str, dict[str, str], bool]:
    """(task, its options as strings, partial) of ``TASK[?k=v&…]``; InputErrors name
    the bad part."""
    name, _, query = rest.partition("?")
    task = name.strip()
    if not task:
        raise InputError("gym: name a task, e.g. gym:gsm_symbolic (`hista tasks list` shows them)", field="spec")
    options: dict[str, str] = {}
    for part in filter(None, query.split("&")):
        key, sep, raw = part.partition("=")
        key = key.strip()
        if not sep or not key:
            raise InputError(f"gym:{rest}: option {part!r} must be written name=value", field=part)
        if key in options:
            raise InputError(f"gym:{rest}: option {key!r} given twice", field=key)
        options[key] = unquote(raw.strip())
    partial = options.pop("partial", "false").lower()
    if partial not in ("true", "false"):
        raise InputError(f"gym:{rest}: partial must be true or false, got {partial!r}", field="partial")
    gym.config_values(task, options)  # the task and its options exist, with values of their types
    return task, options, partial == "true"


def _seed(task: str, options: dict[str, str], seed: int, split: str, chunk: int) -> int:
    key = json.dumps(["hista-gym", task, sorted(options.items()), seed, split, chunk])
    return int.from_bytes(hashlib.sha256(key.encode("utf-8")).digest()[:4], "big")


def _id_prefix(task: str, options: dict[str, str], seed: int, split: str) -> str:
    tag = ""
    if options:
        tag = "." + hashlib.sha256(json.dumps(sorted(options.items())).encode()).hexdigest()[:8]
    return f"gym-{task}{tag}-{split}-s{seed}"


def _gold_pays(task: str, entry: dict, score: float) -> bool:
    """Whether ``entry``'s own gold answer is paid by the ``gym`` verifier: it passes hista's checks
    and scores 1 (``score``: the task's scorer's, for a task hista does not score itself). A task
    without a gold answer (its scorer checks a solution, e.g. ``rush_hour``) is kept unchecked."""
    gold = entry.get("answer")
    if not isinstance(gold, str):
        return True
    if gym_checks.refusal(task, gold, entry) is not None:
        return False
    if task in gym_checks.RESCORED:
        return gym_checks.RESCORED[task](gold, entry) >= 1
    return score >= 1


def generate(rest: str, n: int, seed: int, split: str) -> list[dict]:
    """The first ``n`` problem records of ``gym:REST`` for ``seed`` and ``split`` (the
    module docstring)."""
    task, options, partial = parse_spec(rest)
    split = canonical_split(split)
    prefix = _id_prefix(task, options, seed, split)
    records: list[dict] = []
    seen: set[str] = set()
    dropped = misses = chunk = 0
    field = gym.category(task)
    while len(records) < n:
        chunk_seed, start = _seed(task, options, seed, split, chunk), 0
        while start < CHUNK and len(records) < n:
            stop = min(CHUNK, start + max(8, 4 * (n - len(records))))
            entries, gold_scores, failure = gym.generate(task, options, chunk_seed, CHUNK, start, stop)
            for entry, gold_score in zip(entries, gold_scores):
                if len(records) == n:
                    break
                question = entry.get("question")
                usable = isinstance(question, str) and split_of_text(question) == split and question not in seen
                if usable:
                    seen.add(question)
                    if not _gold_pays(task, entry, gold_score):
                        dropped, usable = dropped + 1, False
                if not usable:  # another split's, a repeat, or a gold the verifier would not pay
                    misses += 1
                    if misses > MAX_ATTEMPTS:
                        raise InputError(f"gym:{rest}: could not draw problem {len(records)} for split {split!r} in "
                                         f"{MAX_ATTEMPTS} tries; the options allow too few distinct questions "
                                         f"({dropped} left out: their gold answer does not score 1)", field="spec")
                    continue
                misses = 0
                answer = json.dumps({"task": task, "options": options, "entry": entry, "partial": partial},
                                    ensure_ascii=False)
                records.append({"id": f"{prefix}-{len(records):05d}", "problem": question + ANSWER_TEXT,
                                "answer": answer, "verifier": "gym", "field": field,
                                "meta": {"task": task, "gold": entry.get("answer")
                                         if isinstance(entry.get("answer"), str) else None}})
            if failure is not None and len(records) < n:
                raise InputError(f"gym:{rest}: reasoning-gym's generator fails with these options: {failure}",
                                 field="spec")
            start = stop
        chunk += 1
    if dropped:
        logger.warning("gym:%s: left out %d entries whose gold answer does not score 1 with the task's scorer",
                       rest, dropped)
    return records


@register("gym")
class GymSource(TaskSource):
    """``gym:TASK[?k=v&…]``: reasoning-gym's seeded generators."""

    description = "reasoning-gym's procedural tasks (pip install 'hista[gym]'): gym:TASK?option=value&..."

    def load(self, rest: str, n: Optional[int] = None, seed: int = 0, split: str = "test") -> list[dict]:
        """The first ``n`` problems (default 1000) of the task for ``seed`` and ``split``."""
        return generate(rest, DEFAULT_N if n is None else n, seed, split)

    def check(self, rest: str) -> None:
        """The task and its options exist and the task draws a problem."""
        generate(rest, 1, 0, "test")

    def example(self, tmp_dir: Path) -> str:
        """Two-term sums; needs reasoning-gym."""
        try:
            gym.reasoning_gym()
        except InputError as exc:
            raise NotImplementedError(str(exc)) from None
        return "chain_sum?min_terms=2&max_terms=2&max_digits=2"
