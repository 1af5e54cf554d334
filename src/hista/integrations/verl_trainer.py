"""verl trainers that hand hista's estimators what verl does not pass an estimator: the
responses (Numca) and the compressed hidden states captured on the actor (Hista, the probe)
(SPEC §4, §9; docs/verl.md).

verl's trainer passes an advantage estimator token-level rewards, the response mask and the
group index, but neither the responses nor any hidden state. The trainers registered here, one
per verl v1 trainer mode (``hista_sync``, ``hista_colocate_async``, ``hista_separate_async``;
set ``trainer.v1.trainer_mode``), are verl's own with steps added (:class:`HistaSteps`):

- text estimators (:data:`TEXT_ESTIMATORS`): at the advantage step the batch's response ids are
  fetched from verl's TransferQueue, decoded into text and per-token character offsets
  (:func:`hista.rollout.offsets.decode_with_offsets`) and held in :data:`RESPONSES` while verl
  computes the advantages;
- hidden-state estimators (:data:`HIDDEN_ESTIMATORS`): at start the run is checked
  (:func:`verl_hidden.check`) and the actor worker class becomes hista's capturing one; before
  the old-log-prob forward the batch gets the capture switch; the actor returns each
  sequence's compressed states as a batch field, fetched at the advantage step and held in
  :data:`STATES`; the probe's history is saved with verl's checkpoints and restored from them.

Everything on the driver reads and writes the TransferQueue the step already uses; hidden
states never leave the actor. Other estimators run unchanged.
"""

from __future__ import annotations

import contextvars
import os
from typing import Any, Optional

import torch

from ..errors import InputError
from ..rollout.offsets import decode_with_offsets
from .verl_settings import HIDDEN_ESTIMATORS, TEXT_ESTIMATORS

#: verl v1 trainer modes that hista's trainers extend: ``hista_<mode>``.
MODES = ("sync", "colocate_async", "separate_async")
#: The probe's history in a verl checkpoint folder (``global_step_N/``).
PROBE_FILE = "hista_probe.pt"
#: The current batch's responses, row by row as verl hands the estimator its rows: (token ids,
#: text, offsets); None outside a hista trainer's advantage step.
RESPONSES: contextvars.ContextVar[Optional[list[tuple[list[int], str, list]]]] = contextvars.ContextVar(
    "hista_verl_responses", default=None)
#: The current batch's captured states, row by row: (prompt length, response length, states
#: [L, H] float32); None outside a hista trainer's advantage step.
STATES: contextvars.ContextVar[Optional[list[tuple[int, int, torch.Tensor]]]] = contextvars.ContextVar(
    "hista_verl_states", default=None)


def responses(ids: Any, tokenizer: Any) -> list[tuple[list[int], str, list]]:
    """Each row of ``ids`` (a nested [B, *] or list of 1-D token-id tensors) decoded with
    ``tokenizer`` into (token ids, text, character offsets) (SPEC §3)."""
    rows = ids.unbind() if getattr(ids, "is_nested", False) else list(ids)
    out = []
    for row in rows:
        tokens = [int(t) for t in row.tolist()]
        text, offsets = decode_with_offsets(tokenizer, tokens)
        out.append((tokens, text, offsets))
    return out


def row_lengths(batch: Any) -> tuple[list[int], list[int]]:
    """Each row's prompt and response lengths: from the tags verl's agent loop gives every row
    (``prompt_len``, ``response_len``), else from the rows' token ids in the TransferQueue."""
    tags = list(getattr(batch, "tags", None) or [])
    if len(tags) == len(batch.keys) and all("prompt_len" in t and "response_len" in t for t in tags):
        return [int(t["prompt_len"]) for t in tags], [int(t["response_len"]) for t in tags]
    import transfer_queue as tq

    data = tq.kv_batch_get(keys=batch.keys, partition_id=batch.partition_id, select_fields=["prompts", "responses"])
    from .verl_settings import nested_lengths

    return nested_lengths(data["prompts"]), nested_lengths(data["responses"])


