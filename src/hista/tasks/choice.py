"""Built-in task ``builtin:choice``: multiple choice without numeric milestones.

Kinds of question (knob ``kind``, default ``mix`` = uniform over all):

* ``compare``: transitive comparisons ("Ana is taller than Ben. Ben is taller than Cal. Who is
  the shortest?");
* ``category``: category membership ("Which of these is a fruit?" / "... is not a fruit?");
* ``syllogism``: syllogisms over nonsense words ("All blims are tarks. All tarks are vorps.
  Which must be true?");
* ``opposite``: opposite words ("What is the opposite of hot?").

The options follow the question, one per line (``A) ...``); knob ``options`` is 3 or 4
(default 4).  The correct letter is drawn uniformly over the positions.  Records have
``answer`` = the letter, ``verifier="choice"``, ``field="choice"`` and ``meta`` with ``kind``,
``options`` (the option texts) and ``correct`` (its 0-based position).
"""

from __future__ import annotations

import random
from typing import Optional

from hista.tasks._common import (
    EXPLAIN,
    Knob,
    canonical_split,
    check_count,
    check_seed,
    generate,
    int_in,
    one_of,
    parse_options,
)

NAME = "choice"
DESCRIPTION = (
    "multiple-choice reasoning answered by a letter (comparisons, categories, syllogisms, "
    "opposites), few or no intermediate numbers; options options, kind"
)
FIELD = "choice"
DEFAULT_N = 1000
KINDS = ("compare", "category", "syllogism", "opposite")
LETTERS = "ABCD"

KNOBS = {
    "options": Knob(int_in(3, 4), 4, "number of options, 3 or 4"),
    "kind": Knob(one_of(*KINDS, "mix"), "mix", "one of " + ", ".join(KINDS + ("mix",))),
    "explain": EXPLAIN,
}
#: what ``explain=yes`` appends to a problem: asks to argue every option (long responses)
EXPLAIN_TEXT = "\nBefore you answer, explain in detail why each option is right or wrong."

_NAMES = ["Ana", "Ben", "Cal", "Dora", "Eli", "Fay", "Gus", "Hana", "Ivan", "Jill",
          "Kim", "Liam", "Mona", "Ned", "Olga", "Pete", "Rita", "Stan", "Tara", "Vic"]
#: comparison relations: (comparative, reverse comparative, top superlative, bottom superlative)
RELATIONS = [
    ("taller", "shorter", "tallest", "shortest"),
    ("older", "younger", "oldest", "youngest"),
    ("faster", "slower", "fastest", "slowest"),
    ("heavier", "lighter", "heaviest", "lightest"),
    ("stronger", "weaker", "strongest", "weakest"),
]
#: category -> (phrase with article, members); member lists are disjoint
CATEGORIES = {
    "fruit": ("a fruit", ["apple", "banana", "grape", "pear", "peach", "cherry", "mango", "plum"]),
    "animal": ("an animal", ["dog", "horse", "cow", "lion", "rabbit", "tiger", "sheep", "goat"]),
    "color": ("a color", ["red", "blue", "green", "yellow", "purple", "pink", "brown"]),
    "vehicle": ("a vehicle", ["car", "bus", "train", "bike", "truck", "boat", "plane"]),
    "instrument": ("a musical instrument", ["piano", "guitar", "drum", "violin", "flute",
                                            "trumpet"]),
    "body": ("a part of the body", ["hand", "foot", "nose", "ear", "knee", "elbow"]),
    "clothing": ("a piece of clothing", ["shirt", "hat", "sock", "coat", "dress", "glove",
                                         "scarf"]),
    "drink": ("a drink", ["milk", "water", "juice", "tea", "coffee"]),
    "tool": ("a tool", ["hammer", "saw", "drill", "wrench", "shovel"]),
    "furniture": ("a piece of furniture", ["chair", "table", "sofa", "bed", "desk", "shelf"]),
    "vegetable": ("a vegetable", ["carrot", "potato", "onion", "cabbage", "lettuce", "spinach"]),
}
_NONSENSE = ["blim", "tark", "vorp", "zeb", "frell", "mip", "glon", "dax", "wug", "plin",
             "snorf", "quib", "trop", "yeb", "krel", "morb", "fip", "gost"]
_NONSENSE_NAMES = ["Zib", "Plox", "Mert", "Dov", "Kess", "Lorp", "Nix", "Tuv"]
OPPOSITES = [
    ("hot", "cold"), ("big", "small"), ("up", "down"), ("day", "night"), ("happy", "sad"),
    ("fast", "slow"), ("open", "closed"), ("wet", "dry"), ("full", "empty"),
    ("light", "dark"), ("young", "old"), ("early", "late"), ("hard", "soft"), ("in", "out"),
    ("push", "pull"), ("win", "lose"), ("buy", "sell"), ("left", "right"), ("first", "last"),
    ("rich", "poor"), ("clean", "dirty"), ("loud", "quiet"), ("thick", "thin"),
    ("begin", "end"), ("true", "false"), ("give", "take"), ("near", "far"),
    ("strong", "weak"), ("awake", "asleep"), ("tall", "short"),
]


