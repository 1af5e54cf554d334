"""Run a training recipe end to end: data, reward, model, trainer, resume (SPEC §9)."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import yaml
from transformers import TrainerCallback

from .. import rewards, tasks
from ..jsonio import jsonable
from ..rollout.engine import chat_messages
from .recipe import Recipe


def build_dataset(recipe: Recipe):
    """The recipe's problems as a TRL prompt dataset: a conversational ``prompt`` (system
    prompt + problem) and the columns the reward needs (SPEC §7, §9)."""
    from datasets import Dataset

    rows = []
    for spec in recipe.task_specs:
        for rec in tasks.load(spec, n=recipe.problems, seed=recipe.seed, split=recipe.split):
            rows.append({"prompt": chat_messages(rec["problem"], recipe.system_prompt), "answer": str(rec["answer"]),
                         "verifier": rec["verifier"], "problem_id": str(rec["id"])})
    return Dataset.from_list(rows)


def correct(completions: list, answer: list, verifier: list, **_: Any) -> list[float]:
    """TRL reward function: 1.0 when the verifier of each problem accepts the completion
    (SPEC §6)."""
    texts = [c[-1]["content"] if isinstance(c, list) else str(c) for c in completions]
    return [rewards.verify(kind, text, gold) for text, gold, kind in zip(texts, answer, verifier)]


def _model(recipe: Recipe):
    from ..models import ALIASES, load

    if recipe.model in ALIASES:
        lm = load(recipe.model, device="cpu")
        lm.model.train()
        return lm.model, lm.tokenizer
    return recipe.model, None  # TRL loads hub ids and local paths itself (dtype, ZeRO-3 init)


class MetricsLog(TrainerCallback):
    """Appends every logged step to ``metrics.jsonl`` and prints a one-line summary (SPEC §9)."""

    KEYS = (("reward", "reward"), ("adv_std", "advantages/std"), ("clip_hi", "loss/clip_frac_high"),
            ("entropy", "entropy"), ("len", "completions/mean_length"), ("est", "estimator/time_frac"))

    def __init__(self, path: Path):
        self.path = path

    def on_log(self, args, state, control, logs=None, **kwargs):
        if not state.is_world_process_zero or not logs or "loss" not in logs:
            return
        with open(self.path, "a") as f:
            f.write(json.dumps(jsonable({"step": state.global_step, "time": time.time(), **logs})) + "\n")
        parts = [f"{name} {logs[key]:.3g}" for name, key in self.KEYS if key in logs]
        print(f"step {state.global_step}/{state.max_steps}: " + ", ".join(parts), flush=True)


def train(recipe: Recipe) -> dict:
    """Train with the recipe's estimator and loss; resume from the last checkpoint in
    ``output_dir`` when ``recipe.resume`` is true. Returns where outputs went and the final
    metrics (SPEC §9)."""
    import trl
    from transformers.trainer_utils import get_last_checkpoint

    from .trainer import HistaGRPOTrainer

    out = Path(recipe.output_dir)
    out.mkdir(parents=True, exist_ok=True)
    metrics = out / "metrics.jsonl"
    checkpoint = get_last_checkpoint(str(out)) if recipe.resume else None
    if recipe.resume and checkpoint is None:
        print(f"resume: no checkpoint in {out}, starting from step 0", flush=True)
    if checkpoint is None:
        metrics.unlink(missing_ok=True)  # a fresh run must not mix its steps with an earlier run's
    config = recipe.grpo_config()
    dataset = build_dataset(recipe)
    model, tokenizer = _model(recipe)
    (out / "recipe.yaml").write_text(yaml.safe_dump(
        {**recipe.to_dict(), "versions": {"trl": trl.__version__}}, sort_keys=False))
    trainer = HistaGRPOTrainer(
        model=model, reward_funcs=[correct], args=config, train_dataset=dataset, processing_class=tokenizer,
        advantage_estimator=recipe.estimator_config(), loss=recipe.loss, callbacks=[MetricsLog(metrics)],
    )
    result = trainer.train(resume_from_checkpoint=checkpoint)
    trainer.save_model(str(out / "final"))
    return {"output_dir": str(out), "final_model": str(out / "final"), "metrics": str(metrics),
            "resumed_from": checkpoint, "global_step": trainer.state.global_step,
            "train_runtime": result.metrics.get("train_runtime")}
