"""Throughput of the ``python-tests`` verifier on HumanEval (SPEC §6, §12).

    python bench/verifier.py [--problems 164] [--threads 1] [--compare OLD/src]

Scores HumanEval's canonical solutions and a ``return None`` body for each problem (two
verifications per problem, as ``tests/tasks/test_humaneval.py`` does), ``--threads`` at a time, and
prints programs per second. Beside it, on the same machine in the same run: one bare sandboxed
program (``run_sandboxed("pass")``, the cost of one sandbox start) per verification, so the
table shows what the verifier's second process (the judge on the trusted side of the boundary)
costs. ``--compare OLD/src`` also times another checkout's verifier (``PYTHONPATH=OLD/src``, in
its own process) and prints the ratio. The issue's target: at least 10 programs/s on 2 cores.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

from arguments import POSITIVE, existing_folder

_SCORE = r"""
import json, sys, time
from concurrent.futures import ThreadPoolExecutor
from hista import rewards, tasks
from hista.rewards import sandbox
problems, threads = int(sys.argv[1]), int(sys.argv[2])
records = tasks.load("humaneval:all")[:problems]
jobs = [(r["meta"]["canonical_solution"], r["answer"], 1.0) for r in records]
jobs += [("    return None\n", r["answer"], 0.0) for r in records]
sandbox.run_sandboxed("pass")  # the backend is probed once, outside the timing
rewards.get("python-tests")  # and the registry loaded (older checkouts' registries were not thread-safe)
def score(job):
    completion, answer, want = job
    return rewards.verify_with_reason("python-tests", completion, answer)[0] == want
start = time.perf_counter()
with ThreadPoolExecutor(threads) as pool:
    right = sum(pool.map(score, jobs))
seconds = time.perf_counter() - start
start = time.perf_counter()
with ThreadPoolExecutor(threads) as pool:
    list(pool.map(lambda _: sandbox.run_sandboxed("pass"), jobs))
bare = time.perf_counter() - start
print(json.dumps({"programs": len(jobs), "right": right, "seconds": seconds, "bare_seconds": bare}))
"""


def measure(src: str | None, problems: int, threads: int) -> dict:
    """One process scoring the jobs with the library of ``src`` (None: this checkout's)."""
    env = dict(os.environ, **({"PYTHONPATH": src} if src else {}))
    out = subprocess.run([sys.executable, "-c", _SCORE, str(problems), str(threads)], env=env, capture_output=True,
                         text=True)
    if out.returncode != 0:
        sys.exit(f"verifier.py: the run with {src or 'this checkout'} failed:\n{out.stderr[-2000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--problems", type=POSITIVE, default=164, help="HumanEval problems to score (default all 164)")
    ap.add_argument("--threads", type=POSITIVE, default=1, help="verifications at a time (default 1)")
    ap.add_argument("--compare", type=existing_folder, metavar="OLD/src", help="also time another checkout's verifier")
    args = ap.parse_args()
    runs = [("this checkout", None)] + ([(f"{args.compare}", args.compare)] if args.compare else [])
    results = [(name, measure(src, args.problems, args.threads)) for name, src in runs]
    print("| verifier | programs | right | seconds | programs/s | ms/program | bare sandbox ms | "
          "verifier / bare |")
    print("|---|---|---|---|---|---|---|---|")
    for name, r in results:
        per = 1000 * r["seconds"] / r["programs"]
        bare = 1000 * r["bare_seconds"] / r["programs"]
        print(f"| {name} | {r['programs']} | {r['right']} | {r['seconds']:.1f} | {r['programs'] / r['seconds']:.1f} | "
              f"{per:.0f} | {bare:.0f} | {per / bare:.2f}x |")
    if len(results) == 2:
        ratio = results[0][1]["seconds"] / results[1][1]["seconds"]
        print(f"\nthis checkout / {results[1][0]}: {ratio:.2f}x the time per program")


if __name__ == "__main__":
    main()
