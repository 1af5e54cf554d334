"""The ``hista`` command line (SPEC §11). Thin: parse options, call the library, print where
outputs went. Bad input exits with code 2 and a message naming the file, line and field."""

from __future__ import annotations

import argparse
import errno
import math
import sys
import time
from pathlib import Path
from typing import Optional, Sequence

from .errors import InputError


def _number(kind: type, lo: float, hi: float = math.inf, *, lo_open: bool = False, what: str = ""):
    """An argparse type: a ``kind`` number in [lo, hi] (or (lo, hi] with ``lo_open``); a value
    outside is a usage error naming the option (exit 2, SPEC §11)."""

    def parse(text: str):
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not {'an integer' if kind is int else 'a number'}") from None
        inside = (lo < value if lo_open else lo <= value) and value <= hi and math.isfinite(value)
        if not inside:
            raise argparse.ArgumentTypeError(f"{text!r} is out of range: {what}")
        return value

    return parse


POSITIVE = _number(int, 1, what="must be an integer >= 1")
AT_LEAST_2 = _number(int, 2, what="must be an integer >= 2 (a group needs two rollouts)")
SEED = _number(int, 0, 2**32 - 1, what="must be an integer in [0, 2^32 - 1]")
FRACTION = _number(float, 0.0, 1.0, what="must lie in [0, 1]")
TOP_P = _number(float, 0.0, 1.0, lo_open=True, what="must lie in (0, 1]")
TEMPERATURE = _number(float, 0.0, what="must be a finite number >= 0 (0 = greedy)")


def _layers(text: str) -> Optional[int]:
    """An argparse type: ``all`` (None) or a number of decoder layers >= 0 (SPEC §4.5)."""
    if text.strip().lower() == "all":
        return None
    return _number(int, 0, what="must be 'all' or an integer >= 0")(text)


def _choice(*valid: str):
    """An argparse type: one of ``valid``."""

    def parse(text: str) -> str:
        if text not in valid:
            raise argparse.ArgumentTypeError(f"{text!r} is not one of {', '.join(valid)}")
        return text

    return parse


def _list_of(item):
    """An argparse type: a comma list of ``item`` values, without repeats."""

    def parse(text: str) -> list:
        values = [item(part.strip()) for part in text.split(",")]
        if len(set(values)) != len(values):
            raise argparse.ArgumentTypeError(f"{text!r} names a value twice")
        return values

    return parse


def _device(text: str) -> str:
    """An argparse type: a torch device this machine has (SPEC §11)."""
    from .models import check_device

    try:
        return check_device(text)
    except InputError as exc:
        raise argparse.ArgumentTypeError(exc.message) from None


def _add_sampling_options(p: argparse.ArgumentParser) -> None:
    from .rollout import SamplingConfig

    d = SamplingConfig()
    p.add_argument("--model", default="smollm2-135m-instruct",
                   help="alias (smollm2-135m-instruct, tiny), local path or Hugging Face id (default: %(default)s)")
    p.add_argument("--device", type=_device, default=None, help="cpu or cuda (default: cuda if available)")
    p.add_argument("--temperature", type=TEMPERATURE, default=d.temperature,
                   help="sampling temperature, 0 = greedy (default: %(default)s)")
    p.add_argument("--top-p", type=TOP_P, default=d.top_p, help="nucleus sampling threshold (default: %(default)s)")
    p.add_argument("--max-new-tokens", type=POSITIVE, default=d.max_new_tokens,
                   help="completion length cap (default: %(default)s)")
    p.add_argument("--batch-size", type=POSITIVE, default=d.batch_size,
                   help="sequences per generate call (default: %(default)s)")
    p.add_argument("--seed", type=SEED, default=0, help="random seed: same seed, same samples (default: %(default)s)")
    _add_engine_options(p, "hf")


def _add_engine_options(p: argparse.ArgumentParser, default: Optional[str]) -> None:
    """``--engine`` and ``--tensor-parallel-size`` (SPEC §7)."""
    shown = default or "the preset's, hf"
    p.add_argument("--engine", choices=["hf", "vllm"], default=default,
                   help="rollout engine: hf (transformers, CPU or GPU) or vllm (GPU; pip install 'hista[vllm]'; "
                        f"top-p 1 only; not yet run on a GPU, see docs/engines.md) (default: {shown})")
    p.add_argument("--tensor-parallel-size", type=POSITIVE, default=None if default is None else 1,
                   help="GPUs the vllm engine splits the model over (default: 1)")


