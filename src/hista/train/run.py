"""Run a training recipe end to end: data, reward, model, trainer, resume (SPEC §9).

Nothing in ``output_dir`` is created or changed until the recipe, the GRPOConfig, the data
and the model have all been checked or loaded; an earlier run there is continued
(``resume: true``), replaced once the new run has started (``overwrite=True``), or refused."""

from __future__ import annotations

import json
import os
import re
import shutil
import time
from pathlib import Path
from typing import Any

import yaml
from transformers import TrainerCallback

from .. import rewards, tasks
from ..jsonio import jsonable, write_atomic
from ..rollout.engine import chat_messages
from .recipe import Recipe

#: TRL's checkpoint folders, as transformers' ``get_last_checkpoint`` recognises them.
CHECKPOINT = re.compile(r"^checkpoint-(\d+)$")


def build_dataset(recipe: Recipe):
    """The recipe's problems as a TRL prompt dataset: a conversational ``prompt`` (system
    prompt + problem) and the columns the reward needs (SPEC §7, §9)."""
    from datasets import Dataset

    rows = []
    for spec in recipe.task_specs:
        for rec in tasks.load(spec, n=recipe.problems, seed=recipe.seed, split=recipe.split):
            rows.append({"prompt": chat_messages(rec["problem"], recipe.system_prompt), "answer": str(rec["answer"]),
                         "verifier": rec["verifier"], "problem_id": str(rec["id"])})
    if not rows:
        raise recipe.error("tasks", f"no problems in {', '.join(recipe.task_specs)}")
    return Dataset.from_list(rows)


def correct(completions: list, answer: list, verifier: list, **_: Any) -> list[float]:
    """TRL reward function: 1.0 when the verifier of each problem accepts the completion
    (SPEC §6)."""
    texts = [c[-1]["content"] if isinstance(c, list) else str(c) for c in completions]
    return [rewards.verify(kind, text, gold) for text, gold, kind in zip(texts, answer, verifier)]


def _model(recipe: Recipe):
    """The policy for the trainer: (model, tokenizer, (name, revision)); for hub ids and local
    paths the model is its name (TRL loads it) and the revision is left to the trainer."""
    from ..models import ALIASES, load

    if recipe.model in ALIASES:
        lm = load(recipe.model, device="cpu")
        lm.model.train()
        return lm.model, lm.tokenizer, (lm.name, lm.revision)
    return recipe.model, None, (recipe.model, None)  # TRL loads hub ids and local paths itself (dtype, ZeRO-3)


class MetricsLog(TrainerCallback):
    """Appends every logged step (and the evaluation before the first, at step 0) to
    ``metrics.jsonl`` and prints a one-line summary (SPEC §9)."""

    KEYS = (("reward", "reward"), ("adv_std", "advantages/std"), ("clip_hi", "loss/clip_frac_high"),
            ("entropy", "entropy"), ("len", "completions/mean_length"), ("est", "estimator/time_frac"),
            ("v_loss", "critic/value_loss"), ("ev", "critic/explained_variance"))

    def __init__(self, path: Path):
        self.path = path

    def on_log(self, args, state, control, logs=None, **kwargs):
        evaluated = [key for key in logs or {} if key.startswith("eval/")]
        if not state.is_world_process_zero or not logs or ("loss" not in logs and not evaluated):
            return
        with open(self.path, "a") as f:
            f.write(json.dumps(jsonable({"step": state.global_step, "time": time.time(), **logs})) + "\n")
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


def check_output_dir(recipe: Recipe, overwrite: bool = False) -> list[Path]:
    """Check that a run of ``recipe`` may write to its ``output_dir`` and return what of an
    earlier run it will replace (SPEC §9): an output_dir (or a folder above it) that is a file,
    or that cannot be written, is an error; an earlier run there (``metrics.jsonl``,
    ``checkpoint-N``, ``final``, ``eval``) is continued with ``resume: true`` (which needs a checkpoint
    to continue from), replaced with ``overwrite`` (the returned paths, removed only once the
    new run has started), and otherwise refused. Reads only; ``--dry-run`` runs it too."""
    out = Path(recipe.output_dir)
    if recipe.resume and overwrite:
        raise recipe.error("resume", "resume=true continues the earlier run and --overwrite replaces it: choose one")
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
        if any(CHECKPOINT.match(p.name) for p in found):
            return []
        raise recipe.error("resume", f"resume=true, but {out} holds no checkpoint to continue from, only an earlier "
                           f"run's {names}: pass --overwrite (without resume=true) to replace it, or choose another "
                           "output_dir")
    if not overwrite:
        raise recipe.error("output_dir", f"{out} holds an earlier run ({names}): set resume=true to continue it, "
                           "pass --overwrite to replace it, or choose another output_dir")
    return found


class ReplaceEarlierRun(TrainerCallback):
    """Removes an earlier run's files (``check_output_dir(..., overwrite=True)``) when the new
    run begins, after the model, data and trainer are ready, so that a run that fails to start
    leaves them as they were (SPEC §9)."""

    def __init__(self, paths: list[Path]):
        self.paths = list(paths)

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


def train(recipe: Recipe, overwrite: bool = False) -> dict:
    """Train with the recipe's estimator and loss (SPEC §9). Checks everything before it
    touches ``output_dir``: the output folder (``check_output_dir``), the GRPOConfig on this
    machine (bf16 without a GPU, ...), the data, the model; then resumes from the last
    checkpoint there when ``recipe.resume`` is true, or starts afresh, replacing an earlier
    run's files once training begins when ``overwrite`` is true. Returns where outputs went and
    the final metrics."""
    from .recipe import require_trl

    trl = require_trl()  # before the modules that import it
    from transformers.trainer_utils import get_last_checkpoint

    from .evaluate import EvaluateDuringTraining
    from .evaluate import parse as parse_eval
    from .trainer import HistaGRPOTrainer

    replaced = check_output_dir(recipe, overwrite)
    config = recipe.grpo_config()
    dataset = build_dataset(recipe)
    model, tokenizer, policy = _model(recipe)
    out = Path(recipe.output_dir)
    metrics = out / "metrics.jsonl"
    checkpoint = get_last_checkpoint(str(out)) if recipe.resume and out.is_dir() else None
    if recipe.resume and checkpoint is None:
        print(f"resume: no checkpoint in {out}, starting from step 0", flush=True)
    callbacks = [ReplaceEarlierRun(replaced), MetricsLog(metrics)]
    if recipe.eval is not None:
        evaluation = EvaluateDuringTraining(parse_eval(recipe.eval), out, recipe.system_prompt, policy)
        callbacks.append(evaluation)  # after ReplaceEarlierRun: its step-0 row goes into the new metrics.jsonl
    trainer = HistaGRPOTrainer(
        model=model, reward_funcs=[correct], args=config, train_dataset=dataset, processing_class=tokenizer,
        advantage_estimator=recipe.estimator_config(), loss=recipe.loss, policy=policy, callbacks=callbacks,
    )
    if recipe.eval is not None:
        evaluation.trainer = trainer
    text = yaml.safe_dump({**recipe.to_dict(), "versions": {"trl": trl.__version__}}, sort_keys=False)
    write_atomic(out / "recipe.yaml", lambda fh: fh.write(text))
    result = trainer.train(resume_from_checkpoint=checkpoint)
    trainer.save_model(str(out / "final"))
    return {"output_dir": str(out), "final_model": str(out / "final"), "metrics": str(metrics),
            "resumed_from": checkpoint, "global_step": trainer.state.global_step,
            "train_runtime": result.metrics.get("train_runtime")}
