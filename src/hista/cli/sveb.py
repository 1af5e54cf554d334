"""``hista sveb`` and ``hista critic`` (SPEC §4.5): build, merge, evaluate, sweep, split and
report the State Value Estimation Benchmark, and train the PPO critics its ``ppo-1`` and
``ppo-n`` methods read; each parser next to its handler."""

from __future__ import annotations

import argparse
import math
from pathlib import Path

from ..critic.config import CPU_LAYERS, FitConfig
from ..errors import InputError
from ..sveb.presets import DEFAULT_FOLDS, DEFAULT_METHODS, PRESETS
from .options import (
    AT_LEAST_2,
    FRACTION,
    POSITIVE,
    SEED,
    SELECT_ON,
    TEMPERATURE,
    TOP_P,
    add_command,
    add_engine_options,
    choice,
    device,
    layers,
    list_of,
    number,
)

#: the BuildConfig fields a command line may set (the rest of a build comes from its preset)
BUILD_FIELDS = ("model", "tasks", "problems", "rollouts", "continuations", "states_per_problem", "seed", "split",
                "lo", "hi", "temperature", "top_p", "max_new_tokens", "batch_size", "engine", "tensor_parallel_size",
                "same_rollout")

#: each command's line in its parent's ``--help`` and the text its own ``--help`` opens with
HELP = {
    "sveb": ("State Value Estimation Benchmark: build, merge, eval, report, run, sweep",
             "SVEB (docs/sveb.md). build: sample G rollouts per problem, pick states, sample M continuations "
             "(targets); merge: join the parts of a sharded build; eval: estimator values vs targets; report: "
             "table, JSON, plots; run: all three with a preset; sweep: a grid of method parameters with selection "
             "on held-out problems."),
    "sveb build": ("sample cases into a JSONL file (resumable)",
                   "Sample G rollouts per problem, verify them, pick states, sample M continuations per state; append "
                   "each case to --out at once. A rerun resumes; the same seed gives the same bytes."),
    "sveb merge": ("join the parts of a sharded build",
                   "Join the case files of every shard of one build (sveb build --shard K/N) into the file a single "
                   "build writes; refuses parts of different builds, missing or repeated shards and unfinished parts."),
    "sveb eval": ("evaluate estimators on stored cases",
                  "Evaluate estimators on the cases of --cases against their Monte-Carlo targets, without generating; "
                  "write a results JSON and print the table."),
    "sveb sweep": ("evaluate a grid of method parameters on stored cases (resumable)",
                   "Evaluate the Cartesian product of --grid laid over --base (or the specs of --specs) on the cases "
                   "of --cases: hidden states once per case for all the layers the points need, every point's value "
                   "appended to OUT/values.jsonl at once (a rerun resumes). Writes OUT/sweep.json, OUT/sweep.md "
                   "(points by ΔMAE vs GRPO) and heatmaps; the best point is chosen on part of the problems and "
                   "reported on the rest."),
    "sveb split": ("split a case file by problem into selection and report parts",
                   "Write OUT/selection.jsonl and OUT/report.jsonl: the cases of --cases split by problem exactly as "
                   "sveb sweep splits them with the same --select-on and --seed, so that tables of the report part are "
                   "not selected on."),
    "sveb grad": ("how close each estimator's policy-gradient step comes to the true gradient (resumable)",
                  "Sample R groups of G rollouts per problem (OUT/pool.jsonl); for every group, the step each "
                  "estimator's credit makes under the training loss, against the leave-one-out REINFORCE gradient "
                  "of expected reward from the other groups (OUT/steps.jsonl); cosine, Adam's first-step cosine and "
                  "the share of the step on the tokens the true gradient moves most, with bootstrap intervals over "
                  "problems and paired differences against GRPO (OUT/grad.json, OUT/grad.md). docs/sveb.md "
                  "\"Update direction\"."),
    "sveb report": ("markdown table, JSON and plots from a results file",
                    "Write report.md, report.json and the plots of a results JSON into --out."),
    "sveb run": ("build + eval + report with a preset",
                 "Build (or resume) OUT/cases.jsonl with a preset, evaluate the methods into OUT/results.json and "
                 "write the report into OUT."),
    "critic": ("train PPO critics (value models) for the SVEB methods ppo-1 and ppo-n",
               "PPO critics (docs/critic.md): a copy of the policy's transformer plus a linear value head, "
               "regressed on GAE(lambda) targets (reward at the last token, gamma = 1)."),
    "critic train": ("train PPO-1 or PPO-N critics on the rollouts of a case file",
                     "Train critics on the G initial rollouts of the cases of --cases. ppo-n: one critic on every "
                     "problem of the cases, written to --out. ppo-1: cross-fitted by problem, --folds seeded folds; "
                     "the critic of fold f never sees fold f's problems and scores only them; written to --out/fold-F "
                     "with --out/folds.json. Loss: mean squared error over completion tokens, AdamW. CPU default: the "
                     f"last {CPU_LAYERS} decoder layers, the final norm and the head train (the rest is frozen, and "
                     "the critic folder stores only what trained); on a GPU the whole critic trains."),
}


