"""A run folder's checkpoints and logs as resume reads them (SPEC §9: long jobs resume, a kill at
any moment loses no more than the steps since the last checkpoint).

- A checkpoint is complete when hista's marker ``hista-checkpoint.json`` is in it (the trainer
  writes it last, after TRL's files, the critic and the estimator state), or, for one written
  without the marker, when its ``trainer_state.json`` names its step and every weight and state
  file it holds is whole. A folder cut short by a kill is skipped and named.
- ``final/`` is written beside itself and renamed into place, so it is whole or absent.
- On resume, ``metrics.jsonl`` keeps the rows of the steps the checkpoint holds: the steps
  trained after it and lost are logged again, once.
- What a resume reads of the checkpoint is checked before the run writes anything: the fields of
  ``trainer_state.json`` (:func:`check_trainer_state`) and hista's state files, read without
  unpickling code (:func:`read_state`); a bad one is an InputError naming the file and field.
- Every process writes ``generation-<process>.pt`` first (:func:`generation_state`): TRL's
  micro-step counter and, for a checkpoint inside a generation batch reused over several
  optimiser steps, the batch itself, which TRL keeps only in memory; a resume trains on it
  rather than drawing it again (:func:`check_generation`). The marker says the checkpoint holds
  it (``"generation": true``); one written by an earlier hista, without it, is resumed as it
  was then.
"""

from __future__ import annotations

import io
import json
import math
import os
import re
import shutil
import zipfile
from pathlib import Path
from typing import Any, Callable, Optional

import torch

from ..errors import InputError
from ..jsonio import read_input, write_atomic, write_json_atomic
from ..models.loading import safetensors_problem
from ..schema import fields

#: TRL's checkpoint folders, as transformers' ``get_last_checkpoint`` recognises them.
CHECKPOINT = re.compile(r"^checkpoint-(\d+)$")
#: what the trainer writes last into a checkpoint it has finished
MARKER = "hista-checkpoint.json"
#: files of a checkpoint that torch writes as zip archives (a cut one has no central directory)
_ZIPPED = re.compile(r"^(optimizer\.pt|scheduler\.pt|rng_state(_\d+)?\.pth|(estimator|generation)-\d+\.pt|"
                     r"training_args\.bin)$")


def mark_complete(folder: Path, step: int) -> None:
    """Write the marker that makes ``folder`` a complete checkpoint of ``step``,
    atomically; called once everything else of the checkpoint is on disk. It records that every
    process's generation state is in it (:func:`generation_file`)."""
    write_json_atomic(folder / MARKER, {"step": int(step), "generation": True})


def generation_file(process: int) -> str:
    """The name of process ``process``'s generation state in a checkpoint:
    :func:`generation_state`, written before any other file of the checkpoint."""
    return f"generation-{int(process)}.pt"


def holds_generation(folder: Path) -> bool:
    """Whether the checkpoint ``folder``'s marker says that every process's generation state is
    in it: then a missing one is refused on resume. A checkpoint of an earlier hista
    (a marker without ``generation``, or no marker) may lack them."""
    try:
        return json.loads((folder / MARKER).read_text(encoding="utf-8")).get("generation") is True
    except (OSError, ValueError, AttributeError):
        return False


