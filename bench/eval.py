"""Evaluation throughput of ``hista eval`` against the rollout engine's raw generation (SPEC §10, §12).

    python bench/eval.py [--model smollm2-135m-instruct] [--suite builtin] [--limit 32]
                         [--temperature T --k K] [--batch-size 64] [--max-new-tokens N]

In one run on one machine: (1) a fresh ``hista eval`` of the suite (:func:`hista.evaluation.evaluate`
into a temporary folder: generation, verification, the per-problem file, summary, results
files), then (2) the same generation alone: the engine on the same problems in the same
batches with the same settings and seeds, nothing else. Prints problems/s and tokens/s of
both, their ratio, and where the evaluation's wall time went: the engine, verification,
bookkeeping (appending the per-problem file, the summary with its bootstrap intervals and the
results files) and the rest (progress bar, loop). The issue's target is an overhead (everything
but the engine) of at most 10% of the wall time.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import torch

from hista.evaluation import EvalConfig, evaluate, suites
from hista.models import load
from hista.rollout import GenerateEngine, SamplingConfig
from hista.sharding import derive_seed


def raw_generation(lm, benchmarks, problems, config: EvalConfig, max_new_tokens: int) -> tuple[float, int, int]:
    """Seconds, problems and tokens of the engine alone on the evaluation's batches."""
    seconds, count, tokens = 0.0, 0, 0
    for b in benchmarks:
        engine = GenerateEngine(lm, SamplingConfig(temperature=b.temperature, top_p=1.0, max_new_tokens=max_new_tokens,
                                                   batch_size=config.batch_size))
        per_chunk = max(1, config.batch_size // b.samples)
        items = problems[b.name]
        for first in range(0, len(items), per_chunk):
            chunk = items[first:first + per_chunk]
            start = time.perf_counter()
            groups = engine.generate([p["problem"] for p in chunk], b.samples,
                                     seed=derive_seed(config.seed, b.name, chunk[0]["id"]))
            seconds += time.perf_counter() - start
            count += len(chunk)
            tokens += sum(len(r.completion_ids) for g in groups for r in g)
    return seconds, count, tokens


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="smollm2-135m-instruct")
    ap.add_argument("--suite", default="builtin")
    ap.add_argument("--limit", type=int, default=32, help="problems per benchmark")
    ap.add_argument("--temperature", type=float, default=None)
    ap.add_argument("--k", type=int, default=None)
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--max-new-tokens", type=int, default=None)
    args = ap.parse_args()

    config = EvalConfig(model=args.model, suites=args.suite.split(","), k=args.k, temperature=args.temperature,
                        max_new_tokens=args.max_new_tokens, limit=args.limit, batch_size=args.batch_size)
    benchmarks, cap, _ = suites.resolve(config.suites, temperature=config.temperature, k=config.k)
    max_new_tokens = config.max_new_tokens or cap
    problems = {b.name: suites.load_problems(b, config.limit) for b in benchmarks}
    lm = load(args.model)
    print(f"model {lm.name} on {lm.device}, torch {torch.__version__}, threads {torch.get_num_threads()}; suite "
          f"{args.suite}, {sum(map(len, problems.values()))} problems, batch {config.batch_size}, max_new_tokens "
          f"{max_new_tokens}, " + ", ".join(f"{b.name} T={b.temperature:g} n={b.samples}" for b in benchmarks))
    GenerateEngine(lm, SamplingConfig(max_new_tokens=4, batch_size=4)).generate(["warm up"], 4)

    with tempfile.TemporaryDirectory() as tmp:
        result = evaluate(config, Path(tmp) / "results.json", lm=lm, progress=False, log=lambda _: None)
    t = result["timing"]
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