def register(sub: argparse._SubParsersAction) -> None:
    """Add ``sveb`` (build, merge, eval, sweep, split, report, run) and ``critic`` (train) to the
    command parser ``sub``."""
    p = add_command(sub, "sveb", *HELP["sveb"])
    actions = p.add_subparsers(dest="action", required=True, metavar="ACTION")
    _add_build(actions)
    _add_merge(actions)
    _add_eval(actions)
    _add_sweep(actions)
    _add_split(actions)
    _add_report(actions)
    _add_run(actions)
    _add_grad(actions)
    register_critic(sub)


def register_critic(sub: argparse._SubParsersAction) -> None:
    """Add ``critic train`` to the command parser ``sub``."""
    p = add_command(sub, "critic", *HELP["critic"])
    actions = p.add_subparsers(dest="action", required=True, metavar="ACTION")
    _add_critic_train(actions)


def add_build_options(p: argparse.ArgumentParser, default_preset: str) -> None:
    """Options of ``sveb build`` and ``sveb run``: a preset and any of its fields."""
    d = PRESETS[default_preset]
    p.add_argument("--preset", choices=sorted(PRESETS), default=default_preset,
                   help="settings preset; the options below override its fields (default: %(default)s)")
    p.add_argument("--tasks", action="append", metavar="SPEC",
                   help=f"task source, repeatable (preset: {' '.join(d.tasks)})")
    p.add_argument("--problems", type=POSITIVE, help=f"problems per task source (preset: {d.problems})")
    p.add_argument("--rollouts", type=AT_LEAST_2, help=f"initial rollouts per problem, G (preset: {d.rollouts})")
    p.add_argument("--continuations", type=POSITIVE, help=f"continuations per state, M (preset: {d.continuations})")
    p.add_argument("--states-per-problem", type=POSITIVE, help=f"states per problem (preset: {d.states_per_problem})")
    p.add_argument("--same-rollout", action="store_const", const=True, default=None,
                   help="place the states of a problem on one rollout, so that SVEB scores the credit of the "
                        "segments between them (docs/sveb.md \"Segments\")")
    p.add_argument("--split", choices=["train", "test"], help=f"built-in task split (preset: {d.split})")
    p.add_argument("--lo", type=FRACTION, help=f"lowest initial accuracy kept (preset: {d.lo})")
    p.add_argument("--hi", type=FRACTION, help=f"highest initial accuracy kept (preset: {d.hi})")
    p.add_argument("--no-filter", action="store_true", help="keep every problem, whatever its accuracy")
    p.add_argument("--model", help=f"alias, local path or Hugging Face id (preset: {d.model})")
    p.add_argument("--temperature", type=TEMPERATURE, help=f"sampling temperature (preset: {d.temperature})")
    p.add_argument("--top-p", type=TOP_P, help=f"nucleus sampling threshold (preset: {d.top_p})")
    p.add_argument("--max-new-tokens", type=POSITIVE, help=f"completion length cap (preset: {d.max_new_tokens})")
    p.add_argument("--batch-size", type=POSITIVE, help=f"sequences per generate call (preset: {d.batch_size})")
    p.add_argument("--seed", type=SEED, help=f"random seed: same seed, same cases (preset: {d.seed})")
    add_engine_options(p, None)