def problem(folder: Path, state_files: tuple[str, ...] = ()) -> Optional[str]:
    """Why the checkpoint ``folder`` cannot be resumed from, or None when it can:
    with the marker, a step that matches the folder's name; without it, a ``trainer_state.json``
    that names its step, the ``state_files`` of hista's state the run writes (a probe's
    ``estimator-0.pt``, the critic's ``critic/optimizer.pt``), and every safetensors file and
    torch archive in it whole. (A marked checkpoint without its state files is refused when it
    is resumed: see the trainer's ``check_checkpoint``.)"""
    step = int(CHECKPOINT.match(folder.name).group(1))
    marker = folder / MARKER
    if marker.is_file():
        try:
            recorded = json.loads(marker.read_text(encoding="utf-8")).get("step")
        except (OSError, ValueError, AttributeError):
            recorded = None
        return None if recorded == step else f"{MARKER} does not name step {step}"
    state = folder / "trainer_state.json"
    try:
        data = json.loads(state.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return "no trainer_state.json (the save was cut short)"
    except (OSError, ValueError) as exc:
        return f"trainer_state.json cannot be read ({exc})"
    if not isinstance(data, dict) or data.get("global_step") != step:
        return f"trainer_state.json does not name step {step}"
    for name in state_files:
        if not (folder / name).is_file():
            return f"no {name} (the save was cut short)"
        if _ZIPPED.match(Path(name).name) and not zipfile.is_zipfile(folder / name):
            return f"{name} is cut short (not a whole archive)"
    for file in sorted(folder.iterdir()):
        if file.suffix == ".safetensors" and (why := safetensors_problem(file)) is not None:
            return f"{file.name} {why}"
        if _ZIPPED.match(file.name) and not zipfile.is_zipfile(file):
            return f"{file.name} is cut short (not a whole archive)"
    return None


def scan(out: Path, state_files: tuple[str, ...] = ()) -> tuple[list[tuple[int, Path]], list[tuple[Path, str]]]:
    """The checkpoints of the run folder ``out``: the complete ones as (step, folder)
    in step order, and the incomplete ones as (folder, why); ``state_files``: see
    :func:`problem`."""
    complete, incomplete = [], []
    if not out.is_dir():
        return complete, incomplete
    folders = [p for p in out.iterdir() if CHECKPOINT.match(p.name) and p.is_dir() and not p.is_symlink()]
    for folder in sorted(folders, key=lambda p: int(CHECKPOINT.match(p.name).group(1))):
        why = problem(folder, state_files)
        if why is None:
            complete.append((int(CHECKPOINT.match(folder.name).group(1)), folder))
        else:
            incomplete.append((folder, why))
    return complete, incomplete


def final_is_whole(final: Path) -> bool:
    """Whether ``final/`` holds a whole model: a ``config.json`` and whole safetensors
    weights (it is renamed into place whole, see :func:`save_final`; this guards older runs)."""
    weights = sorted(final.glob("*.safetensors")) if final.is_dir() else []
    return (final / "config.json").is_file() and bool(weights) and all(safetensors_problem(w) is None
                                                                        for w in weights)


def save_final(final: Path, save: Callable[[str], None], *, main_process: bool = True,
               barrier: Callable[[], None] = lambda: None) -> None:
    """Write the final model with ``save(folder)`` into a folder beside ``final`` and rename it
    into place, so that ``final/`` is never half written; an earlier ``final/`` is
    replaced only once the new one is whole, and leftovers of a killed save are removed. On
    several processes every one calls ``save`` (a sharded model is gathered for it), the main
    process alone removes and renames, and ``barrier`` keeps them in step."""
    partial = final.with_name(f"{final.name}.partial")
    old = final.with_name(f"{final.name}.old")
    if main_process:
        for leftover in (partial, old):
            shutil.rmtree(leftover, ignore_errors=True)
    barrier()
    save(str(partial))
    barrier()
    if main_process:
        if final.exists():
            os.replace(final, old)
        os.replace(partial, final)
        shutil.rmtree(old, ignore_errors=True)
    barrier()


def copy_final(checkpoint: Path, final: Path) -> None:
    """``final/`` from a complete checkpoint's model and tokenizer files, and its critic without
    the optimizer's state as the final model keeps it (SPEC §9: a run killed after its last
    checkpoint but before its final model was whole)."""
    def save(folder: str) -> None:
        os.makedirs(folder)
        for file in checkpoint.iterdir():
            if file.is_file() and not _ZIPPED.match(file.name) and file.name not in (MARKER, "trainer_state.json"):
                shutil.copy2(file, Path(folder) / file.name)
        if (checkpoint / CRITIC).is_dir():
            shutil.copytree(checkpoint / CRITIC, Path(folder) / CRITIC, ignore=shutil.ignore_patterns("optimizer.pt"))

    save_final(final, save)


def trim_metrics(path: Path, step: int) -> int:
    """Keep the rows of ``metrics.jsonl`` up to ``step`` (SPEC §9: a resumed run logs the steps
    after its checkpoint again) and drop a last line a kill cut short; rewritten atomically.
    Returns how many rows were dropped."""
    if not path.is_file():
        return 0
    kept, dropped = [], 0
    for line in path.read_text(encoding="utf-8", errors="replace").splitlines(keepends=True):
        try:
            row = json.loads(line) if line.endswith("\n") else None
        except ValueError:
            row = None
        if isinstance(row, dict) and isinstance(row.get("step"), int) and row["step"] <= step:
            kept.append(line)
        else:
            dropped += 1
    if dropped:
        write_atomic(path, lambda fh: fh.writelines(kept), kind="jsonl")
    return dropped


def _count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _non_negative(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) and value >= 0


def _maybe(check: Callable[[Any], bool]) -> Callable[[Any], bool]:
    return lambda value: value is None or check(value)


#: the fields of transformers' ``trainer_state.json``: field -> (check, what it must be); a
#: resume rebuilds TrainerState from them (an unknown field fails there) and continues from them
TRAINER_STATE = {
    "epoch": (_non_negative, "a number >= 0"), "global_step": (_count, "an integer >= 0"),
    "max_steps": (_count, "an integer >= 0"), "logging_steps": (_non_negative, "a number >= 0"),
    "eval_steps": (_non_negative, "a number >= 0"), "save_steps": (_non_negative, "a number >= 0"),
    "train_batch_size": (_maybe(_count), "an integer >= 0 or null"), "num_train_epochs": (_count, "an integer >= 0"),
    "num_input_tokens_seen": (_count, "an integer >= 0"), "total_flos": (_non_negative, "a number >= 0"),
    "log_history": (lambda v: isinstance(v, list) and all(isinstance(row, dict) for row in v), "a list of objects"),
    "best_metric": (_maybe(lambda v: isinstance(v, (int, float)) and not isinstance(v, bool)), "a number or null"),
    "best_global_step": (_maybe(_count), "an integer >= 0 or null"),
    "best_model_checkpoint": (_maybe(lambda v: isinstance(v, str)), "a string or null"),
    "is_local_process_zero": (lambda v: isinstance(v, bool), "true or false"),
    "is_world_process_zero": (lambda v: isinstance(v, bool), "true or false"),
    "is_hyper_param_search": (lambda v: isinstance(v, bool), "true or false"),
    "trial_name": (_maybe(lambda v: isinstance(v, str)), "a string or null"),
    "trial_params": (_maybe(lambda v: isinstance(v, dict)), "an object or null"),
    "stateful_callbacks": (_maybe(lambda v: isinstance(v, dict)), "an object or null"),
}


def check_trainer_state(folder: Path, step: int) -> None:
    """That ``trainer_state.json`` of the checkpoint ``folder`` of ``step`` is one a resume can
    continue from: a JSON object of transformers' TrainerState fields
    (:data:`TRAINER_STATE`), each of its type, whose ``global_step`` is ``step``; an InputError
    naming the file and the field otherwise. Reads only."""
    path = folder / "trainer_state.json"
    raw = read_input(path, "the checkpoint's trainer state")
    try:
        data = json.loads(raw.decode("utf-8"))  # NaN is allowed: transformers logs a NaN loss as NaN
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise InputError(f"bad JSON ({str(exc)[:100]})", path=str(path)) from None
    if not isinstance(data, dict):
        raise InputError(f"expected a JSON object, got {type(data).__name__}", path=str(path))
    for key, value in sorted(data.items()):
        if key not in TRAINER_STATE:
            raise InputError("not a field of transformers' TrainerState", path=str(path), field=key)
        check, what = TRAINER_STATE[key]
        if not check(value):
            raise InputError(f"expected {what}, got {json.dumps(value)[:60]}", path=str(path), field=key)
    if "global_step" not in data:
        raise InputError("missing", path=str(path), field="global_step")
    if data["global_step"] != step:
        raise InputError(f"is {data['global_step']}, but the checkpoint is {folder.name} (step {step})",
                         path=str(path), field="global_step")


def read_state(path: Path, what: str = "estimator") -> Any:
    """What hista saved with ``torch.save`` into a checkpoint (``estimator-<process>.pt``,
    ``generation-<process>.pt``), loaded with ``weights_only=True`` so that no
    pickled code runs: tensors, numbers, strings and containers of them. An InputError naming
    the file when it is missing, not a regular file, empty, or not such a torch archive.
    ``what``: whose state it is (``estimator``, ``generation``), for the messages."""
    raw = read_input(path, f"the {what} state of the checkpoint")
    if not raw:
        raise InputError(f"is empty (a torch archive of the {what} state was expected)", path=str(path))
    try:
        return torch.load(io.BytesIO(raw), map_location="cpu", weights_only=True)
    except Exception as exc:  # torch raises many types for a damaged or foreign archive
        raise InputError(f"cannot be read as a torch archive of tensors and numbers ({_torch_reason(exc)}); nothing "
                         "in it was run", path=str(path)) from None


#: the lines torch adds to every refusal of ``weights_only`` loading
_TORCH_BOILERPLATE = ("Weights only load failed", "Please file an issue", "Check the documentation")


def _torch_reason(exc: Exception) -> str:
    """The first sentence of ``torch.load``'s error that says what is wrong with the file."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    said = [line for line in lines if not line.startswith(_TORCH_BOILERPLATE)] or [type(exc).__name__]
    return said[0].split(". ")[0].rstrip(".")[:120]


# --- the generation state: TRL's buffered batch and micro-step counter ------------------------

#: the keys of TRL's buffered generation batch (a text-only run's, with hista's
#: ``old_entropies``): key -> (kind, columns). Kinds: ``ids`` (integer token ids of the
#: vocabulary), ``mask`` (integers 0 or 1), ``finite`` (finite floats), ``values`` (floats, any:
#: TRL's sampling log-probs and importance weights may hold NaN where vLLM scored no token),
#: ``count`` (a number >= 0, no dimension). Columns: the second dimension, the prompt's or the
#: completion's length (one length per batch), or ``completion|1`` (either, or 1).
GENERATION_BATCH = {
    "prompt_ids": ("ids", "prompt"), "prompt_mask": ("mask", "prompt"),
    "completion_ids": ("ids", "completion"), "completion_mask": ("mask", "completion"),
    "advantages": ("finite", "completion"), "num_items_in_batch": ("count", None),
    "old_per_token_logps": ("finite", "completion"), "ref_per_token_logps": ("finite", "completion"),
    "old_entropies": ("finite", "completion"), "sampling_per_token_logps": ("values", "completion"),
    "importance_sampling_ratio": ("values", "completion|1"), "tool_mask": ("mask", "completion"),
}
#: the keys every buffered batch holds (a batch reused over optimiser steps also holds the old
#: policy's log-probs: TRL computes them whenever a batch outlives an optimiser step)
GENERATION_REQUIRED = ("prompt_ids", "prompt_mask", "completion_ids", "completion_mask", "advantages",
                       "num_items_in_batch", "old_per_token_logps")


def generation_state(global_step: int, step: int, batch: Optional[list[dict]], generate_every: int) -> dict:
    """What a process writes into ``generation-<process>.pt`` of the checkpoint of
    ``global_step``: TRL's micro-step counter ``step`` and, when it falls inside a
    generation batch (``step`` not a multiple of ``generate_every``, the micro-steps a batch
    feeds), that batch (TRL's ``_buffered_inputs``: a list of slices, one per micro-step of
    ``steps_per_generation``); on a boundary the next step draws a new batch, and none is kept."""
    inside = step % generate_every != 0
    return {"global_step": int(global_step), "step": int(step),
            "batch": [dict(part) for part in batch] if inside and batch is not None else None}


def check_generation(state: Any, *, global_step: int, accumulation: int, steps_per_generation: int,
                     generate_every: int, rows: int, vocab: int, required: tuple[str, ...] = ()
                     ) -> tuple[int, Optional[list[dict]]]:
    """(micro-step counter, buffered batch) of a generation state read back from the
    checkpoint of ``global_step`` (:func:`generation_state`), checked strictly:
    exactly ``global_step`` (the checkpoint's), ``step`` (between ``global_step`` and
    ``global_step`` × ``accumulation``: each optimiser step takes 1 to ``accumulation``
    micro-steps) and ``batch``: None on a generation boundary, else ``steps_per_generation``
    slices of ``rows`` rows, each a mapping of :data:`GENERATION_BATCH` keys holding
    :data:`GENERATION_REQUIRED` and ``required`` (what this run's loss reads), each key a
    tensor of its kind, token ids below ``vocab``, one prompt and one completion length
    throughout. Anything else is an InputError naming the field."""
    fields(state, ("global_step", "step", "batch"), what="the generation state (it holds global_step, step and batch)",
           field="step")
    for key in ("global_step", "step"):
        if not isinstance(state[key], int) or isinstance(state[key], bool):
            raise InputError(f"expected an integer, got {_shown(state[key])}", field=key)
    if state["global_step"] != global_step:
        raise InputError(f"is {state['global_step']}, but the checkpoint is of step {global_step}",
                         field="global_step")
    step = state["step"]
    if not global_step <= step <= global_step * accumulation:
        took = f"{global_step}" if accumulation == 1 else f"{global_step} to {global_step * accumulation}"
        raise InputError(f"is {step}, but the checkpoint's {global_step} optimiser step(s) of at most {accumulation} "
                         f"micro-step(s) each took {took} micro-steps", field="step")
    batch = state["batch"]
    if step % generate_every == 0:
        if batch is not None:
            raise InputError(f"expected null: step {step} begins a generation batch (one every {generate_every} "
                             "micro-steps), so none is kept", field="batch")
        return step, None
    if not isinstance(batch, list):
        what = "missing" if batch is None else f"expected a list of {steps_per_generation} slices, got " \
                                              f"{type(batch).__name__}"
        raise InputError(f"{what} (step {step} falls inside a generation batch)", field="batch")
    if len(batch) != steps_per_generation:
        raise InputError(f"holds {len(batch)} slices, but a generation batch of this run has "
                         f"{steps_per_generation} (steps_per_generation)", field="batch")
    lengths: dict[str, int] = {}
    for i, part in enumerate(batch):
        _check_slice(part, f"batch[{i}]", rows, vocab, (*GENERATION_REQUIRED, *required), lengths)
    return step, batch


def _check_slice(part: Any, field: str, rows: int, vocab: int, required: tuple[str, ...],
                 lengths: dict[str, int]) -> None:
    """One slice of a buffered generation batch (:func:`check_generation`); ``lengths`` holds
    the prompt and completion lengths met so far."""
    fields(part, tuple(GENERATION_BATCH), what="the generation batch of a text-only run", field=field, prefix=field,
           required=required)
    for key in (key for key in GENERATION_BATCH if key in part):  # ids first: they fix the lengths
        value, (kind, columns) = part[key], GENERATION_BATCH[key]
        where = f"{field}.{key}"
        if not isinstance(value, torch.Tensor) or value.layout != torch.strided:
            got = (f"a {str(value.layout).replace('torch.', '')} tensor" if isinstance(value, torch.Tensor)
                   else type(value).__name__)
            raise InputError(f"expected a strided tensor, got {got}", field=where)
        integer = not value.dtype.is_floating_point and not value.dtype.is_complex and value.dtype != torch.bool
        if kind in ("ids", "mask") and not integer:
            raise InputError(f"expected an integer tensor, got {value.dtype}", field=where)
        if kind in ("finite", "values") and not value.dtype.is_floating_point:
            raise InputError(f"expected a floating-point tensor, got {value.dtype}", field=where)
        if kind == "count":
            if value.dim() != 0 or not (integer or value.dtype.is_floating_point):
                raise InputError(f"expected a number (a tensor of no dimension), got a {value.dtype} tensor of shape "
                                 f"{list(value.shape)}", field=where)
            if not bool(torch.isfinite(value.double())) or float(value) < 0:
                raise InputError(f"expected a finite number >= 0, got {float(value)}", field=where)
            continue
        name = columns.split("|")[0]
        width = lengths.setdefault(name, value.shape[1] if value.dim() == 2 else -1)
        widths = [width, 1] if columns.endswith("|1") else [width]
        if value.dim() != 2 or value.shape[0] != rows or value.shape[1] not in widths or width < 0:
            expected = f"[{rows}, {width if width >= 0 else name + ' length'}]"
            raise InputError(f"expected a tensor of shape {expected} ({rows} rows a micro-step, one {name} length "
                             f"in the batch), got shape {list(value.shape)}", field=where)
        if kind == "ids" and value.numel() and (int(value.min()) < 0 or int(value.max()) >= vocab):
            raise InputError(f"holds token ids outside the vocabulary [0, {vocab})", field=where)
        if kind == "mask" and value.numel() and not bool(((value == 0) | (value == 1)).all()):
            raise InputError("expected 0 or 1 in every position", field=where)
        if kind == "finite" and not bool(torch.isfinite(value).all()):
            raise InputError("holds NaN or infinite values", field=where)


def _shown(value: Any) -> str:
    return repr(value)[:60] if isinstance(value, (int, float, str, bool)) or value is None else type(value).__name__


# --- the critic trained with the policy: its folder in a checkpoint ----------------------------

#: the critic's folder in a checkpoint: a critic folder (:mod:`hista.critic.model`)
#: with the optimiser, shuffling and update counter in ``optimizer.pt``
CRITIC = "critic"
#: the fields of a param group of the critic's AdamW that its step reads: each must be saved
#: (others that torch's AdamW knows may be left out, torch then sets its default)
_ADAMW_REQUIRED = ("params", "lr", "betas", "eps", "weight_decay")
#: the state AdamW keeps per parameter (the critic's has no amsgrad)
_ADAMW_STATE = ("step", "exp_avg", "exp_avg_sq")
#: how to get past a critic state that cannot be trusted (the end of the messages about its files)
_CRITIC_FIX = "resume from another checkpoint (or start the run again)"


def check_critic(folder: Path, critic: Any) -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor],
                                                   dict]:
    """The critic's state that the checkpoint's ``critic/`` folder ``folder`` holds, checked
    strictly against ``critic``, this run's :class:`hista.critic.online.OnlineCritic` (SPEC §9,
    §11), for :meth:`~hista.critic.online.OnlineCritic.restore`: (the backbone's tensors by
    name, those of the frozen layers of a partly trained critic left out; the head's ``weight``
    and ``bias``; what ``optimizer.pt`` holds). Checked, in this order:

    - ``critic.json`` and the headers of the weight files (:func:`hista.critic.model.check_folder`),
      the record's sizes this run's critic's (``hidden_size``, ``num_layers``, ``layers_trained``:
      ``advantage_estimator.critic_layers``) and, for a critic whose frozen layers are not saved,
      the ``backbone`` it copied them from;
    - ``optimizer.pt``, read with :func:`read_state` (``weights_only``): exactly ``optimizer``,
      ``shuffle`` and ``updates``; the optimiser of one param group over this critic's trained
      parameters, whose hyperparameters are this run's (``lr`` is ``critic_lr``), and per
      parameter exactly AdamW's ``step`` (a whole number >= 1), ``exp_avg`` and ``exp_avg_sq``
      (>= 0) of the parameter's dtype and shape, finite; ``shuffle`` a CPU generator's state;
      ``updates`` 0 when nothing was stepped, else 1 to the steps taken;
    - the weights (``value_head.safetensors`` and ``trained_layers.safetensors`` or
      ``backbone/*.safetensors``): exactly the tensors of this critic that the folder holds,
      each of its dtype and shape and finite.

    Anything else is an InputError naming the file and field. Reads only: every tensor is read
    on the CPU (the optimiser's file whole in memory)."""
    from ..critic.model import check_folder

    folder = Path(folder)
    _check_critic_files(folder)
    info = check_folder(folder, fix=_CRITIC_FIX)
    full = _check_critic_record(folder, info, critic.model)
    state = _read_critic_optimizer(folder, critic)
    backbone, head = _read_critic_weights(folder, critic.model, full)
    return backbone, head, state


def _check_critic_files(folder: Path) -> None:
    """That the critic's folder, its record and its backbone's weight files are there as regular
    files, before :func:`hista.critic.model.check_folder` opens them (a FIFO would block)."""
    from ..critic.model import BACKBONE, CONFIG

    if not folder.is_dir():
        what = "is not a folder" if folder.exists() or folder.is_symlink() else "does not exist"
        raise InputError(f"the critic's state of the checkpoint {what} (a run with the critic estimator writes it "
                         f"into every checkpoint); {_CRITIC_FIX}", path=str(folder))
    read_input(folder / CONFIG, "the critic's record of the checkpoint")  # missing or not a regular file
    for file in sorted((folder / BACKBONE).glob("*.safetensors")):  # check_folder opens them (a FIFO would block)
        if not file.is_file():
            raise InputError(f"is not a regular file; {_CRITIC_FIX}", path=str(file))


def _check_critic_record(folder: Path, info: dict, model: Any) -> bool:
    """That the critic's record (``info``) has this run's critic's sizes and, for frozen layers
    not saved, its backbone; returns whether the whole backbone is saved."""
    from ..critic.model import BACKBONE, CONFIG

    record = str(folder / CONFIG)
    for key, value, what in (("hidden_size", model.head.in_features, "the policy's hidden size"),
                             ("num_layers", model.num_layers, "the policy's decoder layers"),
                             ("layers_trained", model.layers_trained,
                              "the layers this run's critic trains (advantage_estimator.critic_layers)")):
        if info[key] != value:
            raise InputError(f"is {info[key]}, but {what}: {value}", path=record, field=key)
    full = info["weights"] == BACKBONE
    if not full and info["backbone"] != model.info.get("backbone"):
        raise InputError(f"the critic's frozen layers (not saved) come from {info['backbone']}, but this run's "
                         f"critic copies them from {model.info.get('backbone')}", path=record, field="backbone")
    return full


def _read_critic_optimizer(folder: Path, critic: Any) -> dict:
    """``optimizer.pt`` of the critic's folder, read and checked (:func:`_check_critic_optimizer`),
    its errors located in that file."""
    from ..critic.online import OPTIMIZER

    optimizer = folder / OPTIMIZER
    try:
        return _check_critic_optimizer(read_state(optimizer, "critic's optimiser"), critic)
    except InputError as exc:
        if exc.path is not None:
            raise
        raise InputError(exc.message, path=str(optimizer), field=exc.field) from None


def _read_critic_weights(folder: Path, model: Any, full: bool) -> tuple[dict[str, torch.Tensor],
                                                                        dict[str, torch.Tensor]]:
    """The backbone's and the head's tensors of the critic's weight files, each one of this
    run's critic (``model``) of its dtype and shape and finite, none missing."""
    from ..critic.model import BACKBONE, HEAD, TRAINED

    backbone = model.backbone.state_dict()
    if not full:  # the frozen layers are the policy's copy, as when the critic was saved
        backbone = {name: backbone[name] for name, param in model.backbone.named_parameters() if param.requires_grad}
    expected = {"head": model.head.state_dict(), "backbone": backbone}
    found: dict[str, dict[str, torch.Tensor]] = {"head": {}, "backbone": {}}
    weight_files = sorted((folder / BACKBONE).glob("*.safetensors")) if full else [folder / TRAINED]
    files = [(folder / HEAD, "head")] + [(file, "backbone") for file in weight_files]
    for file, part in files:
        shown = part if full or part == "head" else "trained layers"
        for name, tensor in _read_safetensors(file).items():
            _check_critic_tensor(file, name, tensor, expected[part].get(name), found[part], shown)
            found[part][name] = tensor
    missing = sorted(set(backbone) - set(found["backbone"]))
    if missing:
        raise InputError(f"missing from the critic's weights ({len(missing)} tensor(s) of this run's critic)",
                         path=str(folder / (BACKBONE if full else TRAINED)), field=missing[0])
    return found["backbone"], found["head"]


def _check_critic_tensor(file: Path, name: str, tensor: torch.Tensor, want: Optional[torch.Tensor],
                         found: dict[str, torch.Tensor], shown: str) -> None:
    """That the tensor ``name`` of the critic's weight file ``file`` is one of this run's critic
    (``want``; ``shown``: which part, for the message), met once, of its dtype and shape, finite."""
    if want is None:
        raise InputError(f"is not a tensor of this run's critic (its {shown})", path=str(file), field=name)
    if name in found:
        raise InputError("is in another of the critic's weight files too", path=str(file), field=name)
    if tensor.dtype != want.dtype or tuple(tensor.shape) != tuple(want.shape):
        raise InputError(f"expected a {want.dtype} tensor of shape {list(want.shape)}, got a {tensor.dtype} "
                         f"tensor of shape {list(tensor.shape)}", path=str(file), field=name)
    if want.dtype.is_floating_point and not bool(torch.isfinite(tensor).all()):
        raise InputError("holds NaN or infinite values", path=str(file), field=name)


def _read_safetensors(file: Path) -> dict[str, torch.Tensor]:
    """The tensors of a safetensors file whose header :func:`hista.critic.model.check_folder`
    found sound, on the CPU; an InputError naming it when they cannot be read."""
    from safetensors.torch import load_file

    try:
        return load_file(str(file), device="cpu")
    except Exception as exc:  # noqa: BLE001 - SafetensorError and the like: a damaged file
        raise InputError(f"cannot be read ({type(exc).__name__}: {str(exc)[:100]}); {_CRITIC_FIX}",
                         path=str(file)) from None


def _check_critic_optimizer(state: Any, critic: Any) -> dict:
    """What ``optimizer.pt`` of the critic's folder holds, checked against ``critic``'s AdamW
    (:func:`check_critic`); an InputError naming the field otherwise."""
    fields(state, ("optimizer", "shuffle", "updates"), field="optimizer",
           what="the critic's optimiser state (it holds optimizer, shuffle and updates)")
    saved = state["optimizer"]
    if not isinstance(saved, dict) or set(saved) != {"state", "param_groups"}:
        got = sorted(map(str, saved)) if isinstance(saved, dict) else type(saved).__name__
        raise InputError(f"expected an optimiser's state_dict (state, param_groups), got {got}", field="optimizer")
    _check_param_groups(saved["param_groups"], critic)
    steps = _check_adamw_state(saved["state"], critic.params)
    _check_shuffle(state["shuffle"], critic.shuffle.get_state())
    _check_updates(state["updates"], steps)
    return state


def _check_param_groups(groups: Any, critic: Any) -> None:
    """That the saved param groups are one, of AdamW's fields, over this critic's trained tensors
    with this run's hyperparameters: what a resume continues with."""
    fresh = critic.optimizer.state_dict()["param_groups"][0]
    params = critic.params
    if not isinstance(groups, list) or len(groups) != 1 or not isinstance(groups[0], dict):
        got = f"{len(groups)} entries" if isinstance(groups, list) and len(groups) != 1 else _shown(
            groups[0] if isinstance(groups, list) else groups)
        raise InputError(f"expected a list of one param group (a mapping), got {got}", field="optimizer.param_groups")
    group = groups[0]
    for key in sorted(map(str, group)):
        if key not in fresh:
            raise InputError("not a field of AdamW's param group", field=f"optimizer.param_groups[0].{key}")
    for key in _ADAMW_REQUIRED:
        if key not in group:
            raise InputError("missing", field=f"optimizer.param_groups[0].{key}")
    for key, value in group.items():
        if key == "params":
            if not _same(value, list(range(len(params)))):
                raise InputError(f"expected the indices 0 to {len(params) - 1} of the critic's {len(params)} trained "
                                 f"tensors, got {_listed(value)}", field="optimizer.param_groups[0].params")
        elif not _same(value, fresh[key]):
            raise InputError(f"expected {fresh[key]!r} (this run's critic optimiser), got {_listed(value)}",
                             field=f"optimizer.param_groups[0].{key}")


def _check_adamw_state(per_param: Any, params: list) -> list[int]:
    """That the saved per-parameter state is AdamW's for the critic's trained tensors; returns
    the steps each records, for the update counter's check."""
    if not isinstance(per_param, dict):
        raise InputError(f"expected a mapping of parameter index to state, got {type(per_param).__name__}",
                         field="optimizer.state")
    steps = []
    for index in sorted(per_param, key=str):
        where = f"optimizer.state[{index!r}]"
        if not isinstance(index, int) or isinstance(index, bool) or not 0 <= index < len(params):
            raise InputError(f"not a parameter of the critic (0 to {len(params) - 1})", field=where)
        entry, param = per_param[index], params[index]
        if not isinstance(entry, dict) or set(entry) != set(_ADAMW_STATE):
            got = sorted(map(str, entry)) if isinstance(entry, dict) else type(entry).__name__
            raise InputError(f"expected AdamW's state {', '.join(_ADAMW_STATE)}, got {got}", field=where)
        steps.append(_adamw_step(entry["step"], where))
        for key in ("exp_avg", "exp_avg_sq"):
            _check_moment(entry[key], key, param, index, where)
    return steps


def _adamw_step(step: Any, where: str) -> int:
    """AdamW's step count of one parameter: a floating-point tensor of no dimension holding a
    whole number >= 1."""
    if not (isinstance(step, torch.Tensor) and step.dim() == 0 and step.dtype.is_floating_point):
        raise InputError(f"expected a floating-point tensor of no dimension, got {_tensor_shown(step)}",
                         field=f"{where}.step")
    count = float(step)
    if not (math.isfinite(count) and count >= 1 and count == int(count)):
        raise InputError(f"expected a whole number >= 1 (the steps taken), got {count}", field=f"{where}.step")
    return int(count)


def _check_moment(value: Any, key: str, param: torch.Tensor, index: int, where: str) -> None:
    """One of AdamW's moments (``exp_avg``, ``exp_avg_sq``) of the critic's trained tensor
    ``index``: of the parameter's dtype and shape, finite, and a mean of squares not negative."""
    if not (isinstance(value, torch.Tensor) and value.layout == torch.strided and value.dtype == param.dtype
            and tuple(value.shape) == tuple(param.shape)):
        raise InputError(f"expected a {param.dtype} tensor of shape {list(param.shape)} (the critic's trained "
                         f"tensor {index}), got {_tensor_shown(value)}", field=f"{where}.{key}")
    if not bool(torch.isfinite(value).all()):
        raise InputError("holds NaN or infinite values", field=f"{where}.{key}")
    if key == "exp_avg_sq" and bool((value < 0).any()):
        raise InputError("holds negative values (a mean of squares)", field=f"{where}.{key}")


def _check_shuffle(shuffle: Any, reference: torch.Tensor) -> None:
    """That the saved shuffling state is a CPU generator's state like ``reference``."""
    if not (isinstance(shuffle, torch.Tensor) and shuffle.layout == torch.strided and shuffle.dtype == reference.dtype
            and tuple(shuffle.shape) == tuple(reference.shape)):
        raise InputError(f"expected a CPU generator's state (a {reference.dtype} tensor of shape "
                         f"{list(reference.shape)}), got {_tensor_shown(shuffle)}", field="shuffle")


def _check_updates(updates: Any, steps: list[int]) -> None:
    """That the update counter is 0 when nothing was stepped, else 1 to the steps taken."""
    if not isinstance(updates, int) or isinstance(updates, bool) or updates < 0:
        raise InputError(f"expected an integer >= 0, got {_shown(updates)}", field="updates")
    if updates == 0 and steps:
        raise InputError(f"is 0 (no update yet), but the optimiser state records {max(steps)} step(s) of the critic",
                         field="updates")
    if updates > max(steps, default=0):
        raise InputError(f"is {updates}, more than the {max(steps, default=0)} step(s) of the critic the optimiser "
                         "state records (each update takes at least one)", field="updates")


def _tensor_shown(value: Any) -> str:
    if isinstance(value, torch.Tensor):
        return f"a {value.dtype} tensor of shape {list(value.shape)}"
    return _shown(value)


def _same(value: Any, want: Any) -> bool:
    """Whether ``value`` is ``want``: plain values (numbers, strings, None) and lists or tuples
    of them, of the same types throughout (a tensor is never the same as a number)."""
    if type(value) is not type(want):
        return False
    if isinstance(want, (list, tuple)):
        return len(value) == len(want) and all(_same(a, b) for a, b in zip(value, want))
    return value == want


def _listed(value: Any) -> str:
    """``value`` for a message: plain values and short lists or tuples of them as Python writes
    them, else their type."""
    if isinstance(value, (list, tuple)) and len(value) <= 8 and all(
            isinstance(v, (int, float, str, bool)) or v is None for v in value):
        return repr(value)[:60]
    return _tensor_shown(value)
