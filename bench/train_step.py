"""Seconds per training step and where they go, TRL's generation against hista's engine.

    python bench/train_step.py [--recipe recipes/cpu-compare.yaml] [--steps 4] [--skip 1]
        [--estimator grpo] [key=value ...]

Trains the recipe twice in one process, ``rollout_engine=trl`` (transformers' ``generate``
inside TRL) and ``rollout_engine=hista`` (hista's engine through TRL's ``rollout_func``,
docs/training.md "Where rollouts come from"), ``--steps`` optimiser steps each into a
temporary folder, and prints per path the mean seconds per step after the first ``--skip``
steps and its split (SPEC §12):

* ``generation``: TRL's ``_generate`` (the rollouts, their decoding and length metrics);
* ``scoring``: the rest of ``_generate_and_score_completions`` (rewards, the old-log-prob pass
  where one runs, the estimator);
* ``loss forward``: ``_compute_loss`` (the policy's forward pass with gradients and the loss);
* ``backward + optimiser``: the rest of the step.

and the ratio engine / TRL of each. Both paths train the same recipe from the same seed; their
rollouts differ (different samplers), so their completion lengths are printed beside the times.
Extra ``key=value`` arguments override the recipe as on ``hista train``'s command line.
"""

from __future__ import annotations

import argparse
import collections
import tempfile
import time

from arguments import NON_NEGATIVE, POSITIVE, checked, existing_file, override

PARTS = ("generation", "scoring", "loss forward", "backward + optimiser")


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


def run_path(recipe_path: str, overrides: list[str], engine: str, steps: int, skip: int) -> dict:
    """Train ``steps`` steps with ``rollout_engine=engine`` and return the mean split of the
    steps after ``skip`` and the mean completion length."""
    from transformers import TrainerCallback

    from hista.train.recipe import load_recipe
    from hista.train.run import build_dataset, correct, load_policy
    from hista.train.trainer import HistaGRPOTrainer

    out = tempfile.mkdtemp(prefix=f"train-step-{engine}-")
    recipe = load_recipe(recipe_path, [*overrides, f"rollout_engine={engine}", f"output_dir={out}",
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
        policy=policy, callbacks=[Steps()], rollout_engine=recipe.rollout_engine)
    for name in ("_generate", "_generate_and_score_completions", "_compute_loss"):
        _timed(trainer, name, record)
    lengths: list[float] = []

    class Lengths(TrainerCallback):
        def on_log(self, args, state, control, logs=None, **kwargs):
            if logs and "completions/mean_length" in logs:
                lengths.append(logs["completions/mean_length"])

    trainer.add_callback(Lengths())
    trainer.train()
    kept = rows[skip:] or rows
    mean = {key: sum(r[key] for r in kept) / len(kept) for key in ("step", *PARTS)}
    lengths = lengths[skip:] or lengths
    mean["length"] = sum(lengths) / max(len(lengths), 1)
    mean["source"] = trainer.rollout_source
    return mean


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--recipe", type=existing_file, default="recipes/cpu-compare.yaml")
    ap.add_argument("--steps", type=POSITIVE, default=4)
    ap.add_argument("--skip", type=NON_NEGATIVE, default=1, help="first steps left out of the means (warm-up)")
    ap.add_argument("--estimator", default="grpo")
    ap.add_argument("overrides", nargs="*", type=override, help="recipe overrides, key=value")
    args = ap.parse_args()
    overrides = [f"advantage_estimator.name={args.estimator}", *args.overrides]
    from hista.train.recipe import load_recipe

    for engine in ("trl", "hista"):  # both paths' recipes, as run_path loads them
        checked(ap, load_recipe, args.recipe, [*overrides, f"rollout_engine={engine}"])
    results = {engine: run_path(args.recipe, overrides, engine, args.steps, args.skip) for engine in ("trl", "hista")}
    trl, hista = results["trl"], results["hista"]
    print(f"\n{args.recipe} {' '.join(overrides)}: {args.steps} steps, mean of steps {args.skip + 1}-{args.steps}")
    print(f"rollouts: trl = {trl['source']}; hista = {hista['source']}")
    print("| seconds per step | TRL generate | hista engine | engine / TRL |\n|---|---|---|---|")
    for key in ("step", *PARTS):
        print(f"| {key} | {trl[key]:.2f} | {hista[key]:.2f} | {hista[key] / trl[key]:.2f}x |"
              if trl[key] > 0 else f"| {key} | {trl[key]:.2f} | {hista[key]:.2f} | |")
    print(f"| mean completion tokens | {trl['length']:.1f} | {hista['length']:.1f} | |")


if __name__ == "__main__":
    main()