def add_methods_option(p: argparse.ArgumentParser) -> None:
    """``--methods`` or ``--methods-file``, and ``--device`` for hidden states."""
    which = p.add_mutually_exclusive_group()
    which.add_argument("--methods", default=None,
                       help="comma list of estimator methods, name[-profile][?key=value&...], the key label= names "
                            "the method in reports (e.g. hista?layer=-6&interval=10, mc?num=1&label=MC 1) "
                            f"(default: {','.join(DEFAULT_METHODS)})")
    which.add_argument("--methods-file", metavar="FILE.yaml",
                       help="a YAML list of methods: spec strings, or mappings {name, profile, label, params}")
    p.add_argument("--device", type=device, default=None,
                   help="cpu or cuda for hidden states (default: cuda if available)")


def add_critic_option(p: argparse.ArgumentParser) -> None:
    """``--critic DIR`` (repeatable): the critic folders ``ppo-1`` and ``ppo-n`` read."""
    p.add_argument("--critic", action="append", metavar="DIR",
                   help="a critic folder written by hista critic train (or a folder of them), repeatable; the "
                        "methods ppo-1 and ppo-n read the critic of their mode and lam")


def add_protocol_option(p: argparse.ArgumentParser) -> None:
    """``--protocol``: how each case's group is shown to the methods (docs/sveb.md "Protocols")."""
    p.add_argument("--protocol", choices=["leak-free", "paper"], default="leak-free",
                   help="leak-free: the state's own rollout is shown without its reward (the mean of the others' "
                        "in its place); paper: with its reward, as the paper's SVEB (and hista before issue 63) "
                        "scored it (default: %(default)s)")


def build_overrides(args: argparse.Namespace) -> dict:
    """The build settings given on the command line (None: left to the preset)."""
    out = {key: getattr(args, key) for key in BUILD_FIELDS if getattr(args, key) is not None}
    if "tasks" in out:
        out["tasks"] = tuple(out["tasks"])
    if args.no_filter:
        out["lo"] = out["hi"] = None
    return out


def method_specs(args: argparse.Namespace) -> list[str]:
    """The method specs of ``--methods`` or ``--methods-file`` (the presets' defaults without either)."""
    from ..sveb.methods import read_methods_file

    if args.methods_file is not None:
        return read_methods_file(args.methods_file)
    if args.methods is None:
        return list(DEFAULT_METHODS)
    methods = [m.strip() for m in args.methods.split(",")]
    if not any(methods):
        raise InputError(f"no method in {args.methods!r}: give a comma list of methods, e.g. grpo,hista",
                         field="--methods")
    return methods


def _add_build(actions: argparse._SubParsersAction) -> None:
    """``sveb build``: the output, a shard, and a preset with any of its fields."""
    q = add_command(actions, "build", *HELP["sveb build"])
    q.add_argument("--out", required=True, help="cases JSONL")
    q.add_argument("--shard", metavar="K/N", help="build only the K-th of N disjoint parts of the problem list "
                                                  "(one per machine), with a manifest OUT.shard.json; join the "
                                                  "parts with hista sveb merge")
    add_build_options(q, "default")
    q.set_defaults(func=cmd_sveb_build)


def cmd_sveb_build(args: argparse.Namespace) -> int:
    """`hista sveb build`: build or resume a case file from a preset and overrides."""
    import dataclasses

    from .. import sharding
    from ..sveb.build import build
    from ..sveb.presets import preset

    config = dataclasses.replace(preset(args.preset), **build_overrides(args))
    shard = sharding.parse(args.shard) if args.shard is not None else None
    counts = build(config, args.out, shard=shard)
    part = f" (shard {shard[0]}/{shard[1]}; join the parts with hista sveb merge)" if shard else ""
    print(f"sveb build: {counts['cases']} new cases, {counts['skipped']} problems skipped, "
          f"{counts['present']} records already present -> {args.out}{part}")
    return 0


def _add_merge(actions: argparse._SubParsersAction) -> None:
    """``sveb merge``: the parts of a sharded build and the merged file."""
    q = add_command(actions, "merge", *HELP["sveb merge"])
    q.add_argument("parts", nargs="+", help="the shards' case files (their manifests lie beside them)")
    q.add_argument("--out", required=True, help="the merged cases JSONL")
    q.set_defaults(func=cmd_sveb_merge)


