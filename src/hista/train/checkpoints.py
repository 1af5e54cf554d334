"""A run folder's checkpoints and logs as resume reads them (SPEC §9: long jobs resume, a kill at
any moment loses no more than the steps since the last checkpoint).

- A checkpoint is complete when hista's marker ``hista-checkpoint.json`` is in it (the trainer
  writes it last, after TRL's files, the critic and the estimator state), or, for one written
  without the marker, when its ``trainer_state.json`` names its step and every weight and state
  file it holds is whole. A folder cut short by a kill is skipped and named.
- ``final/`` is written beside itself and renamed into place, so it is whole or absent.
- On resume, ``metrics.jsonl`` keeps the rows of the steps the checkpoint holds: the steps
  trained after it and lost are logged again, once.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import zipfile
from pathlib import Path
from typing import Callable, Optional

from ..jsonio import write_atomic, write_json_atomic
from ..models.loading import safetensors_problem

#: TRL's checkpoint folders, as transformers' ``get_last_checkpoint`` recognises them.
CHECKPOINT = re.compile(r"^checkpoint-(\d+)$")
#: what the trainer writes last into a checkpoint it has finished
MARKER = "hista-checkpoint.json"
#: files of a checkpoint that torch writes as zip archives (a cut one has no central directory)
_ZIPPED = re.compile(r"^(optimizer\.pt|scheduler\.pt|rng_state(_\d+)?\.pth|estimator-\d+\.pt|training_args\.bin)$")


def mark_complete(folder: Path, step: int) -> None:
    """Write the marker that makes ``folder`` a complete checkpoint of ``step`` (SPEC §9),
    atomically; called once everything else of the checkpoint is on disk."""
    write_json_atomic(folder / MARKER, {"step": int(step)})


def problem(folder: Path) -> Optional[str]:
    """Why the checkpoint ``folder`` cannot be resumed from (SPEC §9), or None when it can:
    with the marker, a step that matches the folder's name; without it, a ``trainer_state.json``
    that names its step, and every safetensors file and torch archive in it whole."""
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
    for file in sorted(folder.iterdir()):
        if file.suffix == ".safetensors" and (why := safetensors_problem(file)) is not None:
            return f"{file.name} {why}"
        if _ZIPPED.match(file.name) and not zipfile.is_zipfile(file):
            return f"{file.name} is cut short (not a whole archive)"
    return None


def scan(out: Path) -> tuple[list[tuple[int, Path]], list[tuple[Path, str]]]:
    """The checkpoints of the run folder ``out`` (SPEC §9): the complete ones as (step, folder)
    in step order, and the incomplete ones as (folder, why)."""
    complete, incomplete = [], []
    if not out.is_dir():
        return complete, incomplete
    folders = [p for p in out.iterdir() if CHECKPOINT.match(p.name) and p.is_dir() and not p.is_symlink()]
    for folder in sorted(folders, key=lambda p: int(CHECKPOINT.match(p.name).group(1))):
        why = problem(folder)
        if why is None:
            complete.append((int(CHECKPOINT.match(folder.name).group(1)), folder))
        else:
            incomplete.append((folder, why))
    return complete, incomplete


def final_is_whole(final: Path) -> bool:
    """Whether ``final/`` holds a whole model (SPEC §9): a ``config.json`` and whole safetensors
    weights (it is renamed into place whole, see :func:`save_final`; this guards older runs)."""
    weights = sorted(final.glob("*.safetensors")) if final.is_dir() else []
    return (final / "config.json").is_file() and bool(weights) and all(safetensors_problem(w) is None
                                                                        for w in weights)


def save_final(final: Path, save: Callable[[str], None], *, main_process: bool = True,
               barrier: Callable[[], None] = lambda: None) -> None:
    """Write the final model with ``save(folder)`` into a folder beside ``final`` and rename it
    into place (SPEC §9), so that ``final/`` is never half written; an earlier ``final/`` is
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
    """``final/`` from a complete checkpoint's model and tokenizer files (SPEC §9: a run killed
    after its last checkpoint but before its final model was whole)."""
    def save(folder: str) -> None:
        os.makedirs(folder)
        for file in checkpoint.iterdir():
            if file.is_file() and not _ZIPPED.match(file.name) and file.name not in (MARKER, "trainer_state.json"):
                shutil.copy2(file, Path(folder) / file.name)

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
