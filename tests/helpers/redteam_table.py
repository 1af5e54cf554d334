"""Score every completion of the code verifiers' red team (tests/rewards/redteam_code.py) and print a
markdown table: reward and reason. ``PYTHONPATH=OTHER/src python tests/helpers/redteam_table.py``
scores them with another checkout's verifiers (e.g. the commit before a fix)."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "rewards"))
from redteam_code import MBPP_ROW, attacks  # noqa: E402

from hista import rewards, tasks  # noqa: E402


def main() -> None:
    records = {r["id"]: r for r in tasks.load("humaneval:all")}
    entry_points = {k: json.loads(r["answer"])["entry_point"] for k, r in records.items()}
    print("| attack | family | form | reward | reason |")
    print("|---|---|---|---|---|")
    paid = 0
    start = time.time()
    for attack in attacks(entry_points):
        answer = json.dumps(MBPP_ROW) if attack.problem == "mbpp" else records[attack.problem]["answer"]
        reward, reason = rewards.verify_with_reason("python-tests", attack.completion, answer)
        paid += reward > 0
        print(f"| {attack.id} | {attack.family} | {attack.form} | {reward:.1f} | {reason.replace('|', '/')[:100]} |",
              flush=True)
    print(f"\n{paid} of {len(attacks(entry_points))} attacks scored; {time.time() - start:.0f} s")


if __name__ == "__main__":
    main()
