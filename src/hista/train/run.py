"""Run a training recipe end to end: data, reward, model, trainer, resume.

Nothing in ``output_dir`` is created or changed until the recipe, the GRPOConfig, the data
and the model have all been checked or loaded; an earlier run there is continued
(``resume: true``), replaced once the new run has started (``overwrite=True``), or refused."""

from __future__ import annotations

import json
import os
import shutil
import time
from pathlib import Path
from typing import Any, Optional

import yaml
from transformers import TrainerCallback

from .. import provenance, rewards, tasks, yamlio
from ..errors import InputError
from ..jsonio import check_not_inputs, jsonable, read_input, write_atomic
from ..rollout.engine import chat_messages
from . import checkpoints, pool
from .checkpoints import CHECKPOINT
from .pool import STAGED
from .recipe import Recipe

#: recipe fields a resumed run may change (how long it trains, how often it saves and logs):
#: any other change would make the resumed run another run
RESUMABLE_CHANGES = ("resume", "trl.max_steps", "trl.num_train_epochs", "trl.save_steps", "trl.save_total_limit",
                     "trl.logging_steps", "trl.report_to", "trl.disable_tqdm")


#: task sources whose problems load without a download: a dry run loads them as the run
#: does (that each source supplies ``problems`` of them) and checks their prompts
LOCAL_SOURCES = ("builtin", "jsonl", "humaneval", "gym")


def load_problems(recipe: Recipe) -> list[tuple[str, dict]]:
    """The recipe's problems as (task spec, problem record), in the order of its task specs; an
    InputError about ``tasks`` when a source cannot supply ``problems`` of
    them (a task file's own error keeps its file and line) or there are none."""
    try:
        problems = [(spec, rec) for spec in recipe.task_specs
                    for rec in tasks.load(spec, n=recipe.problems, seed=recipe.seed, split=recipe.split)]
    except InputError as exc:
        raise recipe.error("tasks", str(exc) if exc.path else exc.message) from None
    if not problems:
        raise recipe.error("tasks", f"no problems in {', '.join(recipe.task_specs)}")
    return problems


def build_dataset(recipe: Recipe, problems: Optional[list[tuple[str, dict]]] = None):
    """The recipe's problems (``problems``, as :func:`load_problems` gives them, else loaded)
    as a TRL prompt dataset: a conversational ``prompt`` (system prompt + problem) and the
    columns the reward needs."""
    from datasets import Dataset

    rows = [{"prompt": chat_messages(rec["problem"], recipe.system_prompt), "answer": str(rec["answer"]),
             "verifier": rec["verifier"], "problem_id": str(rec["id"])}
            for _, rec in (problems if problems is not None else load_problems(recipe))]
    return Dataset.from_list(rows)


def check_prompt_lengths(recipe: Recipe, problems: Optional[list[tuple[str, dict]]] = None,
                         tokenizer: Any = None) -> Optional[str]:
    """Refuse a problem whose prompt cannot be sampled within the model's context (SPEC §9,
    §11), before the model loads and before anything is written: each problem is posed as the
    trainer poses it (the system prompt, TRL's chat template with ``trl.chat_template_kwargs``:
    :func:`hista.train.rollouts.pose`), and the first whose tokens plus
    ``trl.max_completion_length`` pass ``max_position_embeddings`` is an InputError about
    ``tasks`` naming it (``SPEC/ID``) and its token count (with ``pool_filter.max_new_tokens``
    instead when the pool filter measures with a larger cap); a prompt is never truncated.
    ``problems`` (:func:`load_problems`) and ``tokenizer`` are loaded when not given. A dry run
    calls it without problems: it checks those of the sources that load without a download
    (:data:`LOCAL_SOURCES`) and leaves the others to the run. Returns a note saying what was not
    checked, else None."""
    from ..models import load
    from ..models.loading import context_length, model_config
    from .rollouts import pose

    context = context_length(model_config(recipe.model))
    if context is None:
        return (f"note: the context of {recipe.model} cannot be read here: the prompts' lengths are not checked before "
                "it loads")
    if problems is None:
        remote = [spec for spec in recipe.task_specs if spec.partition(":")[0].strip().lower() not in LOCAL_SOURCES]
        if remote:
            return (f"note: a dry run does not load the problems of {', '.join(remote)}: the run checks that each "
                    f"prompt fits the context of {recipe.model} with trl.max_completion_length before it loads the "
                    "model")
        problems = load_problems(recipe)
    tokenizer = tokenizer if tokenizer is not None else load(recipe.model, device="cpu", weights=False).tokenizer
    if not getattr(tokenizer, "chat_template", None):
        return None  # TRL poses conversational prompts with the chat template only: such a run fails as it loads
    cap, name = int(recipe.trl_setting("max_completion_length")), "trl.max_completion_length"
    if recipe.pool_filter and (recipe.pool_filter["max_new_tokens"] or 0) > cap:  # the pool's measurement
        cap, name = recipe.pool_filter["max_new_tokens"], "pool_filter.max_new_tokens"
    options = recipe.trl.get("chat_template_kwargs") or {}
    for first in range(0, len(problems), 256):
        chunk = problems[first: first + 256]
        posed = pose(tokenizer, [chat_messages(rec["problem"], recipe.system_prompt) for _, rec in chunk], options)
        for (spec, rec), ids in zip(chunk, posed):
            if len(ids) + cap > context:
                raise recipe.error("tasks", f"problem '{spec}/{rec['id']}' has a prompt of {len(ids)} tokens, which "
                                            f"with {cap} new tokens ({name}) passes the context of {recipe.model}: "
                                            f"{context} positions (max_position_embeddings); shorten the problem, "
                                            f"leave it out, or lower {name}")
    return None


