"""The tables and curves of train-study-3 (DESIGN.md here), from runs/ here.

    python results/train-study-3/report.py    # writes report.md and curves.png here

The tables of results/paired_study.py (the primary metric per seed and per arm, the paired
differences against GRPO with Holm's correction and the MDE, the secondary metrics, the curves),
and one secondary metric of this setting: the share of test problems whose greedy answer has all
nine parts right (the primary metric is the mean share of parts right).
"""

from __future__ import annotations

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
RUNS = HERE / "runs"
ARMS = ("grpo", "hista", "probe")  # DESIGN.md

sys.path.insert(0, str(HERE.parent))  # the statistics and tables: results/paired_study.py
from paired_study import mean_ci, pct, read_json_gz, runs, setting_report  # noqa: E402


def all_right(folder: Path) -> float:
    """The share of test problems whose greedy answer scores 1 (every part right)."""
    problems = read_json_gz(folder / "test-greedy.json.gz")["problems"]
    return sum(p["samples"][0]["reward"] == 1.0 for p in problems) / len(problems)


def main() -> None:
    lines = ["# Training study 3: the tables (report.py; DESIGN.md has the design)", ""]
    lines += setting_report(RUNS, "", "## Nine additions per prompt, paid by the share right", HERE / "curves.png",
                            ARMS)
    found = runs(RUNS)
    if found:
        lines += ["**All nine parts right** (greedy test answers, %):", "",
                  "| arm | seeds | mean [95% t-interval over seeds] |", "|---|---|---|"]
        for arm in [a for a in ARMS if a in found] + sorted(set(found) - set(ARMS)):
            m, lo, hi = mean_ci([all_right(folder) for folder in found[arm].values()])
            lines.append(f"| {arm} | {len(found[arm])} | {pct(m)} [{pct(lo)}, {pct(hi)}] |")
        lines.append("")
    (HERE / "report.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
