"""Bad inputs of issue 41, item 5, that a resumed training run reads (SPEC §9, §11): a probe's
state in ``checkpoint-N/estimator-0.pt`` tampered with, deleted or replaced by a folder, NaN in
its history, and ``trainer_state.json`` fields a resume would trust. Each resume exits 2 with a
message naming the file and field, prints no traceback, and changes no file, ``recipe.yaml``
of the run included (the refusal comes before the resume writes anything;
tests/test_bad_inputs.py)."""

from __future__ import annotations

import atexit
import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any, Callable

from bad_inputs import RECIPE, Case

#: a finished one-step run of the probe on the tiny model (batches of 4 rows: 1 prompt × 4)
PROBE_RECIPE = RECIPE.replace("bf16: false", "bf16: false\n  save_steps: 1") + "advantage_estimator:\n  name: probe\n"
#: resume it for one more step, so that the checkpoint's state is read
RESUME = ["train", "recipe.yaml", "resume=true", "trl.max_steps=2"]
STATE = "run/checkpoint-1/estimator-0.pt"
TRAINER_STATE = "run/checkpoint-1/trainer_state.json"
_TEMPLATE: dict[str, Path] = {}


def _probe_run(root: Path) -> None:
    """A finished one-step probe run in ``root/run`` from ``root/recipe.yaml``, copied from one
    trained once per process (its checkpoint-1 holds the probe's history of one batch)."""
    if "run" not in _TEMPLATE:
        from hista.cli import main

        template = Path(tempfile.mkdtemp(prefix="hista-probe-run-"))
        atexit.register(shutil.rmtree, template, True)
        (template / "recipe.yaml").write_text(PROBE_RECIPE)
        assert main(["train", str(template / "recipe.yaml"), f"output_dir={template / 'run'}"]) == 0
        text = (template / "run" / "recipe.yaml").read_text().replace(str(template / "run"), "run")
        (template / "run" / "recipe.yaml").write_text(text)  # as `output_dir: run` wrote it, relative to root
        _TEMPLATE["run"] = template
    shutil.copytree(_TEMPLATE["run"], root, dirs_exist_ok=True)


def _state(change: Callable[[dict], None]) -> Callable[[Path], None]:
    """A setup: the probe run, its ``estimator-0.pt`` changed in place by ``change``."""
    def setup(root: Path) -> None:
        import torch

        _probe_run(root)
        state = torch.load(root / STATE, weights_only=True)
        change(state)
        torch.save(state, root / STATE)
    return setup


def _saved(value: Callable[[dict], Any]) -> Callable[[Path], None]:
    """A setup: the probe run, its ``estimator-0.pt`` replaced by ``value(state)``."""
    def setup(root: Path) -> None:
        import torch

        _probe_run(root)
        torch.save(value(torch.load(root / STATE, weights_only=True)), root / STATE)
    return setup


def _raw_state(content: bytes) -> Callable[[Path], None]:
    def setup(root: Path) -> None:
        _probe_run(root)
        (root / STATE).write_bytes(content)
    return setup


def _pickle_payload(root: Path) -> None:
    """``estimator-0.pt`` as a pickle that would create a file when unpickled without
    weights_only."""
    import torch

    class Runs:
        def __reduce__(self):
            return (os.mkdir, ("unpickled",))

    _probe_run(root)
    torch.save({"history": [Runs()]}, root / STATE)


def _no_state(replace_by_folder: bool) -> Callable[[Path], None]:
    def setup(root: Path) -> None:
        _probe_run(root)
        (root / STATE).unlink()
        if replace_by_folder:
            (root / STATE).mkdir()
    return setup


def _trainer_state(change: Callable[[dict], None]) -> Callable[[Path], None]:
    def setup(root: Path) -> None:
        _probe_run(root)
        data = json.loads((root / TRAINER_STATE).read_text())
        change(data)
        (root / TRAINER_STATE).write_text(json.dumps(data, indent=2))
    return setup


def _no_trainer_state(root: Path) -> None:
    _probe_run(root)
    (root / TRAINER_STATE).unlink()


def _narrow(state: dict) -> None:
    """The first batch of the history with 32 features instead of the tiny model's 64."""
    entry = state["history"][0]
    entry.update(x=entry["x"][:32].clone(), xx=entry["xx"][:32, :32].clone(), xy=entry["xy"][:32].clone())


def _without_xy(state: dict) -> None:
    del state["history"][0]["xy"]


def _nan(state: dict) -> None:
    state["history"][0]["x"][3] = float("nan")


