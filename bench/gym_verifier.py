"""Cost of the ``gym`` verifier per call (SPEC §6, §12; issue 62: the scorers run in the sandbox).

    python bench/gym_verifier.py [--problems 25] [--compare OLD/src]

Loads ``--problems`` test problems of each of four reasoning-gym tasks (``chain_sum``,
``gsm_symbolic``, ``spiral_matrix``, ``countdown``) and verifies two completions per problem, the
gold answer boxed and a wrong one, as training does; prints the first call (the scorer's process
started) and the mean of the warm calls. Beside it, in the same process: the task's own scorer
called directly, in this process, with nothing around it (the cost the verifier adds on top of
the scoring itself). ``--compare OLD/src`` also times another checkout's verifier
(``PYTHONPATH=OLD/src``, in its own process) and prints the ratio.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

from arguments import POSITIVE, existing_folder

_SCORE = r"""
import json, logging, sys, time
logging.disable(logging.WARNING)
import reasoning_gym
from hista import rewards, tasks
problems = int(sys.argv[1])
jobs = []
for task in ("chain_sum", "gsm_symbolic", "spiral_matrix", "countdown"):
    for r in tasks.load("gym:" + task, n=problems, seed=0, split="test"):
        jobs += [("\\boxed{%s}" % r["meta"]["gold"], r["answer"], 1.0), ("\\boxed{12}", r["answer"], 0.0)]
start = time.perf_counter()
first = rewards.verify("gym", *jobs[0][:2]) == jobs[0][2]
first_seconds = time.perf_counter() - start
start = time.perf_counter()
right = sum(rewards.verify("gym", completion, answer) == want for completion, answer, want in jobs)
seconds = time.perf_counter() - start
scorers = {}
start = time.perf_counter()
for completion, answer, _ in jobs:
    record = json.loads(answer)
    if record["task"] not in scorers:
        scorers[record["task"]] = reasoning_gym.create_dataset(record["task"], seed=0, size=1)
    scorers[record["task"]].score_answer(completion[7:-1], record["entry"])
bare = time.perf_counter() - start
print(json.dumps({"calls": len(jobs), "right": right + first, "first_seconds": first_seconds, "seconds": seconds,
                  "bare_seconds": bare}))
"""


def measure(src: str | None, problems: int) -> dict:
    """One process verifying the jobs with the library of ``src`` (None: this checkout's)."""
    env = dict(os.environ, **({"PYTHONPATH": src} if src else {}))
    out = subprocess.run([sys.executable, "-c", _SCORE, str(problems)], env=env, capture_output=True, text=True)
    if out.returncode != 0:
        sys.exit(f"gym_verifier.py: the run with {src or 'this checkout'} failed:\n{out.stderr[-2000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--problems", type=POSITIVE, default=25, help="test problems per task (default 25)")
    ap.add_argument("--compare", type=existing_folder, metavar="OLD/src", help="also time another checkout's verifier")
    args = ap.parse_args()
    runs = [("this checkout", None)] + ([(f"{args.compare}", args.compare)] if args.compare else [])
    results = [(name, measure(src, args.problems)) for name, src in runs]
    print("| verifier | calls | right | first call s | ms/call (warm) | scorer in-process ms/call | "
          "verifier / in-process |")
    print("|---|---|---|---|---|---|---|")
    for name, r in results:
        per = 1000 * r["seconds"] / r["calls"]
        bare = 1000 * r["bare_seconds"] / r["calls"]
        print(f"| {name} | {r['calls'] + 1} | {r['right']} | {r['first_seconds']:.2f} | {per:.2f} | {bare:.3f} | "
              f"{per / bare:.0f}x |")
    if len(results) == 2:
        ratio = results[0][1]["seconds"] / results[1][1]["seconds"]
        print(f"\nthis checkout / {results[1][0]}: {ratio:.2f}x the time per warm call")


if __name__ == "__main__":
    main()
