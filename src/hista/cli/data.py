"""``hista sample``, ``hista models`` and ``hista tasks``: problems, models and
rollouts, each parser next to its handler."""

from __future__ import annotations

import argparse
import textwrap
import time

from ..errors import InputError
from .options import FRACTION, POSITIVE, add_command, add_sampling_options, number, sampler, sampling_config

#: each command's line in its parent's ``--help`` and the text its own ``--help`` opens with
HELP = {
    "sample": ("sample rollouts, verify them, print accuracies",
               "Sample G rollouts for each of N problems, verify them, print per-problem accuracy, the mean and one "
               "example, and write the rollouts as JSONL."),
    "models": ("list model aliases or prepare the embedded model",
               "List model aliases, or convert the embedded GGUF model to the cache once."),
    "tasks": ("list, preview or difficulty-filter task sources",
              "List the built-in task generators, print problems from a task source, or keep the problems whose "
              "accuracy under a policy lies in [--lo, --hi] (paper: 0.1-0.8 of 20 samples) and write them as JSONL."),
}


def register(sub: argparse._SubParsersAction) -> None:
    """Add ``sample``, ``models`` and ``tasks`` to the command parser ``sub``."""
    p = add_command(sub, "sample", *HELP["sample"])
    p.add_argument("--tasks", action="append", required=True, metavar="SPEC",
                   help="task source, repeatable: builtin:arith[?steps=2&max_value=20], builtin:choice, "
                        "jsonl:PATH, hf:NAME")
    p.add_argument("--problems", type=POSITIVE, default=8, help="problems per task source (default: %(default)s)")
    p.add_argument("--rollouts", type=POSITIVE, default=4, help="rollouts per problem, G (default: %(default)s)")
    p.add_argument("--split", default="test", choices=["train", "test"],
                   help="built-in task split (default: %(default)s)")
    p.add_argument("--out", default="runs/sample.jsonl", help="rollouts JSONL (default: %(default)s)")
    add_sampling_options(p)
    p.set_defaults(func=cmd_sample)

    p = add_command(sub, "models", *HELP["models"])
    p.add_argument("action", nargs="?", default="list", choices=["list", "prepare"], help="(default: list)")
    p.set_defaults(func=cmd_models)

    p = add_command(sub, "tasks", *HELP["tasks"])
    p.add_argument("action", nargs="?", default="list", choices=["list", "preview", "filter"], help="(default: list)")
    p.add_argument("spec", nargs="?", default="builtin:arith", help="task source (default: %(default)s)")
    p.add_argument("-n", type=POSITIVE, default=3, help="problems to preview or to filter (default: %(default)s)")
    # at most hista.train.pool.MAX_SAMPLES, as a recipe's pool_filter.samples
    p.add_argument("--samples", type=number(int, 1, 1024, what="must be an integer in [1, 1024] (accuracies resolve "
                                            "0.001 at 1024)"),
                   default=20, help="filter: samples per problem, at most 1024 (default: %(default)s)")
    p.add_argument("--lo", type=FRACTION, default=0.1, help="filter: lowest accuracy kept (default: %(default)s)")
    p.add_argument("--hi", type=FRACTION, default=0.8, help="filter: highest accuracy kept (default: %(default)s)")
    p.add_argument("--out", default="runs/filtered.jsonl", help="filter: output JSONL (default: %(default)s)")
    add_sampling_options(p)
    p.add_argument("--split", default="test", choices=["train", "test"], help="(default: %(default)s)")
    p.set_defaults(func=cmd_tasks)


