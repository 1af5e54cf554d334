"""What a case file holds: response lengths, initial accuracy and Hista's nodes per response.

    python results/sveb-study/describe.py CASES [--interval 50 --interval 10]

Prints markdown: case and problem counts; the completion length of every initial rollout
(each group counted once, however many states it has); the initial accuracy of the kept
problems and of every problem sampled (skips included, from their skip records); the number
of interior Hista nodes per response at each interval (positions k·interval strictly inside
the completion, SPEC §4.3); and where the states sit (t and t/T).
"""

from __future__ import annotations

import argparse
import statistics

from hista.sveb import read_case_records


def quartiles(values: list[float]) -> str:
    """'median (quartiles q1 and q3; min-max)' of ``values``."""
    q1, q2, q3 = statistics.quantiles(values, n=4, method="inclusive")
    return f"{q2:g} (quartiles {q1:g} and {q3:g}; {min(values):g}-{max(values):g})"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("cases")
    ap.add_argument("--interval", type=int, action="append", help="Hista node interval (default 50 and 10)")
    args = ap.parse_args()
    records = read_case_records(args.cases)
    kept = [r for r in records if r["kind"] == "case"]
    skips = [r for r in records if r["kind"] == "skip"]
    groups = {}
    for r in kept:  # the states of one problem share its rollouts
        groups.setdefault(r["key"].split("#")[0], r)
    lengths = [len(x["completion_ids"]) for g in groups.values() for x in g["rollouts"]]
    cap = kept[0]["settings"]["max_new_tokens"]
    accuracy = [g["accuracy"] for g in groups.values()]
    sampled = accuracy + [s["accuracy"] for s in skips]
    inside = sum(0.1 - 1e-9 <= a <= 0.8 + 1e-9 for a in sampled)
    print(f"- cases: {len(kept)} from {len(groups)} problems ({len(skips)} more problems skipped: "
          f"initial accuracy outside the filter)")
    print(f"- completion length of the {len(lengths)} initial rollouts, tokens: {quartiles(lengths)}; "
          f"{sum(n >= cap for n in lengths) / len(lengths):.0%} reach the {cap}-token cap")
    print(f"- initial accuracy, kept problems: {quartiles(accuracy)}")
    print(f"- initial accuracy, all {len(sampled)} problems sampled: {quartiles(sampled)}; "
          f"{inside / len(sampled):.0%} inside [0.1, 0.8]")
    for interval in args.interval or [50, 10]:
        nodes = [max(0, (n - 1) // interval) for n in lengths]
        print(f"- interior Hista nodes per response at interval {interval}: {quartiles(nodes)}")
    ts = [r["state"]["t"] for r in kept]
    rel = [r["state"]["t"] / len(r["rollouts"][r["state"]["rollout"]]["completion_ids"]) for r in kept]
    print(f"- state position t: {quartiles(ts)}; t/T: {quartiles([round(x, 2) for x in rel])}")


if __name__ == "__main__":
    main()