def cmd_sveb_merge(args: argparse.Namespace) -> int:
    """`hista sveb merge`: join the case files of a sharded build into one."""
    from ..sveb import shards

    counts = shards.merge(args.parts, args.out)
    print(f"sveb merge: {counts['parts']} parts, {counts['cases']} cases, {counts['skipped']} problems skipped "
          f"-> {args.out}")
    return 0


def _add_eval(actions: argparse._SubParsersAction) -> None:
    """``sveb eval``: the cases, the results file, the methods and the critics they read."""
    q = add_command(actions, "eval", *HELP["sveb eval"])
    q.add_argument("--cases", required=True, help="the cases JSONL written by sveb build")
    q.add_argument("--out", required=True, help="results JSON")
    add_methods_option(q)
    q.add_argument("--model", "--eval-model", dest="model", default=None,
                   help="refuse unless the cases were built with this model")
    add_critic_option(q)
    add_protocol_option(q)
    q.set_defaults(func=cmd_sveb_eval)


def cmd_sveb_eval(args: argparse.Namespace) -> int:
    """`hista sveb eval`: evaluate methods on stored cases, write the results JSON and print its tables."""
    from ..jsonio import check_not_inputs, check_output_file, write_json_atomic
    from ..sveb.eval import evaluate
    from ..sveb.labels import report_labels
    from ..sveb.methods import from_results
    from ..sveb.tables import leak_table, markdown_table, paired_markdown

    check_not_inputs([args.out], [args.cases, *([args.methods_file] if args.methods_file else [])])
    check_output_file(args.out, "json")
    results = evaluate(args.cases, method_specs(args), model=args.model, device=args.device, critics=args.critic,
                       protocol=args.protocol)
    write_json_atomic(args.out, results)
    problems = results["summary"].get("n_problems")  # questions asked twice count once (docs/sveb.md)
    print(f"sveb eval: {len(results['cases'])} cases{f' of {problems} problems' if problems else ''} -> {args.out}")
    labels = report_labels(from_results(results))
    print(markdown_table(results["summary"], labels))
    print(paired_markdown(results["paired"], labels))
    if "leak" in results:
        print(leak_table(results["leak"], results["protocol"], labels))
    return 0


def _add_sweep(actions: argparse._SubParsersAction) -> None:
    """``sveb sweep``: the cases, the output folder, a grid over a base (or specs), the selection."""
    q = add_command(actions, "sweep", *HELP["sveb sweep"])
    q.add_argument("--cases", required=True, help="the cases JSONL written by sveb build")
    q.add_argument("--out", required=True, help="output folder (values.jsonl, sweep.json, sweep.md, heatmaps)")
    q.add_argument("--base", default=None, help="the method spec the grid is laid over, may set parameters itself "
                                                "(e.g. hista-reference, numca?parser=digits) (default: hista)")
    points = q.add_mutually_exclusive_group(required=True)
    points.add_argument("--grid", help="key=v1,v2;key2=v3,... (values are YAML scalars), e.g. "
                                       "'layer=-1,-4,-8;interval=10,25,50;stride=1,5'")
    points.add_argument("--specs", metavar="FILE.yaml", help="explicit method specs instead of a grid (the "
                                                             "--methods-file format of sveb eval)")
    selection = q.add_mutually_exclusive_group()
    selection.add_argument("--select-on", type=SELECT_ON, nargs="?", const=0.5, default=None, metavar="HALF",
                           help="choose the best point on this fraction of the problems (seeded) and report it on "
                                "the others (the default, with 0.5)")
    selection.add_argument("--folds", type=AT_LEAST_2, metavar="K",
                           help="K-fold by problem: choose on K-1 folds, report on the held-out one, pool them")
    q.add_argument("--seed", type=SEED, default=0, help="seed of the split and the bootstrap (default: %(default)s)")
    q.add_argument("--n-boot", type=number(int, 1, 1_000_000, what="must be an integer in [1, 1000000]"),
                   default=2000, help="bootstrap resamples of the intervals (default: %(default)s)")
    q.add_argument("--device", type=device, default=None,
                   help="cpu or cuda for hidden states (default: cuda if available)")
    add_critic_option(q)
    add_protocol_option(q)
    q.set_defaults(func=cmd_sveb_sweep)