def filter_pool(recipe: Recipe, problems: list[tuple[str, dict]],
                config: Any) -> tuple[list[tuple[str, dict]], Optional[Path]]:
    """The recipe's problems that its ``pool_filter`` keeps (:mod:`hista.train.pool`):
    measured with the base policy under the run's temperature and top-p, with
    ``pool_filter.max_new_tokens`` (default ``trl.max_completion_length``) new tokens, into
    ``OUTPUT_DIR/pool.new/``, or read from ``pool/`` (or ``pool.new/``) when it holds this pool;
    and the folder :class:`ReplaceEarlierRun` puts in place of ``pool/`` (None: none)."""
    from ..models import load

    cfg = recipe.pool_filter
    lm = load(recipe.model, device="cpu")
    return pool.filtered(recipe, problems, lm, cfg, temperature=config.temperature, top_p=config.top_p,
                         max_new_tokens=cfg["max_new_tokens"] or config.max_completion_length,
                         folder=Path(recipe.output_dir) / "pool")


def measure_pool(recipe: Recipe) -> tuple[list[tuple[str, dict]], Path]:
    """The problems the recipe's ``pool_filter`` keeps, measured as a run measures them before
    its first step (:func:`filter_pool`), and the folder holding the pool's files
    (``pool.jsonl``, ``accuracy.jsonl``, ``settings.json``): ``OUTPUT_DIR/pool.new/`` when
    measured now, ``OUTPUT_DIR/pool/`` when that held this pool already. An InputError about
    ``pool_filter`` when the recipe sets none."""
    if not recipe.pool_filter:
        raise recipe.error("pool_filter", "the recipe filters no pool: set pool_filter")
    kept, staged = filter_pool(recipe, load_problems(recipe), recipe.grpo_config())
    return kept, staged if staged is not None else Path(recipe.output_dir) / "pool"


def correct(completions: list, answer: list, verifier: list, **_: Any) -> list[float]:
    """TRL reward function: 1.0 when the verifier of each problem accepts the completion."""
    texts = [c[-1]["content"] if isinstance(c, list) else str(c) for c in completions]
    return [rewards.verify(kind, text, gold) for text, gold, kind in zip(texts, answer, verifier)]


def load_policy(recipe: Recipe):
    """The policy for the trainer: (model, tokenizer, (name, revision)); for hub ids
    and local paths the model is its name (TRL loads it) and the revision is left to the
    trainer."""
    from ..models import ALIASES, load

    if recipe.model in ALIASES:
        lm = load(recipe.model, device="cpu")
        lm.model.train()
        return lm.model, lm.tokenizer, (lm.name, lm.revision)
    return recipe.model, None, (recipe.model, None)  # TRL loads hub ids and local paths itself (dtype, ZeRO-3)


