"""Evaluation throughput of ``hista eval`` against the rollout engine's raw generation (SPEC §10, §12).

    python bench/eval.py [--model smollm2-135m-instruct] [--suite builtin] [--limit 32]
                         [--temperature T --k K] [--batch-size 64] [--max-new-tokens N]
                         [--compare OLD/src]

In one run on one machine: (1) a fresh ``hista eval`` of the suite (:func:`hista.evaluation.evaluate`
into a temporary folder: generation, verification, the per-problem file, summary, results
files), then (2) the same generation alone: the engine on the same problems in the same
batches with the same settings and seeds, nothing else. Prints problems/s and tokens/s of
both, their ratio, and where the evaluation's wall time went: the engine, verification,
bookkeeping (appending the per-problem file, the summary with its bootstrap intervals and the
results files) and the rest (progress bar, loop). The issue's target is an overhead (everything
but the engine) of at most 10% of the wall time.

``--compare OLD/src`` instead times the same ``hista eval`` with another checkout's library
(``PYTHONPATH=OLD/src``) and with this one, each in its own process, taking turns ``--repeat``
times, and prints both side by side: tokens/s and problems/s of the whole evaluation (best
run), their ratio, and each process's peak resident memory (SPEC §12).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch
from arguments import POSITIVE, TEMPERATURE, checked, existing_folder

from hista.evaluation import EvalConfig, evaluate, suites
from hista.models import load
from hista.rollout import GenerateEngine, SamplingConfig


def raw_generation(lm, benchmarks, problems, config: EvalConfig, max_new_tokens: int) -> tuple[float, int, int]:
    """Seconds, problems and tokens of the engine alone on the evaluation's calls: each
    benchmark's problems in one call, each problem seeded by its id, as ``hista eval`` does."""
    from hista.sharding import derive_seed

    seconds, count, tokens = 0.0, 0, 0
    for b in benchmarks:
        engine = GenerateEngine(lm, SamplingConfig(temperature=b.temperature, top_p=1.0, max_new_tokens=max_new_tokens,
                                                   batch_size=config.batch_size))
        items = problems[b.name]
        start = time.perf_counter()
        groups = engine.generate([p["problem"] for p in items], b.samples,
                                 prompt_seeds=[derive_seed(config.seed, b.name, p["id"]) for p in items])
        seconds += time.perf_counter() - start
        count += len(items)
        tokens += sum(len(r.completion_ids) for g in groups for r in g)
    return seconds, count, tokens


