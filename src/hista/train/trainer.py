"""TRL's GRPOTrainer with a pluggable advantage estimator and policy loss.

The subclass overrides only TRL's advantage path and its loss:

* ``_calculate_rewards`` keeps the (gathered) rewards TRL computed, so the estimator sees them;
* ``_generate_and_score_completions`` replaces TRL's one-number-per-response advantages by
  per-token advantages of a hista estimator (SPEC §4), computed on whole groups. Hidden states
  (Hista) and old-policy entropies (S-trace) are captured from the old-log-prob pass TRL already
  runs; only when TRL skips that pass (fully on-policy steps) is it run here, once;
* ``_compute_loss`` calls the configured :class:`hista.losses.Loss` (SPEC §5).

Rollouts come from hista's engine through TRL's ``rollout_func`` where the engine can serve the
run (:mod:`hista.train.rollouts`), and from TRL's own generation otherwise.

An estimator whose critic trains with the policy (``trains_with_policy``: ``critic``, the PPO
baseline, SPEC §4.5) gets one (:class:`hista.critic.online.OnlineCritic`), copied from the
policy when the trainer is built and updated after each generation batch's advantages; it is
saved into ``critic/`` of every checkpoint and of the final model, and restored on resume.

Every checkpoint also holds each process's generation state (``generation-<process>.pt``: TRL's
micro-step counter and, inside a generation batch reused over several optimiser steps, that
batch, which TRL keeps only in memory) and the estimator's state across steps
(``estimator-<process>.pt``), so that a resumed run draws and trains what the uninterrupted run
did (:mod:`hista.train.checkpoints`).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any, Optional, Union

import torch
from accelerate.utils import gather_object
from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR
from trl import GRPOTrainer

from .. import estimators, losses
from ..advantages import batch_to_groups, build_group, estimate, scatter, unpad
from ..errors import InputError
from ..estimators import Estimator
from ..models.capture import capture_logprob_pass
from ..models.forward import decoder_layers
from ..types import Rollout
from . import checkpoints, dynamic, packing, rollouts, split
from .limits import UNSUPPORTED, untrainable
from .sampler import EpochSampler

#: TRL's metrics of the rewards of a generation round (and ``rewards/<function>/...``)
REWARD_METRICS = ("reward", "reward_std", "frac_reward_zero_std")


class HistaGRPOTrainer(GRPOTrainer):
    """GRPOTrainer whose advantages come from ``advantage_estimator`` and whose loss is
    ``loss``, whose rollouts come from hista's engine where it can serve the run
    (``rollout_engine``: auto, hista or trl; :mod:`hista.train.rollouts`).
    ``advantage_estimator``: ``{"name": ..., "gae_lambda": ..., "scale": ..., **estimator
    parameters}``, built here unless ``estimator`` is that estimator already built (``hista
    train`` passes its recipe's one object); ``loss``: ``{"name": ..., **policy_loss
    parameters}``, likewise built here unless ``policy_loss`` is that loss already built.
    What is captured and passed on is decided by what the estimator and the loss declare
    (``needs_hidden`` and its layer, ``needs_text``, ``needs_entropy``, ``needs_ref_logp``,
    ``trains_with_policy``). ``policy``: (name, revision) of the policy as
    :func:`hista.models.load` records them, for the critic's record (default: read from the
    model); ``gae_lambda`` and ``scale`` default to the estimator's own defaults (1.0 and the
    group std for most). ``dynamic_sampling``: DAPO's (:mod:`hista.train.dynamic`):
    false, true (``max_rounds`` 4) or ``{"max_rounds": n}``; off unless asked for here (a
    recipe turns it on for the ``dapo`` loss). ``packed_loss``: the loss forward packs each
    prompt's rows into one sequence without padding (:mod:`hista.train.packing`) where the
    model's attention takes a custom mask (sdpa, eager) and the inputs are text; false: TRL's
    padded forward."""

    def __init__(self, *args: Any, advantage_estimator: dict, loss: dict, estimator: Optional[Estimator] = None,
                 policy_loss: Optional[losses.Loss] = None, policy: Optional[tuple[str, Optional[str]]] = None,
                 rollout_engine: str = "auto", dynamic_sampling: Union[bool, dict] = False, packed_loss: bool = True,
                 **kwargs: Any):
        est_cfg = dict(advantage_estimator)
        name = est_cfg.pop("name", "grpo")
        # the recipe's, or None: hista.advantages.estimate falls back to the estimator's own
        self.gae_lambda, self.scale = est_cfg.pop("gae_lambda", None), est_cfg.pop("scale", None)
        self.estimator = estimator if estimator is not None else estimators.get(name, **est_cfg)
        loss_cfg = dict(loss)
        loss_name = loss_cfg.pop("name", "dapo")
        self.loss = policy_loss if policy_loss is not None else losses.get(loss_name, **loss_cfg)
        self.dynamic_sampling = dynamic.resolve(dynamic_sampling, loss_name)
        self.sampling_round = 0  # the generation round of the step being sampled (dynamic sampling)
        self.packed_loss = packed_loss
        refusal = untrainable(self.estimator, self.loss)
        if refusal is not None:
            raise ValueError(refusal[1])
        super().__init__(*args, **kwargs)
        if self.rollout_func is None:
            use_engine, self.rollout_source = rollouts.choose(
                rollout_engine, self.args, self.accelerator.num_processes,
                tools=bool(self.tools) or self.environment_factories is not None, multimodal=self._is_vlm)
            if use_engine:
                self.rollout_func = rollouts.EngineRollouts(self.args.seed)
        else:
            self.rollout_source = "the rollout_func passed to the trainer"
        for key, (neutral, why) in UNSUPPORTED.items():
            if getattr(self.args, key, neutral) != neutral:
                raise ValueError(f"GRPOConfig.{key}={getattr(self.args, key)!r} has no effect here: {why}")
        if self.dynamic_sampling and self._is_vlm:
            raise ValueError("dynamic_sampling does not handle a multimodal processor's inputs: set dynamic_sampling: "
                             "false")
        if self.loss.config["beta"] != float(self.beta):
            raise ValueError(f"loss.beta={self.loss.config['beta']} but GRPOConfig.beta={self.beta}: they must agree")
        self.hidden_layer = (self.estimator.hidden_layer(decoder_layers(self.model)) if self.estimator.needs_hidden
                             else None)
        with capture_logprob_pass(self.model, layer=self.hidden_layer):
            pass  # a layer the model does not have fails here, before any step
        #: the rewards of the generation batch the advantages are computed on (every process's rows, gathered)
        self.batch_rewards: Optional[torch.Tensor] = None
        self._cycle_start: Optional[float] = None
        self._estimator_seconds = 0.0
        self.critic = self._build_critic(policy) if estimators.critic_trains_with_policy(self.estimator) else None

    @property
    def engine_rollouts(self) -> bool:
        """Whether hista's engine samples this trainer's rollouts (:mod:`hista.train.rollouts`)."""
        return isinstance(self.rollout_func, rollouts.EngineRollouts)

    def _build_critic(self, policy: Optional[tuple[str, Optional[str]]]):
        """The estimator's critic (SPEC §4.5): a copy of the policy as it is now (before any
        step; a resumed run restores the checkpoint's critic), on this process's device."""
        from ..critic.online import OnlineCritic, policy_revision
        from ..models import LoadedModel

        if any(hasattr(p, "ds_id") for p in self.model.parameters()):
            raise ValueError("the critic estimator copies the policy's weights, which DeepSpeed ZeRO-3 partitions: "
                             "launch with ZeRO-2 (configs/accelerate/zero2-4gpus.yaml) or without DeepSpeed")
        name, revision = policy or (getattr(self.model.config, "_name_or_path", "") or "policy", None)
        lm = LoadedModel(self.model, self.processing_class, name, revision or policy_revision(self.model, name))
        critic = OnlineCritic.from_policy(
            lm, self.estimator.config, seed=self.args.seed, device=self.accelerator.device,
            checkpointing=bool(self.args.activation_checkpointing), bf16=bool(self.args.bf16))
        self.estimator.use_critic(critic)
        return critic

    def _get_train_sampler(self, dataset=None):
        """TRL's sampler, with each epoch's prompt order a function of (seed, epoch)
        (:class:`hista.train.sampler.EpochSampler`; SPEC §9: a resumed run draws what an
        uninterrupted one drew, past the first epoch too)."""
        return EpochSampler(dataset if dataset is not None else self.train_dataset,
                            mini_repeat_count=self.num_generations,
                            batch_size=self.args.generation_batch_size // self.num_generations,
                            repeat_count=self.num_iterations * self.args.steps_per_generation,
                            shuffle=self.shuffle_dataset, seed=self.args.seed)

    # ---- advantage hook ------------------------------------------------------------------
    def _calculate_rewards(self, inputs, prompts, completions, completion_ids_list):
        rewards_per_func = super()._calculate_rewards(inputs, prompts, completions, completion_ids_list)
        weights = self.reward_weights.to(rewards_per_func.device).unsqueeze(0)
        self.batch_rewards = torch.nan_to_num((rewards_per_func * weights).nansum(dim=1), nan=0.0)
        return rewards_per_func

    @property
    def captures(self) -> bool:
        """Whether the estimator or the loss reads what the old-log-prob pass sees (hidden
        states, entropies)."""
        return self.hidden_layer is not None or self.loss.needs_entropy

    def _generate_and_score_completions(self, inputs):
        mode = "train" if self.model.training else "eval"
        now = time.perf_counter()
        if mode == "train" and self._cycle_start is not None:
            self._metrics[mode]["estimator/time_frac"].append(self._estimator_seconds / (now - self._cycle_start))
        self._cycle_start = now
        if mode == "train" and self.dynamic_sampling:
            out, hidden, inputs = self._sample_informative(inputs)
        else:
            out, hidden, captured = self._score(inputs)
            if not captured:
                hidden = self._capture_pass(out)
        if self.engine_rollouts and "old_per_token_logps" in out and "sampling_per_token_logps" in out:
            self._metrics[mode]["rollout/logprob_gap"].append(rollouts.logprob_gap(
                out["sampling_per_token_logps"], out["old_per_token_logps"], out["completion_mask"]))
        if mode != "train":  # evaluation keeps TRL's per-response advantages
            return out
        start = time.perf_counter()
        problem_ids = [x.get("problem_id") for x in inputs]
        out["advantages"] = self.batch_advantages(out, hidden, None if None in problem_ids else problem_ids)
        self._estimator_seconds = time.perf_counter() - start
        self._metrics[mode]["estimator/seconds"].append(self._estimator_seconds)
        return out

    def _score(self, inputs) -> tuple[dict, Optional[torch.Tensor], bool]:
        """TRL's generation and scoring of ``inputs``, with what its old-log-prob pass showed
        the capture hooks: (output, hidden states [B, P + C, H] or None, whether they were
        captured). The old policy's entropies go into ``old_entropies``. Nothing to capture
        counts as captured; a step where TRL skips the pass (fully on-policy) is not."""
        if not self.captures:
            return super()._generate_and_score_completions(inputs), None, True
        with capture_logprob_pass(self.model, layer=self.hidden_layer) as record:
            out = super()._generate_and_score_completions(inputs)
        if not record.calls:
            return out, None, False
        hidden, entropy = record.rows(out["completion_ids"].size(0))
        if entropy is not None:
            out["old_entropies"] = entropy[:, -out["completion_ids"].size(1):]
        return out, hidden, True

    def _capture_pass(self, out: dict) -> Optional[torch.Tensor]:
        """Run the old-log-prob pass TRL skipped on ``out``, once, under the capture
        hooks: it fills ``old_per_token_logps`` and ``old_entropies``; returns the hidden states."""
        if not self.captures:
            return None
        with capture_logprob_pass(self.model, layer=self.hidden_layer) as record:
            out["old_per_token_logps"] = self.old_logprob_pass(out)
        hidden, entropy = record.rows(out["completion_ids"].size(0))
        if entropy is not None:
            out["old_entropies"] = entropy[:, -out["completion_ids"].size(1):]
        return hidden

    # ---- dynamic sampling ------------------------------------------------------------------
    def _sample_informative(self, inputs: list[dict]) -> tuple[dict, Optional[torch.Tensor], list[dict]]:
        """DAPO's dynamic sampling (:mod:`hista.train.dynamic`): score this process's
        slice of the generation batch, then extra rounds of freshly drawn prompts until every
        process holds as many groups with unequal rewards as its slice has (or
        ``max_rounds`` are spent: the rest is filled with groups of equal rewards, and said);
        return exactly that many whole groups, merged, with their hidden states and their
        input rows. The rewards the estimator reads, ``num_items_in_batch`` and the reward
        metrics are the kept batch's; the metrics of the step say how it went."""
        g, step = self.num_generations, self.state.global_step
        processes, quota = self.accelerator.num_processes, len(inputs) // self.num_generations
        rounds, flags, rewards = self._sampling_rounds(inputs, step, quota)
        picks, filled = dynamic.choose(flags, quota)
        out, hidden, kept_inputs = self._merge_picks(rounds, picks[self.accelerator.process_index])
        kept = torch.cat([rewards[r][q * quota * g + gg * g: q * quota * g + gg * g + g]
                          for q in range(processes) for r, gg in picks[q]])
        self.batch_rewards = kept.to(self.batch_rewards.device)
        mask = out["completion_mask"] * out["tool_mask"] if "tool_mask" in out else out["completion_mask"]
        out["num_items_in_batch"] = self.accelerator.gather(mask.sum()).sum()
        self._log_sampling(step, kept, flags, len(rounds), filled, processes * quota)
        return out, hidden, kept_inputs

    def _sampling_rounds(self, inputs: list[dict], step: int, quota: int
                         ) -> tuple[list[tuple], list[torch.Tensor], list[torch.Tensor]]:
        """The rounds of dynamic sampling at ``step``: this process's slice, then extra rounds
        until enough groups have unequal rewards; each round's (output, hidden states, whether
        captured, input rows), with every process's flags [processes, quota] and rewards of each
        round. Only the first round's reward metrics stay: an unbiased sample of the pool."""
        g, processes = self.num_generations, self.accelerator.num_processes
        metrics = self._metrics["train"]
        rounds, flags, rewards, mark = [], [], [], None
        for r in range(self.dynamic_sampling["max_rounds"] + 1):
            self.sampling_round = r
            rows = inputs if r == 0 else self._extra_inputs(step, r, quota)
            try:
                out, hidden, captured = self._score(rows)
            finally:
                self.sampling_round = 0
            rounds.append((out, hidden, captured, rows))
            rewards.append(self.batch_rewards.detach().cpu())
            flags.append(dynamic.informative(rewards[-1], g).view(processes, quota))
            if r == 0:  # TRL's reward metrics of the first round stay: an unbiased sample of the pool
                mark = {k: len(v) for k, v in metrics.items() if k in REWARD_METRICS or k.startswith("rewards/")}
            if dynamic.enough(flags, quota):
                break
        for key, length in mark.items():
            del metrics[key][length:]
        return rounds, flags, rewards

    def _merge_picks(self, rounds: list[tuple], mine: list[tuple[int, int]]
                     ) -> tuple[dict, Optional[torch.Tensor], list[dict]]:
        """This process's picked groups (``mine``: (round, group) pairs) merged into one batch,
        with their hidden states and input rows; the old-log-prob pass runs once over it when TRL
        skipped it."""
        g = self.num_generations
        parts = [(out, hidden, [k for rr, gg in mine if rr == r for k in range(gg * g, gg * g + g)])
                 for r, (out, hidden, _, _) in enumerate(rounds)]
        parts = [part for part in parts if part[2]]
        out, hidden = dynamic.merge(parts, self._tokenizer.pad_token_id)
        kept_inputs = [rounds[r][3][k] for r, gg in mine for k in range(gg * g, gg * g + g)]
        if not rounds[0][2]:  # TRL skipped the old-log-prob pass: one pass over the kept batch, not one per round
            hidden = self._capture_pass(out)
        return out, hidden, kept_inputs

    def _log_sampling(self, step: int, kept: torch.Tensor, flags: list[torch.Tensor], rounds: int, filled: int,
                      groups: int) -> None:
        """The step's dynamic-sampling metrics, and a line when groups of equal rewards filled
        the batch, so that a run says how its batches were drawn."""
        metrics = self._metrics["train"]
        g = self.num_generations
        metrics["frac_reward_zero_std"][-1] = 1.0 - float(dynamic.informative(kept, g).float().mean())
        metrics["dynamic_sampling/informative_frac"].append(float(flags[0].float().mean()))
        metrics["dynamic_sampling/rounds"].append(float(rounds))
        metrics["dynamic_sampling/rollouts_per_trained"].append(float(rounds))  # each round: a whole batch
        metrics["dynamic_sampling/filled_groups"].append(float(filled))
        metrics["dynamic_sampling/kept_reward"].append(float(kept.mean()))
        if filled and self.accelerator.is_main_process:
            print(f"dynamic sampling: step {step}: {groups - filled} of {groups} groups have unequal rewards after "
                  f"{rounds - 1} extra rounds (max_rounds); training on {filled} with equal rewards too",
                  flush=True)

    def _extra_inputs(self, step: int, round_: int, quota: int) -> list[dict]:
        """This process's slice of the prompts of extra round ``round_`` at ``step``, each
        repeated G times (:func:`hista.train.dynamic.extra_prompts`)."""
        indices = dynamic.extra_prompts(len(self.train_dataset), int(self.args.seed), step, round_,
                                        quota * self.accelerator.num_processes)
        mine = indices[self.accelerator.process_index * quota: (self.accelerator.process_index + 1) * quota]
        return [dict(self.train_dataset[i]) for i in mine for _ in range(self.num_generations)]

    @torch.no_grad()
    def old_logprob_pass(self, out: dict) -> torch.Tensor:
        """The old policy's per-token log-probs of a generation batch from one forward pass, run
        when TRL skips its own on a fully on-policy step, so that the capture
        hooks see hidden states and entropies."""
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

    def groups_are_local(self, local_rows: int) -> bool:
        """Whether this process's ``local_rows`` rows are whole groups: one process,
        or a multiple of G rows per process (TRL's sampler emits a prompt's G rollouts back to
        back and each process gets a contiguous slice)."""
        return self.accelerator.num_processes == 1 or local_rows % self.num_generations == 0

    def batch_advantages(self, out: dict, hidden: Optional[torch.Tensor],
                          problem_ids: Optional[list[str]] = None) -> torch.Tensor:
        """Per-token advantages [B_local, T] from the estimator on whole groups (SPEC §4),
        keyed by their problem ids. When this process holds whole groups
        (:meth:`groups_are_local`) they are estimated here and nothing crosses processes (TRL
        has already gathered the rewards). When groups span processes, each is estimated once
        by the process holding its first row, which gets only that group's rows from the others
        (:mod:`hista.train.split`). A critic trained with the policy sees every group on every
        process, so that its copies stay equal: with one, every process gathers the batch."""
        local_b, local_t = out["completion_ids"].shape
        first = self.accelerator.process_index * local_b
        rewards = self.batch_rewards.to(out["completion_ids"].device)
        batch_std = float(rewards.std()) if rewards.numel() > 1 else 0.0  # over the whole generation batch
        tokenizer = self.processing_class if self.estimator.needs_text else None
        local = self.groups_are_local(local_b)
        if not local and self.critic is None:
            advantages = self._split_advantages(out, hidden, problem_ids, rewards, batch_std, tokenizer)
            self._log_advantages(advantages, out["completion_mask"])
            return advantages
        if local:
            batch = (out["prompt_ids"], out["prompt_mask"], out["completion_ids"], out["completion_mask"],
                     rewards[first: first + local_b])
        else:
            batch = (self._gather(out["prompt_ids"], True), self._gather(out["prompt_mask"], True),
                     self._gather(out["completion_ids"]), self._gather(out["completion_mask"]), rewards)
            if hidden is not None:
                p = out["prompt_ids"].size(1)
                hidden = torch.cat([self._gather(hidden[:, :p], True), self._gather(hidden[:, p:])], dim=1)
            if problem_ids is not None:
                problem_ids = gather_object(list(problem_ids))
        groups = batch_to_groups(*batch, self.num_generations, problem_ids=problem_ids, hidden=hidden,
                                 tokenizer=tokenizer)
        if self.critic is not None:
            self.critic.observe(groups)  # the values this batch's advantages and targets start from
        per_group = self._estimate(groups, batch_std)
        if self.critic is not None:  # PPO's order: advantages from the values before the critic's update
            for key, value in self.critic.update(groups).items():
                self._metrics["train"][key].append(value)
        advantages = scatter(per_group, batch[2].shape, device=batch[2].device)
        if not local:
            advantages = advantages[first: first + local_b, :local_t]
        self._log_advantages(advantages, out["completion_mask"])
        return advantages

    def _estimate(self, groups: list, batch_std: float) -> list[list[torch.Tensor]]:
        """Each group's per-token advantages (SPEC §4): an estimator that learns across
        groups (the probe) is fitted for each group on the others first (``for_batch``). Logs
        the structure the estimator resolved per group (docs/estimators.md "Structure rule")
        as ``estimator/<name>``, averaged over the groups, and the hidden layer read as
        ``estimator/layer``."""
        for g in groups:
            for key, value in self.estimator.resolved(g).items():
                self._metrics["train"][f"estimator/{key}"].append(float(value))
        if self.hidden_layer is not None and groups:
            self._metrics["train"]["estimator/layer"].append(float(self.hidden_layer))
        return estimate(self.estimator, groups, gae_lambda=self.gae_lambda, scale=self.scale, batch_std=batch_std)

    def _split_advantages(self, out: dict, hidden: Optional[torch.Tensor], problem_ids: Optional[list[str]],
                          rewards: torch.Tensor, batch_std: float, tokenizer: Any) -> torch.Tensor:
        """This process's advantages when groups span processes (:mod:`hista.train.split`)."""
        first = self.accelerator.process_index * out["completion_ids"].size(0)
        prompts, completions, states = unpad(out["prompt_ids"], out["prompt_mask"], out["completion_ids"],
                                             out["completion_mask"], hidden)
        rows = [split.Row(first + i, prompt, completion, None if problem_ids is None else problem_ids[i],
                          None if states is None else states[i])
                for i, (prompt, completion) in enumerate(zip(prompts, completions))]

        def represent(row: split.Row) -> Optional[tuple[torch.Tensor, int]]:
            return self.estimator.represent(Rollout(prompt_ids=row.prompt_ids, completion_ids=row.completion_ids,
                                                    hidden=row.hidden))

        def estimate(owned: list[list], owned_rewards: list[list[float]]) -> list[list[torch.Tensor]]:
            wholes = []
            for group, group_rewards in zip(owned, owned_rewards):
                represented = group[0].representation is not None
                whole = build_group([r.prompt_ids for r in group], [r.completion_ids for r in group], group_rewards,
                                    hidden=None if hidden is None or represented else [r.hidden for r in group],
                                    problem_id=group[0].problem_id, tokenizer=tokenizer)
                if represented:
                    whole.representations = [r.representation for r in group]
                wholes.append(whole)
            return self._estimate(wholes, batch_std)

        per_row = split.estimate_split(rows, rewards, self.num_generations, estimate,
                                       represent if hidden is not None else None)
        return scatter([per_row], out["completion_ids"].shape, device=out["completion_ids"].device)

    def _log_advantages(self, advantages: torch.Tensor, mask: torch.Tensor) -> None:
        valid = advantages[mask.bool()]
        if valid.numel():
            self._metrics["train"]["advantages/mean"].append(valid.mean().item())
            self._metrics["train"]["advantages/std"].append(valid.std().item() if valid.numel() > 1 else 0.0)
            self._metrics["train"]["advantages/abs_max"].append(valid.abs().max().item())

    # ---- checkpoints: the critic, the estimator's state, the generation batch --------------------
    @property
    def generate_every(self) -> int:
        """The micro-steps one generation batch feeds (TRL's ``steps_per_generation`` ×
        ``num_iterations``): TRL draws a batch when its micro-step counter is a multiple."""
        return int(self.args.steps_per_generation) * int(self.num_iterations)

    def _save_checkpoint(self, model, trial):
        folder = Path(self._get_output_dir(trial=trial)) / f"{PREFIX_CHECKPOINT_DIR}-{self.state.global_step}"
        if self.args.should_save:  # a folder saved over again is incomplete until its new marker
            (folder / checkpoints.MARKER).unlink(missing_ok=True)
        # first: a checkpoint whose trainer_state.json is whole holds it (hista.train.checkpoints)
        folder.mkdir(parents=True, exist_ok=True)
        torch.save(checkpoints.generation_state(self.state.global_step, self._step, self._buffered_inputs,
                                                self.generate_every),
                   folder / checkpoints.generation_file(self.accelerator.process_index))
        super()._save_checkpoint(model, trial)
        if self.critic is not None and self.args.should_save:
            self.critic.save(folder / checkpoints.CRITIC, optimizer=not self.args.save_only_model)
        state = self.estimator.state_dict()
        if state is not None:  # every process its own (a probe's history holds the groups it estimated)
            folder.mkdir(parents=True, exist_ok=True)
            torch.save(state, folder / f"estimator-{self.accelerator.process_index}.pt")
        self.accelerator.wait_for_everyone()  # every process's state is written before the marker
        if self.args.should_save:  # last: a checkpoint without it was cut short (hista.train.checkpoints)
            checkpoints.mark_complete(folder, self.state.global_step)

    def save_model(self, output_dir: Optional[str] = None, _internal_call: bool = False):
        super().save_model(output_dir, _internal_call)
        if self.critic is not None and not _internal_call and self.args.should_save:  # checkpoints: above
            self.critic.save(Path(output_dir or self.args.output_dir) / "critic", optimizer=False)

    def _load_optimizer_and_scheduler(self, checkpoint):
        super()._load_optimizer_and_scheduler(checkpoint)
        if checkpoint is not None and self.critic is not None:  # checked as check_checkpoint checked it
            self.critic.restore(*checkpoints.check_critic(Path(checkpoint) / checkpoints.CRITIC, self.critic))
        if checkpoint is not None and self.estimator.state_dict() is not None:
            self._load_estimator_state(self.estimator, Path(checkpoint), self.accelerator.process_index)
        if checkpoint is not None:
            self._load_generation(Path(checkpoint))

    def check_checkpoint(self, folder: Path) -> None:
        """That the checkpoint ``folder`` holds the state a resume continues from (SPEC §9,
        §11): every process's generation state (``generation-<process>.pt``: TRL's micro-step
        counter and the generation batch a checkpoint inside one trains on;
        :func:`hista.train.checkpoints.check_generation`), the critic trained with the policy
        (``critic/``: its record, weights, optimiser, shuffling state and update counter;
        :func:`hista.train.checkpoints.check_critic`) and, for an estimator that keeps one
        (the probe's history), every process's ``estimator-<process>.pt``, checked strictly by a
        fresh estimator of this configuration; each read without unpickling code. A missing,
        damaged or foreign state is an InputError naming the file and field. Reads only:
        ``hista train`` calls it before it writes."""
        step = int(checkpoints.CHECKPOINT.match(folder.name).group(1))
        for process in range(self.accelerator.num_processes):
            self._read_generation(folder, process, step)
        if self.critic is not None:  # read again (and checked again) when the resume loads it
            checkpoints.check_critic(folder / checkpoints.CRITIC, self.critic)
        if self.estimator.state_dict() is None:
            return
        for process in range(self.accelerator.num_processes):
            self._load_estimator_state(type(self.estimator)(self.estimator.config), folder, process)

    def _read_generation(self, folder: Path, process: int, step: int) -> Optional[tuple[int, Optional[list[dict]]]]:
        """(TRL's micro-step counter, the buffered generation batch or None) that process
        ``process`` saved into the checkpoint ``folder`` of optimiser step ``step``, checked
        (:func:`hista.train.checkpoints.check_generation`; an InputError names the file); None
        for a checkpoint of an earlier hista that holds none (its marker does not say it does)."""
        path = folder / checkpoints.generation_file(process)
        if not checkpoints.holds_generation(folder) and not (path.exists() or path.is_symlink()):
            return None
        required = (("ref_per_token_logps",) if self.loss.needs_ref_logp else ()) + (
            ("old_entropies",) if self.loss.needs_entropy else ())
        try:
            return checkpoints.check_generation(
                checkpoints.read_state(path, "generation"), global_step=step,
                accumulation=int(self.args.gradient_accumulation_steps),
                steps_per_generation=int(self.args.steps_per_generation), generate_every=self.generate_every,
                rows=int(self.args.per_device_train_batch_size),
                vocab=int(self.accelerator.unwrap_model(self.model).get_input_embeddings().num_embeddings),
                required=required)
        except InputError as exc:
            raise InputError(exc.message, path=str(path), field=exc.field) from None

    def _load_generation(self, folder: Path) -> None:
        """Continue TRL's generation schedule from the checkpoint ``folder``: its
        micro-step counter and, inside a generation batch, that batch (on this process's
        device), so that the steps left of it train on it as the uninterrupted run did. A
        checkpoint of an earlier hista holds neither: the counter is taken as the optimiser
        steps × ``gradient_accumulation_steps``, and a batch it falls inside is drawn again."""
        step = self.state.global_step  # transformers has read the checkpoint's trainer_state.json
        saved = self._read_generation(folder, self.accelerator.process_index, step)
        if saved is None:
            self._step, self._buffered_inputs = step * int(self.args.gradient_accumulation_steps), None
            if self._step % self.generate_every and self.accelerator.is_main_process:
                print(f"resume: {folder} holds no generation batch (written by an earlier hista): the batch it falls "
                      "inside is drawn again, so the steps left of it differ from the uninterrupted run's", flush=True)
            return
        self._step, batch = saved
        device = self.accelerator.device
        self._buffered_inputs = None if batch is None else [{key: value.to(device) for key, value in part.items()}
                                                            for part in batch]

    def _load_estimator_state(self, estimator, folder: Path, process: int) -> None:
        """Load ``estimator-<process>.pt`` of ``folder`` into ``estimator`` (its checks see the
        policy's hidden-state width); an InputError names the file."""
        path = folder / f"estimator-{process}.pt"
        config = self.accelerator.unwrap_model(self.model).config
        hidden_size = (config.get_text_config() if hasattr(config, "get_text_config") else config).hidden_size
        try:
            estimator.load_state_dict(checkpoints.read_state(path), hidden_size=int(hidden_size))
        except InputError as exc:
            raise InputError(exc.message, path=str(path), field=exc.field) from None

    # ---- loss ----------------------------------------------------------------------------
    def _attention(self, model) -> Optional[str]:
        return getattr(self.accelerator.unwrap_model(model).config, "_attn_implementation", None)

    def _packs(self, model, inputs: dict) -> bool:
        """Whether the loss forward of ``inputs`` runs packed (``packed_loss``)."""
        return (self.packed_loss and not self._is_vlm and self._attention(model) in ("sdpa", "eager")
                and packing.packable(inputs["completion_mask"]))

    def _packed_logps(self, model, inputs: dict) -> tuple[torch.Tensor, torch.Tensor]:
        """The policy's per-token log-probs and entropies [B, T] of a micro-batch from one packed
        forward (:mod:`hista.train.packing`), through TRL's fused LM head (its temperature)."""
        packed = packing.pack(inputs["prompt_ids"], inputs["prompt_mask"], inputs["completion_ids"],
                              inputs["completion_mask"], pad_token_id=self._tokenizer.pad_token_id or 0)
        mask = packed.attention_mask
        if self._attention(model) == "eager":
            mask = packing.additive(mask, next(model.parameters()).dtype)
        with self.accelerator.autocast():
            out = model(input_ids=packed.input_ids, attention_mask=mask, position_ids=packed.position_ids,
                        shift_labels=packed.shift_labels, fused_lm_head=True)
        return packing.unpack(out.log_probs, packed), packing.unpack(out.entropy, packed)

    def _compute_loss(self, model, inputs):
        mask = inputs["completion_mask"]
        if "tool_mask" in inputs:
            mask = mask * inputs["tool_mask"]
        if self._packs(model, inputs):
            logp, entropies = self._packed_logps(model, inputs)
        else:  # TRL's padded forward over prompt + completion
            input_ids = torch.cat([inputs["prompt_ids"], inputs["completion_ids"]], dim=1)
            attention_mask = torch.cat([inputs["prompt_mask"], inputs["completion_mask"]], dim=1)
            logp, entropies, _ = self._get_per_token_logps_and_entropies(
                model, input_ids, attention_mask, inputs["completion_ids"].size(1), compute_entropy=True
            )
        old_logp = inputs.get("old_per_token_logps")
        old_logp = logp.detach() if old_logp is None else old_logp
        loss, metrics = self.loss(
            logp, old_logp, inputs["advantages"], mask,
            entropies=inputs.get("old_entropies") if self.loss.needs_entropy else None,
            ref_logp=inputs["ref_per_token_logps"] if self.loss.needs_ref_logp else None,
            token_weights=inputs.get("importance_sampling_ratio"),
        )
        mode = "train" if self.model.training else "eval"
        accumulation = self.current_gradient_accumulation_steps if mode == "train" else 1
        if self.loss.aggregation == "token-mean":
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