class MetricsLog(TrainerCallback):
    """Appends every logged step (and the evaluation before the first, at step 0) to
    ``metrics.jsonl`` and prints a one-line summary."""

    KEYS = (("reward", "reward"), ("adv_std", "advantages/std"), ("clip_hi", "loss/clip_frac_high"),
            ("entropy", "entropy"), ("len", "completions/mean_length"), ("est", "estimator/time_frac"),
            ("v_loss", "critic/value_loss"), ("ev", "critic/explained_variance"),
            ("rounds", "dynamic_sampling/rounds"))

    def __init__(self, path: Path):
        self.path = path

    def on_log(self, args, state, control, logs=None, **kwargs):
        evaluated = [key for key in logs or {} if key.startswith("eval/")]
        if not state.is_world_process_zero or not logs or ("loss" not in logs and not evaluated):
            return
        with open(self.path, "a") as f:
            f.write(json.dumps(jsonable({"step": state.global_step, "time": time.time(), **logs,
                                          "commit": provenance.code()["commit"]})) + "\n")
        parts = [f"{name} {logs[key]:.3g}" for name, key in self.KEYS if logs.get(key) is not None]
        parts += [f"{key} {logs[key]:.3g}" for key in evaluated if logs[key] is not None]
        print(f"step {state.global_step}/{state.max_steps}: " + ", ".join(parts), flush=True)


def earlier_run(out: Path) -> list[Path]:
    """What an earlier run left in ``out``: ``metrics.jsonl``, ``checkpoint-N/`` (in step
    order), ``final/`` and ``eval/``; empty when ``out`` holds none of them or does not exist."""
    if not out.is_dir():
        return []
    checkpoints = sorted((p for p in out.iterdir() if CHECKPOINT.match(p.name) and p.is_dir()),
                         key=lambda p: int(CHECKPOINT.match(p.name).group(1)))
    metrics, final, evaluations = out / "metrics.jsonl", out / "final", out / "eval"
    return [*([metrics] if metrics.exists() else []), *checkpoints,
            *(p for p in (final, evaluations) if p.exists())]


#: recipe settings compared as a whole on resume (their mapping and their true/false forms are one
#: setting); listed after the others when both differ: the dapo loss turns dynamic sampling on
WHOLE_SETTINGS = ("dynamic_sampling", "pool_filter")


def _flat(data: Any, prefix: str = "") -> dict[str, Any]:
    if not isinstance(data, dict) or (prefix and not data) or prefix in WHOLE_SETTINGS:
        return {prefix: data}
    out: dict[str, Any] = {}
    for key, value in data.items():
        out.update(_flat(value, f"{prefix}.{key}" if prefix else str(key)))
    return out


def check_same_run(recipe: Recipe) -> None:
    """A resumed run must be the run it resumes: its recipe may differ from the
    ``recipe.yaml`` the earlier run wrote only in :data:`RESUMABLE_CHANGES`; any other
    difference (another ``seed``, loss, estimator, model) is an InputError naming the field and
    both values. A ``recipe.yaml`` that cannot be read is an InputError too; a run folder
    without one (it was removed) cannot be checked, which is said."""
    saved_path = Path(recipe.output_dir) / "recipe.yaml"
    if not saved_path.exists():
        print(f"note: {saved_path} is missing: cannot check that the recipe is the one the run was trained with",
              flush=True)
        return
    text = read_input(saved_path, "the earlier run's recipe").decode("utf-8", errors="replace")
    saved = yamlio.load(text, path=str(saved_path), what="the earlier run's recipe")
    if not isinstance(saved, dict):
        raise InputError("the earlier run's recipe is not a mapping", path=str(saved_path))
    saved.pop("versions", None)
    saved.pop("code", None)  # which code wrote it: a resume may run on another commit
    saved.setdefault("rollout_engine", "trl")  # runs from before the engine sampled in training
    saved.setdefault("dynamic_sampling", False)  # runs from before dynamic sampling
    saved.setdefault("packed_loss", False)  # runs from before the packed loss forward
    if isinstance(saved.get("pool_filter"), dict):
        saved["pool_filter"].setdefault("seed", None)  # runs from before pool_filter.seed
    old, new = _flat(saved), _flat(recipe.to_dict())
    for key in sorted(old.keys() | new.keys(), key=lambda k: (k in WHOLE_SETTINGS, k)):
        if key in RESUMABLE_CHANGES or key == "output_dir" or old.get(key) == new.get(key):
            continue
        allowed = ", ".join(RESUMABLE_CHANGES[1:])
        raise recipe.error(key, f"resume=true continues the run in {recipe.output_dir}, which was trained with "
                                f"{key}={old.get(key)!r}, not {new.get(key)!r}: only {allowed} may change on resume; "
                                "start a new run (another output_dir) for other settings")


