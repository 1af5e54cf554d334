"""Why Numca's policies keep a tail (README.md here, "Setting 1"): what the final checkpoints write,
and what Numca's advantages are on a group of such responses.

    python results/train-study-2/numca_tail.py

Per arm, over every seed's greedy test completions: the share with a "final answer" sentence
after the equation, the share whose number after "=" is the gold answer, and the share scored
correct; over steps 1-20 of every seed's training, the median gradient norm and the mean
completion length. Then GRPO's and Numca's token advantages on a constructed group of eight responses to
"16 + 12", tokenised into digit runs, words, spaces and punctuation.
"""

from __future__ import annotations

import gzip
import itertools
import json
import re
import statistics
from pathlib import Path

from hista.estimators import get
from hista.types import Rollout, RolloutGroup

RUNS = Path(__file__).resolve().parent / "runs"
GROUP = [("16 + 12 = 28\n\nThe final answer is 28.", 1.0), ("16 + 12 = 28", 1.0),
         ("16 + 12 = 26\n\nThe final answer is 26.", 0.0), ("16 + 12 = 38", 0.0), ("16 + 12 = 28", 1.0),
         ("16 + 12 = 18\n\nThe final answer is 18.", 0.0), ("16 + 12 = 28\n\nThe final answer is 28.", 1.0),
         ("16 + 12 = 24", 0.0)]


def shares(setting: int, arm: str) -> dict[str, float]:
    """Shares of the arm's greedy test completions over all its seeds."""
    n = tail = equation = correct = 0
    for path in sorted(RUNS.glob(f"s{setting}-{arm}-seed*/test-greedy.json.gz")):
        for problem in json.loads(gzip.decompress(path.read_bytes()))["problems"]:
            sample = problem["samples"][0]
            found = re.search(r"=\s*(-?\d+)", sample["text"])
            n += 1
            tail += "final answer" in sample["text"].lower()
            equation += bool(found and found.group(1) == str(problem["answer"]).strip())
            correct += sample["reward"]
    return {"completions": n, "final-answer sentence": tail / n, "number after '=' right": equation / n,
            "scored correct": correct / n}


def early_steps(setting: int, arm: str, last: int = 20) -> dict[str, float]:
    """Median gradient norm and mean completion length over steps 1..``last`` of every seed."""
    norms, lengths = [], []
    for path in sorted(RUNS.glob(f"s{setting}-{arm}-seed*/metrics.jsonl")):
        for row in map(json.loads, path.read_text().splitlines()):
            if "grad_norm" in row and 1 <= row["step"] <= last:
                norms.append(row["grad_norm"])
                lengths.append(row["completions/mean_length"])
    return {"median grad_norm, steps 1-20": statistics.median(norms), "mean length": statistics.fmean(lengths)}


def tokens(text: str) -> tuple[list[str], list[tuple[int, int]]]:
    pieces = re.findall(r"\d+|\w+|\s+|[^\w\s]", text)
    ends = list(itertools.accumulate(map(len, pieces)))
    return pieces, [(end - len(p), end) for p, end in zip(pieces, ends)]


def main() -> None:
    setting = 1  # the one-step additions ("a + b = c"); setting 2 answers three parts
    for arm in ("grpo", "hista", "numca", "probe"):
        print(arm, {k: round(v, 3) for k, v in {**shares(setting, arm), **early_steps(setting, arm)}.items()})
    rollouts = []
    for text, reward in GROUP:
        pieces, offsets = tokens(text)
        rollouts.append(Rollout(prompt_ids=[1], completion_ids=list(range(2, 2 + len(pieces))), reward=reward,
                                completion_text=text, offsets=offsets))
    group = RolloutGroup(rollouts, prompt_id="16 + 12")
    for name in ("grpo", "numca"):
        print(f"{name} advantages of the first and third responses:")
        advantages = get(name).token_advantages(group)
        for k in (0, 2):
            print("   ", " ".join(f"{p!r}:{a:+.2f}" for p, a in zip(tokens(GROUP[k][0])[0], advantages[k].tolist())))


if __name__ == "__main__":
    main()
