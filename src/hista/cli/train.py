"""``hista train`` and ``hista verl`` (docs/verl.md): train a policy from a YAML
recipe on TRL, and check hista's plugin inside verl; each parser next to its handler."""

from __future__ import annotations

import argparse

from ..errors import InputError
from .options import add_command

#: each command's line in its parent's ``--help`` and the text its own ``--help`` opens with
HELP = {
    "train": ("train a policy from a YAML recipe (estimator x loss on TRL's GRPOTrainer)",
              "Train with TRL's GRPOTrainer, advantages from a hista estimator and a hista policy loss "
              "(docs/training.md). Overrides use dotted keys with YAML values, e.g. advantage_estimator.name=hista "
              "loss.name=strace trl.max_steps=10 resume=true. Multi-GPU: accelerate launch --config_file "
              "configs/accelerate/zero2.yaml -m hista.cli train RECIPE.yaml"),
    "verl": ("hista inside verl: check the plugin's registrations",
             "hista registers its losses and estimators with verl through the verl.plugins entry point (docs/verl.md). "
             "check imports verl and the plugin and prints what is registered; verl itself hides a failing plugin "
             "import."),
    "verl check": ("print what hista registered with verl (exit 1 if something is missing)", None),
}


def register(sub: argparse._SubParsersAction) -> None:
    """Add ``train`` and ``verl`` (check) to the command parser ``sub``."""
    p = add_command(sub, "train", *HELP["train"])
    p.add_argument("recipe", help="recipe YAML, e.g. recipes/cpu-smoke.yaml")
    p.add_argument("overrides", nargs="*", metavar="KEY=VALUE", help="recipe overrides (dotted keys)")
    p.add_argument("--dry-run", action="store_true",
                   help="validate the recipe (types, ranges, GRPOConfig, output folder) and print its batch "
                        "layout only")
    p.add_argument("--overwrite", action="store_true",
                   help="replace an earlier run in output_dir (its metrics.jsonl, checkpoints and final model are "
                        "removed once the new run starts); without it such a run is refused unless resume=true")
    # overrides may follow the options too (`hista train RECIPE --dry-run key=value`), as users type them
    p.set_defaults(func=cmd_train, trailing_overrides=True)

    p = add_command(sub, "verl", *HELP["verl"])
    actions = p.add_subparsers(dest="action", required=True, metavar="ACTION")
    q = add_command(actions, "check", *HELP["verl check"])
    q.set_defaults(func=cmd_verl_check)


def cmd_train(args: argparse.Namespace) -> int:
    """`hista train`: validate a recipe and train with it. A dry run makes the
    checks a run makes before it loads anything, the output folder's included."""
    from ..train import load_recipe, train
    from ..train.recipe import check_model
    from ..train.run import check_output_dir, check_prompt_lengths

    recipe = load_recipe(args.recipe, args.overrides)
    note = check_model(recipe)
    if note:
        print(note)
    layout = recipe.batch_layout()
    est, loss = recipe.estimator_config(), recipe.loss
    print(f"recipe {args.recipe}: {recipe.model} on {', '.join(recipe.task_specs)}; estimator {est['name']}, "
          f"loss {loss.get('name')}; {layout['prompts_per_generation']} prompts x {layout['num_generations']} "
          f"rollouts per generation batch", flush=True)
    if recipe.world_size > 1:
        print(f"{layout['rows_per_process']} rows per process: " + (
            "group-local, each process estimates its own groups" if layout["group_local"] else
            "groups span processes (allow_split_groups): each is estimated by the process holding its first row"))
    if recipe.accelerate_config:
        print(f"launch on {recipe.world_size} processes: accelerate launch --config_file {recipe.accelerate_config} "
              f"-m hista.cli train {args.recipe}")
    replaced = check_output_dir(recipe, args.overwrite)
    if args.dry_run:
        try:
            recipe.grpo_config()
        except InputError as exc:  # only a recipe for accelerate launch gets here: the rest was validated
            print(f"note: {exc}\n  (fine for a recipe meant for accelerate launch: the run checks this on the "
                  "machine it starts on)")
        if note is None:  # the model's context could be read: the prompts that load here must fit it
            prompts_note = check_prompt_lengths(recipe)
            if prompts_note:
                print(prompts_note)
        if replaced:
            why = "--overwrite" if args.overwrite else "resume=true, but no complete checkpoint to continue from"
            print(f"{why}: the run would start from step 0 and replace the earlier run in {recipe.output_dir} "
                  f"({', '.join(p.name for p in replaced)}) once it starts")
        print("dry run: the recipe is valid; nothing was trained")
        return 0
    result = train(recipe, overwrite=args.overwrite)
    if result["finished_before"]:
        print(f"nothing to train: the run in {result['output_dir']} is at step {result['global_step']} already\n"
              f"  final model: {result['final_model']}")
        return 0
    resumed = f" (resumed from {result['resumed_from']})" if result["resumed_from"] else ""
    print(f"trained {result['global_step']} steps{resumed}\n  checkpoints: {result['output_dir']}\n"
          f"  final model: {result['final_model']}\n  metrics:     {result['metrics']}")
    return 0


def cmd_verl_check(args: argparse.Namespace) -> int:
    """`hista verl check`: import verl and hista's plugin in the open and print what hista
    registered with verl (docs/verl.md). Exit 1 when a name is not registered."""
    from ..integrations.verl import status

    found = status()
    print(f"verl {found['verl']}; hista's entry point in verl.plugins: "
          f"{', '.join(found['entry_points']) or 'none (is hista installed in this environment?)'}")
    kinds = [("losses", "actor_rollout_ref.actor.policy_loss.loss_mode"), ("estimators", "algorithm.adv_estimator")]
    if isinstance(found["trainers"], str):
        print(f"  trainer.v1.trainer_mode=hista_*: not registered: {found['trainers']}")
    else:
        kinds.append(("trainers", "trainer.v1.trainer_mode"))
    missing = [n for kind, _ in kinds for n, ok in found[kind].items() if not ok]
    for kind, flag in kinds:
        for name, ok in found[kind].items():
            print(f"  {flag}={name}: {'registered by hista' if ok else 'NOT registered by hista'}")
    print(f"hidden-state capture on the actor (hista_hista, hista_probe): {found['capture']}")
    print("hista losses verl already has (set these instead):")
    for name, settings in found["equivalent"].items():
        print(f"  {name}: " + " ".join(f"{k}={v:g}" if isinstance(v, float) else f"{k}={v}"
                                       for k, v in settings.items()))
    return 1 if missing else 0
