"""verl trainers that hand hista's text estimators (Numca) the responses (SPEC §4, §9; docs/verl.md).

verl's trainer passes an advantage estimator token-level rewards, the response mask and the
group index, but not the responses. The trainers registered here, one per verl v1 trainer mode
(``hista_sync``, ``hista_colocate_async``, ``hista_separate_async``; set
``trainer.v1.trainer_mode``), are verl's own with one step added to ``_compute_advantage``: when
the run's estimator reads text (:data:`TEXT_ESTIMATORS`), the batch's response ids are fetched
from verl's TransferQueue, decoded with the trainer's tokenizer into text and per-token character
offsets (:func:`hista.rollout.offsets.decode_with_offsets`), and held in :data:`RESPONSES` while
verl computes the advantages, so that the registered estimator reads them row by row. Everything
happens on the driver; nothing more crosses to the workers. Other estimators run unchanged.
"""

from __future__ import annotations

import contextvars
from typing import Any, Optional

from ..rollout.offsets import decode_with_offsets

#: verl estimator names that need the responses' token ids, text and offsets.
TEXT_ESTIMATORS = ("hista_numca",)
#: verl v1 trainer modes that hista's trainers extend: ``hista_<mode>``.
MODES = ("sync", "colocate_async", "separate_async")
#: The current batch's responses, row by row as verl hands the estimator its rows: (token ids,
#: text, offsets); None outside a hista trainer's advantage step.
RESPONSES: contextvars.ContextVar[Optional[list[tuple[list[int], str, list]]]] = contextvars.ContextVar(
    "hista_verl_responses", default=None)


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


class ResponseTexts:
    """The step hista adds to a verl v1 trainer (module docstring); mixed in before verl's class."""

    def _compute_advantage(self, batch, metrics: dict):
        if self.config.algorithm.adv_estimator not in TEXT_ESTIMATORS:
            return super()._compute_advantage(batch, metrics)
        import transfer_queue as tq

        data = tq.kv_batch_get(keys=batch.keys, partition_id=batch.partition_id, select_fields=["responses"])
        token = RESPONSES.set(responses(data["responses"], self.tokenizer))
        try:
            return super()._compute_advantage(batch, metrics)
        finally:
            RESPONSES.reset(token)


def register_trainers() -> list[str]:
    """Register ``hista_<mode>`` for each verl v1 trainer mode of :data:`MODES` (SPEC §9),
    skipping names already taken. Raises ImportError when verl's v1 trainer cannot be imported
    (it needs ``TransferQueue``, in verl's ``verl-core`` extra). Returns the names registered."""
    from verl.trainer.ppo.v1 import trainer_base

    done = []
    for mode in MODES:
        name = f"hista_{mode}"
        if name in trainer_base.TRAINER_REGISTRY:
            continue
        base = trainer_base.get_trainer_cls(mode)
        cls = type(f"Hista{base.__name__}", (ResponseTexts, base), {"__module__": __name__,
                                                                    "__doc__": f"verl's {mode} trainer with "
                                                                               "responses for text estimators."})
        trainer_base.register_trainer(name)(cls)
        done.append(name)
    return done