class HistaSteps:
    """The steps hista adds to a verl v1 trainer (module docstring); mixed in before verl's class."""

    def __init__(self, config, *args, **kwargs):
        super().__init__(config, *args, **kwargs)
        if config.algorithm.adv_estimator in HIDDEN_ESTIMATORS:
            check_start(config)

    def _init_resource_pool_mgr(self):
        super()._init_resource_pool_mgr()
        if self.config.algorithm.adv_estimator not in HIDDEN_ESTIMATORS:
            return
        import ray
        from verl.trainer.ppo.utils import Role

        from .verl_hidden import capture_worker

        for role in (Role.Actor, Role.ActorRollout, Role.ActorRolloutRef):
            if role in self.role_worker_mapping:
                base = self.role_worker_mapping[role].__ray_actor_class__
                self.role_worker_mapping[role] = ray.remote(capture_worker(base))

    def _compute_old_log_prob(self, batch, metrics: dict):
        if self.config.algorithm.adv_estimator not in HIDDEN_ESTIMATORS:
            return super()._compute_old_log_prob(batch, metrics)
        from .verl_hidden import CAPTURE

        batch.extra_info[CAPTURE] = self._capture_switch()
        try:
            out = super()._compute_old_log_prob(batch, metrics)
        finally:
            batch.extra_info.pop(CAPTURE, None)
        getattr(out, "extra_info", {}).pop(CAPTURE, None)
        return out

    def _capture_switch(self) -> dict:
        """The switch for the actor's old-log-prob pass: the estimator to capture for, with its
        parameters, and the dtype the states travel in."""
        from .verl_settings import estimator_for, estimator_params

        est, dtype = estimator_for(self.config.algorithm.adv_estimator)
        return {"estimator": est.name, "params": estimator_params(), "dtype": dtype}

    def _compute_advantage(self, batch, metrics: dict):
        name = self.config.algorithm.adv_estimator
        if name in TEXT_ESTIMATORS:
            import transfer_queue as tq

            data = tq.kv_batch_get(keys=batch.keys, partition_id=batch.partition_id, select_fields=["responses"])
            token = RESPONSES.set(responses(data["responses"], self.tokenizer))
            try:
                return super()._compute_advantage(batch, metrics)
            finally:
                RESPONSES.reset(token)
        if name in HIDDEN_ESTIMATORS:
            token = STATES.set(self._states(batch))
            try:
                return super()._compute_advantage(batch, metrics)
            finally:
                STATES.reset(token)
        return super()._compute_advantage(batch, metrics)

    def _states(self, batch) -> list[tuple[int, int, torch.Tensor]]:
        """The batch's captured states with each row's prompt and response lengths."""
        import transfer_queue as tq

        from .verl_hidden import STATES as FIELD

        data = tq.kv_batch_get(keys=batch.keys, partition_id=batch.partition_id, select_fields=[FIELD])
        if FIELD not in data.keys():
            raise RuntimeError(f"the batch has no field {FIELD!r}: the actor did not capture hidden states (run "
                               f"{self.config.algorithm.adv_estimator} with a hista trainer mode, and without "
                               "algorithm.rollout_correction.bypass_mode)")
        states = [s.float() for s in data[FIELD].unbind()]
        return list(zip(*row_lengths(batch), states))

    def _save_checkpoint(self):
        if self.config.algorithm.adv_estimator == "hista_probe":
            save_probe(os.path.join(self.config.trainer.default_local_dir, f"global_step_{self.global_steps}"))
        return super()._save_checkpoint()

    def _load_checkpoint(self):
        out = super()._load_checkpoint()
        if self.config.algorithm.adv_estimator == "hista_probe" and self.global_steps:
            trainer = self.config.trainer
            folder = (trainer.resume_from_path if trainer.resume_mode == "resume_path"
                      else os.path.join(trainer.default_local_dir, f"global_step_{self.global_steps}"))
            load_probe(folder)
        return out


def check_start(config: Any) -> None:
    """Refuse at start, naming the setting, a run whose hidden-state estimator the capture cannot
    serve (:func:`verl_hidden.check`), reading the model's depth from its config
    (``actor_rollout_ref.model.path``)."""
    from transformers import AutoConfig

    from .verl_hidden import check
    from .verl_settings import estimator_for

    est, _ = estimator_for(config.algorithm.adv_estimator)
    model = config.actor_rollout_ref.model
    depth = AutoConfig.from_pretrained(model.path, trust_remote_code=bool(model.get("trust_remote_code", False)))
    check(config, est, depth.num_hidden_layers)


def save_probe(folder: str) -> None:
    """Write the probe's history (``hista_probe``'s) into verl's checkpoint folder
    ``folder`` (``global_step_N``), before verl marks the checkpoint as the latest."""
    from verl.utils.fs import local_mkdir_safe

    from .verl_settings import estimator_for

    local_mkdir_safe(folder)
    est, _ = estimator_for("hista_probe")
    torch.save(est.state_dict(), os.path.join(folder, PROBE_FILE))


def load_probe(folder: str) -> None:
    """Restore the probe's history from verl's checkpoint folder ``folder`` (SPEC §9: a resumed
    run fits as an uninterrupted one); an InputError naming the file when it is missing."""
    from .verl_settings import estimator_for

    path = os.path.join(folder, PROBE_FILE)
    if not os.path.exists(path):
        raise InputError(f"resuming hista_probe from {folder}, which has no {PROBE_FILE}: the probe's history would "
                         "restart empty (a checkpoint of another estimator?)", field="trainer.resume_mode")
    est, _ = estimator_for("hista_probe")
    est.load_state_dict(torch.load(path, weights_only=True))


def register_trainers() -> list[str]:
    """Register ``hista_<mode>`` for each verl v1 trainer mode of :data:`MODES`,
    skipping names already taken. Raises ImportError when verl's v1 trainer cannot be imported
    (it needs ``TransferQueue``, in verl's ``verl-core`` extra). Returns the names registered."""
    from verl.trainer.ppo.v1 import trainer_base

    done = []
    for mode in MODES:
        name = f"hista_{mode}"
        if name in trainer_base.TRAINER_REGISTRY:
            continue
        base = trainer_base.get_trainer_cls(mode)
        cls = type(f"Hista{base.__name__}", (HistaSteps, base), {"__module__": __name__,
                                                                 "__doc__": f"verl's {mode} trainer with hista's "
                                                                            "steps (HistaSteps)."})
        trainer_base.register_trainer(name)(cls)
        done.append(name)
    return done
