"""Pilot of train-study-3, step 1 (PILOT.md): the base model on each candidate setting.

    python results/train-study-3/pilot.py sets     # runs/train-study-3/pilot/C.jsonl per candidate
    python results/train-study-3/pilot.py report   # pilot-base.md here, from pilot.sh's evaluations
    python results/train-study-3/pilot.py study KEY TRAIN   # train.jsonl, validation.jsonl here (step 2)
    python results/train-study-3/pilot.py test KEY N        # test.jsonl here (step 4, with DESIGN.md)

A candidate's problems are the first 100 distinct problems of its validation split (the test
split stays unseen until the study's design is written). The report gives per candidate: greedy
accuracy (100 problems), avg@8 and pass@8 at temperature 0.7 (the first 50), answer length in
tokens (mean, median, share cut at 256), and the share of problems whose 8 samples score inside
the pool band 0.15-0.75 (what dynamic sampling can train on). With ``score=share`` a sample's
reward is its share of parts right, and accuracy is the mean share. Candidates measured in an
earlier round keep their rows in pilot-base.md.
"""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path

from hista import tasks

HERE = Path(__file__).parent
OUT = Path("runs/train-study-3/pilot")
N = 100
BAND = (0.15, 0.75)


def candidates() -> dict[str, str]:
    rows = (line.split(None, 1) for line in (HERE / "candidates.txt").read_text().splitlines() if line.strip())
    return {key: spec.strip() for key, spec in rows}


def distinct(spec: str, split: str, n: int) -> list[dict]:
    """The first ``n`` distinct problems of a split, in generation order."""
    seen, rows = set(), []
    for rec in tasks.load(spec, n=20 * n, seed=0, split=split):
        if rec["problem"] not in seen:
            seen.add(rec["problem"])
            rows.append(rec)
    return rows[:n]


def write(path: Path, rows: list[dict]) -> None:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    print(f"{path}: {len(rows)} problems")


def sets() -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    for key, spec in candidates().items():
        write(OUT / f"{key}.jsonl", distinct(spec, "validation", N))


def study(key: str, train: str) -> None:
    """Step 2's files: the chosen candidate's first TRAIN distinct train problems and its pilot
    validation problems (the test split stays unread until DESIGN.md)."""
    spec = candidates()[key]
    write(HERE / "train.jsonl", distinct(spec, "train", int(train)))
    write(HERE / "validation.jsonl", distinct(spec, "validation", N))


def test(key: str, n: str) -> None:
    """The study's test problems: the chosen candidate's first N distinct test problems, none of
    them among the train or validation problems here (checked)."""
    rows = distinct(candidates()[key], "test", int(n))
    seen = {json.loads(line)["problem"] for name in ("train.jsonl", "validation.jsonl")
            for line in (HERE / name).read_text().splitlines()}
    shared = [r["id"] for r in rows if r["problem"] in seen]
    if len(rows) < int(n) or shared:
        sys.exit(f"{len(rows)} distinct test problems; {len(shared)} also in train or validation: {shared[:5]}")
    write(HERE / "test.jsonl", rows)


def samples(path: Path) -> list[list[dict]]:
    return [p["samples"] for p in json.loads(path.read_text())["problems"]]


def measured_before() -> dict[str, str]:
    """pilot-base.md's rows by candidate: a round's report keeps the rows of candidates measured
    in an earlier round (their runs/ are gone with that session)."""
    path = HERE / "pilot-base.md"
    rows = path.read_text().splitlines()[2:] if path.exists() else []
    return {row.split("|")[1].strip(): row for row in rows if "not run" not in row}


def report() -> None:
    lines = ["| candidate | setting | greedy | avg@8 | pass@8 | tokens mean | median | cut at 256 | problems in band |",
             "|---|---|---|---|---|---|---|---|---|"]
    earlier = measured_before()
    for key, spec in candidates().items():
        greedy, sampled = OUT / f"{key}-greedy.json", OUT / f"{key}-t07.json"
        if not (greedy.exists() and sampled.exists()):
            lines.append(earlier.get(key, f"| {key} | `{spec}` | not run | | | | | | |"))
            continue
        g = [s[0] for s in samples(greedy)]
        t = samples(sampled)
        flat = [s for group in t for s in group]
        tokens = [s["tokens"] for s in flat]
        means = [statistics.fmean(s["reward"] for s in group) for group in t]
        lines.append(
            f"| {key} | `{spec}` | {statistics.fmean(s['reward'] for s in g):.2f} ({len(g)}) "
            f"| {statistics.fmean(means):.2f} ({len(t)}) | {statistics.fmean(m > 0 for m in means):.2f} "
            f"| {statistics.fmean(tokens):.0f} | {statistics.median(tokens):.0f} "
            f"| {statistics.fmean(s['truncated'] for s in flat):.2f} "
            f"| {statistics.fmean(BAND[0] <= m <= BAND[1] for m in means):.2f} |")
    (HERE / "pilot-base.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    {"sets": sets, "report": report, "study": study, "test": test}[sys.argv[1]](*sys.argv[2:])
