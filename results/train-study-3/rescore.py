"""An evaluation's answers scored again with today's verifiers (amendment 6: the fixed reading of
`math-parts`), its summary recomputed as `hista eval` computes it, into a new file.

    python results/train-study-3/rescore.py IN.json.gz OUT.json.gz

For a greedy evaluation this is what a new one would give: the answers depend on the model
alone, the scores on the verifier. Each sample's `reward` and `reason` are replaced; a `notes`
entry says what was done; everything else is kept. Prints how many samples changed score.
"""

from __future__ import annotations

import gzip
import json
import sys

from hista import provenance, rewards
from hista.evaluation import summarise


def main() -> None:
    src, out = sys.argv[1:3]
    with gzip.open(src, "rt") as fh:
        results = json.load(fh)
    changed = 0
    for problem in results["problems"]:
        for sample in problem["samples"]:
            reward, reason = rewards.verify_with_reason(problem["verifier"], sample["text"], problem["answer"])
            changed += reward != sample["reward"]
            sample["reward"], sample["reason"] = reward, reason
    settings = results["settings"]
    results["summary"] = summarise(results["problems"], settings["benchmarks"], seed=settings["seed"])
    results["notes"] = [*results.get("notes", []), f"rescored from {src} with the verifiers of {provenance.code()}"]
    with open(out, "wb") as raw, gzip.GzipFile(fileobj=raw, mode="wb", mtime=0) as fh:
        fh.write(json.dumps(results).encode())
    (bench,) = results["summary"]["benchmarks"].values()
    print(f"{out}: {changed} samples changed score; avg {bench['avg']['mean']:.4f}")


if __name__ == "__main__":
    main()
