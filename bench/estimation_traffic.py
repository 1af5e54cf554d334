"""Bytes moved between processes and per-process memory of advantage estimation in training
(SPEC §9; issue 15), for each GPU recipe, old path against group-local estimation.

    python bench/estimation_traffic.py                        # every recipe under recipes/gpu/
    python bench/estimation_traffic.py RECIPE.yaml --prompt-tokens 1024
    python bench/estimation_traffic.py recipes/gpu/qwen2.5-1.5b-math/dapo-hista.yaml \
        --set trl.generation_batch_size=64 trl.steps_per_generation=null allow_split_groups=true  # split

Old path (every process gathered the whole generation batch and estimated every group): each
process receives the other processes' prompt and completion ids and masks, padded to the
longest row (int64), and, for an estimator that reads hidden states, their captured layer
[rows, P + T, H] in the training dtype; it then holds the whole batch's hidden states.
Group-local path (a recipe whose rows per process are a multiple of G, which the validator
requires unless ``allow_split_groups: true``): nothing crosses processes while advantages are
computed (TRL has already gathered the rewards), and each process holds its own rows only.
Split path (``hista.train.split``, a layout whose groups span processes): a group's owner (the
process holding its first row) receives the other rows of its groups, their ids and the part
past the prompt of what the estimator reads (Hista with a fixed stride, e.g. its paper profile:
its smoothed vectors at every ``stride``-th position, float32; otherwise, the default profile's
rule-resolved stride included, the completion tokens' hidden states), and
sends their advantages back (float32); the column shows the process that receives most.
The ``critic`` estimator (PPO) still gathers ids and masks, so that its copies on every process
train on the same groups; it reads no captured hidden states.

Sequences are counted at their padded maximum, P (``--prompt-tokens``, an assumption: TRL pads
prompts to the longest of the batch) plus ``max_completion_length``, the worst case a step can
reach. Hidden sizes are the models' ``config.json`` values, listed below (this script reads no
hub).

``--verl`` prints instead, for hista inside verl (``hista.integrations.verl_hidden``; default
G 16 · T 8,192 · H 1,536 × 32 prompts, P 512, 8 actor ranks), the bytes per step that cross Ray
(through verl's TransferQueue: actor to store, store to driver) with the states compressed on the
actor against shipping the layer's hidden states (bfloat16, the training dtype), and each actor
rank's extra memory: on the accelerator, one micro-batch's captured layer held until its output
is prepared and the float32 temporaries of compressing the longest sequence (about four copies
of [P + T, H]); on the host, the rank's compressed states until the call returns.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from arguments import POSITIVE, checked, existing_file, override

from hista import estimators
from hista.train import load_recipe

ROOT = Path(__file__).resolve().parents[1]
#: hidden_size of the models the GPU recipes train (their config.json).
HIDDEN = {"Qwen/Qwen2.5-1.5B": 1536, "Qwen/Qwen2.5-1.5B-Instruct": 1536, "Qwen/Qwen2.5-Math-1.5B": 1536,
          "Qwen/Qwen3-1.7B-Base": 2048, "Qwen/Qwen2.5-7B": 3584, "Qwen/Qwen2.5-14B": 5120}
GB = 1e9


def traffic(path: Path, prompt_tokens: int, overrides: list[str]) -> dict:
    """Old and new bytes received per process per generation batch and memory per process for
    the hidden states of one recipe (with ``key=value`` overrides)."""
    recipe = load_recipe(path, overrides)
    layout = recipe.batch_layout()
    est = estimators.get(recipe.estimator_config()["name"],
                         **{k: v for k, v in recipe.advantage_estimator.items() if k not in ("name", "gae_lambda",
                                                                                              "scale")})
    world, rows, total = recipe.world_size, layout["rows_per_process"], layout["generation_batch"]
    width = prompt_tokens + recipe.trl["max_completion_length"]
    hidden = HIDDEN.get(recipe.model)
    dtype_bytes = 2 if recipe.trl.get("bf16") else 4
    ids = 2 * 2 * width * 8  # ids and mask of prompt and completion, int64
    per_row_hidden = width * hidden * dtype_bytes if est.needs_hidden and hidden else 0
    others = total - rows
    with_policy = estimators.critic_trains_with_policy(est)
    local = layout["group_local"] and not with_policy  # a critic sees every group on every process
    completion = recipe.trl["max_completion_length"]
    received, states = [0] * world, [0] * world  # the split path: rows to their owners, advantages back
    sent_states = completion * hidden * dtype_bytes if per_row_hidden else 0  # raw completion states
    stride = getattr(est.config, "stride", None)  # Hista's representation: a fixed stride, not the reference's
    if per_row_hidden and est.name == "hista" and est.profile != "reference" and stride:
        sent_states = (-(-width // stride) - -(-prompt_tokens // stride)) * hidden * 4
    for row in range(total):
        holder, owner = row // rows, (row // layout["num_generations"] * layout["num_generations"]) // rows
        if holder != owner:
            states[owner] += sent_states
            received[owner] += ids
            received[holder] += completion * 4
    received = [r + s for r, s in zip(received, states)]
    return {"recipe": str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else str(path),
            "estimator": est.name, "world": world, "G": layout["num_generations"], "rows": rows, "total": total,
            "width": width, "H": hidden, "local": local,
            "old_in": others * (ids + per_row_hidden), "old_mem": total * per_row_hidden,
            "new_in": 0 if local else (others * ids if with_policy else max(received)),
            "new_mem": rows * per_row_hidden + (0 if local else max(states))}


def verl_traffic(est, groups: int, size: int, prompt: int, completion: int, hidden: int, ranks: int,
                 micro_tokens: int, state_bytes: int) -> dict:
    """Bytes per step across Ray and per-rank extra memory of ``est`` inside verl (``--verl``)."""
    from hista.types import Rollout

    rows = groups * size
    group = [Rollout(prompt_ids=[0] * prompt, completion_ids=[0] * completion) for _ in range(size)]
    if est.name == "hista":
        _, stride = est.structure(group)
        vectors = -(-(prompt + completion if est.config.include_prompt else completion) // stride)
        extra = 2 * 8 + 40  # the stride field to the store and to the actor, the driver's fetch of the uid
    else:
        stride, vectors, extra = 1, completion + 1, 0
    states = rows * vectors * hidden * state_bytes
    layer = rows * (prompt + completion) * hidden * 2
    return {"estimator": est.method_label(), "stride": stride, "vectors": vectors, "capture": 2 * states + rows * extra,
            "hidden": 2 * layer, "device": micro_tokens * hidden * 2 + 4 * (prompt + completion) * hidden * 4,
            "host": -(-rows // ranks) * vectors * hidden * state_bytes}


def main_verl(args: argparse.Namespace) -> None:
    print(f"hista inside verl: {args.prompts} prompts x G {args.group} = {args.prompts * args.group} sequences of "
          f"P {args.prompt_tokens} + T {args.completion_tokens} tokens, H {args.hidden}, {args.ranks} actor ranks, "
          f"{args.micro_tokens} tokens per micro-batch; GB = 1e9 bytes")
    print("| estimator | states travel as | stride | vectors per sequence | across Ray per step, states | "
          "across Ray, hidden states (bf16) | ratio | extra on each rank: accelerator | host |")
    print("|---|---|---|---|---|---|---|---|---|")
    for name in ("hista", "probe"):
        for dtype, width in (("float32", 4), ("bfloat16", 2)):
            t = verl_traffic(estimators.get(name), args.prompts, args.group, args.prompt_tokens,
                             args.completion_tokens, args.hidden, args.ranks, args.micro_tokens, width)
            print(f"| {t['estimator']} | {dtype}{' (exact)' if width == 4 else ''} | {t['stride']} | {t['vectors']} | "
                  f"{t['capture'] / GB:.2f} GB | {t['hidden'] / GB:.2f} GB | {t['hidden'] / t['capture']:.1f}x | "
                  f"{t['device'] / GB:.2f} GB | {t['host'] / GB:.2f} GB |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("recipes", nargs="*", type=existing_file)
    parser.add_argument("--prompt-tokens", type=POSITIVE, default=512)
    parser.add_argument("--set", nargs="*", type=override, default=[], metavar="KEY=VALUE", help="recipe overrides")
    parser.add_argument("--verl", action="store_true", help="hista inside verl: states against hidden states")
    parser.add_argument("--prompts", type=POSITIVE, default=32, help="--verl: prompts per step")
    parser.add_argument("--group", type=POSITIVE, default=16, help="--verl: rollouts per prompt (G)")
    parser.add_argument("--completion-tokens", type=POSITIVE, default=8192, help="--verl: T")
    parser.add_argument("--hidden", type=POSITIVE, default=1536, help="--verl: H")
    parser.add_argument("--ranks", type=POSITIVE, default=8, help="--verl: actor data-parallel ranks")
    parser.add_argument("--micro-tokens", type=POSITIVE, default=16384, help="--verl: tokens per micro-batch")
    args = parser.parse_args()
    if args.verl:
        return main_verl(args)
    paths = [Path(p) for p in args.recipes] or sorted(p for p in (ROOT / "recipes" / "gpu").glob("*/*.yaml")
                                                      if p.name != "base.yaml")
    print(f"per process and generation batch; sequences padded to {args.prompt_tokens} prompt tokens + "
          "max_completion_length; GB = 1e9 bytes")
    print("| recipe | estimator | processes x rows (G) | H | group-local | received, old | received, new | "
          "hidden states held, old | held, new |")
    print("|---|---|---|---|---|---|---|---|---|")
    for path in paths:
        t = checked(parser, traffic, path.resolve(), args.prompt_tokens, args.set)
        print(f"| {t['recipe']} | {t['estimator']} | {t['world']} x {t['rows']} ({t['G']}) | {t['H']} | "
              f"{'yes' if t['local'] else 'no'} | {t['old_in'] / GB:.2f} GB | {t['new_in'] / GB:.2f} GB | "
              f"{t['old_mem'] / GB:.2f} GB | {t['new_mem'] / GB:.2f} GB |")


if __name__ == "__main__":
    main()
