"""Issue 45, part 1: a cheaper structure rule checked on fresh cases (README.md here, "The next
check" and "A second candidate").

    python results/sveb-study/cost_check.py fresh BUILD CASES...   # the build's lines, committed problems dropped
    python results/sveb-study/cost_check.py [DIR]                  # tables + decision -> DIR/check.md

``fresh`` writes to stdout every line of the build file except the cases whose problem text
appears in one of the case files CASES (and says on stderr how many it dropped). The default
command reads ``DIR/short/results.json`` and ``DIR/long/results.json`` (DIR: ``cost-check`` beside
this file), whose three methods are, in order, GRPO, today's default and the candidate, and
writes ``DIR/check.md``: per setting, the MAE of the three and their paired differences; pooled
over both settings, the primary metric, ΔMAE of the candidate against today's default.
Intervals are 95% percentile bootstraps (2000 resamples, seed 0) over problems, a problem being
a distinct problem text (repeated texts are one cluster), and the decision rule is the one fixed
before the builds: adopt if the pooled interval's upper bound is at most +0.010 and its point
estimate at most 0.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np

from hista.sveb import bootstrap_ci, read_cases

MARGIN = 0.010


def problem_texts(path: str | Path) -> dict[str, str]:
    """The problem text of every case of a case file, by case key."""
    return {r["key"]: r["problem"]["problem"] for r in read_cases(path).records}


def fresh(build: str, studies: list[str]) -> None:
    seen = {text for path in studies for text in problem_texts(path).values()}
    dropped = 0
    with open(build) as f:  # the build's lines pass through unchanged
        for line in f:
            record = json.loads(line)
            if record["kind"] == "case" and record["problem"]["problem"] in seen:
                dropped += 1
                continue
            sys.stdout.write(line)
    print(f"{build}: dropped {dropped} case(s) whose problem is in a committed case file", file=sys.stderr)


def errors(path: Path) -> tuple[dict[str, np.ndarray], list[str], dict[str, str]]:
    """Absolute errors per method, the problem text of each case and the methods' labels (in
    the file's order: GRPO, today's default, the candidate)."""
    by_id = problem_texts(path.parent / "cases.jsonl.gz")
    results = json.loads(path.read_text())
    labels, cases = results["labels"], results["cases"]
    return ({m: np.array([abs(c["values"][m] - c["target"]) for c in cases]) for m in labels},
            [by_id[c["case_id"]] for c in cases], labels)


def cell(x: np.ndarray, clusters: list[str], sign: bool = False) -> str:
    lo, hi = bootstrap_ci(x, clusters=clusters)
    f = "{:+.3f}" if sign else "{:.3f}"
    return f"{f.format(x.mean())} [{f.format(lo)}, {f.format(hi)}]"


def check(root: Path) -> str:
    found = {setting: errors(root / setting / "results.json") for setting in ("short", "long")}
    labels = found["short"][2]
    grpo, default, candidate = labels
    name = labels[candidate]
    out = [f"# {name} on fresh cases (issue 45, part 1)", "",
           "Intervals: 95%, problems resampled (a problem = a distinct problem text).", "",
           f"| setting | cases | problems | GRPO | today's default | {name} | default − GRPO "
           f"| {name} − GRPO | {name} − default |",
           "|---|---|---|---|---|---|---|---|---|"]
    for setting, (e, clusters, _) in found.items():
        out.append(f"| {setting} | {len(clusters)} | {len(set(clusters))} | "
                   + " | ".join(cell(e[m], clusters) for m in labels) + " | "
                   + " | ".join(cell(e[a] - e[b], clusters, sign=True)
                                for a, b in ((default, grpo), (candidate, grpo), (candidate, default)))
                   + " |")
    pooled = {m: np.concatenate([e[m] for e, _, _ in found.values()]) for m in labels}
    texts = [f"{setting}: {t}" for setting, (_, clusters, _) in found.items() for t in clusters]
    d = pooled[candidate] - pooled[default]
    lo, hi = bootstrap_ci(d, clusters=texts)
    adopt = hi <= MARGIN and d.mean() <= 0
    out += ["", f"**Primary (pooled, {d.size} cases of {len(set(texts))} problems):** ΔMAE {name} − today's default "
            f"= {d.mean():+.4f} [{lo:+.4f}, {hi:+.4f}].", "",
            f"Decision (fixed before the builds: upper bound ≤ +{MARGIN:.3f} and point ≤ 0): "
            + (f"**adopt {name} as the default.**" if adopt else "**keep today's default.**")]
    return "\n".join(out) + "\n"


if __name__ == "__main__":
    if sys.argv[1:2] == ["fresh"]:
        fresh(sys.argv[2], sys.argv[3:])
    else:
        root = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).parent / "cost-check"
        text = check(root)
        (root / "check.md").write_text(text)
        print(text, end="")
