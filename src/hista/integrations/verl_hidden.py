"""Hidden-state estimators inside verl: the estimator's layer captured on the actor during the
old-log-prob forward, compressed per sequence into what the estimator reads (SPEC §4.3, §9;
docs/verl.md "Hista and the probe").

Reading order:

1. ``sequence_states``   what an estimator reads of one sequence: Hista's smoothed, strided
                         vectors (:meth:`hista.estimators.hista.Hista.compress`), the probe's
                         state features (:func:`hista.estimators.probe.features`)
2. ``sequences``         one micro-batch's captured layer, cut into its sequences (verl's packed
                         [1, total tokens, H] layout, or padded [B, S, H])
3. ``capturing``         for one call: the layer hook (:mod:`hista.models.capture`) and the step
                         that adds the compressed states to the engine's model output, so that
                         verl's own micro-batch bookkeeping returns them row by row
4. ``CapturingTrainingWorker``, ``capture_worker``
                         verl's TrainingWorker and actor worker with that step, through verl's
                         ``actor_worker_cls`` extension point; capture runs only when the batch
                         carries :data:`CAPTURE` (set by hista's trainers for the old-log-prob
                         pass alone)
5. ``check``             the configurations the capture cannot serve, refused at start

Nothing here patches verl: hista's trainers (:mod:`hista.integrations.verl_trainer`) put the
capture worker in place of verl's actor worker class, as verl's own ``separate_async`` trainer
puts its ``DetachActorWorker`` there.
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import Any, Iterator

import torch
from verl.experimental.separation.engine_workers import DetachActorWorker
from verl.single_controller.base.decorator import make_nd_compute_dataproto_dispatch_fn, register
from verl.utils import tensordict_utils as tu
from verl.workers.engine_workers import ActorRolloutRefWorker, TrainingWorker

from .. import estimators
from ..errors import InputError
from ..estimators.probe import Probe, features
from ..models.capture import backbone_of, hook_layer
from .verl_settings import DTYPES, nested_lengths

#: the batch's non-tensor key that switches capture on: {"estimator", "params", "dtype"}
CAPTURE = "hista_capture"
#: the batch field the actor returns: per sequence, what the estimator reads ([L, H] each)
STATES = "hista_states"
#: verl actor strategies whose engine the capture supports
STRATEGIES = ("fsdp", "fsdp2")


def sequence_states(est: Any, hidden: torch.Tensor, prompt_len: int) -> torch.Tensor:
    """What ``est`` reads of one sequence's hidden states ``hidden`` [P + T, H] (SPEC §4.3):
    the probe's state features [T + 1, H], Hista's smoothed vectors at its compression stride
    [⌈(P + T) / stride⌉, H] (the prompt's positions included unless ``include_prompt`` is off).
    float32."""
    if isinstance(est, Probe):
        return features(hidden, prompt_len, est.config.alpha)
    return est.compress(hidden, prompt_len, est.stride)


def sequences(hidden: torch.Tensor, lengths: list[int], packed: bool) -> list[torch.Tensor]:
    """The captured layer of each sequence of one micro-batch, [length, H] each: ``hidden`` is
    [1, Σ lengths, H] when verl packs the micro-batch (``use_remove_padding``), else [B, S, H]
    with each row's sequence at its start."""
    if packed:
        flat = hidden.reshape(-1, hidden.shape[-1])
        if flat.shape[0] != sum(lengths):
            raise RuntimeError(f"the captured layer has {flat.shape[0]} positions for sequences of {sum(lengths)} "
                               "tokens: a layout the capture does not support (sequence parallelism?)")
        return list(flat.split(lengths))
    return [hidden[k, :n] for k, n in enumerate(lengths)]


@contextmanager
def capturing(engine: Any, spec: dict) -> Iterator[None]:
    """For the ``with`` block, every forward of ``engine`` (a verl FSDP engine) captures the
    layer of ``spec``'s estimator and adds :data:`STATES` to the micro-batch's model output:
    each sequence's :func:`sequence_states`, in ``spec["dtype"]``. The engine's
    ``prepare_model_outputs`` is wrapped on this engine object only, for the block."""
    est = estimators.get(spec["estimator"], **spec["params"])
    layer = est.hidden_layer(engine.model_config.hf_config.num_hidden_layers)
    dtype = DTYPES[spec["dtype"]]
    seen: list[torch.Tensor] = []
    handles = hook_layer(backbone_of(engine.module), layer, seen.append)
    original = engine.prepare_model_outputs

    def prepare_model_outputs(output, output_args, micro_batch, logits_processor_func):
        out = original(output, output_args, micro_batch, logits_processor_func)
        hidden = seen[-1]
        seen.clear()
        lengths = nested_lengths(micro_batch["input_ids"])
        packed = bool(tu.get_non_tensor_data(data=micro_batch, key="use_remove_padding", default=True))
        rows = sequences(hidden, lengths, packed)
        prompts = nested_lengths(micro_batch["prompts"])
        # to host memory at once: the rank's states wait there, not on the accelerator, until returned
        states = [sequence_states(est, h, p).to("cpu", dtype) for h, p in zip(rows, prompts)]
        out[STATES] = torch.nested.as_nested_tensor(states, layout=torch.jagged)
        return out

    engine.prepare_model_outputs = prepare_model_outputs
    try:
        yield
    finally:
        del engine.prepare_model_outputs
        for handle in handles:
            handle.remove()


# --- 4. the workers ----------------------------------------------------------------------------


class CapturingTrainingWorker(TrainingWorker):
    """verl's TrainingWorker whose ``infer_batch`` captures (:func:`capturing`) when the batch
    carries :data:`CAPTURE`; otherwise verl's own, unchanged."""

    @register(dispatch_mode=make_nd_compute_dataproto_dispatch_fn(mesh_name="train"), blocking=False)
    def infer_batch(self, data):
        spec = tu.get_non_tensor_data(data=data, key=CAPTURE, default=None)
        if spec is None:
            return super().infer_batch(data)
        with capturing(self.engine, spec):
            return super().infer_batch(data)


class HistaActorRolloutRefWorker(ActorRolloutRefWorker):
    """verl's actor worker whose actor engine captures for hista (``actor_worker_cls``)."""

    actor_worker_cls = CapturingTrainingWorker


class HistaDetachActorWorker(DetachActorWorker):
    """verl's ``separate_async`` actor worker whose actor engine captures for hista."""

    actor_worker_cls = CapturingTrainingWorker


def capture_worker(base: type) -> type:
    """The capturing worker class for verl's actor worker class ``base``."""
    workers = {ActorRolloutRefWorker: HistaActorRolloutRefWorker, DetachActorWorker: HistaDetachActorWorker}
    if base not in workers:
        raise InputError(f"hista's capture has no worker for {base.__module__}.{base.__name__}; it extends "
                         "ActorRolloutRefWorker and DetachActorWorker", field="trainer.v1.trainer_mode")
    return workers[base]


# --- 5. configurations the capture cannot serve ----------------------------------------------


def check(config: Any, est: Any, num_layers: int) -> None:
    """Refuse, naming the setting, a run whose hidden-state estimator the capture cannot serve
    (docs/verl.md): an actor strategy other than FSDP, sequence parallelism, the bypass mode
    that skips the old-log-prob forward, a layer beyond the model's depth."""
    actor = config.actor_rollout_ref.actor
    strategy = actor.get("strategy", "fsdp")
    if strategy not in STRATEGIES:
        raise InputError(f"{strategy!r}: hista captures hidden states on FSDP actors only ({', '.join(STRATEGIES)})",
                         field="actor_rollout_ref.actor.strategy")
    if int(actor.get("ulysses_sequence_parallel_size", 1) or 1) != 1:
        raise InputError("hista's capture needs whole sequences on each rank: set it to 1",
                         field="actor_rollout_ref.actor.ulysses_sequence_parallel_size")
    correction = config.algorithm.get("rollout_correction", None) or {}
    if correction.get("bypass_mode", False):
        raise InputError("bypass mode skips the old-log-prob forward, where hista captures hidden states",
                         field="algorithm.rollout_correction.bypass_mode")
    layer = est.hidden_layer(num_layers)
    if not -(num_layers + 1) <= layer <= num_layers:
        raise InputError(f"layer {layer} is beyond the model's {num_layers} layers ({-(num_layers + 1)}..{num_layers})",
                         field="HISTA_ESTIMATOR.layer")
