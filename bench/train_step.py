"""Seconds per training step and where they go: TRL's baseline against hista's CPU step.

    python bench/train_step.py [--recipe recipes/cpu-compare.yaml] [--steps 4] [--skip 1]
        [--estimator grpo] [--paths trl,padded,packed] [key=value ...]

Trains the recipe once per path in one process, ``--steps`` optimiser steps each into a
temporary folder:

* ``trl``: the baseline, TRL's generation (transformers' ``generate`` inside TRL,
  ``rollout_engine=trl``) and TRL's padded loss forward (``packed_loss=false``);
* ``padded``: hista's engine through TRL's ``rollout_func`` (``rollout_engine=hista``,
  docs/training.md "Where rollouts come from"), the padded loss forward: the step before the
  packed forward;
* ``packed``: hista's engine and the packed loss forward (``packed_loss=true``,
  hista.train.packing): what a CPU run does by default;
* ``packed-bf16``: as ``packed``, under bf16 autocast (``trl.bf16=true trl.use_cpu=true``).

and prints per path the mean seconds per step after the first ``--skip`` steps and its split
(SPEC §12):

* ``generation``: TRL's ``_generate`` (the rollouts, their decoding and length metrics);
* ``scoring``: the rest of ``_generate_and_score_completions`` (rewards, the old-log-prob pass
  where one runs, the estimator);
* ``loss forward``: ``_compute_loss`` (the policy's forward pass with gradients and the loss);
* ``backward + optimiser``: the rest of the step.

and the ratio of each to the baseline's. The paths train the same recipe from the same seed;
TRL's rollouts differ from the engine's (different samplers), so their completion lengths are
printed beside the times.
Extra ``key=value`` arguments override the recipe as on ``hista train``'s command line.
"""

from __future__ import annotations

import argparse
import collections
import shutil
import tempfile
import time

from arguments import NON_NEGATIVE, POSITIVE, checked, existing_file, override

PARTS = ("generation", "scoring", "loss forward", "backward + optimiser")
#: path -> (column title, recipe overrides)
PATHS = {
    "trl": ("TRL baseline", ["rollout_engine=trl", "packed_loss=false"]),
    "padded": ("engine, padded loss", ["rollout_engine=hista", "packed_loss=false"]),
    "packed": ("engine, packed loss", ["rollout_engine=hista", "packed_loss=true"]),
    "packed-bf16": ("packed, bf16 autocast", ["rollout_engine=hista", "packed_loss=true", "trl.bf16=true",
                                                "trl.use_cpu=true"]),
}


def _timed(trainer, name: str, record: dict) -> None:
    """Wrap ``trainer.<name>`` so that each call's seconds add to ``record[name]``."""
    inner = getattr(trainer, name)

    def wrapper(*args, **kwargs):
        start = time.perf_counter()
        try:
            return inner(*args, **kwargs)
        finally:
            record[name] += time.perf_counter() - start

    setattr(trainer, name, wrapper)