def cases() -> list[Case]:
    """Every bad input of a resume listed in issue 41, item 5 (tampered, missing and silently
    trusted state), plus a few of the same kind."""
    return [
        # tampered probe state (the 10 of the issue)
        Case("41.5 resume: estimator-0.pt of another feature size", RESUME,
             (STATE, "history[0].x", "64 features", "[32]"), setup=_state(_narrow)),
        Case("41.5 resume: estimator-0.pt with an extra key", RESUME, (STATE, "field 'extra'"),
             setup=_state(lambda s: s.update(extra=1))),
        Case("41.5 resume: estimator-0.pt with a missing key (history[0].xy)", RESUME,
             (STATE, "history[0].xy", "missing"), setup=_state(_without_xy)),
        Case("41.5 resume: estimator-0.pt whose history is a list of lists", RESUME, (STATE, "history[0]", "list"),
             setup=_saved(lambda s: {"history": [[1.0, 2.0]]})),
        Case("41.5 resume: estimator-0.pt holding {}", RESUME, (STATE, "field 'history'", "missing"),
             setup=_saved(lambda s: {})),
        Case("41.5 resume: estimator-0.pt whose history is a string", RESUME, (STATE, "field 'history'", "str"),
             setup=_saved(lambda s: {"history": "recent batches"})),
        Case("41.5 resume: estimator-0.pt with x a string", RESUME, (STATE, "history[0].x", "str"),
             setup=_state(lambda s: s["history"][0].update(x="features"))),
        Case("41.5 resume: estimator-0.pt of garbage bytes", RESUME, (STATE, "torch archive"),
             setup=_raw_state(bytes(range(256)) * 4)),
        Case("41.5 resume: estimator-0.pt a pickle payload", RESUME, (STATE, "torch archive"), setup=_pickle_payload),
        Case("41.5 resume: estimator-0.pt an empty file", RESUME, (STATE, "empty"), setup=_raw_state(b"")),
        # variants of the same
        Case("41.5 resume: estimator-0.pt holding a list", RESUME, (STATE, "field 'history'", "list"),
             setup=_saved(lambda s: s["history"])),
        Case("41.5 resume: estimator-0.pt holding a string", RESUME, (STATE, "field 'history'", "str"),
             setup=_saved(lambda s: "history")),
        Case("41.5 resume: estimator-0.pt with an extra key in a batch", RESUME, (STATE, "history[0].extra"),
             setup=_state(lambda s: s["history"][0].update(extra=1.0))),
        Case("41.5 resume: estimator-0.pt with weight a string", RESUME, (STATE, "history[0].weight", "number"),
             setup=_state(lambda s: s["history"][0].update(weight="1"))),
        Case("41.5 resume: estimator-0.pt with more batches than the buffer", RESUME, (STATE, "buffer of 4"),
             setup=_state(lambda s: s.update(history=s["history"] * 5))),
        # silent before
        Case("41.5 resume: estimator-0.pt deleted from a complete checkpoint", RESUME, (STATE, "does not exist"),
             setup=_no_state(False)),
        Case("41.5 resume: a folder in place of estimator-0.pt", RESUME, (STATE, "directory"), setup=_no_state(True)),
        Case("41.5 resume: NaN in the probe's history", RESUME, (STATE, "history[0].x", "NaN"), setup=_state(_nan)),
        Case("41.5 resume: NaN weight in the probe's history", RESUME, (STATE, "history[0].weight", "nan"),
             setup=_state(lambda s: s["history"][0].update(weight=float("nan")))),
        Case("41.5 resume: global_step -1 in trainer_state.json", RESUME, (TRAINER_STATE, "global_step", "-1"),
             setup=_trainer_state(lambda d: d.update(global_step=-1))),
        Case("41.5 resume: global_step 5 in checkpoint-1's trainer_state.json", RESUME,
             (TRAINER_STATE, "global_step", "checkpoint-1"), setup=_trainer_state(lambda d: d.update(global_step=5))),
        Case("41.5 resume: an unknown field in trainer_state.json", RESUME, (TRAINER_STATE, "field 'evil'"),
             setup=_trainer_state(lambda d: d.update(evil=1))),
        Case("41.5 resume: log_history a string in trainer_state.json", RESUME, (TRAINER_STATE, "log_history"),
             setup=_trainer_state(lambda d: d.update(log_history="x"))),
        Case("41.5 resume: trainer_state.json deleted from a complete checkpoint", RESUME,
             (TRAINER_STATE, "does not exist"), setup=_no_trainer_state),
        Case("41.5 resume refused with another allowed change: recipe.yaml is not rewritten",
             [*RESUME, "trl.save_steps=2", "trl.logging_steps=2"], (STATE, "history[0].x", "NaN"),
             setup=_state(_nan)),
    ]
