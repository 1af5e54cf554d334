"""TRL's GRPOTrainer with a pluggable advantage estimator and policy loss (SPEC §9).

The subclass overrides only TRL's advantage path and its loss:

* ``_calculate_rewards`` keeps the (gathered) rewards TRL computed, so the estimator sees them;
* ``_generate_and_score_completions`` replaces TRL's one-number-per-response advantages by
  per-token advantages of a hista estimator (SPEC §4), computed on whole groups. Hidden states
  (Hista) and old-policy entropies (S-trace) are captured from the old-log-prob pass TRL already
  runs; only when TRL skips that pass (fully on-policy steps) is it run here, once;
* ``_compute_loss`` calls :func:`hista.losses.policy_loss` (SPEC §5).
"""

from __future__ import annotations

import time
from typing import Any, Optional

import torch
from trl import GRPOTrainer

from .. import estimators
from ..losses import check_config, policy_loss
from ..models.capture import capture_logprob_pass
from ..rollout.offsets import decode_with_offsets
from ..types import Rollout, RolloutGroup

#: TRL options whose effect lives in the ``_compute_loss`` this class replaces; set the
#: equivalent in the recipe's ``loss`` section instead (a flag must never be silently ignored).
UNSUPPORTED = {
    "top_entropy_quantile": (1.0, "use loss.name=strace with top_entropy_fraction"),
    "entropy_coef": (0.0, "no entropy bonus in hista losses"),
    "use_adaptive_entropy": (False, "no entropy bonus in hista losses"),
    "off_policy_mask_threshold": (None, "not supported by hista losses"),
    "delta": (None, "two-sided clipping is not supported by hista losses"),
}


