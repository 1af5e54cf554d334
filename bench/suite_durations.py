"""Where the test suite's time goes (issue 66): per test file and per test, from pytest's JUnit XML,
and side by side with an earlier run.

    .venv/bin/python -m pytest -q --junitxml=runs/suite-after.xml        # one run of the suite
    python bench/suite_durations.py runs/suite-after.xml [--before runs/suite-before.xml] [--top 30]

Prints a Markdown table of the files that took longest (seconds summed over their tests, setup and
teardown included, as pytest's JUnit report counts them; a module fixture's cost lands on its
first test), with the earlier run's figure and the ratio when ``--before`` is given, then the
slowest tests, the test counts and the sums. The sums are test time, not wall time: with
several workers (pytest-xdist) the wall time is shorter.
"""

from __future__ import annotations

import argparse
import gzip
import xml.etree.ElementTree as ET
from collections import defaultdict
from pathlib import Path

from arguments import POSITIVE


def read(path: Path, cpu: bool = False) -> dict[str, float]:
    """Test id (file::name) -> seconds, for every test case of a JUnit XML report (gzipped when
    its name ends in .gz): wall seconds, or with ``cpu`` the CPU seconds ``suite_cpu`` recorded
    (a report without them is an error)."""
    out = {}
    with (gzip.open(path) if path.suffix == ".gz" else open(path, "rb")) as f:
        root = ET.parse(f).getroot()
    for case in root.iter("testcase"):
        module = case.get("classname", "").replace(".", "/")
        if cpu:
            found = [p.get("value") for p in case.iter("property") if p.get("name") == "cpu_s"]
            if not found and case.find("skipped") is not None:
                found = ["0"]  # skipped before it ran (a module skipped at import)
            if not found:
                raise ValueError(f"test {case.get('name')} has no cpu_s property (run pytest with -p suite_cpu)")
            seconds = float(found[0])
        else:
            seconds = float(case.get("time") or 0.0)
        out[f"{module}.py::{case.get('name')}"] = seconds
    return out


def by_file(times: dict[str, float]) -> dict[str, float]:
    files: dict[str, float] = defaultdict(float)
    for test, seconds in times.items():
        files[test.split(".py::")[0] + ".py"] += seconds
    return files


def table(title: str, after: dict[str, float], before: dict[str, float] | None, top: int) -> None:
    print(f"\n### {title}\n")
    if before is None:
        print("| | seconds |\n|---|---|")
    else:
        print("| | before (s) | after (s) | after / before |\n|---|---|---|---|")
    keys = sorted(set(after) | set(before or {}), key=lambda k: -max(after.get(k, 0.0), (before or {}).get(k, 0.0)))
    for key in keys[:top]:
        if before is None:
            print(f"| `{key}` | {after[key]:.1f} |")
        else:
            b, a = before.get(key), after.get(key)
            ratio = f"{a / b:.2f}" if a is not None and b else "—"
            print(f"| `{key}` | {'—' if b is None else f'{b:.1f}'} | {'—' if a is None else f'{a:.1f}'} | {ratio} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("after", type=Path, help="pytest --junitxml report")
    parser.add_argument("--before", type=Path, help="an earlier run's report, shown beside it")
    parser.add_argument("--top", type=POSITIVE, default=30)
    parser.add_argument("--cpu", action="store_true", help="CPU seconds (bench/suite_cpu.py's) instead of wall")
    args = parser.parse_args()
    reports = {}
    for name, path in (("after", args.after), ("--before", args.before)):
        try:
            reports[name] = read(path, args.cpu) if path is not None else None
        except (OSError, ET.ParseError, ValueError) as exc:
            parser.error(f"{name}: {path} is not a readable JUnit XML report ({exc})")
    after, before = reports["after"], reports["--before"]
    table("Per file", by_file(after), by_file(before) if before else None, args.top)
    table("Slowest tests", after, before, args.top)
    runs = [("after", after)] + ([("before", before)] if before else [])
    what = "CPU" if args.cpu else "time"
    print("\n" + "; ".join(f"{name}: {len(t)} tests, {sum(t.values()):.0f} s of test {what}" for name, t in runs))


if __name__ == "__main__":
    main()