def check_output_dir(recipe: Recipe, overwrite: bool = False) -> list[Path]:
    """Check that a run of ``recipe`` may write to its ``output_dir`` and return what of an
    earlier run it will replace: an output_dir (or a folder above it) that is a file,
    that lies under /proc, /sys or /dev, or that cannot be written, is an error; so is a recipe
    or task file that is one of the files a run writes there or lies in one of its folders
    (:func:`check_inputs_outside`), and a ``README.md`` there that is not the model card TRL
    writes over it at each checkpoint (a user's file: the folder is likely not meant as a run
    folder). An earlier run there
    (``metrics.jsonl``, ``checkpoint-N``, ``final``, ``eval``) is continued with ``resume: true``
    from its newest complete checkpoint (:mod:`hista.train.checkpoints`; the recipe must be the
    same run's, :func:`check_same_run`) or, with no complete checkpoint, started afresh and
    replaced; replaced with ``overwrite`` (the returned paths, removed only once the new run has
    started); and otherwise refused. Reads only; ``--dry-run`` runs it too."""
    from ..jsonio import system_root

    out = Path(recipe.output_dir)
    if recipe.resume and overwrite:
        raise recipe.error("resume", "resume=true continues the earlier run and --overwrite replaces it: choose one")
    root = system_root(Path(os.path.abspath(out)), Path(os.path.realpath(out)))
    if root is not None:
        raise recipe.error("output_dir", f"{out} lies under {root}: a run folder cannot be written there")
    if Path(os.path.realpath(recipe.source)) == Path(os.path.realpath(out / "recipe.yaml")):
        raise recipe.error("output_dir", f"the recipe {recipe.source} is the run's own recipe.yaml, which the run "
                                         "rewrites: copy it out of the run folder and train with the copy")
    check_inputs_outside(recipe, out)
    readme = out / "README.md"
    if (readme.exists() or readme.is_symlink()) and not _is_model_card(readme):
        raise recipe.error("output_dir", f"{readme} is not the model card TRL writes there, and the run would "
                                         f"replace it with one: move it out of {out} or choose another output_dir")
    for folder in (out, *out.parents):
        if folder.exists() or folder.is_symlink():
            if not folder.is_dir():
                what = "is" if folder == out else f"lies under {folder}, which is"
                raise recipe.error("output_dir", f"{out} {what} not a folder")
            if not os.access(folder, os.W_OK | os.X_OK):
                raise recipe.error("output_dir", f"{folder} is not writable")
            break
    found = earlier_run(out)
    if not found:
        return []
    names = ", ".join(p.name for p in found)
    if recipe.resume:
        complete, _ = checkpoints.scan(out, state_files(recipe))
        if complete:
            check_same_run(recipe)
            return []
        return found  # nothing to continue from: the run starts at step 0 and replaces these
    if not overwrite:
        raise recipe.error("output_dir", f"{out} holds an earlier run ({names}): set resume=true to continue it, "
                           "pass --overwrite to replace it, or choose another output_dir")
    return found


#: what a run writes in ``output_dir``: files, and folders all of whose files are the run's (and checkpoint-N/)
OWN_FILES = ("recipe.yaml", "metrics.jsonl", "README.md")
OWN_FOLDERS = ("pool", STAGED, "final", "eval")


def check_inputs_outside(recipe: Recipe, out: Path) -> None:
    """Refuse an input of the run (the recipe, its task files and those of its ``eval`` suites)
    that is a file the run writes in ``out`` (:data:`OWN_FILES`, by name after following
    symlinks or by inode) or lies in a folder it writes (:data:`OWN_FOLDERS`, ``checkpoint-N``):
    the run would overwrite or remove it: an InputError naming the output file, or
    about ``output_dir``."""
    from ..evaluation.run import task_files

    plan = recipe.evaluation
    inputs = [recipe.source, *tasks.input_files(recipe.task_specs),
              *(task_files(plan.config.suites) if plan is not None else ())]
    check_not_inputs([out / name for name in OWN_FILES], inputs)
    root = Path(os.path.realpath(out))
    for path in inputs:
        real = Path(os.path.realpath(path))
        first = real.relative_to(root).parts[0] if root in real.parents else ""
        if first in OWN_FOLDERS or CHECKPOINT.match(first):
            raise recipe.error("output_dir", f"the input {path} lies in {out / first}, which the run writes and "
                                             "replaces: move it out of the run folder")