class HistaGRPOTrainer(GRPOTrainer):
    """GRPOTrainer whose advantages come from ``advantage_estimator`` and whose loss is
    ``loss`` (SPEC §9). ``advantage_estimator``: ``{"name": ..., "gae_lambda": ..., "scale":
    ..., **estimator parameters}``; ``loss``: ``{"name": ..., **policy_loss parameters}``."""

    def __init__(self, *args: Any, advantage_estimator: dict, loss: dict, **kwargs: Any):
        est_cfg = dict(advantage_estimator)
        self.estimator_name = est_cfg.pop("name", "grpo")
        self.gae_lambda = float(est_cfg.pop("gae_lambda", 1.0))
        self.scale = est_cfg.pop("scale", "group")
        self.estimator = estimators.get(self.estimator_name, **est_cfg)
        loss_cfg = dict(loss)
        self.loss_name = loss_cfg.pop("name", "dapo")
        self.loss_cfg = loss_cfg
        self.aggregation = check_config(self.loss_name, loss_cfg)["aggregation"]
        super().__init__(*args, **kwargs)
        for key, (neutral, why) in UNSUPPORTED.items():
            if getattr(self.args, key, neutral) != neutral:
                raise ValueError(f"GRPOConfig.{key}={getattr(self.args, key)!r} has no effect here: {why}")
        if float(loss_cfg.get("beta", 0.0)) != float(self.beta):
            raise ValueError(f"loss.beta={loss_cfg.get('beta', 0.0)} but GRPOConfig.beta={self.beta}: they must agree")
        self.needs_hidden = self.estimator_name == "hista"
        self.needs_entropy = self.loss_name == "strace"
        self._hista_rewards: Optional[torch.Tensor] = None
        self._cycle_start: Optional[float] = None
        self._estimator_seconds = 0.0

    # ---- advantage hook ------------------------------------------------------------------
    def _calculate_rewards(self, inputs, prompts, completions, completion_ids_list):
        rewards_per_func = super()._calculate_rewards(inputs, prompts, completions, completion_ids_list)
        weights = self.reward_weights.to(rewards_per_func.device).unsqueeze(0)
        self._hista_rewards = torch.nan_to_num((rewards_per_func * weights).nansum(dim=1), nan=0.0)
        return rewards_per_func

    def _generate_and_score_completions(self, inputs):
        mode = "train" if self.model.training else "eval"
        now = time.perf_counter()
        if mode == "train" and self._cycle_start is not None:
            self._metrics[mode]["estimator/time_frac"].append(self._estimator_seconds / (now - self._cycle_start))
        self._cycle_start = now
        if not (self.needs_hidden or self.needs_entropy):
            out = super()._generate_and_score_completions(inputs)
            hidden = entropy = None
        else:
            with capture_logprob_pass(self.model) as record:
                out = super()._generate_and_score_completions(inputs)
                hidden, entropy = record.rows(out["completion_ids"].size(0))
                if hidden is None:  # TRL skipped the old-log-prob pass (on-policy step): run it once here
                    out["old_per_token_logps"] = self._old_logprob_pass(out)
                    hidden, entropy = record.rows(out["completion_ids"].size(0))
        if entropy is not None:
            out["old_entropies"] = entropy[:, -out["completion_ids"].size(1):]
        if mode != "train":  # evaluation keeps TRL's per-response advantages
            return out
        start = time.perf_counter()
        out["advantages"] = self._token_advantages(out, hidden)
        self._estimator_seconds = time.perf_counter() - start
        self._metrics[mode]["estimator/seconds"].append(self._estimator_seconds)
        return out

    @torch.no_grad()
    def _old_logprob_pass(self, out: dict) -> torch.Tensor:
        input_ids = torch.cat([out["prompt_ids"], out["completion_ids"]], dim=1)
        attention_mask = torch.cat([out["prompt_mask"], out["completion_mask"]], dim=1)
        logps, _, _ = self._get_per_token_logps_and_entropies(
            self.model, input_ids, attention_mask, out["completion_ids"].size(1),
            batch_size=self.args.per_device_train_batch_size,
        )
        return logps

    def _gather(self, x: torch.Tensor, pad_first: bool = False) -> torch.Tensor:
        if self.accelerator.num_processes == 1:
            return x
        x = self.accelerator.pad_across_processes(x, dim=1, pad_index=0, pad_first=pad_first)
        return self.accelerator.gather(x)

    def _token_advantages(self, out: dict, hidden: Optional[torch.Tensor]) -> torch.Tensor:
        """Per-token advantages [B_local, T] from the estimator, on whole groups gathered
        across processes (SPEC §4, §9)."""
        local_b, local_t = out["completion_ids"].shape
        p = out["prompt_ids"].size(1)
        prompt_ids, prompt_mask = self._gather(out["prompt_ids"], True), self._gather(out["prompt_mask"], True)
        completion_ids, completion_mask = self._gather(out["completion_ids"]), self._gather(out["completion_mask"])
        hidden_p = hidden_c = None
        if hidden is not None:
            hidden_p, hidden_c = self._gather(hidden[:, :p], True), self._gather(hidden[:, p:])
        rewards = self._hista_rewards.to(completion_ids.device)
        g = self.num_generations
        if rewards.numel() != completion_ids.size(0) or rewards.numel() % g:
            raise RuntimeError(f"{rewards.numel()} rewards for {completion_ids.size(0)} completions in groups of {g}")
        batch_std = float(rewards.std()) if rewards.numel() > 1 else 0.0
        lengths = completion_mask.sum(dim=1).long().tolist()
        advantages = torch.zeros(completion_ids.shape, dtype=torch.float32, device=completion_ids.device)
        for start in range(0, len(lengths), g):
            rollouts = []
            for i in range(start, start + g):
                pm = prompt_mask[i].bool()
                ids = completion_ids[i, : lengths[i]].tolist()
                text, offsets = decode_with_offsets(self.processing_class, ids) if self.estimator_name == "numca" \
                    else ("", None)
                h = None if hidden_p is None else torch.cat([hidden_p[i][pm], hidden_c[i, : lengths[i]]])
                rollouts.append(Rollout(prompt_ids=prompt_ids[i][pm].tolist(), completion_ids=ids,
                                        reward=float(rewards[i]), completion_text=text, offsets=offsets, hidden=h))
            group = RolloutGroup(rollouts=rollouts, prompt_id=str(start // g))
            for i, a in enumerate(self.estimator.token_advantages(group, gae_lambda=self.gae_lambda,
                                                                  scale=self.scale, batch_std=batch_std)):
                advantages[start + i, : lengths[start + i]] = a.to(advantages.device)
        valid = advantages[completion_mask.bool()]
        if valid.numel():
            self._metrics["train"]["advantages/mean"].append(valid.mean().item())
            self._metrics["train"]["advantages/std"].append(valid.std().item() if valid.numel() > 1 else 0.0)
            self._metrics["train"]["advantages/abs_max"].append(valid.abs().max().item())
        first = self.accelerator.process_index * local_b
        return advantages[first: first + local_b, :local_t]

    # ---- loss ----------------------------------------------------------------------------
    def _compute_loss(self, model, inputs):
        prompt_ids, completion_ids = inputs["prompt_ids"], inputs["completion_ids"]
        input_ids = torch.cat([prompt_ids, completion_ids], dim=1)
        attention_mask = torch.cat([inputs["prompt_mask"], inputs["completion_mask"]], dim=1)
        mask = inputs["completion_mask"] if "tool_mask" not in inputs else inputs["completion_mask"] * inputs["tool_mask"]
        logp, entropies, _ = self._get_per_token_logps_and_entropies(
            model, input_ids, attention_mask, completion_ids.size(1), compute_entropy=True
        )
        old_logp = inputs.get("old_per_token_logps")
        old_logp = logp.detach() if old_logp is None else old_logp
        extra = {}
        if self.beta != 0.0:
            extra["ref_logp"] = inputs["ref_per_token_logps"]
        if "importance_sampling_ratio" in inputs:
            extra["token_weights"] = inputs["importance_sampling_ratio"]
        loss, metrics = policy_loss(
            self.loss_name, logp, old_logp, inputs["advantages"], mask,
            entropies=inputs.get("old_entropies"), **self.loss_cfg, **extra,
        )
        mode = "train" if self.model.training else "eval"
        accumulation = self.current_gradient_accumulation_steps if mode == "train" else 1
        if self.aggregation == "token-mean":
            # Same normaliser as TRL's DAPO/CISPO: the tokens of the whole accumulation window.
            normaliser = inputs["num_items_in_batch"].clamp(min=1.0) / self.accelerator.num_processes
            if mode == "train":
                normaliser = normaliser * accumulation / self.args.steps_per_generation
            loss = loss * mask.sum().clamp(min=1.0) / normaliser
        else:
            loss = loss / accumulation
        for key, value in metrics.items():
            self._metrics[mode][f"loss/{key}"].append(value)
        valid = mask.bool()
        if valid.any():
            self._metrics[mode]["entropy"].append(entropies[valid].mean().item())
        return loss
