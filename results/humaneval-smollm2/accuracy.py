"""How HumanEval's problems spread by accuracy on the embedded model: per problem, the share of
its 8 samples at temperature 0.8 that pass (from an evaluation's samples file), and per problem
of a SVEB build the accuracy of its rollouts (kept cases and skipped problems alike).

    python accuracy.py EVAL.samples.jsonl SVEB-CASES.jsonl
"""

import collections
import json
import sys


def table(name: str, accuracies: list[float]) -> None:
    inside = sum(0.1 - 1e-9 <= a <= 0.8 + 1e-9 for a in accuracies)
    counts = collections.Counter(round(a, 3) for a in accuracies)
    print(f"{name}: {len(accuracies)} problems, {inside} with accuracy in [0.1, 0.8]")
    print("  accuracy: problems  " + ", ".join(f"{a:g}: {n}" for a, n in sorted(counts.items())))


samples, cases = sys.argv[1], sys.argv[2]
rows = [json.loads(line) for line in open(samples, encoding="utf-8")]
sampled = [r for r in rows if r.get("kind") == "problem" and r.get("benchmark") == "HumanEval-T0.8"]
table("eval, 8 samples at T 0.8", [sum(s["reward"] for s in r["samples"]) / len(r["samples"]) for r in sampled])
build = [json.loads(line) for line in open(cases, encoding="utf-8")]
table("SVEB build, 8 rollouts at T 0.7", [r["accuracy"] for r in build if "accuracy" in r])
