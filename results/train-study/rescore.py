"""The study's test evaluations scored again by this tree's verifier (README.md here).

    python results/train-study/rescore.py

The ``math`` verifier used to pay an answer that restates the computation (``add 6 - 2 + 4.``
for 8) because math-verify evaluated it; since issue 42's pilot a numeric gold answer needs a
numeric prediction. This rescores the completions stored in ``runs/RUN/test-greedy.json`` and
``test-t07.json`` and prints per run, and per estimator as the mean over seeds, the accuracy as
reported and as rescored (greedy accuracy; avg@8 at T 0.7 on the first 50 test problems).
"""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path

from hista import rewards

HERE = Path(__file__).resolve().parent


def accuracy(path: Path) -> tuple[float, float, int]:
    """(accuracy as stored, as rescored, completions whose score changed) of one eval file."""
    problems = json.loads(path.read_text())["problems"]
    before = after = changed = n = 0
    for problem in problems if isinstance(problems, list) else problems.values():
        for sample in problem["samples"]:
            new = rewards.verify(problem.get("verifier", "math"), sample["text"], problem["answer"])
            before, after, n = before + sample["reward"], after + new, n + 1
            changed += new != sample["reward"]
    return before / n, after / n, changed


def main() -> None:
    by_estimator: dict[tuple[str, str], list[tuple[float, float]]] = defaultdict(list)
    print("| run | greedy: reported | rescored | changed | T 0.7 avg@8: reported | rescored | changed |")
    print("|---|---|---|---|---|---|---|")
    for run in sorted(p for p in (HERE / "runs").iterdir() if p.is_dir()):
        row = [run.name]
        for kind in ("greedy", "t07"):
            before, after, changed = accuracy(run / f"test-{kind}.json")
            by_estimator[(run.name.rsplit("-s", 1)[0], kind)].append((before, after))
            row += [f"{100 * before:.1f}", f"{100 * after:.1f}", str(changed)]
        print("| " + " | ".join(row) + " |")
    print("\n| estimator | greedy: reported | rescored | T 0.7 avg@8: reported | rescored |\n|---|---|---|---|---|")
    for name in sorted({k[0] for k in by_estimator}):
        cells = []
        for kind in ("greedy", "t07"):
            pairs = by_estimator[(name, kind)]
            cells += [f"{100 * sum(b for b, _ in pairs) / len(pairs):.1f}",
                      f"{100 * sum(a for _, a in pairs) / len(pairs):.1f}"]
        print(f"| {name} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
