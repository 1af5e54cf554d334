"""What ``--model`` names: an alias, a Hugging Face id or folder, or a ``hista
train`` run, whose checkpoints are evaluated with the system prompt the run trained with.

A ``hista train`` output folder holds ``recipe.yaml`` (the recipe as it ran), ``checkpoint-N/``
folders and ``final/``, each a ``save_pretrained`` model with its tokenizer (and so its chat
template). ``--model runs/x/final`` or ``runs/x/checkpoint-50`` evaluates that checkpoint;
``--model runs/x`` evaluates ``final/``, or the last checkpoint when the run has no final
model yet.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import re
from pathlib import Path
from typing import Optional

from .. import yamlio
from ..errors import InputError
from ..jsonio import read_input
from ..rollout.config import SYSTEM_PROMPT

#: The checkpoint folders of a run, as TRL names them.
CHECKPOINT = re.compile(r"^checkpoint-(\d+)$")
RECIPE = "recipe.yaml"


@dataclasses.dataclass(frozen=True)
class ModelSource:
    """What to load (:func:`hista.models.load`'s argument), the system prompt to pose problems
    with, and, for a ``hista train`` checkpoint, where it came from (``run``)."""

    load_as: str
    system_prompt: str = SYSTEM_PROMPT
    run: Optional[dict] = None


def _recipe(path: Path) -> dict:
    """The recipe a run wrote (``recipe.yaml``), as a mapping; an InputError naming the file
    when it cannot be read."""
    raw = read_input(path, "run's recipe")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InputError(f"the run's recipe is not UTF-8 ({exc.reason})", path=str(path)) from None
    data = yamlio.load(text, path=str(path), what="the run's recipe")
    if not isinstance(data, dict):
        raise InputError("the run's recipe is not a mapping", path=str(path))
    prompt = data.get("system_prompt", SYSTEM_PROMPT)
    if not isinstance(prompt, str):
        raise InputError(f"expected a string, got {type(prompt).__name__}", path=str(path), field="system_prompt")
    return data


def _step(folder: Path) -> Optional[int]:
    """The optimiser step a checkpoint was saved at (its name, else its trainer_state.json)."""
    match = CHECKPOINT.match(folder.name)
    if match:
        return int(match.group(1))
    try:
        return int(json.loads((folder / "trainer_state.json").read_text())["global_step"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _last_model(run: Path) -> Path:
    """``final/`` of a run folder, else its last ``checkpoint-N/``."""
    if (run / "final" / "config.json").is_file():
        return run / "final"
    checkpoints = sorted((p for p in run.iterdir() if CHECKPOINT.match(p.name) and (p / "config.json").is_file()),
                         key=lambda p: int(CHECKPOINT.match(p.name).group(1)))
    if not checkpoints:
        raise InputError(f"a hista train run folder ({RECIPE}), but it holds no model yet: neither final/ nor a "
                         "checkpoint-N/ folder with config.json", path=str(run))
    return checkpoints[-1]


def resolve(model: str) -> ModelSource:
    """What ``model`` names (module docstring): an alias or hub id as it is; a
    model folder as it is; a ``hista train`` run folder, or its ``final/`` or ``checkpoint-N/``,
    as that checkpoint, posed with the ``system_prompt`` of the run's ``recipe.yaml`` and
    recorded with the run's folder, checkpoint, step, base model, estimator and loss."""
    if not isinstance(model, str) or not model.strip():
        raise InputError(f"must be a model alias, folder or Hugging Face id, got {model!r}", field="model")
    path = Path(model)
    if not path.is_dir():
        return ModelSource(model)
    if (path / RECIPE).is_file() and not (path / "config.json").is_file():
        run, folder = path, _last_model(path)
    elif (path.parent / RECIPE).is_file() and (path.name == "final" or CHECKPOINT.match(path.name)):
        run, folder = path.parent, path
    else:
        return ModelSource(model)
    recipe = _recipe(run / RECIPE)
    info = {"output_dir": str(run), "checkpoint": folder.name, "step": _step(folder),
            "base_model": recipe.get("model"), "tasks": recipe.get("tasks"),
            "advantage_estimator": (recipe.get("advantage_estimator") or {}).get("name")
            if isinstance(recipe.get("advantage_estimator"), dict) else None,
            "loss": (recipe.get("loss") or {}).get("name") if isinstance(recipe.get("loss"), dict) else None}
    return ModelSource(str(folder), recipe.get("system_prompt", SYSTEM_PROMPT), info)


def weights_stamp(load_as: str) -> Optional[str]:
    """For a model folder, a SHA-256 of the names, sizes and modification times of its weight
    and config files, so that a checkpoint written again at the same path is not
    taken for the one an earlier evaluation used; None for an alias or a hub id. Reads no
    weights, so it costs microseconds."""
    folder = Path(load_as)
    if not folder.is_dir():
        return None
    digest = hashlib.sha256()
    for file in sorted(folder.iterdir()):
        if file.suffix in (".safetensors", ".bin", ".pt") or file.name == "config.json":
            info = file.stat()
            digest.update(f"{file.name}:{info.st_size}:{info.st_mtime_ns}\n".encode())
    return digest.hexdigest()