def compare(args: argparse.Namespace, old_src: str) -> None:
    """``--compare``: the evaluation with ``old_src``'s library and with this one, in turns."""
    here = str(Path(__file__).resolve().parents[1] / "src")
    argv = [sys.executable, __file__, "--eval-only", "--model", args.model, "--suite", args.suite, "--limit",
            str(args.limit), "--batch-size", str(args.batch_size)]
    options = (("--temperature", args.temperature), ("--k", args.k), ("--max-new-tokens", args.max_new_tokens))
    for flag, value in options:
        if value is not None:
            argv += [flag, str(value)]
    runs: dict[str, list[dict]] = {"before": [], "after": []}
    for _ in range(args.repeat):
        for name, src in (("before", old_src), ("after", here)):
            env = {**os.environ, "PYTHONPATH": src}
            out = subprocess.run(argv, env=env, capture_output=True, text=True, check=True).stdout
            runs[name].append(json.loads(out.strip().splitlines()[-1]))
            print(f"{name}: {runs[name][-1]}", flush=True)
    best = {name: max(r, key=lambda x: x["tokens"] / x["wall_s"]) for name, r in runs.items()}
    print(f"\n{'':8s} {'tokens/s':>9s} {'problems/s':>11s} {'wall s':>7s} {'tokens':>7s} {'peak RSS MiB':>13s}")
    for name, r in best.items():
        print(f"{name:8s} {r['tokens'] / r['wall_s']:9.1f} {r['problems'] / r['wall_s']:11.2f} {r['wall_s']:7.1f} "
              f"{r['tokens']:7d} {max(x['rss_mib'] for x in runs[name]):13.0f}")
    ratio = (best["after"]["tokens"] / best["after"]["wall_s"]) / (best["before"]["tokens"] / best["before"]["wall_s"])
    rss = max(x["rss_mib"] for x in runs["after"]) / max(x["rss_mib"] for x in runs["before"])
    print(f"after / before: {ratio:.2f}x tokens/s, {rss:.2f}x peak RSS")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="smollm2-135m-instruct")
    ap.add_argument("--suite", default="builtin")
    ap.add_argument("--limit", type=POSITIVE, default=32, help="problems per benchmark")
    ap.add_argument("--temperature", type=TEMPERATURE, default=None)
    ap.add_argument("--k", type=POSITIVE, default=None)
    ap.add_argument("--batch-size", type=POSITIVE, default=64)
    ap.add_argument("--max-new-tokens", type=POSITIVE, default=None)
    ap.add_argument("--compare", metavar="OLD/src", type=existing_folder, default=None,
                    help="time hista eval with that library and this one, side by side")
    ap.add_argument("--repeat", type=POSITIVE, default=2, help="--compare: runs of each, taken in turn (best counts)")
    ap.add_argument("--eval-only", action="store_true", help=argparse.SUPPRESS)  # one run, as JSON (--compare)
    args = ap.parse_args()
    config = checked(ap, EvalConfig, model=args.model, suites=args.suite.split(","), k=args.k,
                     temperature=args.temperature, max_new_tokens=args.max_new_tokens, limit=args.limit,
                     batch_size=args.batch_size)
    benchmarks, cap, _ = checked(ap, suites.resolve, config.suites, temperature=config.temperature, k=config.k)
    if args.compare:
        compare(args, args.compare)
        return

    max_new_tokens = config.max_new_tokens or cap
    problems = checked(ap, lambda: {b.name: suites.load_problems(b, config.limit) for b in benchmarks})
    lm = checked(ap, load, args.model)
    print(f"model {lm.name} on {lm.device}, torch {torch.__version__}, threads {torch.get_num_threads()}; suite "
          f"{args.suite}, {sum(map(len, problems.values()))} problems, batch {config.batch_size}, max_new_tokens "
          f"{max_new_tokens}, " + ", ".join(f"{b.name} T={b.temperature:g} n={b.samples}" for b in benchmarks))
    GenerateEngine(lm, SamplingConfig(max_new_tokens=4, batch_size=4)).generate(["warm up"], 4)

    with tempfile.TemporaryDirectory() as tmp:
        result = evaluate(config, Path(tmp) / "results.json", lm=lm, progress=False, log=lambda _: None)
    t = result["timing"]
    if args.eval_only:
        rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        print(json.dumps({"tokens": t["tokens"], "problems": t["problems"], "wall_s": round(t["wall_s"], 2),
                          "generate_s": round(t["generate_s"], 2), "rss_mib": round(rss)}))
        return
    raw_s, raw_problems, raw_tokens = raw_generation(lm, benchmarks, problems, config, max_new_tokens)

    wall = t["wall_s"]
    eval_pps, eval_tps = t["problems"] / wall, t["tokens"] / wall
    raw_pps, raw_tps = raw_problems / raw_s, raw_tokens / raw_s
    print(f"\n{'':24s} {'problems/s':>11s} {'tokens/s':>10s} {'seconds':>9s} {'tokens':>8s}")
    print(f"{'hista eval (wall)':24s} {eval_pps:11.2f} {eval_tps:10.1f} {wall:9.1f} {t['tokens']:8d}")
    print(f"{'engine alone':24s} {raw_pps:11.2f} {raw_tps:10.1f} {raw_s:9.1f} {raw_tokens:8d}")
    print(f"eval / engine: {eval_pps / raw_pps:.2f}x problems/s, {eval_tps / raw_tps:.2f}x tokens/s"
          + ("" if raw_tokens == t["tokens"] else f" (tokens differ: {t['tokens']} vs {raw_tokens})"))
    bookkeeping = t["write_s"] + t["summary_s"]
    rest = wall - t["generate_s"] - t["verify_s"] - bookkeeping
    print(f"\nwall {wall:.1f}s: engine {t['generate_s'] / wall:.1%}, verification {t['verify_s'] / wall:.1%}, "
          f"bookkeeping {bookkeeping / wall:.1%} (per-problem file and results {t['write_s']:.2f}s, summary "
          f"{t['summary_s']:.2f}s), rest {rest / wall:.1%}; overhead (all but the engine) "
          f"{(wall - t['generate_s']) / wall:.1%}")


if __name__ == "__main__":
    main()