def cmd_sveb_sweep(args: argparse.Namespace) -> int:
    """`hista sveb sweep`: a grid of method specs on stored cases, resumable, with selection."""
    from ..sveb.methods import read_methods_file
    from ..sveb.sweep import VALUES, sweep
    from ..sveb.sweep_outputs import summary_text

    specs = read_methods_file(args.specs) if args.specs is not None else None
    result = sweep(args.cases, args.out, base=args.base, grid=args.grid, specs=specs, folds=args.folds,
                   select_on=args.select_on, seed=args.seed, n_boot=args.n_boot, device=args.device,
                   critics=args.critic, protocol=args.protocol)
    print("sveb sweep: " + summary_text(result))
    print("sveb sweep: " + ", ".join(str(p) for p in [Path(args.out) / VALUES, *result["paths"].values()]))
    return 0


def _add_split(actions: argparse._SubParsersAction) -> None:
    """``sveb split``: the cases, the output folder and the split sweep selects on."""
    q = add_command(actions, "split", *HELP["sveb split"])
    q.add_argument("--cases", required=True, help="the cases JSONL (or .jsonl.gz) written by sveb build")
    q.add_argument("--out", required=True, help="output folder (selection.jsonl, report.jsonl)")
    q.add_argument("--select-on", type=SELECT_ON, default=0.5, metavar="HALF",
                   help="fraction of the problems in the selection part (default: %(default)s)")
    q.add_argument("--seed", type=SEED, default=0, help="seed of the split (default: %(default)s)")
    q.set_defaults(func=cmd_sveb_split)


def cmd_sveb_split(args: argparse.Namespace) -> int:
    """`hista sveb split`: the selection and report parts of a case file, as sweep splits it."""
    from ..sveb.selection import split_cases

    paths = split_cases(args.cases, args.out, select_on=args.select_on, seed=args.seed)
    print("sveb split: " + ", ".join(f"{part} {path}" for part, path in paths.items()))
    return 0


def _add_report(actions: argparse._SubParsersAction) -> None:
    """``sveb report``: the results file and the output folder."""
    q = add_command(actions, "report", *HELP["sveb report"])
    q.add_argument("--results", required=True, help="the results JSON written by sveb eval")
    q.add_argument("--out", required=True, help="output folder")
    q.set_defaults(func=cmd_sveb_report)


def cmd_sveb_report(args: argparse.Namespace) -> int:
    """`hista sveb report`: the markdown table, JSON and plots of a results file."""
    from ..sveb import report

    paths, table = report.report_file(args.results, Path(args.out))
    print(table)
    print("sveb report: " + ", ".join(str(p) for p in paths.values()))
    return 0


def _add_run(actions: argparse._SubParsersAction) -> None:
    """``sveb run``: the output folder, a preset with any of its fields, the methods, the critics."""
    q = add_command(actions, "run", *HELP["sveb run"])
    q.add_argument("--out", required=True, help="output folder")
    add_build_options(q, "quick")
    add_methods_option(q)
    q.add_argument("--with-critic", action="store_true",
                   help="also train the PPO critics (ppo-1 and ppo-n at lam 0.95 and 1.0, hista critic train's "
                        "defaults) into OUT/critics after the build, and evaluate the four ppo methods beside the "
                        "others")
    add_protocol_option(q)
    q.set_defaults(func=cmd_sveb_run)


def cmd_sveb_run(args: argparse.Namespace) -> int:
    """`hista sveb run`: build + eval + report with a preset, through :func:`hista.sveb.run`."""
    from ..sveb import run
    from ..sveb.tables import markdown_table

    result = run(args.preset, args.out, methods=method_specs(args), overrides=build_overrides(args),
                 device=args.device, with_critic=args.with_critic, protocol=args.protocol)
    counts = result["counts"]
    print(f"sveb build: {counts['cases']} new cases, {counts['skipped']} problems skipped, "
          f"{counts['present']} records already present -> {result['cases']}")
    print(f"sveb eval: {result['results']}")
    print(markdown_table(result["summary"], result["labels"]))
    print("sveb report: " + ", ".join(str(p) for p in result["report"].values()))
    return 0


