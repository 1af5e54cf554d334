"""How long each example of examples/ takes, as a new user runs it (issue 66: each should finish
in two minutes on two CPU cores with the embedded model).

    .venv/bin/python bench/examples.py [--threads 2] [--repeat 1]

Runs each example as tests/test_examples.py does (a process of its own, offline, its default
arguments except the test's), with ``OMP_NUM_THREADS`` set to ``--threads``, and prints its wall
time, its CPU time (user + system, the process and its children) and the wall time as a share of
the two-minute target. Wall time depends on what else the machine runs; the CPU time much less.
"""

from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

from arguments import integer

ROOT = Path(__file__).resolve().parents[1]
#: each example with the arguments tests/test_examples.py gives it
EXAMPLES = {
    "own_loop.py": ["--steps", "2"],
    "compare_estimators.py": ["--continuations", "4"],
}
TARGET = 120.0


def cpu_of_children() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--threads", type=integer(), default=2, help="OMP_NUM_THREADS of each example (default 2)")
    ap.add_argument("--repeat", type=integer(), default=1, help="runs of each example (default 1)")
    args = ap.parse_args()
    env = {**os.environ, "OMP_NUM_THREADS": str(args.threads), "HF_HUB_OFFLINE": "1"}
    print(f"| example | run | wall s | CPU s | wall / {TARGET:.0f} s |")
    print("|---|---|---|---|---|")
    for name, extra in EXAMPLES.items():
        for run in range(args.repeat):
            cpu, start = cpu_of_children(), time.perf_counter()
            subprocess.run([sys.executable, str(ROOT / "examples" / name), *extra], cwd=ROOT, env=env, check=True,
                           stdout=subprocess.DEVNULL, stdin=subprocess.DEVNULL)
            wall, cpu = time.perf_counter() - start, cpu_of_children() - cpu
            print(f"| {name} | {run + 1} | {wall:.1f} | {cpu:.1f} | {wall / TARGET:.2f} |", flush=True)


if __name__ == "__main__":
    main()
