"""The tables and curves of the powered training study (README.md here), from runs/ here.

    python results/train-study-2/report.py [--settings 1 2]    # writes report.md and curves-K.png

Per setting: the per-seed table of the primary metric (greedy accuracy of the final checkpoint
on the setting's test problems), each arm's mean with a seed-level 95% t-interval, the paired
difference against GRPO over the seeds both have (mean, 95% t-interval, p, Holm over the
comparisons, the MDE at 80% power from the measured SD of the differences), the secondary
metrics, and the curves (train reward, validation accuracy, entropy, completion length: the mean
over seeds with the range over seeds as a band). Only complete runs (test-t07.json.gz written)
count.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
RUNS = HERE / "runs"
ARMS = ("grpo", "hista", "numca", "probe", "strace")

sys.path.insert(0, str(HERE.parent))  # the statistics and tables: results/paired_study.py
from paired_study import paired, read_json_gz, setting_report, summary  # noqa: E402,F401  (issue63.py imports them)
from paired_study import runs as runs_under  # noqa: E402


def runs(setting: int) -> dict[str, dict[int, Path]]:
    """arm -> seed -> folder of the complete runs of ``setting``."""
    return runs_under(RUNS, f"s{setting}-")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--settings", type=int, nargs="+", default=[1, 2])
    args = ap.parse_args()
    lines = ["# Training study 2: the tables (report.py; README.md has the design and the reading)", ""]
    for setting in args.settings:
        lines += setting_report(RUNS, f"s{setting}-", f"## Setting {setting}", HERE / f"curves-{setting}.png",
                                ARMS)
    (HERE / "report.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