def _add_grad(actions: argparse._SubParsersAction) -> None:
    """``sveb grad``: the output folder, a recipe or the settings one sets, the task, the sizes, the methods."""
    from ..sveb.presets import GradConfig

    d = GradConfig()
    q = add_command(actions, "grad", *HELP["sveb grad"])
    q.add_argument("--out", required=True, help="output folder (a rerun resumes it)")
    q.add_argument("--recipe", metavar="RECIPE.yaml",
                   help="a training recipe: its model, loss, temperature, max_completion_length, num_generations "
                        "(G), mask_truncated_completions and max_grad_norm (options below override them)")
    q.add_argument("--model", help=f"alias, local path or Hugging Face id (default: {d.model})")
    q.add_argument("--tasks", action="append", metavar="SPEC", help=f"task source, repeatable (default: {d.tasks[0]})")
    q.add_argument("--problems", type=POSITIVE, help=f"problems per task source, N (default: {d.problems})")
    q.add_argument("--split", choices=["train", "test"], help=f"built-in task split (default: {d.split})")
    q.add_argument("--groups", type=POSITIVE, help=f"groups per problem, R; the reference of a group is the other "
                                                   f"R - 1 (default: {d.groups})")
    q.add_argument("--group-size", type=AT_LEAST_2, help=f"rollouts per group, G (default: {d.group_size})")
    q.add_argument("--temperature", type=TEMPERATURE, help=f"sampling temperature (default: {d.temperature})")
    q.add_argument("--max-new-tokens", type=POSITIVE, help=f"completion length cap (default: {d.max_new_tokens})")
    q.add_argument("--loss", help=f"policy loss (default: {d.loss})")
    q.add_argument("--max-grad-norm", type=number(float, 0.0, lo_open=True, what="must be > 0"),
                   help=f"the trainer's clip (default: {d.max_grad_norm})")
    q.add_argument("--params", choices=["head", "all"],
                   help="head: the output layer's weight, in closed form (CPU); all: every parameter, by autograd "
                        f"(default: {d.params})")
    q.add_argument("--no-adam", dest="adam", action="store_false", default=None,
                   help="skip the cosine of Adam's first update (it materialises every step: the costliest part)")
    q.add_argument("--batch-size", type=POSITIVE, help=f"sequences per generate call (default: {d.batch_size})")
    q.add_argument("--seed", type=SEED, help=f"random seed (default: {d.seed})")
    add_methods_option(q)
    q.set_defaults(func=cmd_sveb_grad)


def grad_config(args: argparse.Namespace):
    """The GradConfig of a recipe (if given) with the command line's options over it."""
    from ..sveb.presets import GradConfig

    fields: dict = {}
    if args.recipe is not None:
        from ..train.recipe import load_recipe

        recipe = load_recipe(args.recipe)
        setting = recipe.trl_setting  # the recipe's, else TRL's default: what its run would use
        loss = dict(recipe.loss)
        fields = {"model": recipe.model, "loss": loss.pop("name"), "loss_config": loss,
                  "temperature": setting("temperature"), "max_new_tokens": setting("max_completion_length"),
                  "group_size": setting("num_generations"),
                  "mask_truncated": bool(setting("mask_truncated_completions")),
                  "max_grad_norm": setting("max_grad_norm")}
    for key in ("model", "problems", "split", "groups", "group_size", "temperature", "max_new_tokens", "loss",
                "max_grad_norm", "params", "adam", "batch_size", "seed"):
        if getattr(args, key) is not None:
            fields[key] = getattr(args, key)
    if args.tasks:
        fields["tasks"] = tuple(args.tasks)
    return GradConfig(**fields)


def cmd_sveb_grad(args: argparse.Namespace) -> int:
    """`hista sveb grad`: sample, measure and summarise the update direction of each method."""
    from ..sveb.grad import run
    from ..sveb.grad_summary import table

    methods = method_specs(args) if (args.methods or args.methods_file) else ["grpo", "hista", "numca", "probe"]
    inputs = [f for f in (args.recipe, args.methods_file) if f is not None]
    summary = run(grad_config(args), args.out, methods, inputs=inputs)
    print(f"sveb grad -> {args.out}/grad.json, {args.out}/grad.md")
    print(table(summary))
    return 0


