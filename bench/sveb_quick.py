"""Wall time of the quick SVEB preset, split into its parts, and its peak memory.

    python bench/sveb_quick.py --out /tmp/sveb-quick-bench

Builds the ``quick`` preset's cases into OUT/cases.jsonl (a fresh folder: nothing to resume),
timing the engine's initial rollouts and Monte-Carlo continuations separately, then evaluates
the default methods on them, and prints seconds per problem and per case and the peak resident
memory of the process (SPEC §8, §12). Run it from two checkouts (``PYTHONPATH=OLD/src``) on one
machine, one after the other, to compare them; ``--eval-only CASES`` times ``sveb eval`` alone
on one case file, for comparing two checkouts on the same cases.
"""

from __future__ import annotations

import argparse
import resource
import time
from pathlib import Path

from arguments import checked, existing_file, new_path

from hista.rollout import GenerateEngine
from hista.sveb.build import build
from hista.sveb.eval import evaluate
from hista.sveb.presets import DEFAULT_METHODS, PRESETS

spent = {"rollouts": 0.0, "continuations": 0.0}


def _timed(method, key):
    def wrapper(self, *args, **kwargs):
        start = time.perf_counter()
        try:
            return method(self, *args, **kwargs)
        finally:
            spent[key] += time.perf_counter() - start
    return wrapper


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=new_path, required=True, help="a folder that does not exist yet")
    ap.add_argument("--eval-only", metavar="CASES", type=existing_file,
                    help="skip the build: time sveb eval on this case file")
    args = ap.parse_args()
    if args.eval_only:
        start = time.perf_counter()
        results = checked(ap, evaluate, args.eval_only, DEFAULT_METHODS, progress=False)
        cases = len(results["cases"])
        print(f"eval: {time.perf_counter() - start:.0f} s for {cases} cases, "
              f"{(time.perf_counter() - start) / cases:.2f} s per case")
        return
    out = Path(args.out)
    # generate() calls generate_from_ids(): continuations = time in generate_from_ids - rollouts
    GenerateEngine.generate = _timed(GenerateEngine.generate, "rollouts")
    GenerateEngine.generate_from_ids = _timed(GenerateEngine.generate_from_ids, "continuations")
    config = PRESETS["quick"]
    start = time.perf_counter()
    counts = build(config, out / "cases.jsonl", progress=False)
    build_s = time.perf_counter() - start
    problems = counts["cases"] + counts["skipped"]
    continuations = spent["continuations"] - spent["rollouts"]
    start = time.perf_counter()
    results = evaluate(out / "cases.jsonl", DEFAULT_METHODS, progress=False)
    eval_s = time.perf_counter() - start
    cases = len(results["cases"])
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"build: {build_s:.0f} s for {problems} problems ({counts['cases']} cases), {build_s / problems:.1f} s per "
          f"problem: rollouts {spent['rollouts'] / problems:.1f} s, continuations {continuations / problems:.1f} s")
    print(f"eval: {eval_s:.0f} s for {cases} cases, {eval_s / cases:.2f} s per case ({', '.join(DEFAULT_METHODS)})")
    print(f"peak RSS: {rss:.0f} MiB")


if __name__ == "__main__":
    main()