def _sampler(args: argparse.Namespace, config):
    """The model and engine of ``--model``, ``--engine``, ``--tensor-parallel-size`` and
    ``--device`` (SPEC §7), reporting the load."""
    from .rollout.engines import load_model, make_engine

    start = time.time()
    lm = load_model(args.engine, args.model, device=args.device)
    engine = make_engine(args.engine, lm, config, tensor_parallel_size=args.tensor_parallel_size)
    where = f"on {lm.device}" if args.engine == "hf" else f"in vLLM ({engine.identity()['vllm']})"
    print(f"model {lm.name} ({lm.revision}) loaded in {time.time() - start:.1f}s {where}")
    return lm, engine


def cmd_sample(args: argparse.Namespace) -> int:
    """`hista sample`: sample and verify rollouts, print accuracies, write them as JSONL (SPEC §7, §11)."""
    from . import tasks
    from .jsonio import check_not_inputs, check_output_file, write_jsonl_atomic
    from .rollout import SamplingConfig
    from .rollout.sample import sample_groups

    check_not_inputs([args.out], tasks.input_files(args.tasks))
    check_output_file(args.out, "jsonl")
    config = SamplingConfig(temperature=args.temperature, top_p=args.top_p,
                            max_new_tokens=args.max_new_tokens, batch_size=args.batch_size)
    problems = [p for spec in args.tasks for p in tasks.load(spec, n=args.problems, seed=args.seed, split=args.split)]
    lm, engine = _sampler(args, config)
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
    """`hista models`: list the model aliases or prepare the embedded model (SPEC §7, §11)."""
    from .models import ALIASES, EMBEDDED, cache_dir, prepare_embedded

    if args.action == "prepare":
        print(f"embedded model ready at {prepare_embedded()}")
        return 0
    for name, description in ALIASES.items():
        print(f"{name:24s} {description}")
    print(f"\nany Hugging Face id (owner/name) or local folder also works. Cache: {cache_dir()} "
          f"(set HISTA_CACHE to move it); `hista models prepare` converts {EMBEDDED} once.")
    return 0


def cmd_tasks(args: argparse.Namespace) -> int:
    """`hista tasks`: list, preview or difficulty-filter task sources (SPEC §7, §11)."""
    from . import tasks

    if args.action == "list":
        for name, description in tasks.list_builtin().items():
            print(f"builtin:{name:10s} {description}")
        print("\nsources:")
        for prefix in tasks.names():
            print(f"{prefix + ':':10s} {tasks.REGISTRY.lookup(prefix).description}")
        return 0
    if args.action == "preview":
        print(tasks.preview(args.spec, n=args.n, seed=args.seed, split=args.split))
        return 0
    return _filter_tasks(args)


def _filter_tasks(args: argparse.Namespace) -> int:
    from . import tasks
    from .jsonio import check_not_inputs, check_output_file, write_jsonl_atomic
    from .rollout import SamplingConfig
    from .rollout.sample import policy_accuracy

    if args.lo > args.hi:
        raise InputError(f"--lo {args.lo} is above --hi {args.hi}: no accuracy lies in between", field="--lo")
    check_not_inputs([args.out], tasks.input_files([args.spec]))
    check_output_file(args.out, "jsonl")
    config = SamplingConfig(temperature=args.temperature, top_p=args.top_p,
                            max_new_tokens=args.max_new_tokens, batch_size=args.batch_size)
    problems = tasks.load(args.spec, n=args.n, seed=args.seed, split=args.split)
    lm, engine = _sampler(args, config)
    accuracies = policy_accuracy(engine, problems, args.samples, seed=args.seed)
    kept = tasks.filter_by_accuracy([dict(p, accuracy=a) for p, a in zip(problems, accuracies)],
                                    accuracies, args.lo, args.hi)
    path = write_jsonl_atomic(args.out, kept)
    print(f"kept {len(kept)} of {len(problems)} problems with accuracy in [{args.lo}, {args.hi}] over "
          f"{args.samples} samples of {lm.name}; wrote {path} (use it as --tasks jsonl:{path})")
    return 0


_BUILD_FIELDS = ("model", "tasks", "problems", "rollouts", "continuations", "states_per_problem", "seed", "split",
                 "lo", "hi", "temperature", "top_p", "max_new_tokens", "batch_size", "engine", "tensor_parallel_size")


def _build_overrides(args: argparse.Namespace) -> dict:
    """The build settings given on the command line (None: left to the preset)."""
    out = {key: getattr(args, key) for key in _BUILD_FIELDS if getattr(args, key) is not None}
    if "tasks" in out:
        out["tasks"] = tuple(out["tasks"])
    if args.no_filter:
        out["lo"] = out["hi"] = None
    return out


def _methods(args: argparse.Namespace) -> list[str]:
    """The methods of ``--methods`` or ``--methods-file`` (the presets' defaults without either)."""
    from .sveb.eval import read_methods_file
    from .sveb.presets import DEFAULT_METHODS

    if args.methods_file is not None:
        return read_methods_file(args.methods_file)
    if args.methods is None:
        return list(DEFAULT_METHODS)
    methods = [m.strip() for m in args.methods.split(",")]
    if not any(methods):
        raise InputError(f"no method in {args.methods!r}: give a comma list of methods, e.g. grpo,hista",
                         field="--methods")
    return methods


