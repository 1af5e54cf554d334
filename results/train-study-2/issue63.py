"""Issue 63, part 4: setting 1's Numca arm with the valid rule (`numca-valid`), paired by seed with
GRPO run again at the same commit and library versions (`grpo-rerun`; the study's own GRPO runs do
not reproduce bit for bit in today's environment, README.md here). Greedy test accuracy per arm,
the paired difference with its 95% t-interval over the seeds both arms have (with the SD of the
differences, the p-value and the minimum detectable difference at 80% power), and the tens- and
units-digit accuracy of every arm (the number after the first "=" against the gold, two-digit golds).

    python results/train-study-2/issue63.py
"""

from __future__ import annotations

import re

from report import paired, read_json_gz, runs, summary

ARMS = ["grpo", "numca", "grpo-rerun", "numca-valid"]


def digits(folder) -> tuple[float, float, int]:
    """(tens right, units right, two-digit golds) over the greedy test completions of one run."""
    tens = units = n = 0
    for p in read_json_gz(folder / "test-greedy.json.gz")["problems"]:
        if len(p["answer"]) != 2:
            continue
        n += 1
        got = re.search(r"=\s*(\d+)", p["samples"][0]["text"])
        got = got.group(1) if got else ""
        tens += len(got) == 2 and got[0] == p["answer"][0]
        units += len(got) == 2 and got[1] == p["answer"][1]
    return tens, units, n


def main() -> None:
    found = runs(1)
    acc = {arm: {s: 100 * summary(read_json_gz(f / "test-greedy.json.gz"))["avg"]["mean"]
                 for s, f in found.get(arm, {}).items()} for arm in ARMS}
    print("| arm | seeds | greedy test accuracy (mean) | tens digit | units digit |\n|---|---|---|---|---|")
    for arm in ARMS:
        if not acc[arm]:
            continue
        counts = [digits(f) for f in found[arm].values()]
        n = sum(c[2] for c in counts)
        mean = sum(acc[arm].values()) / len(acc[arm])
        print(f"| {arm} | {len(acc[arm])} | {mean:.1f} | {100 * sum(c[0] for c in counts) / n:.1f}% | "
              f"{100 * sum(c[1] for c in counts) / n:.1f}% |")
    seeds = sorted(set(acc["grpo-rerun"]) | set(acc["numca-valid"]))
    print("\n| seed | " + " | ".join(ARMS) + " |\n|---|" + "---|" * len(ARMS))
    for s in seeds:
        print(f"| {s} | " + " | ".join(f"{acc[a][s]:.1f}" if s in acc[a] else "" for a in ARMS) + " |")
    for a, b in (("numca-valid", "grpo-rerun"), ("grpo-rerun", "grpo"), ("numca", "grpo")):
        d = paired(acc[a], acc[b])
        if d["n"]:
            print(f"\n{a} − {b}, paired over {d['n']} seeds: {d['mean']:+.1f} [{d['lo']:+.1f}, {d['hi']:+.1f}] points "
                  f"(SD {d['sd']:.1f}, p {d['p']:.2f}, MDE at 80% power {d['mde']:.1f})")


if __name__ == "__main__":
    main()
