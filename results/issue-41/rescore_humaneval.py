"""Rescore the completions of an evaluation results file with this checkout's verifiers and print
how the rewards moved (issue 41: the python-tests verifier's trust boundary and body assembly).

    python results/issue-41/rescore_humaneval.py results/humaneval-smollm2/humaneval.json

Prints, per benchmark, the completions whose reward changed (old -> new, with both reasons) and
a count of old/new reward pairs. Reads the file only.
"""

from __future__ import annotations

import collections
import json
import sys
from concurrent.futures import ThreadPoolExecutor

from hista.rewards import verify_with_reason


def main() -> None:
    with open(sys.argv[1], encoding="utf-8") as f:
        results = json.load(f)
    jobs = []
    for problem in results["problems"]:
        for sample in problem["samples"]:
            jobs.append((problem["benchmark"], problem["id"], problem["verifier"], problem["answer"], sample))

    def rescore(job):
        return verify_with_reason(job[2], job[4]["text"], job[3])

    with ThreadPoolExecutor(2) as pool:
        new = list(pool.map(rescore, jobs))
    pairs = collections.Counter()
    for (benchmark, pid, _, _, sample), (reward, reason) in zip(jobs, new):
        pairs[(benchmark, sample["reward"], reward)] += 1
        if reward != sample["reward"]:
            print(f"{benchmark} {pid}: {sample['reward']} -> {reward}  (was: {sample['reason']}; now: {reason})")
    print("\n| benchmark | old reward | new reward | completions |")
    print("|---|---|---|---|")
    for (benchmark, old, now), n in sorted(pairs.items()):
        print(f"| {benchmark} | {old} | {now} | {n} |")


if __name__ == "__main__":
    main()