def _is_model_card(path: Path) -> bool:
    """Whether ``path`` is a model card a TRL trainer wrote: YAML front matter tagged ``trl``."""
    try:
        text = read_input(path, "README.md").decode("utf-8", errors="replace")
    except InputError:
        return False
    head, sep, _ = text.removeprefix("---\n").partition("\n---")
    try:
        meta = yaml.safe_load(head) if text.startswith("---\n") and sep else None
    except yaml.YAMLError:
        return False
    return isinstance(meta, dict) and isinstance(meta.get("tags"), list) and "trl" in meta["tags"]


def state_files(recipe: Recipe) -> tuple[str, ...]:
    """The files of hista's state a complete checkpoint of this recipe's run holds besides
    TRL's: process 0's ``estimator-0.pt`` when the estimator keeps a state (the
    probe's history), and ``critic/optimizer.pt`` (the last file of the critic's folder) when a
    critic trains with the policy; a checkpoint without the marker and without them was cut
    short."""
    from .. import estimators

    estimator = recipe.estimator
    return ((("estimator-0.pt",) if estimator.state_dict() is not None else ())
            + ((f"{checkpoints.CRITIC}/optimizer.pt",) if estimators.critic_trains_with_policy(estimator) else ()))


class ReplaceEarlierRun(TrainerCallback):
    """Removes an earlier run's files (``check_output_dir(..., overwrite=True)``) and puts the
    pool measured for the new run (``pool.new/``, :func:`hista.train.pool.filtered`) in place of
    ``pool/`` when the new run begins, after the model, data and trainer are ready, so that a run
    that fails to start leaves them as they were."""

    def __init__(self, paths: list[Path], pool: Optional[Path] = None):
        self.paths = list(paths)
        self.pool = pool

    def on_train_begin(self, args, state, control, **kwargs):
        if not state.is_world_process_zero:
            return
        for path in self.paths:
            if path.is_dir() and not path.is_symlink():
                shutil.rmtree(path)
            else:
                path.unlink(missing_ok=True)
        if self.paths:
            print(f"replaced the earlier run in {self.paths[0].parent}: removed "
                  f"{', '.join(p.name for p in self.paths)}", flush=True)
        if self.pool is not None:
            pool.place(self.pool, self.pool.with_name("pool"))


def train(recipe: Recipe, overwrite: bool = False) -> dict:
    """Train with the recipe's estimator and loss. Checks everything before it
    touches ``output_dir``: the output folder (``check_output_dir``), the GRPOConfig on this
    machine (bf16 without a GPU, ...), the data (every prompt fits the model's context with the
    completion cap: :func:`check_prompt_lengths`), the model, the checkpoint a resume reads
    (the trainer's ``check_checkpoint``); then resumes from the last
    checkpoint there when ``recipe.resume`` is true, or starts afresh, replacing an earlier
    run's files once training begins when ``overwrite`` is true. Returns where outputs went and
    the final metrics."""
    from .recipe import require_trl

    trl = require_trl()  # before the modules that import it
    from .evaluate import EvaluateDuringTraining
    from .trainer import HistaGRPOTrainer

    replaced = check_output_dir(recipe, overwrite)
    config = recipe.grpo_config()
    out = Path(recipe.output_dir)
    checkpoint = _resume_point(recipe, out)
    if checkpoint is not None and 0 < config.max_steps <= checkpoint[0]:
        return _finished(recipe, out, checkpoint)
    problems = load_problems(recipe)
    plan = recipe.evaluation
    dataset, staged_pool = _dataset(recipe, problems, plan, config)
    model, tokenizer, policy = load_policy(recipe)
    callbacks = [ReplaceEarlierRun(replaced, staged_pool), MetricsLog(out / "metrics.jsonl")]
    evaluation = None if plan is None else EvaluateDuringTraining(plan, out, recipe.system_prompt, policy)
    if evaluation is not None:
        callbacks.append(evaluation)  # after ReplaceEarlierRun: its step-0 row goes into the new metrics.jsonl
    trainer = HistaGRPOTrainer(
        model=model, reward_funcs=[correct], args=config, train_dataset=dataset, processing_class=tokenizer,
        advantage_estimator=recipe.estimator_config(), estimator=recipe.estimator, loss=recipe.loss,
        policy_loss=recipe.policy_loss, policy=policy,
        callbacks=callbacks,
        rollout_engine=recipe.rollout_engine, dynamic_sampling=recipe.dynamic_sampling,
        packed_loss=recipe.packed_loss,
    )
    if trainer.accelerator.is_main_process:
        print(f"rollouts: {trainer.rollout_source}", flush=True)
    if evaluation is not None:
        evaluation.trainer = trainer
    if checkpoint is not None:  # what the resume reads is checked before anything is written
        trainer.check_checkpoint(checkpoint[1])
    _write_start(recipe, out, checkpoint, trl.__version__)
    return _train_to_end(trainer, out, checkpoint)


