"""The study's problem files (results/train-study-2/README.md): every distinct problem of a
built-in task's split, in generation order, drawn from its first N problems.

    python results/train-study-2/make_sets.py 'builtin:arith?steps=1&ops=+&max_value=40' 1
    python results/train-study-2/make_sets.py 'builtin:arith?steps=1&ops=+&max_value=5&parts=3&style=expr' 2 384 500

writes train-K.jsonl (the first TRAIN distinct train problems, default all), validation-K.jsonl
(the first 200 distinct validation problems) and test-K.jsonl (the first TEST distinct test
problems, default all) next to this script.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from hista import tasks

DRAWS = 20000
VALIDATION = 200


def distinct(spec: str, split: str) -> list[dict]:
    seen, out = set(), []
    for rec in tasks.load(spec, n=DRAWS, seed=0, split=split):
        if rec["problem"] not in seen:
            seen.add(rec["problem"])
            out.append(rec)
    return out


def main() -> None:
    spec, key = sys.argv[1], sys.argv[2]
    train, test = (int(v) for v in (sys.argv[3:5] + [0, 0])[:2])
    here = Path(__file__).parent
    for split, cap in (("train", train or None), ("validation", VALIDATION), ("test", test or None)):
        rows = distinct(spec, split)[:cap]
        (here / f"{split}-{key}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
        print(f"{split}-{key}.jsonl: {len(rows)} distinct problems of {spec}")


if __name__ == "__main__":
    main()