def cmd_sample(args: argparse.Namespace) -> int:
    """`hista sample`: sample and verify rollouts, print accuracies, write them as JSONL.
    A problem whose prompt with ``--max-new-tokens`` passes the model's context is refused, named,
    before anything is sampled."""
    from .. import tasks
    from ..jsonio import check_not_inputs, check_output_file, write_jsonl_atomic
    from ..rollout.engine import check_prompts
    from ..rollout.sample import sample_groups

    check_not_inputs([args.out], tasks.input_files(args.tasks))
    check_output_file(args.out, "jsonl")
    config = sampling_config(args)
    loaded = [(spec, p) for spec in args.tasks for p in tasks.load(spec, n=args.problems, seed=args.seed,
                                                                     split=args.split)]
    problems = [p for _, p in loaded]
    lm, engine = sampler(args, config)
    check_prompts(lm, config.max_new_tokens, [(f"{spec}/{p['id']}", p["problem"]) for spec, p in loaded],
                  config.system_prompt)
    start = time.time()
    groups = sample_groups(engine, problems, args.rollouts, seed=args.seed)
    elapsed = time.time() - start
    n_tokens = sum(len(r.completion_ids) for g in groups for r in g.rollouts)

    print(f"\n{'problem':32s} {'field':10s} {'answer':>8s}  accuracy")
    for g in groups:
        acc = float(g.rewards.mean())
        print(f"{g.prompt_id:32s} {g.problem['field']:10s} {g.problem['answer']:>8s}  {acc:.2f}  "
              + "".join("x" if r.reward > 0 else "." for r in g.rollouts))
    rewards = [r.reward for g in groups for r in g.rollouts]
    mean = sum(rewards) / max(len(rewards), 1)
    print(f"\nmean accuracy {mean:.3f} over {len(groups)} problems x {args.rollouts} rollouts "
          f"({n_tokens} tokens in {elapsed:.0f}s, {n_tokens / max(elapsed, 1e-9):.1f} tok/s)")
    example = next((r for g in groups for r in g.rollouts if r.reward > 0), groups[0].rollouts[0] if groups else None)
    if example is not None:
        print(f"\nexample completion (reward {example.reward:.0f}):\n{example.completion_text}\n")

    meta = {"model": lm.name, "revision": lm.revision, "seed": args.seed, "sampling": config.to_dict(),
            "engine": engine.identity()}
    records = (
        {"problem_id": g.prompt_id, "field": g.problem["field"], "answer": g.problem["answer"],
         "verifier": g.problem["verifier"], "rollout_index": i, **r.to_dict(), **meta}
        for g in groups for i, r in enumerate(g.rollouts)
    )
    path = write_jsonl_atomic(args.out, records)
    print(f"wrote {len(rewards)} rollouts to {path}")
    return 0


def cmd_models(args: argparse.Namespace) -> int:
    """`hista models`: list the model aliases or prepare the embedded model."""
    from ..models import ALIASES, EMBEDDED, cache_dir, prepare_embedded

    if args.action == "prepare":
        print(f"embedded model ready at {prepare_embedded()}")
        return 0
    for name, description in ALIASES.items():
        print(f"{name:24s} {description}")
    print(f"\nany Hugging Face id (owner/name) or local folder also works. Cache: {cache_dir()} "
          f"(set HISTA_CACHE to move it); `hista models prepare` converts {EMBEDDED} once.")
    return 0


def cmd_tasks(args: argparse.Namespace) -> int:
    """`hista tasks`: list, preview or difficulty-filter task sources."""
    from .. import tasks

    if args.action == "list":
        for name, description in tasks.list_builtin().items():
            print(f"builtin:{name:10s} {description}")
        print("\nsources:")
        for prefix in tasks.names():
            print(f"{prefix + ':':10s} {tasks.REGISTRY.lookup(prefix).description}")
        from ..tasks.gym import listing

        print("\nreasoning-gym's tasks (gym:TASK?option=value&...):")
        print("\n".join(textwrap.fill(line, 100, subsequent_indent="    ") for line in listing()))
        return 0
    if args.action == "preview":
        print(tasks.preview(args.spec, n=args.n, seed=args.seed, split=args.split))
        return 0
    return filter_tasks(args)


def filter_tasks(args: argparse.Namespace) -> int:
    """`hista tasks filter`: keep the problems whose accuracy under the policy lies in [--lo,
    --hi] and write them as JSONL; a problem whose prompt with ``--max-new-tokens``
    passes the model's context is refused, named, before anything is sampled."""
    from .. import tasks
    from ..jsonio import check_not_inputs, check_output_file, write_jsonl_atomic
    from ..rollout.engine import check_prompts
    from ..rollout.sample import policy_accuracy

    if args.lo > args.hi:
        raise InputError(f"--lo {args.lo} is above --hi {args.hi}: no accuracy lies in between", field="--lo")
    check_not_inputs([args.out], tasks.input_files([args.spec]))
    check_output_file(args.out, "jsonl")
    config = sampling_config(args)
    problems = tasks.load(args.spec, n=args.n, seed=args.seed, split=args.split)
    lm, engine = sampler(args, config)
    check_prompts(lm, config.max_new_tokens, [(f"{args.spec}/{p['id']}", p["problem"]) for p in problems],
                  config.system_prompt)
    accuracies = policy_accuracy(engine, problems, args.samples, seed=args.seed)
    kept = tasks.filter_by_accuracy([dict(p, accuracy=a) for p, a in zip(problems, accuracies)],
                                    accuracies, args.lo, args.hi)
    path = write_jsonl_atomic(args.out, kept)
    print(f"kept {len(kept)} of {len(problems)} problems with accuracy in [{args.lo}, {args.hi}] over "
          f"{args.samples} samples of {lm.name}; wrote {path} (use it as --tasks jsonl:{path})")
    return 0