def _compare(rng: random.Random, k: int):
    people = rng.sample(_NAMES, k)  # people[0] is the top of the order
    more, less, top, bottom = rng.choice(RELATIONS)
    facts = []
    for a, b in zip(people, people[1:]):
        if rng.random() < 0.5:
            facts.append(f"{a} is {more} than {b}.")
        else:
            facts.append(f"{b} is {less} than {a}.")
    rng.shuffle(facts)
    if rng.random() < 0.5:
        question, correct = f"Who is the {top}?", people[0]
    else:
        question, correct = f"Who is the {bottom}?", people[-1]
    wrong = [p for p in people if p != correct]
    return " ".join(facts) + " " + question, correct, wrong


def _category(rng: random.Random, k: int):
    cats = rng.sample(sorted(CATEGORIES), k)
    phrase, members = CATEGORIES[cats[0]]
    if rng.random() < 0.5:
        correct = rng.choice(members)
        wrong = [rng.choice(CATEGORIES[c][1]) for c in cats[1:]]
        return f"Which of these is {phrase}?", correct, wrong
    inside = rng.sample(members, k - 1)
    correct = rng.choice(CATEGORIES[cats[1]][1])
    return f"Which of these is not {phrase}?", correct, inside


def _syllogism(rng: random.Random, k: int):
    a, b, c = rng.sample(_NONSENSE, 3)
    form = rng.randrange(3)
    if form == 0:
        facts = [f"All {a}s are {b}s.", f"All {b}s are {c}s."]
        correct = f"All {a}s are {c}s"
        wrong = [f"All {c}s are {a}s", f"All {b}s are {a}s", f"All {c}s are {b}s",
                 f"No {a} is a {c}"]
    elif form == 1:
        facts = [f"All {a}s are {b}s.", f"No {b} is a {c}."]
        correct = f"No {a} is a {c}"
        wrong = [f"All {a}s are {c}s", f"All {c}s are {a}s", f"All {c}s are {b}s",
                 f"All {b}s are {a}s"]
    else:
        x = rng.choice(_NONSENSE_NAMES)
        facts = [f"{x} is a {a}.", f"All {a}s are {b}s.", f"All {b}s are {c}s."]
        correct = f"{x} is a {c}"
        wrong = [f"{x} is not a {b}", f"{x} is not a {c}", f"All {c}s are {a}s",
                 f"All {b}s are {a}s"]
    if rng.random() < 0.5 and form != 2:
        facts.reverse()
    return " ".join(facts) + " Which must be true?", correct, rng.sample(wrong, k - 1)


def _opposite(rng: random.Random, k: int):
    picks = rng.sample(OPPOSITES, k)
    word, correct = picks[0] if rng.random() < 0.5 else picks[0][::-1]
    wrong = [rng.choice(pair) for pair in picks[1:]]
    return f"What is the opposite of {word}?", correct, wrong


_MAKERS = {"compare": _compare, "category": _category, "syllogism": _syllogism,
           "opposite": _opposite}


def load(spec: str, query: str, n: Optional[int] = None, seed: int = 0,
         split: str = "test") -> list[dict]:
    """Generate ``n`` multiple-choice problems (default 1000) for ``split``.

    Deterministic in (options, seed, split, index); ids look like
    ``choice-o4-mix-seed0-test-00017``.
    """
    opts = parse_options(spec, query, KNOBS)
    n = check_count(n, DEFAULT_N)
    seed = check_seed(seed)
    split = canonical_split(split)
    k, kind = opts["options"], opts["kind"]
    explain = opts["explain"] == "yes"
    prefix = f"choice-o{k}-{kind}{'-explain' if explain else ''}-seed{seed}"

    def make(rng: random.Random):
        this_kind = rng.choice(KINDS) if kind == "mix" else kind
        question, correct, wrong = _MAKERS[this_kind](rng, k)
        pos = rng.randrange(k)
        wrong = list(wrong)
        rng.shuffle(wrong)
        options = wrong[:pos] + [correct] + wrong[pos:]
        lines = [f"{LETTERS[i]}) {opt}" for i, opt in enumerate(options)]
        text = question + "\n" + "\n".join(lines) + (EXPLAIN_TEXT if explain else "")
        meta = {"kind": this_kind, "options": options, "correct": pos}
        return text, LETTERS[pos], meta

    return generate(spec, prefix, split, n, make, verifier="choice", field=FIELD)
