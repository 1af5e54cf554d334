"""``hista eval`` with ``merge`` and ``compare``: evaluate a model or a ``hista
train`` checkpoint on benchmark suites, join a sharded evaluation, put runs side by side; each
parser next to its handler."""

from __future__ import annotations

import argparse

from ..errors import InputError
from .options import POSITIVE, SEED, TEMPERATURE, add_command, add_engine_options, device

#: each command's line in its parent's ``--help`` and the text its own ``--help`` opens with
HELP = {
    "eval": ("evaluate a model on benchmark suites (avg@k, pass@k); compare runs",
             "Evaluate a model or a hista train checkpoint on benchmark suites (docs/evaluation.md): accuracy "
             "avg@k and pass@k per benchmark, category and overall, with bootstrap 95% intervals over problems. "
             "Writes OUT (results JSON), OUT's .samples.jsonl (every problem as it finishes: a rerun with the "
             "same settings resumes) and OUT's .md table. 'hista eval compare A.json B.json' puts runs side by "
             "side."),
    "eval merge": ("join the results of a sharded evaluation",
                   "Join the results files of every shard of one evaluation (hista eval --shard K/N) into the results, "
                   "table and per-problem file of a whole evaluation; refuses parts of different evaluations, missing "
                   "or repeated shards and missing or repeated problems."),
    "eval compare": ("runs side by side, paired differences from the first",
                     "Put hista eval results side by side per benchmark, category and ALL, with each later run's "
                     "paired difference from the first (same problems) and its bootstrap 95% interval. Runs whose "
                     "settings differ other than the model are refused, naming the fields, unless --force."),
}


def register(sub: argparse._SubParsersAction) -> None:
    """Add ``eval`` (and its actions ``merge`` and ``compare``) to the command parser ``sub``."""
    p = _add_eval(sub)
    actions = p.add_subparsers(dest="action", metavar="[compare|merge]")
    _add_merge(actions)
    _add_compare(actions)


