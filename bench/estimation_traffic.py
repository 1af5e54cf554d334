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
    local = layout["group_local"] and not est.trains_with_policy  # a critic sees every group on every process
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
            "new_in": 0 if local else (others * ids if est.trains_with_policy else max(received)),
            "new_mem": rows * per_row_hidden + (0 if local else max(states))}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("recipes", nargs="*", type=existing_file)
    parser.add_argument("--prompt-tokens", type=POSITIVE, default=512)
    parser.add_argument("--set", nargs="*", type=override, default=[], metavar="KEY=VALUE", help="recipe overrides")
    args = parser.parse_args()
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