def _add_critic_train(actions: argparse._SubParsersAction) -> None:
    """``critic train``: the cases, the modes and lambdas, the output folder, the fit's settings."""
    d = FitConfig()
    q = add_command(actions, "train", *HELP["critic train"])
    q.add_argument("--cases", required=True, help="the cases JSONL written by sveb build")
    q.add_argument("--mode", required=True, type=list_of(choice("ppo-1", "ppo-n")),
                   help="ppo-1: cross-fitted by problem; ppo-n: trained on the cases' own problems; a comma list "
                        "trains each")
    q.add_argument("--lam", required=True, type=list_of(number(float, 0.0, 1.0, what="must lie in [0, 1]")),
                   help="GAE lambda of the targets (paper: 0.95 or 1.0; 1.0 regresses on the reward); a comma "
                        "list trains each. Several modes or lambdas write OUT/MODE-LAMBDA folders")
    q.add_argument("--out", required=True, help="output folder: new or empty, or the folder of an interrupted "
                                                "run of the same command, which resumes")
    q.add_argument("--folds", type=number(int, 2, what="must be an integer >= 2 (PPO-1 holds one fold of "
                                                       "problems out of each critic's training, to score it)"),
                   default=None, help=f"ppo-1: folds by problem (default: {DEFAULT_FOLDS}, or one per problem when "
                                      "the cases hold fewer)")
    q.add_argument("--layers", type=layers, default=None, metavar="K|all",
                   help=f"train the last K decoder layers (0: the head only) or all (default: {CPU_LAYERS} on the "
                        "CPU, all on a GPU)")
    q.add_argument("--epochs", type=POSITIVE, default=d.epochs, help="passes over the rollouts (default: %(default)s)")
    q.add_argument("--lr", type=number(float, 0.0, lo_open=True, what="must be a positive number"),
                   default=d.lr, help="AdamW learning rate (default: %(default)s)")
    q.add_argument("--batch-size", type=POSITIVE, default=d.batch_size,
                   help="rollouts per optimiser step (default: %(default)s)")
    q.add_argument("--value-clip", type=number(float, 0.0, lo_open=True, what="must be a positive number"),
                   default=None, metavar="EPS", help="PPO value clipping around the epoch's starting values "
                                                     "(default: off)")
    q.add_argument("--seed", type=SEED, default=0, help="seed of the folds and the shuffling (default: %(default)s)")
    q.add_argument("--model", default=None,
                   help="the critic's backbone: alias, path or Hugging Face id (default: the model recorded in the "
                        "cases)")
    q.add_argument("--device", type=device, default=None, help="cpu or cuda (default: cuda if available)")
    q.set_defaults(func=cmd_critic_train)


def cmd_critic_train(args: argparse.Namespace) -> int:
    """`hista critic train`: PPO-1 or PPO-N critics on the rollouts of a case file."""
    from ..sveb.critic_training import train_critics

    config = FitConfig(epochs=args.epochs, lr=args.lr, batch_size=args.batch_size, value_clip=args.value_clip,
                       seed=args.seed)
    result = train_critics(args.cases, args.out, mode=args.mode, lam=args.lam, folds=args.folds,
                           layers=args.layers, fit_config=config, model=args.model, device=args.device)
    for critic in result["critics"]:
        losses = [math.nan if x["loss"] is None else x["loss"] for x in critic["losses"]]  # NaN is null in JSON
        print(f"critic {critic['path']}: {len(critic['problems'])} problems, loss {losses[0]:.4f} -> "
              f"{losses[-1]:.4f} over {len(losses)} epochs in {critic['seconds']:.0f}s"
              + (" (written before, kept)" if critic.get("resumed") else ""))
    methods = ",".join(f"{m}?lam={lam:g}" for m in args.mode for lam in args.lam)
    print(f"critic train: -> {result['out']} (use it with sveb eval --critic {result['out']} --methods '{methods}')")
    return 0