def _add_eval(sub: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """``eval``: the model, the suites, the sampling, the output and a shard of an evaluation."""
    p = add_command(sub, "eval", *HELP["eval"])
    p.add_argument("--model", default="smollm2-135m-instruct",
                   help="alias (smollm2-135m-instruct, tiny), model folder, Hugging Face id, or a hista train run or "
                        "checkpoint (runs/x, runs/x/final, runs/x/checkpoint-50), posed with the run's system prompt "
                        "(default: %(default)s)")
    p.add_argument("--suite", action="append", metavar="SUITE[,SUITE...]",
                   help="presets builtin, humaneval, gym, champ (offline), paper-math, paper-hybrid (Hugging Face "
                        "hub), or task source specs (builtin:arith?steps=2, gym:chain_sum, champ:test, jsonl:PATH, "
                        "hf:math500), comma-separated or repeated")
    p.add_argument("--k", type=POSITIVE, default=None,
                   help="samples per problem when sampling: avg@k and pass@1..k (default: each benchmark's own; 1 for "
                        "a task spec). Greedy decoding takes one sample whatever k says")
    p.add_argument("--temperature", type=TEMPERATURE, default=None,
                   help="sampling temperature for every benchmark, 0 = greedy (default: each benchmark's own; 0 for a "
                        "task spec; the paper presets: 0, AMC and AIME 0.1)")
    p.add_argument("--max-new-tokens", type=POSITIVE, default=None,
                   help="completion length cap (default: the preset's, 512 for task specs)")
    p.add_argument("--limit", type=POSITIVE, default=None, help="at most N problems per benchmark, the first ones")
    p.add_argument("--out", default="runs/eval/results.json", help="results JSON (default: %(default)s)")
    p.add_argument("--seed", type=SEED, default=0, help="seed of the sampling and the bootstrap (default: %(default)s)")
    p.add_argument("--device", type=device, default=None, help="cpu or cuda (default: cuda if available)")
    p.add_argument("--batch-size", type=POSITIVE, default=64,
                   help="sequences per generation batch, problems mixed (default: %(default)s)")
    p.add_argument("--shard", metavar="K/N", help="evaluate only the K-th of N disjoint parts of the problems (one "
                                                  "per machine); join the parts' results with hista eval merge")
    add_engine_options(p, "hf")
    p.set_defaults(func=cmd_eval)
    return p


def cmd_eval(args: argparse.Namespace) -> int:
    """`hista eval`: evaluate a model on benchmark suites, avg@k and pass@k, resumably."""
    from ..evaluation import EvalConfig, evaluate
    from ..sharding import parse

    if not args.suite:
        raise InputError("give --suite: a preset (builtin, humaneval, gym, champ, paper-math, paper-hybrid) or a "
                         "task source spec such as builtin:arith?steps=2, gym:chain_sum, jsonl:PATH or hf:math500",
                         field="suite")
    suites = [part.strip() for item in args.suite for part in item.split(",")]
    config = EvalConfig(model=args.model, suites=suites, k=args.k, temperature=args.temperature,
                        max_new_tokens=args.max_new_tokens, limit=args.limit, seed=args.seed,
                        batch_size=args.batch_size, engine=args.engine,
                        tensor_parallel_size=args.tensor_parallel_size)
    shard = parse(args.shard) if args.shard is not None else None
    result = evaluate(config, args.out, device=args.device, shard=shard)
    if shard is not None:
        print(f"shard {shard[0]}/{shard[1]}: join the parts' results with hista eval merge")
    t = result["timing"]
    print("\n" + result["table"])
    print(f"evaluated {result['evaluated']} problems now ({result['found']} were done before): {t['samples']} samples, "
          f"{t['tokens']} tokens in {t['wall_s']:.0f}s ({t['tokens'] / max(t['generate_s'], 1e-9):.0f} tokens/s "
          f"generating)\n  results: {result['results']}\n  per-problem samples: {result['samples']}\n"
          f"  table: {result['markdown']}")
    return 0


def _add_merge(actions: argparse._SubParsersAction) -> None:
    """``eval merge``: the shards' results files and the merged file."""
    q = add_command(actions, "merge", *HELP["eval merge"])
    q.add_argument("parts", nargs="+", metavar="RESULTS.json", help="the shards' results files")
    q.add_argument("--out", dest="merge_out", required=True, metavar="RESULTS.json", help="the merged results JSON")
    q.set_defaults(func=cmd_eval_merge)


def cmd_eval_merge(args: argparse.Namespace) -> int:
    """`hista eval merge`: join the results of a sharded evaluation."""
    from ..evaluation.merge import merge

    table = merge(args.parts, args.merge_out)
    print("\n" + table)
    print(f"eval merge: {len(args.parts)} parts -> {args.merge_out}")
    return 0


def _add_compare(actions: argparse._SubParsersAction) -> None:
    """``eval compare``: the results files, the metric, the table's file and the bootstrap seed."""
    q = add_command(actions, "compare", *HELP["eval compare"])
    q.add_argument("results", nargs="+", metavar="RESULTS.json", help="results files of hista eval; the first is "
                                                                       "the baseline")
    q.add_argument("--force", action="store_true", help="compare runs whose settings differ (listed in the table)")
    q.add_argument("--metric", default="avg", help="avg (avg@k) or pass@K (default: %(default)s)")
    q.add_argument("--out", dest="compare_out", default=None, metavar="TABLE.md",
                   help="also write the table there and its numbers to the .json beside it")
    q.add_argument("--seed", dest="compare_seed", type=SEED, default=0, metavar="SEED",
                   help="seed of the bootstrap (default: %(default)s)")
    q.set_defaults(func=cmd_eval_compare)


def cmd_eval_compare(args: argparse.Namespace) -> int:
    """`hista eval compare`: results side by side with paired differences from the first."""
    from ..evaluation.compare import compare_to_files

    _, text, written = compare_to_files(args.results, args.compare_out, force=args.force, metric=args.metric,
                                        seed=args.compare_seed)
    print(text)
    if written:
        print(f"wrote {' and '.join(map(str, written))}")
    return 0
