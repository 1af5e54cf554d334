"""ΔMAE against GRPO with a problem-level bootstrap interval, for case files with several
states per problem (the long setting has two): resampling problems, each with all its cases,
instead of cases.

    python docs/results/sveb-study/problem_bootstrap.py RESULTS.json [METHOD ...]

RESULTS.json is a ``sveb eval`` results file; METHOD a method spec as it appears there (default:
every method). Prints, per method, the problems and cases used, ΔMAE (the mean over cases of
|value − target| − |group mean − target|) and its 95% percentile interval over 4,000 resamples
of the problems (numpy seed 0).
"""

from __future__ import annotations

import json
import sys

import numpy as np

from hista.sveb.sweep import problem_of


def main() -> None:
    results = json.load(open(sys.argv[1]))
    for method in sys.argv[2:] or list(results["methods"]):
        by_problem: dict[str, list[float]] = {}
        for row in results["cases"]:
            value = row["values"].get(method)
            if value is None:
                continue
            diff = abs(value - row["target"]) - abs(row["group_mean"] - row["target"])
            by_problem.setdefault(problem_of(row["case_id"]), []).append(diff)
        sums = np.array([sum(d) for d in by_problem.values()])
        counts = np.array([len(d) for d in by_problem.values()])
        draws = np.random.default_rng(0).integers(0, len(sums), (4000, len(sums)))
        boot = sums[draws].sum(1) / counts[draws].sum(1)
        lo, hi = np.percentile(boot, [2.5, 97.5])
        print(f"{method}: {len(sums)} problems, {counts.sum()} cases, ΔMAE {sums.sum() / counts.sum():+.3f} "
              f"[{lo:+.3f}, {hi:+.3f}]")


if __name__ == "__main__":
    main()