def cmd_sveb_build(args: argparse.Namespace) -> int:
    """`hista sveb build`: build or resume a case file from a preset and overrides (SPEC §8)."""
    import dataclasses

    from .sveb import shards
    from .sveb.build import build
    from .sveb.presets import preset

    config = dataclasses.replace(preset(args.preset), **_build_overrides(args))
    shard = shards.parse(args.shard) if args.shard is not None else None
    counts = build(config, args.out, shard=shard)
    part = f" (shard {shard[0]}/{shard[1]}; join the parts with hista sveb merge)" if shard else ""
    print(f"sveb build: {counts['cases']} new cases, {counts['skipped']} problems skipped, "
          f"{counts['present']} records already present -> {args.out}{part}")
    return 0


def cmd_sveb_merge(args: argparse.Namespace) -> int:
    """`hista sveb merge`: join the case files of a sharded build into one (SPEC §8)."""
    from .sveb import shards

    counts = shards.merge(args.parts, args.out)
    print(f"sveb merge: {counts['parts']} parts, {counts['cases']} cases, {counts['skipped']} problems skipped "
          f"-> {args.out}")
    return 0


def cmd_sveb_eval(args: argparse.Namespace) -> int:
    """`hista sveb eval`: evaluate methods on stored cases, write the results JSON (SPEC §8)."""
    from .jsonio import check_not_inputs, check_output_file, write_json_atomic
    from .sveb import report
    from .sveb.eval import evaluate

    check_not_inputs([args.out], [args.cases, *([args.methods_file] if args.methods_file else [])])
    check_output_file(args.out, "json")
    results = evaluate(args.cases, _methods(args), model=args.model, device=args.device, critics=args.critic)
    write_json_atomic(args.out, results)
    print(f"sveb eval: {len(results['cases'])} cases -> {args.out}")
    print(report.markdown_table(results["summary"], results["labels"]))
    print(report.paired_markdown(results["cases"], list(results["methods"]), results["labels"],
                                 n_boot=results["summary"]["n_boot"], seed=results["summary"]["seed"]))
    return 0


def cmd_sveb_sweep(args: argparse.Namespace) -> int:
    """`hista sveb sweep`: a grid of method specs on stored cases, resumable, with selection (SPEC §8)."""
    from .sveb import sweep
    from .sveb.eval import read_methods_file

    specs = read_methods_file(args.specs) if args.specs is not None else None
    result = sweep.sweep(args.cases, args.out, base=args.base, grid=args.grid, specs=specs, folds=args.folds,
                         select_on=args.select_on, seed=args.seed, n_boot=args.n_boot, device=args.device,
                         critics=args.critic)
    print("sveb sweep: " + sweep.summary_text(result))
    print("sveb sweep: " + ", ".join(str(p) for p in [Path(args.out) / sweep.VALUES, *result["paths"].values()]))
    return 0


def cmd_sveb_split(args: argparse.Namespace) -> int:
    """`hista sveb split`: the selection and report parts of a case file, as sweep splits it (SPEC §8)."""
    from .sveb import sweep

    paths = sweep.split_cases(args.cases, args.out, select_on=args.select_on, seed=args.seed)
    print("sveb split: " + ", ".join(f"{part} {path}" for part, path in paths.items()))
    return 0


def cmd_sveb_report(args: argparse.Namespace) -> int:
    """`hista sveb report`: the markdown table, JSON and plots of a results file (SPEC §8)."""
    from .sveb import results

    paths, table = results.report(args.results, Path(args.out))
    print(table)
    print("sveb report: " + ", ".join(str(p) for p in paths.values()))
    return 0


def cmd_sveb_run(args: argparse.Namespace) -> int:
    """`hista sveb run`: build + eval + report with a preset, through :func:`hista.sveb.run` (SPEC §8)."""
    from .sveb import report, run

    result = run(args.preset, args.out, methods=_methods(args), overrides=_build_overrides(args), device=args.device,
                 with_critic=args.with_critic)
    counts = result["counts"]
    print(f"sveb build: {counts['cases']} new cases, {counts['skipped']} problems skipped, "
          f"{counts['present']} records already present -> {result['cases']}")
    print(f"sveb eval: {result['results']}")
    print(report.markdown_table(result["summary"], result["labels"]))
    print("sveb report: " + ", ".join(str(p) for p in result["report"].values()))
    return 0


