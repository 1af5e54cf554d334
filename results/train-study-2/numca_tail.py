"""Why Numca's policies keep a tail (README.md here, "Setting 1"): what the final checkpoints write,
and what Numca's advantages are on a group of such responses.

    python results/train-study-2/numca_tail.py

Per arm, over every seed's greedy test completions: the share with a "final answer" sentence
after the equation, the share whose number after "=" is the gold answer, and the share scored
correct; over steps 1-20 of every seed's training, the median gradient norm and the mean
completion length. Then GRPO's and Numca's token advantages on a constructed group of eight
responses to "16 + 12", tokenised into digit runs, words, spaces and punctuation. Setting 1 only
(its answers are "a + b = c"); complete runs only, as in report.py.
"""

from __future__ import annotations

import itertools
import re
import statistics

from report import read_json_gz, runs

from hista.estimators import get
from hista.train import read_metrics
from hista.types import Rollout, RolloutGroup

GROUP = [("16 + 12 = 28\n\nThe final answer is 28.", 1.0), ("16 + 12 = 28", 1.0),
         ("16 + 12 = 26\n\nThe final answer is 26.", 0.0), ("16 + 12 = 38", 0.0), ("16 + 12 = 28", 1.0),
         ("16 + 12 = 18\n\nThe final answer is 18.", 0.0), ("16 + 12 = 28\n\nThe final answer is 28.", 1.0),
         ("16 + 12 = 24", 0.0)]


def shares(folders) -> dict[str, float]:
    """Shares of the greedy test completions of the runs in ``folders``."""
    n = tail = equation = correct = 0
    for folder in folders:
        for problem in read_json_gz(folder / "test-greedy.json.gz")["problems"]:
            sample = problem["samples"][0]
            found = re.search(r"=\s*(-?\d+)", sample["text"])
            n += 1
            tail += "final answer" in sample["text"].lower()
            equation += bool(found and found.group(1) == str(problem["answer"]).strip())
            correct += sample["reward"]
    return {"completions": n, "final-answer sentence": tail / n, "number after '=' right": equation / n,
            "scored correct": correct / n}


def early_steps(folders, last: int = 20) -> dict[str, float]:
    """Median gradient norm and mean completion length over steps 1..``last`` of the runs in
    ``folders`` (a resumed run's steps once each: ``read_metrics``)."""
    rows = [r for folder in folders for r in read_metrics(folder / "metrics.jsonl")
            if "grad_norm" in r and 1 <= r["step"] <= last]
    return {"median grad_norm, steps 1-20": statistics.median(r["grad_norm"] for r in rows),
            "mean length": statistics.fmean(r["completions/mean_length"] for r in rows)}


def tokens(text: str) -> tuple[list[str], list[tuple[int, int]]]:
    pieces = re.findall(r"\d+|\w+|\s+|[^\w\s]", text)
    ends = list(itertools.accumulate(map(len, pieces)))
    return pieces, [(end - len(p), end) for p, end in zip(pieces, ends)]


def main() -> None:
    found = runs(1)
    for arm in ("grpo", "hista", "numca", "probe"):
        folders = list(found[arm].values())
        print(arm, {k: round(v, 3) for k, v in {**shares(folders), **early_steps(folders)}.items()})
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