def run_path(recipe_path: str, overrides: list[str], path: str, steps: int, skip: int) -> dict:
    """Train ``steps`` steps of ``path`` (:data:`PATHS`) and return the mean split of the steps
    after ``skip`` and the mean completion length."""
    from transformers import TrainerCallback

    from hista.train.recipe import load_recipe
    from hista.train.run import build_dataset, correct, load_policy
    from hista.train.trainer import HistaGRPOTrainer

    out = tempfile.mkdtemp(prefix=f"train-step-{path}-")
    recipe = load_recipe(recipe_path, [*overrides, *PATHS[path][1], f"output_dir={out}",
                                       f"trl.max_steps={steps}", "trl.save_steps=100000"])
    model, tokenizer, policy = load_policy(recipe)
    record: dict = collections.defaultdict(float)
    rows: list[dict] = []

    class Steps(TrainerCallback):
        def on_step_begin(self, args, state, control, **kwargs):
            record.clear()
            record["start"] = time.perf_counter()

        def on_step_end(self, args, state, control, **kwargs):
            total = time.perf_counter() - record["start"]
            gen, loss = record["_generate"], record["_compute_loss"]
            score_all = record["_generate_and_score_completions"]
            rows.append({"step": total, "generation": gen, "scoring": score_all - gen, "loss forward": loss,
                         "backward + optimiser": total - score_all - loss})

    trainer = HistaGRPOTrainer(
        model=model, reward_funcs=[correct], args=recipe.grpo_config(), train_dataset=build_dataset(recipe),
        processing_class=tokenizer, advantage_estimator=recipe.estimator_config(), loss=recipe.loss,
        policy=policy, callbacks=[Steps()], rollout_engine=recipe.rollout_engine, packed_loss=recipe.packed_loss)
    for name in ("_generate", "_generate_and_score_completions", "_compute_loss"):
        _timed(trainer, name, record)
    lengths: list[float] = []

    class Lengths(TrainerCallback):
        def on_log(self, args, state, control, logs=None, **kwargs):
            if logs and "completions/mean_length" in logs:
                lengths.append(logs["completions/mean_length"])

    trainer.add_callback(Lengths())
    trainer.train()
    shutil.rmtree(out, ignore_errors=True)  # its checkpoint is 1.6 GB and nobody reads it
    kept = rows[skip:] or rows
    mean = {key: sum(r[key] for r in kept) / len(kept) for key in ("step", *PARTS)}
    lengths = lengths[skip:] or lengths
    mean["length"] = sum(lengths) / max(len(lengths), 1)
    mean["source"] = trainer.rollout_source
    return mean


def paths(text: str) -> list[str]:
    names = [name.strip() for name in text.split(",") if name.strip()]
    unknown = [name for name in names if name not in PATHS]
    if unknown or not names:
        raise argparse.ArgumentTypeError(f"{text!r}: paths are a comma-separated list of {', '.join(PATHS)}")
    return names


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--recipe", type=existing_file, default="recipes/cpu-compare.yaml")
    ap.add_argument("--steps", type=POSITIVE, default=4)
    ap.add_argument("--skip", type=NON_NEGATIVE, default=1, help="first steps left out of the means (warm-up)")
    ap.add_argument("--estimator", default="grpo")
    ap.add_argument("--paths", type=paths, default="trl,padded,packed",
                    help=f"comma-separated, the first is the baseline: {', '.join(PATHS)}")
    ap.add_argument("overrides", nargs="*", type=override, help="recipe overrides, key=value")
    args = ap.parse_args()
    overrides = [f"advantage_estimator.name={args.estimator}", *args.overrides]
    from hista.train.recipe import load_recipe

    for path in args.paths:  # every path's recipe, as run_path loads it
        checked(ap, load_recipe, args.recipe, [*overrides, *PATHS[path][1]])
    results = {path: run_path(args.recipe, overrides, path, args.steps, args.skip) for path in args.paths}
    base = results[args.paths[0]]
    print(f"\n{args.recipe} {' '.join(overrides)}: {args.steps} steps, mean of steps {args.skip + 1}-{args.steps}")
    for path in args.paths:
        print(f"{path} ({PATHS[path][0]}): {' '.join(PATHS[path][1])}; rollouts: {results[path]['source']}")
    rest = args.paths[1:]
    print("| seconds per step | " + " | ".join(PATHS[p][0] for p in args.paths) + " | "
          + " | ".join(f"{p} / {args.paths[0]}" for p in rest) + " |")
    print("|---" * (len(args.paths) + len(rest) + 1) + "|")
    for key in ("step", *PARTS):
        times = " | ".join(f"{results[p][key]:.2f}" for p in args.paths)
        ratios = " | ".join(f"{results[p][key] / base[key]:.2f}x" if base[key] > 0 else "" for p in rest)
        print(f"| {key} | {times} | {ratios} |")
    print("| mean completion tokens | " + " | ".join(f"{results[p]['length']:.1f}" for p in args.paths)
          + " |" + " |" * len(rest))


if __name__ == "__main__":
    main()