def _add_build_options(p: argparse.ArgumentParser, default_preset: str) -> None:
    """Options of ``sveb build`` and ``sveb run``: a preset and any of its fields."""
    from .sveb.presets import PRESETS

    d = PRESETS[default_preset]
    p.add_argument("--preset", choices=sorted(PRESETS), default=default_preset,
                   help="settings preset; the options below override its fields (default: %(default)s)")
    p.add_argument("--tasks", action="append", metavar="SPEC",
                   help=f"task source, repeatable (preset: {' '.join(d.tasks)})")
    p.add_argument("--problems", type=POSITIVE, help=f"problems per task source (preset: {d.problems})")
    p.add_argument("--rollouts", type=AT_LEAST_2, help=f"initial rollouts per problem, G (preset: {d.rollouts})")
    p.add_argument("--continuations", type=POSITIVE, help=f"continuations per state, M (preset: {d.continuations})")
    p.add_argument("--states-per-problem", type=POSITIVE, help=f"states per problem (preset: {d.states_per_problem})")
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
    _add_engine_options(p, None)


def _add_methods_option(p: argparse.ArgumentParser) -> None:
    from .sveb.presets import DEFAULT_METHODS

    which = p.add_mutually_exclusive_group()
    which.add_argument("--methods", default=None,
                       help="comma list of estimator methods, name[-profile][?key=value&...], the key label= names "
                            "the method in reports (e.g. hista?layer=-6&interval=10, mc?num=1&label=MC 1) "
                            f"(default: {','.join(DEFAULT_METHODS)})")
    which.add_argument("--methods-file", metavar="FILE.yaml",
                       help="a YAML list of methods: spec strings, or mappings {name, profile, label, params}")
    p.add_argument("--device", type=_device, default=None,
                   help="cpu or cuda for hidden states (default: cuda if available)")


def cmd_critic_train(args: argparse.Namespace) -> int:
    """`hista critic train`: PPO-1 or PPO-N critics on the rollouts of a case file (SPEC §4.5)."""
    from .critic.train import FitConfig, train_critics

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


def _add_critic_option(p: argparse.ArgumentParser) -> None:
    p.add_argument("--critic", action="append", metavar="DIR",
                   help="a critic folder written by hista critic train (or a folder of them), repeatable; the "
                        "methods ppo-1 and ppo-n read the critic of their mode and lam")


def cmd_train(args: argparse.Namespace) -> int:
    """`hista train`: validate a recipe and train with it (SPEC §9, §11). A dry run makes the
    checks a run makes before it loads anything, the output folder's included."""
    from .train import load_recipe, train
    from .train.recipe import check_hidden_layer
    from .train.run import check_output_dir

    recipe = load_recipe(args.recipe, args.overrides)
    note = check_hidden_layer(recipe)
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
    from .integrations.verl import status

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
    print("hista losses verl already has (set these instead):")
    for name, settings in found["equivalent"].items():
        print(f"  {name}: " + " ".join(f"{k}={v:g}" if isinstance(v, float) else f"{k}={v}"
                                       for k, v in settings.items()))
    return 1 if missing else 0


def cmd_eval(args: argparse.Namespace) -> int:
    """`hista eval`: evaluate a model on benchmark suites, avg@k and pass@k, resumably (SPEC §10)."""
    from .evaluation import EvalConfig, evaluate

    if not args.suite:
        raise InputError("give --suite: a preset (builtin, paper-math, paper-hybrid) or a task source spec such as "
                         "builtin:arith?steps=2, jsonl:PATH or hf:math500", field="suite")
    suites = [part.strip() for item in args.suite for part in item.split(",")]
    config = EvalConfig(model=args.model, suites=suites, k=args.k, temperature=args.temperature,
                        max_new_tokens=args.max_new_tokens, limit=args.limit, seed=args.seed,
                        batch_size=args.batch_size, engine=args.engine,
                        tensor_parallel_size=args.tensor_parallel_size)
    from .sveb.shards import parse

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


def cmd_eval_merge(args: argparse.Namespace) -> int:
    """`hista eval merge`: join the results of a sharded evaluation (SPEC §10)."""
    from .evaluation.merge import merge

    table = merge(args.parts, args.merge_out)
    print("\n" + table)
    print(f"eval merge: {len(args.parts)} parts -> {args.merge_out}")
    return 0


