"""What hista's verl modules share (docs/verl.md): the environment variables that carry the
parameters verl's strict config cannot hold, hista's estimators behind verl's names and the one
object each name keeps across steps (the probe's history). The bottom of
:mod:`hista.integrations`: it imports neither verl nor the other verl modules, which import it.
"""

from __future__ import annotations

import os
from typing import Any

import torch

from .. import estimators, yamlio
from ..errors import InputError

#: the classes of the registered estimators a hista trainer inside verl feeds (rewards, the mask
#: and the group index always, and either the responses or the states captured on the actor), by
#: verl name (``hista_NAME``), read from their declarations (:func:`hista.estimators.refusal`);
#: no estimator is built
_CLASSES = {f"hista_{name}": cls for name in estimators.names()
            if estimators.refusal("verl", cls := estimators.estimator_class(name)) is None}
#: verl estimator names -> hista estimators
ESTIMATORS = {verl_name: cls.name for verl_name, cls in _CLASSES.items()}
#: verl estimator names that need the responses' token ids, text and offsets.
TEXT_ESTIMATORS = tuple(v for v, cls in _CLASSES.items() if cls.needs_text)
#: verl estimator names that read hidden states captured on the actor (:mod:`verl_hidden`).
HIDDEN_ESTIMATORS = tuple(v for v, cls in _CLASSES.items() if cls.needs_hidden)
#: The environment variables that carry parameters verl's config cannot hold.
LOSS_ENV, ESTIMATOR_ENV = "HISTA_LOSS", "HISTA_ESTIMATOR"
#: ``HISTA_ESTIMATOR`` keys that are not the estimator's own parameters.
RUN_KEYS = ("scale", "gae_lambda", "states_dtype")
#: dtypes the captured states may travel in (``HISTA_ESTIMATOR``'s ``states_dtype``; float32: exact)
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def nested_lengths(nested: Any) -> list[int]:
    """The row lengths of a nested (jagged) tensor, as verl's batches carry token ids."""
    return [int(n) for n in nested.offsets().diff().tolist()]


def settings(variable: str) -> dict:
    """The YAML mapping in environment variable ``variable`` (empty when unset), or an
    InputError naming the variable."""
    raw = os.environ.get(variable, "").strip()
    if not raw:
        return {}
    value = yamlio.load(raw, field=variable, what="the setting")
    if not isinstance(value, dict):
        raise InputError(f"must be a YAML mapping such as '{{lam: 0.95}}', got {raw!r}", field=variable)
    return value


def estimator_params() -> dict:
    """The estimator's own parameters in ``HISTA_ESTIMATOR`` (its other keys, :data:`RUN_KEYS`,
    left out)."""
    return {k: v for k, v in settings(ESTIMATOR_ENV).items() if k not in RUN_KEYS}


#: The estimator of each verl name, kept across steps for one that learns across groups (the
#: probe's history), with the parameters it was made with.
_KEPT: dict[str, tuple[dict, Any]] = {}


def estimator_for(verl_name: str) -> tuple[Any, str]:
    """The hista estimator behind ``verl_name`` with ``HISTA_ESTIMATOR``'s parameters, and the
    dtype the captured states travel in (``states_dtype``, default float32: exact). The same
    object across calls while the parameters stay (the probe keeps its history in it)."""
    params = estimator_params()
    dtype = str(settings(ESTIMATOR_ENV).get("states_dtype", "float32"))
    if dtype not in DTYPES:
        raise InputError(f"unknown states_dtype {dtype!r}; valid: {', '.join(DTYPES)}",
                         field=f"{ESTIMATOR_ENV}.states_dtype")
    kept = _KEPT.get(verl_name)
    if kept is None or kept[0] != params:
        kept = _KEPT[verl_name] = (params, estimators.get(ESTIMATORS[verl_name], **params))
    return kept[1], dtype


def reset_estimators() -> None:
    """Forget every kept estimator (as a new process starts: the probe's history empty until a
    checkpoint restores it)."""
    _KEPT.clear()
