"""``sveb eval``: estimator values at the stored states against the Monte-Carlo targets
(SPEC §8). Nothing is generated; hidden states are recomputed from the stored token ids with
the model that built the cases."""

from __future__ import annotations

from pathlib import Path
from typing import Optional, Sequence

from tqdm.auto import tqdm

from .. import __version__
from ..errors import InputError
from ..estimators import get
from ..models import LoadedModel, forward, load
from ..types import Rollout, RolloutGroup, State
from . import cases, metrics

DEFAULT_METHODS = ("grpo", "numca", "numca-reference", "hista", "hista-reference")
LABELS = {"grpo": "GRPO", "numca": "Numca", "numca-reference": "Numca-reference", "hista": "Hista",
          "hista-reference": "Hista-reference", "mc": "MC"}


def build_estimator(method: str):
    """``name`` or ``name-profile`` (e.g. ``hista-reference``) -> a fresh estimator."""
    name, _, profile = method.partition("-")
    try:
        return get(name, profile=profile) if profile else get(name)
    except ValueError as exc:
        raise InputError(str(exc), field="methods") from None


def evaluate(path: str | Path, methods: Sequence[str] = DEFAULT_METHODS, *, model: Optional[str] = None,
             lm: Optional[LoadedModel] = None, device: Optional[str] = None, layer: int = -1,
             progress: bool = True, n_boot: int = 2000) -> dict:
    """Evaluate ``methods`` on every case of the file ``path``; returns the results dict
    (settings, estimator configs, per-case values and the per-field summary). Raises an
    InputError, before any output is written, for a bad line or a model mismatch."""
    records = [r for r in cases.read(path) if r["kind"] == "case"]
    if not records:
        raise InputError("holds no cases", path=str(path))
    built = {(r["settings"]["model"], r["settings"]["revision"]) for r in records}
    if len(built) > 1:
        raise InputError(f"mixes cases of several models: {sorted(built)}", path=str(path))
    (recorded, revision), = built
    if model is not None and model != recorded:
        raise InputError(f"cases were built with model '{recorded}', not '{model}': hidden states "
                         "must come from the policy that sampled them", path=str(path))
    for m in methods:
        build_estimator(m)
    if any(m.startswith("hista") for m in methods):
        lm = lm or load(recorded, device=device)
        if lm.revision != revision:
            raise InputError(f"cases were built with {recorded} revision '{revision}', but the model "
                             f"loaded now is revision '{lm.revision}'", path=str(path))
    else:
        lm = None
    rows = []
    for record in tqdm(records, desc="sveb eval", unit="case", disable=not progress):
        group = _group(record, lm, layer)
        state = State(rollout=record["state"]["rollout"], t=record["state"]["t"])
        values = {m: float(build_estimator(m).state_values(group, [state])[0]) for m in methods}
        rows.append({"case_id": record["key"], "field": record["field"], "target": record["target"],
                     "group_mean": float(group.rewards.mean()), "continuations": record["continuations"],
                     "state": record["state"], "values": values})
    return {
        "hista_version": __version__,
        "cases_file": str(path),
        "settings": records[0]["settings"],
        "methods": {m: build_estimator(m).to_dict() for m in methods},
        "labels": {m: LABELS.get(m, m) for m in methods},
        "cases": rows,
        "summary": metrics.summarise(rows, list(methods), n_boot=n_boot),
    }


def _group(record: dict, lm: Optional[LoadedModel], layer: int) -> RolloutGroup:
    prompt = record["prompt_ids"]
    stored = record["rollouts"]
    hidden = [None] * len(stored)
    if lm is not None:
        hidden = forward(lm, [prompt] * len(stored), [r["completion_ids"] for r in stored], layer=layer).hidden
    rollouts = [Rollout(prompt, r["completion_ids"], r["reward"], completion_text=r["completion_text"],
                        offsets=[tuple(o) for o in r["offsets"]], hidden=h) for r, h in zip(stored, hidden)]
    return RolloutGroup(rollouts, prompt_id=record["key"], problem=record["problem"])