def cmd_eval_compare(args: argparse.Namespace) -> int:
    """`hista eval compare`: results side by side with paired differences from the first (SPEC §10)."""
    from .evaluation import compare
    from .evaluation.report import compare_markdown
    from .evaluation.run import check_outputs_not_inputs
    from .jsonio import check_output_file, write_atomic, write_json_atomic

    out = Path(args.compare_out) if args.compare_out else None
    if out is not None:
        if out.suffix == ".json":
            raise InputError("give the markdown file a .md name: the numbers go to the .json file beside it",
                             path=str(out))
        check_outputs_not_inputs(out, [out.with_suffix(".json")], args.results)
        check_output_file(out, "markdown")
        check_output_file(out.with_suffix(".json"), "json")
    result = compare(args.results, force=args.force, metric=args.metric, seed=args.compare_seed)
    text = compare_markdown(result)
    print(text)
    if out is not None:
        write_atomic(out, lambda fh: fh.write(text), kind="markdown")
        write_json_atomic(out.with_suffix(".json"), result)
        print(f"wrote {out} and {out.with_suffix('.json')}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of every ``hista`` command (SPEC §11)."""
    from . import __version__

    parser = argparse.ArgumentParser(prog="hista", description=(
        "Credit assignment for RL of LLMs: token-level advantages, the SVEB benchmark, training."))
    parser.add_argument("--version", action="version", version=f"hista {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    p = sub.add_parser("sample", help="sample rollouts, verify them, print accuracies",
                       description="Sample G rollouts for each of N problems, verify them, print per-problem "
                                   "accuracy, the mean and one example, and write the rollouts as JSONL.")
    p.add_argument("--tasks", action="append", required=True, metavar="SPEC",
                   help="task source, repeatable: builtin:arith[?steps=2&max_value=20], builtin:choice, "
                        "jsonl:PATH, hf:NAME")
    p.add_argument("--problems", type=POSITIVE, default=8, help="problems per task source (default: %(default)s)")
    p.add_argument("--rollouts", type=POSITIVE, default=4, help="rollouts per problem, G (default: %(default)s)")
    p.add_argument("--split", default="test", choices=["train", "test"],
                   help="built-in task split (default: %(default)s)")
    p.add_argument("--out", default="runs/sample.jsonl", help="rollouts JSONL (default: %(default)s)")
    _add_sampling_options(p)
    p.set_defaults(func=cmd_sample)

    p = sub.add_parser("sveb", help="State Value Estimation Benchmark: build, merge, eval, report, run, sweep",
                       description="SVEB (SPEC §8). build: sample G rollouts per problem, pick states, sample M "
                                   "continuations (targets); merge: join the parts of a sharded build; eval: "
                                   "estimator values vs targets; report: table, JSON, plots; run: all three "
                                   "with a preset; sweep: a grid of method parameters with selection on held-out "
                                   "problems.")
    actions = p.add_subparsers(dest="action", required=True, metavar="ACTION")
    q = actions.add_parser("build", help="sample cases into a JSONL file (resumable)",
                           description="Sample G rollouts per problem, verify them, pick states, sample M "
                                       "continuations per state; append each case to --out at once. A rerun "
                                       "resumes; the same seed gives the same bytes.")
    q.add_argument("--out", required=True, help="cases JSONL")
    q.add_argument("--shard", metavar="K/N", help="build only the K-th of N disjoint parts of the problem list "
                                                  "(one per machine), with a manifest OUT.shard.json; join the "
                                                  "parts with hista sveb merge")
    _add_build_options(q, "default")
    q.set_defaults(func=cmd_sveb_build)
    q = actions.add_parser("merge", help="join the parts of a sharded build",
                           description="Join the case files of every shard of one build (sveb build --shard K/N) "
                                       "into the file a single build writes; refuses parts of different builds, "
                                       "missing or repeated shards and unfinished parts.")
    q.add_argument("parts", nargs="+", help="the shards' case files (their manifests lie beside them)")
    q.add_argument("--out", required=True, help="the merged cases JSONL")
    q.set_defaults(func=cmd_sveb_merge)
    q = actions.add_parser("eval", help="evaluate estimators on stored cases",
                           description="Evaluate estimators on the cases of --cases against their Monte-Carlo "
                                       "targets, without generating; write a results JSON and print the table.")
    q.add_argument("--cases", required=True, help="the cases JSONL written by sveb build")
    q.add_argument("--out", required=True, help="results JSON")
    _add_methods_option(q)
    q.add_argument("--model", "--eval-model", dest="model", default=None,
                   help="refuse unless the cases were built with this model")
    _add_critic_option(q)
    q.set_defaults(func=cmd_sveb_eval)
    q = actions.add_parser("sweep", help="evaluate a grid of method parameters on stored cases (resumable)",
                           description="Evaluate the Cartesian product of --grid laid over --base (or the specs of "
                                       "--specs) on the cases of --cases: hidden states once per case for all the "
                                       "layers the points need, every point's value appended to OUT/values.jsonl "
                                       "at once (a rerun resumes). Writes OUT/sweep.json, OUT/sweep.md (points "
                                       "by ΔMAE vs GRPO) and heatmaps; the best point is chosen on part of the "
                                       "problems and reported on the rest.")
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
    selection.add_argument("--select-on", type=_number(float, 0.0, 1.0, lo_open=True, what="must lie in (0, 1)"),
                           nargs="?", const=0.5, default=None, metavar="HALF",
                           help="choose the best point on this fraction of the problems (seeded) and report it on "
                                "the others (the default, with 0.5)")
    selection.add_argument("--folds", type=AT_LEAST_2, metavar="K",
                           help="K-fold by problem: choose on K-1 folds, report on the held-out one, pool them")
    q.add_argument("--seed", type=SEED, default=0, help="seed of the split and the bootstrap (default: %(default)s)")
    q.add_argument("--n-boot", type=_number(int, 1, 1_000_000, what="must be an integer in [1, 1000000]"),
                   default=2000, help="bootstrap resamples of the intervals (default: %(default)s)")
    q.add_argument("--device", type=_device, default=None,
                   help="cpu or cuda for hidden states (default: cuda if available)")
    _add_critic_option(q)
    q.set_defaults(func=cmd_sveb_sweep)
    q = actions.add_parser("split", help="split a case file by problem into selection and report parts",
                           description="Write OUT/selection.jsonl and OUT/report.jsonl: the cases of --cases split "
                                       "by problem exactly as sveb sweep splits them with the same --select-on "
                                       "and --seed, so that tables of the report part are not selected on.")
    q.add_argument("--cases", required=True, help="the cases JSONL (or .jsonl.gz) written by sveb build")
    q.add_argument("--out", required=True, help="output folder (selection.jsonl, report.jsonl)")
    q.add_argument("--select-on", type=_number(float, 0.0, 1.0, lo_open=True, what="must lie in (0, 1)"),
                   default=0.5, metavar="HALF", help="fraction of the problems in the selection part "
                                                     "(default: %(default)s)")
    q.add_argument("--seed", type=SEED, default=0, help="seed of the split (default: %(default)s)")
    q.set_defaults(func=cmd_sveb_split)
    q = actions.add_parser("report", help="markdown table, JSON and plots from a results file",
                           description="Write report.md, report.json and the plots of a results JSON into --out.")
    q.add_argument("--results", required=True, help="the results JSON written by sveb eval")
    q.add_argument("--out", required=True, help="output folder")
    q.set_defaults(func=cmd_sveb_report)
    q = actions.add_parser("run", help="build + eval + report with a preset",
                           description="Build (or resume) OUT/cases.jsonl with a preset, evaluate the methods "
                                       "into OUT/results.json and write the report into OUT.")
    q.add_argument("--out", required=True, help="output folder")
    _add_build_options(q, "quick")
    _add_methods_option(q)
    q.add_argument("--with-critic", action="store_true",
                   help="also train the PPO critics (ppo-1 and ppo-n at lam 0.95 and 1.0, hista critic train's "
                        "defaults) into OUT/critics after the build, and evaluate the four ppo methods beside the "
                        "others")
    q.set_defaults(func=cmd_sveb_run)

    p = sub.add_parser("train", help="train a policy from a YAML recipe (estimator x loss on TRL's GRPOTrainer)",
                       description="Train with TRL's GRPOTrainer, advantages from a hista estimator and a hista "
                                   "policy loss (SPEC §9). Overrides use dotted keys with YAML values, e.g. "
                                   "advantage_estimator.name=hista loss.name=strace trl.max_steps=10 resume=true. "
                                   "Multi-GPU: accelerate launch --config_file configs/accelerate/zero2.yaml "
                                   "-m hista.cli train RECIPE.yaml")
    p.add_argument("recipe", help="recipe YAML, e.g. recipes/cpu-smoke.yaml")
    p.add_argument("overrides", nargs="*", metavar="KEY=VALUE", help="recipe overrides (dotted keys)")
    p.add_argument("--dry-run", action="store_true",
                   help="validate the recipe (types, ranges, GRPOConfig, output folder) and print its batch "
                        "layout only")
    p.add_argument("--overwrite", action="store_true",
                   help="replace an earlier run in output_dir (its metrics.jsonl, checkpoints and final model are "
                        "removed once the new run starts); without it such a run is refused unless resume=true")
    p.set_defaults(func=cmd_train)

    p = sub.add_parser("eval", help="evaluate a model on benchmark suites (avg@k, pass@k); compare runs",
                       description="Evaluate a model or a hista train checkpoint on benchmark suites (SPEC §10): "
                                   "accuracy avg@k and pass@k per benchmark, category and overall, with bootstrap "
                                   "95% intervals over problems. Writes OUT (results JSON), OUT's .samples.jsonl "
                                   "(every problem as it finishes: a rerun with the same settings resumes) and OUT's "
                                   ".md table. 'hista eval compare A.json B.json' puts runs side by side.")
    p.add_argument("--model", default="smollm2-135m-instruct",
                   help="alias (smollm2-135m-instruct, tiny), model folder, Hugging Face id, or a hista train run or "
                        "checkpoint (runs/x, runs/x/final, runs/x/checkpoint-50), posed with the run's system prompt "
                        "(default: %(default)s)")
    p.add_argument("--suite", action="append", metavar="SUITE[,SUITE...]",
                   help="presets builtin (offline), paper-math, paper-hybrid (Hugging Face hub), or task source specs "
                        "(builtin:arith?steps=2, builtin:choice, jsonl:PATH, hf:math500), comma-separated or repeated")
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
    p.add_argument("--device", type=_device, default=None, help="cpu or cuda (default: cuda if available)")
    p.add_argument("--batch-size", type=POSITIVE, default=64,
                   help="sequences per generation batch, problems mixed (default: %(default)s)")
    p.add_argument("--shard", metavar="K/N", help="evaluate only the K-th of N disjoint parts of the problems (one "
                                                  "per machine); join the parts' results with hista eval merge")
    _add_engine_options(p, "hf")
    p.set_defaults(func=cmd_eval)
    actions = p.add_subparsers(dest="action", metavar="[compare|merge]")
    q = actions.add_parser("merge", help="join the results of a sharded evaluation",
                           description="Join the results files of every shard of one evaluation (hista eval --shard "
                                       "K/N) into the results, table and per-problem file of a whole evaluation; "
                                       "refuses parts of different evaluations, missing or repeated shards and "
                                       "missing or repeated problems.")
    q.add_argument("parts", nargs="+", metavar="RESULTS.json", help="the shards' results files")
    q.add_argument("--out", dest="merge_out", required=True, metavar="RESULTS.json", help="the merged results JSON")
    q.set_defaults(func=cmd_eval_merge)
    q = actions.add_parser("compare", help="runs side by side, paired differences from the first",
                           description="Put hista eval results side by side per benchmark, category and ALL, with each "
                                       "later run's paired difference from the first (same problems) and its "
                                       "bootstrap 95% interval. Runs whose settings differ other than the model are "
                                       "refused, naming the fields, unless --force.")
    q.add_argument("results", nargs="+", metavar="RESULTS.json", help="results files of hista eval; the first is "
                                                                       "the baseline")
    q.add_argument("--force", action="store_true", help="compare runs whose settings differ (listed in the table)")
    q.add_argument("--metric", default="avg", help="avg (avg@k) or pass@K (default: %(default)s)")
    q.add_argument("--out", dest="compare_out", default=None, metavar="TABLE.md",
                   help="also write the table there and its numbers to the .json beside it")
    q.add_argument("--seed", dest="compare_seed", type=SEED, default=0, metavar="SEED",
                   help="seed of the bootstrap (default: %(default)s)")
    q.set_defaults(func=cmd_eval_compare)

    p = sub.add_parser("verl", help="hista inside verl: check the plugin's registrations",
                       description="hista registers its losses and estimators with verl through the verl.plugins "
                                   "entry point (docs/verl.md). check imports verl and the plugin and prints what is "
                                   "registered; verl itself hides a failing plugin import.")
    actions = p.add_subparsers(dest="action", required=True, metavar="ACTION")
    q = actions.add_parser("check", help="print what hista registered with verl (exit 1 if something is missing)")
    q.set_defaults(func=cmd_verl_check)

    from .critic.train import CPU_LAYERS, DEFAULT_FOLDS, FitConfig

    d = FitConfig()
    p = sub.add_parser("critic", help="train PPO critics (value models) for the SVEB methods ppo-1 and ppo-n",
                       description="PPO critics (SPEC §4.5): a copy of the policy's transformer plus a linear value "
                                   "head, regressed on GAE(lambda) targets (reward at the last token, gamma = 1).")
    actions = p.add_subparsers(dest="action", required=True, metavar="ACTION")
    q = actions.add_parser("train", help="train PPO-1 or PPO-N critics on the rollouts of a case file",
                           description="Train critics on the G initial rollouts of the cases of --cases. ppo-n: one "
                                       "critic on every problem of the cases, written to --out. ppo-1: cross-fitted "
                                       "by problem, --folds seeded folds; the critic of fold f never sees fold f's "
                                       "problems and scores only them; written to --out/fold-F with "
                                       "--out/folds.json. Loss: mean squared error over completion tokens, AdamW. "
                                       f"CPU default: the last {CPU_LAYERS} decoder layers, the final norm and the "
                                       "head train (the rest is frozen, and the critic folder stores only what "
                                       "trained); on a GPU the whole critic trains.")
    q.add_argument("--cases", required=True, help="the cases JSONL written by sveb build")
    q.add_argument("--mode", required=True, type=_list_of(_choice("ppo-1", "ppo-n")),
                   help="ppo-1: cross-fitted by problem; ppo-n: trained on the cases' own problems; a comma list "
                        "trains each")
    q.add_argument("--lam", required=True, type=_list_of(_number(float, 0.0, 1.0, what="must lie in [0, 1]")),
                   help="GAE lambda of the targets (paper: 0.95 or 1.0; 1.0 regresses on the reward); a comma "
                        "list trains each. Several modes or lambdas write OUT/MODE-LAMBDA folders")
    q.add_argument("--out", required=True, help="output folder: new or empty, or the folder of an interrupted "
                                                "run of the same command, which resumes")
    q.add_argument("--folds", type=_number(int, 2, what="must be an integer >= 2 (PPO-1 holds one fold of "
                                                        "problems out of each critic's training, to score it)"),
                   default=None, help=f"ppo-1: folds by problem (default: {DEFAULT_FOLDS}, or one per problem when "
                                      "the cases hold fewer)")
    q.add_argument("--layers", type=_layers, default=None, metavar="K|all",
                   help=f"train the last K decoder layers (0: the head only) or all (default: {CPU_LAYERS} on the "
                        "CPU, all on a GPU)")
    q.add_argument("--epochs", type=POSITIVE, default=d.epochs, help="passes over the rollouts (default: %(default)s)")
    q.add_argument("--lr", type=_number(float, 0.0, lo_open=True, what="must be a positive number"),
                   default=d.lr, help="AdamW learning rate (default: %(default)s)")
    q.add_argument("--batch-size", type=POSITIVE, default=d.batch_size,
                   help="rollouts per optimiser step (default: %(default)s)")
    q.add_argument("--value-clip", type=_number(float, 0.0, lo_open=True, what="must be a positive number"),
                   default=None, metavar="EPS", help="PPO value clipping around the epoch's starting values "
                                                     "(default: off)")
    q.add_argument("--seed", type=SEED, default=0, help="seed of the folds and the shuffling (default: %(default)s)")
    q.add_argument("--model", default=None,
                   help="the critic's backbone: alias, path or Hugging Face id (default: the model recorded in the "
                        "cases)")
    q.add_argument("--device", type=_device, default=None, help="cpu or cuda (default: cuda if available)")
    q.set_defaults(func=cmd_critic_train)

    p = sub.add_parser("models", help="list model aliases or prepare the embedded model",
                       description="List model aliases, or convert the embedded GGUF model to the cache once.")
    p.add_argument("action", nargs="?", default="list", choices=["list", "prepare"], help="(default: list)")
    p.set_defaults(func=cmd_models)

    p = sub.add_parser("tasks", help="list, preview or difficulty-filter task sources",
                       description="List the built-in task generators, print problems from a task source, or "
                                   "keep the problems whose accuracy under a policy lies in [--lo, --hi] "
                                   "(paper: 0.1-0.8 of 20 samples) and write them as JSONL.")
    p.add_argument("action", nargs="?", default="list", choices=["list", "preview", "filter"], help="(default: list)")
    p.add_argument("spec", nargs="?", default="builtin:arith", help="task source (default: %(default)s)")
    p.add_argument("-n", type=POSITIVE, default=3, help="problems to preview or to filter (default: %(default)s)")
    p.add_argument("--samples", type=POSITIVE, default=20, help="filter: samples per problem (default: %(default)s)")
    p.add_argument("--lo", type=FRACTION, default=0.1, help="filter: lowest accuracy kept (default: %(default)s)")
    p.add_argument("--hi", type=FRACTION, default=0.8, help="filter: highest accuracy kept (default: %(default)s)")
    p.add_argument("--out", default="runs/filtered.jsonl", help="filter: output JSONL (default: %(default)s)")
    _add_sampling_options(p)
    p.add_argument("--split", default="test", choices=["train", "test"], help="(default: %(default)s)")
    p.set_defaults(func=cmd_tasks)
    return parser


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Entry point of the ``hista`` command (SPEC §11): bad input (an InputError, or an OSError
    about a path, such as a full disk or a permission) exits 2 with a message naming the file,
    line and field; any other exception is a bug and keeps its traceback."""
    parser = build_parser()
    args, extra = parser.parse_known_args(argv)
    if extra:  # `hista train RECIPE --dry-run key=value`: overrides after options, as users type them
        if getattr(args, "func", None) is cmd_train and all("=" in e and not e.startswith("-") for e in extra):
            args.overrides = [*args.overrides, *extra]
        else:
            parser.error(f"unrecognized arguments: {' '.join(extra)}")
    try:
        return args.func(args)
    except InputError as exc:
        print(f"hista: error: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:
        if exc.filename is None and exc.errno in (errno.ENOSPC, errno.EDQUOT, errno.EROFS):
            print(f"hista: error: {exc.strerror or exc}", file=sys.stderr)
            return 2
        if exc.filename is None:
            raise
        where = exc.filename if exc.filename2 is None else f"{exc.filename} -> {exc.filename2}"
        print(f"hista: error: {where}: {exc.strerror or exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("hista: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
