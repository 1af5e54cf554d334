"""Evaluation during training: a recipe's ``eval:`` section.

::

    eval:
      suites: builtin:arith?steps=1   # presets and task specs, as ``hista eval --suite``
      every: 25                       # optimiser steps between evaluations (and the last step)
      k: 1                            # optional, as hista eval: k, temperature, limit,
      temperature: 0.0                #   max_new_tokens, batch_size, seed
      limit: 64
      at_start: true                  # also evaluate the policy before the first step

The policy is evaluated in memory by :func:`hista.evaluation.run.evaluate` (the same engine,
verifiers and summaries as ``hista eval``) on the main process, with the run's system prompt.
Each evaluation writes ``OUTPUT_DIR/eval/step-N.json`` (with its per-problem file and markdown
table), and its ``eval/<benchmark>/avg@k`` (and ``pass@k`` when k > 1) join that step's logged
metrics, so they reach ``metrics.jsonl``, the console line and the run's trackers; the
evaluation before the first step is logged at step 0.
"""

from __future__ import annotations

import dataclasses
import numbers
from pathlib import Path
from typing import Optional

from transformers import TrainerCallback

from ..errors import InputError
from ..evaluation import EvalConfig, ModelSource, check_suites, evaluate, output_paths

#: The keys of the ``eval:`` section.
KEYS = ("suites", "every", "at_start", "k", "temperature", "limit", "max_new_tokens", "batch_size", "seed")


@dataclasses.dataclass(frozen=True)
class TrainEval:
    """A parsed ``eval:`` section: what to evaluate (an :class:`EvalConfig` whose model is the
    policy), every how many optimiser steps, and whether before the first step."""

    config: EvalConfig
    every: int
    at_start: bool = True


def parse(section: dict) -> TrainEval:
    """The ``eval:`` section of a recipe, checked: known keys, ``suites`` (a
    spec or a list of them, resolved as ``hista eval`` resolves them, without loading their
    problems), ``every`` >= 1, ``at_start`` a boolean, and the ``hista eval`` settings. An
    InputError's field is the section's key."""
    for key in section:
        if key not in KEYS:
            raise InputError(f"unknown key; valid: {', '.join(KEYS)}", field=str(key))
    if "suites" not in section or "every" not in section:
        raise InputError("required", field="suites" if "suites" not in section else "every")
    names = section["suites"]
    if isinstance(names, str):
        names = names.split(",")
    if not isinstance(names, list) or not names or not all(isinstance(n, str) and n.strip() for n in names):
        raise InputError(f"must be a suite (a preset or a task spec) or a list of them, got {names!r}", field="suites")
    every = section["every"]
    if isinstance(every, bool) or not isinstance(every, numbers.Integral) or every < 1:
        raise InputError(f"must be an integer >= 1 (optimiser steps), got {every!r}", field="every")
    at_start = section.get("at_start", True)
    if not isinstance(at_start, bool):
        raise InputError(f"must be true or false, got {at_start!r}", field="at_start")
    settings = {k: v for k, v in section.items() if k not in ("suites", "every", "at_start")}
    config = EvalConfig(model="policy", suites=[n.strip() for n in names], **settings)
    try:
        check_suites(config)
    except InputError as exc:
        raise InputError(str(exc) if exc.path else exc.message, field="suites") from None
    return TrainEval(config, int(every), at_start)


def step_metrics(summary: dict) -> dict[str, float]:
    """The numbers an evaluation adds to a step's log: ``eval/<benchmark>/avg@k`` of
    each benchmark (k its samples per problem), ``eval/<benchmark>/pass@k`` when k > 1, and
    ``eval/overall/avg`` when there are several benchmarks."""
    out = {}
    for name, entry in summary["benchmarks"].items():
        k = entry["samples_per_problem"]
        out[f"eval/{name}/avg@{k}"] = entry["avg"]["mean"]
        if k > 1:
            out[f"eval/{name}/pass@{k}"] = entry["pass"][str(k)]["mean"]
    if len(summary["benchmarks"]) > 1:
        out["eval/overall/avg"] = summary["overall"]["avg"]["mean"]
    return out


class EvaluateDuringTraining(TrainerCallback):
    """Evaluates the policy every ``plan.every`` optimiser steps, at the last step and (with
    ``at_start``) before the first (module docstring). ``trainer`` is set once the
    trainer exists; ``policy``: the policy's (name, revision) as the results record them."""

    def __init__(self, plan: TrainEval, output_dir: str | Path, system_prompt: str,
                 policy: tuple[str, Optional[str]]):
        self.plan, self.output_dir = plan, Path(output_dir)
        self.system_prompt, self.policy = system_prompt, policy
        self.trainer = None

    def evaluate(self, step: int) -> dict[str, float]:
        """Evaluate the policy as it is at ``step`` into ``eval/step-N.json`` and return its
        step metrics. Files of an earlier attempt at the same step are replaced: they belong to
        weights that never reached a checkpoint (a resumed run trains that step again)."""
        from ..models import LoadedModel
        from .rollouts import sampling_policy

        trainer = self.trainer
        out = self.output_dir / "eval" / f"step-{step}.json"
        for path in output_paths(out):
            path.unlink(missing_ok=True)
        name, revision = self.policy
        source = ModelSource(f"{self.output_dir}@step-{step}", self.system_prompt,
                             {"output_dir": str(self.output_dir), "checkpoint": None, "step": step, "base_model": name})
        with sampling_policy(trainer) as model:
            lm = LoadedModel(model, trainer.processing_class, name, f"{revision or name}, trained {step} steps in "
                             f"{self.output_dir}")
            result = evaluate(self.plan.config, out, lm=lm, source=source, progress=False, log=lambda _: None)
        metrics = step_metrics(result["summary"])
        shown = ", ".join(f"{key.removeprefix('eval/')} {value:.3f}" for key, value in metrics.items())
        print(f"eval at step {step} ({result['timing']['wall_s']:.0f} s): {shown}", flush=True)
        return metrics

    def on_train_begin(self, args, state, control, **kwargs):
        if self.plan.at_start and state.global_step == 0 and state.is_world_process_zero:
            self.trainer.log(self.evaluate(0))

    def on_step_end(self, args, state, control, **kwargs):
        step = state.global_step
        if state.is_world_process_zero and (step % self.plan.every == 0 or step == state.max_steps):
            for key, value in self.evaluate(step).items():  # joins this step's log (GRPOTrainer.log averages them)
                self.trainer._metrics["train"][key].append(value)