def _dataset(recipe: Recipe, problems: list[tuple[str, dict]], plan: Any, config: Any) -> tuple[Any, Optional[Path]]:
    """The training dataset, once every problem of the evaluation ``plan`` loads and every prompt
    fits the context, filtered by the pool filter when the recipe sets one (only its measurement
    is written, into ``pool.new/``), and the pool folder to put in place when training begins
    (:func:`filter_pool`)."""
    if plan is not None:  # every problem it evaluates loads now, before anything is written
        from ..evaluation import check_suites

        check_suites(plan.config, load=True)
    note = check_prompt_lengths(recipe, problems)  # every prompt fits the context with the cap
    if note:
        print(note, flush=True)
    staged = None
    if recipe.pool_filter:
        problems, staged = filter_pool(recipe, problems, config)
    return build_dataset(recipe, problems), staged


def _write_start(recipe: Recipe, out: Path, checkpoint: Optional[tuple[int, Path]], trl_version: str) -> None:
    """What a run writes before it trains: ``recipe.yaml`` (with TRL's version), and, on resume,
    ``metrics.jsonl`` cut back to the checkpoint, whose later steps are trained again."""
    text = yaml.safe_dump({**recipe.to_dict(), "versions": {"trl": trl_version}, "code": provenance.code()},
                          sort_keys=False)
    write_atomic(out / "recipe.yaml", lambda fh: fh.write(text), kind="yaml")
    if checkpoint is not None:
        checkpoints.trim_metrics(out / "metrics.jsonl", checkpoint[0])


def _train_to_end(trainer: Any, out: Path, checkpoint: Optional[tuple[int, Path]]) -> dict:
    """Train (from ``checkpoint`` on resume), write ``final/`` whole, and say where outputs went."""
    metrics, final = out / "metrics.jsonl", out / "final"
    result = trainer.train(resume_from_checkpoint=None if checkpoint is None else str(checkpoint[1]))
    checkpoints.save_final(final, trainer.save_model, main_process=trainer.args.should_save,
                           barrier=trainer.accelerator.wait_for_everyone)
    return {"output_dir": str(out), "final_model": str(final), "metrics": str(metrics),
            "resumed_from": None if checkpoint is None else str(checkpoint[1]),
            "global_step": trainer.state.global_step,
            "train_runtime": result.metrics.get("train_runtime"), "finished_before": False}


def _resume_point(recipe: Recipe, out: Path) -> Optional[tuple[int, Path]]:
    """The (step, folder) of the newest complete checkpoint a ``resume: true`` run continues
    from, naming every incomplete checkpoint it skips, its ``trainer_state.json``
    checked (:func:`hista.train.checkpoints.check_trainer_state`); None to start from step 0."""
    if not recipe.resume:
        return None
    complete, incomplete = checkpoints.scan(out, state_files(recipe))
    for folder, why in incomplete:
        if not complete or int(CHECKPOINT.match(folder.name).group(1)) > complete[-1][0]:
            print(f"resume: skipping {folder} ({why})", flush=True)
    if not complete:
        print(f"resume: no complete checkpoint in {out}; starting from step 0 (an earlier run's files there are "
              "replaced once training starts)", flush=True)
        return None
    checkpoints.check_trainer_state(complete[-1][1], complete[-1][0])
    return complete[-1]


def _finished(recipe: Recipe, out: Path, checkpoint: tuple[int, Path]) -> dict:
    """A resumed run whose newest checkpoint is at ``trl.max_steps`` already: nothing
    is trained and nothing written, unless ``final/`` is missing or cut short, which is then
    made from that checkpoint."""
    step, folder = checkpoint
    final = out / "final"
    if checkpoints.final_is_whole(final):
        print(f"resume: {folder} is at step {step}, trl.max_steps is {recipe.trl.get('max_steps')}: nothing to "
              "train, nothing written", flush=True)
    else:
        checkpoints.copy_final(folder, final)
        print(f"resume: {folder} is at step {step} = trl.max_steps; wrote {final} from it", flush=True)
    return {"output_dir": str(out), "final_model": str(final), "metrics": str(out / "metrics.jsonl"),
            "resumed_from": str(folder), "global_step": step, "train_runtime": 0.0, "finished_before": True}
