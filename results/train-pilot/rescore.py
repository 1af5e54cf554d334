"""The pilot's validation evaluations scored again by this tree's verifier (README.md here).

    python results/train-pilot/rescore.py [runs/train-pilot]

For every ``RUN/eval/step-N.samples.jsonl`` under the folder (what evaluation during training
wrote: one greedy completion per validation problem), prints the accuracy as logged and as the
current verifier scores the same completions, and how many completions changed score. The math
verifier was changed during the pilot (a numeric gold answer needs a numeric prediction) after
one run learned to restate the sum instead of computing it.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

from hista import rewards


def main() -> None:
    root = Path(sys.argv[1] if len(sys.argv) > 1 else "runs/train-pilot")
    print("| run | step | accuracy as logged | rescored | completions whose score changed |")
    print("|---|---|---|---|---|")
    for path in sorted(root.glob("*/eval/step-*.samples.jsonl"),
                       key=lambda p: (p.parts[-3], int(re.search(r"step-(\d+)", p.name).group(1)))):
        logged = rescored = changed = n = 0
        for line in path.read_text().splitlines():
            row = json.loads(line)
            if row.get("kind") != "problem":
                continue
            for sample in row["samples"]:
                new = rewards.verify(row.get("verifier", "math"), sample["text"], row["answer"])
                logged += sample["reward"]
                rescored += new
                changed += new != sample["reward"]
                n += 1
        step = re.search(r"step-(\d+)", path.name).group(1)
        print(f"| {path.parts[-3]} | {step} | {100 * logged / n:.1f} | {100 * rescored / n:.1f} | {changed} of {n} |")


if __name__ == "__main__":
    main()
