"""Bad inputs of issue 41, item 5, that a resumed training run reads (SPEC §9, §11): a probe's
state in ``checkpoint-N/estimator-0.pt`` tampered with, deleted or replaced by a folder, NaN in
its history, ``trainer_state.json`` fields a resume would trust, the generation state
``checkpoint-N/generation-0.pt`` (TRL's micro-step counter and, inside a generation batch, the
batch: issue 41, item 4), and the state of the critic trained with the policy
(``checkpoint-N/critic/``: its record, weights, optimiser, shuffling state and update counter)
tampered with or deleted. Each resume exits 2 with a message naming the file and field, prints
no traceback, and changes no file, ``recipe.yaml`` of the run included (the refusal comes
before the resume writes anything; tests/reliability/test_bad_inputs.py)."""

from __future__ import annotations

import atexit
import json
import math
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
GENERATION = "run/checkpoint-1/generation-0.pt"
#: the probe run with each generation batch trained twice: its checkpoint-1 falls inside the
#: batch drawn at step 0, and generation-0.pt holds that batch
REUSED_RECIPE = PROBE_RECIPE.replace("bf16: false", "bf16: false\n  num_iterations: 2")
#: Numca keeping its value tables per prompt across steps (checkpointed in estimator-0.pt)
NUMCA_RECIPE = PROBE_RECIPE.replace("name: probe", "name: numca\n  persist: true")
#: the PPO baseline: a critic trained with the policy, every layer (checkpoint-1/critic/backbone/)
CRITIC_RECIPE = PROBE_RECIPE.replace("name: probe", "name: critic")
#: the same with only the critic's last layer trained (checkpoint-1/critic/trained_layers.safetensors)
PARTIAL_CRITIC_RECIPE = CRITIC_RECIPE.replace("name: critic", "name: critic\n  critic_layers: 1")
CRITIC = "run/checkpoint-1/critic"
_TEMPLATE: dict[str, Path] = {}


def _probe_run(root: Path, recipe: str = PROBE_RECIPE) -> None:
    """A finished one-step probe run of ``recipe`` in ``root/run`` from ``root/recipe.yaml``,
    copied from one trained once per process (its checkpoint-1 holds the probe's history of one
    batch)."""
    if recipe not in _TEMPLATE:
        from hista.cli import main

        template = Path(tempfile.mkdtemp(prefix="hista-probe-run-"))
        atexit.register(shutil.rmtree, template, True)
        (template / "recipe.yaml").write_text(recipe)
        assert main(["train", str(template / "recipe.yaml"), f"output_dir={template / 'run'}"]) == 0
        text = (template / "run" / "recipe.yaml").read_text().replace(str(template / "run"), "run")
        (template / "run" / "recipe.yaml").write_text(text)  # as `output_dir: run` wrote it, relative to root
        _TEMPLATE[recipe] = template
    shutil.copytree(_TEMPLATE[recipe], root, dirs_exist_ok=True)


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


def _numca_state(change: Callable[[dict], Any]) -> Callable[[Path], None]:
    """A setup: the Numca run, its ``estimator-0.pt`` changed in place by ``change`` (or, when
    ``change`` is None, deleted)."""
    def setup(root: Path) -> None:
        import torch

        _probe_run(root, NUMCA_RECIPE)
        if change is None:
            (root / STATE).unlink()
            return
        state = torch.load(root / STATE, weights_only=True)
        change(state)
        torch.save(state, root / STATE)
    return setup


def _first_table(state: dict) -> dict:
    return next(iter(state["tables"].values()))


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


def _generation(change: Callable[[dict], None], recipe: str = REUSED_RECIPE) -> Callable[[Path], None]:
    """A setup: the run of ``recipe`` (by default inside a generation batch at checkpoint-1), its
    ``generation-0.pt`` changed in place by ``change``."""
    def setup(root: Path) -> None:
        import torch

        _probe_run(root, recipe)
        state = torch.load(root / GENERATION, weights_only=True)
        change(state)
        torch.save(state, root / GENERATION)
    return setup


def _generation_saved(value: Callable[[dict], Any]) -> Callable[[Path], None]:
    """A setup: the run inside a generation batch, its ``generation-0.pt`` replaced by
    ``value(state)``."""
    def setup(root: Path) -> None:
        import torch

        _probe_run(root, REUSED_RECIPE)
        torch.save(value(torch.load(root / GENERATION, weights_only=True)), root / GENERATION)
    return setup


def _raw_generation(content: bytes) -> Callable[[Path], None]:
    def setup(root: Path) -> None:
        _probe_run(root, REUSED_RECIPE)
        (root / GENERATION).write_bytes(content)
    return setup


def _no_generation(recipe: str) -> Callable[[Path], None]:
    def setup(root: Path) -> None:
        _probe_run(root, recipe)
        (root / GENERATION).unlink()
    return setup


def _slice(change: Callable[[dict], None]) -> Callable[[dict], None]:
    """``change`` applied to the first slice of the saved generation batch."""
    return lambda state: change(state["batch"][0])


def _token_beyond_vocabulary(part: dict) -> None:
    part["completion_ids"][0, 0] = 10 ** 6


def _nan_advantage(part: dict) -> None:
    part["advantages"][0, 0] = float("nan")


def _critic(change: Callable[[Path], None], recipe: str = CRITIC_RECIPE) -> Callable[[Path], None]:
    """A setup: the critic run of ``recipe``, its checkpoint's ``critic/`` folder changed by
    ``change(folder)``."""
    def setup(root: Path) -> None:
        _probe_run(root, recipe)
        change(root / CRITIC)
    return setup


def _optimizer_saved(value: Callable[[dict], Any]) -> Callable[[Path], None]:
    """A setup: the critic run, its ``critic/optimizer.pt`` replaced by ``value(state)``."""
    def change_file(folder: Path) -> None:
        import torch

        torch.save(value(torch.load(folder / "optimizer.pt", weights_only=True)), folder / "optimizer.pt")
    return _critic(change_file)


def _optimizer(change: Callable[[dict], Any]) -> Callable[[Path], None]:
    """A setup: the critic run, its ``critic/optimizer.pt`` changed in place by ``change``."""
    def changed(state: dict) -> dict:
        change(state)
        return state
    return _optimizer_saved(changed)


def _tensors(name: str, change: Callable[[dict], None], recipe: str = CRITIC_RECIPE) -> Callable[[Path], None]:
    """A setup: the critic run of ``recipe``, the tensors of its ``critic/<name>`` (a
    safetensors file) changed in place by ``change``."""
    def change_file(folder: Path) -> None:
        from safetensors.torch import load_file, save_file

        tensors = load_file(folder / name)
        change(tensors)
        save_file(tensors, folder / name)
    return _critic(change_file, recipe)


def _record(change: Callable[[dict], None], recipe: str = CRITIC_RECIPE) -> Callable[[Path], None]:
    """A setup: the critic run of ``recipe``, its ``critic/critic.json`` changed by ``change``."""
    def change_file(folder: Path) -> None:
        record = json.loads((folder / "critic.json").read_text())
        change(record)
        (folder / "critic.json").write_text(json.dumps(record, indent=1))
    return _critic(change_file, recipe)


def _replace(name: str, content: Any) -> Callable[[Path], None]:
    """``critic/<name>`` replaced by ``content``: bytes, None (deleted), ``<dir>`` (a folder) or
    ``<fifo>`` (a FIFO, which must not block the resume)."""
    def change(folder: Path) -> None:
        path = folder / name
        if path.is_dir():
            shutil.rmtree(path)
        else:
            path.unlink()
        if content == "<dir>":
            path.mkdir()
        elif content == "<fifo>":
            os.mkfifo(path)
        elif content is not None:
            path.write_bytes(content)
    return change


def _critic_pickle_payload(folder: Path) -> None:
    """``critic/optimizer.pt`` as a pickle that would create a folder when unpickled without
    weights_only."""
    import torch

    class Runs:
        def __reduce__(self):
            return (os.mkdir, ("unpickled",))

    state = torch.load(folder / "optimizer.pt", weights_only=True)
    state["shuffle"] = Runs()
    torch.save(state, folder / "optimizer.pt")


def _first_state(state: dict) -> dict:
    return state["optimizer"]["state"][0]


def _nan_tensor(name: str) -> Callable[[dict], None]:
    def change(tensors: dict) -> None:
        tensors[name] = tensors[name].clone()
        tensors[name].view(-1)[0] = float("nan")
    return change


def _copied(source: str, name: str) -> Callable[[dict], None]:
    """A copy of the tensor ``source`` added as ``name``."""
    return lambda tensors: tensors.update({name: tensors[source].clone()})


def critic_cases() -> list[Case]:
    """The critic's state in a checkpoint (``critic/``: record, weights, optimiser, shuffling
    state and update counter), tampered with, deleted or replaced by a folder."""
    opt, head, weights = f"{CRITIC}/optimizer.pt", f"{CRITIC}/value_head.safetensors", \
        f"{CRITIC}/backbone/model.safetensors"
    record, trained = f"{CRITIC}/critic.json", f"{CRITIC}/trained_layers.safetensors"
    return [
        Case("41.5 resume: critic/optimizer.pt of garbage bytes", RESUME, (opt, "torch archive"),
             setup=_critic(_replace("optimizer.pt", bytes(range(256)) * 4))),
        Case("41.5 resume: critic/optimizer.pt an empty file", RESUME, (opt, "empty"),
             setup=_critic(_replace("optimizer.pt", b""))),
        Case("41.5 resume: critic/optimizer.pt a pickle payload", RESUME,
             (opt, "torch archive", "nothing in it was run"),
             setup=_critic(_critic_pickle_payload)),
        Case("41.5 resume: critic/optimizer.pt deleted", RESUME, (opt, "does not exist"),
             setup=_critic(_replace("optimizer.pt", None))),
        Case("41.5 resume: a folder in place of critic/optimizer.pt", RESUME, (opt, "directory"),
             setup=_critic(_replace("optimizer.pt", "<dir>"))),
        Case("41.5 resume: critic/optimizer.pt holding a list", RESUME, (opt, "field 'optimizer'", "list"),
             setup=_optimizer_saved(lambda s: [s])),
        Case("41.5 resume: critic/optimizer.pt with an extra key", RESUME, (opt, "field 'extra'"),
             setup=_optimizer(lambda s: s.update(extra=1))),
        Case("41.5 resume: critic/optimizer.pt without its shuffling state", RESUME,
             (opt, "field 'shuffle'", "missing"),
             setup=_optimizer(lambda s: s.__delitem__("shuffle"))),
        Case("41.5 resume: critic/optimizer.pt with a moment of another shape", RESUME,
             (opt, "field 'optimizer.state[0].exp_avg'", "shape [49152, 64]"),
             setup=_optimizer(lambda s: _first_state(s).update(exp_avg=_first_state(s)["exp_avg"][:, :32].clone()))),
        Case("41.5 resume: critic/optimizer.pt with NaN in a moment", RESUME,
             (opt, "field 'optimizer.state[1].exp_avg_sq'", "NaN"),
             setup=_optimizer(lambda s: s["optimizer"]["state"][1]["exp_avg_sq"].view(-1).__setitem__(0, math.nan))),
        Case("41.5 resume: critic/optimizer.pt with a NaN step count", RESUME,
             (opt, "field 'optimizer.state[0].step'", "nan"),
             setup=_optimizer(lambda s: _first_state(s)["step"].fill_(float("nan")))),
        Case("41.5 resume: critic/optimizer.pt with another learning rate", RESUME,
             (opt, "field 'optimizer.param_groups[0].lr'", "1e-05"),
             setup=_optimizer(lambda s: s["optimizer"]["param_groups"][0].update(lr=1.0))),
        Case("41.5 resume: critic/optimizer.pt with a second param group", RESUME,
             (opt, "field 'optimizer.param_groups'", "2 entries"),
             setup=_optimizer(lambda s: s["optimizer"]["param_groups"].append(s["optimizer"]["param_groups"][0]))),
        Case("41.5 resume: critic/optimizer.pt with updates -1", RESUME, (opt, "field 'updates'", "-1"),
             setup=_optimizer(lambda s: s.update(updates=-1))),
        Case("41.5 resume: critic/optimizer.pt with updates 0 after a step", RESUME, (opt, "field 'updates'", "is 0"),
             setup=_optimizer(lambda s: s.update(updates=0))),
        Case("41.5 resume: critic/optimizer.pt with a shuffling state of another shape", RESUME,
             (opt, "field 'shuffle'", "[5056]"), setup=_optimizer(lambda s: s.update(shuffle=s["shuffle"][:100]))),
        Case("41.5 resume: critic/value_head.safetensors of garbage bytes", RESUME, (head, "truncated"),
             setup=_critic(_replace("value_head.safetensors", bytes(range(256)) * 4))),
        Case("41.5 resume: critic/value_head.safetensors deleted", RESUME, (head, "missing"),
             setup=_critic(_replace("value_head.safetensors", None))),
        Case("41.5 resume: NaN in the critic's value head", RESUME, (head, "field 'bias'", "NaN"),
             setup=_tensors("value_head.safetensors", _nan_tensor("bias"))),
        Case("41.5 resume: NaN in the critic's backbone", RESUME, (weights, "field 'norm.weight'", "NaN"),
             setup=_tensors("backbone/model.safetensors", _nan_tensor("norm.weight"))),
        Case("41.5 resume: a critic backbone tensor of another shape", RESUME,
             (weights, "field 'norm.weight'", "shape [64]", "[32]"),
             setup=_tensors("backbone/model.safetensors", lambda t: t.update({"norm.weight": t["norm.weight"][:32]}))),
        Case("41.5 resume: a critic backbone tensor missing", RESUME, (f"{CRITIC}/backbone", "field 'norm.weight'",
                                                                      "missing"),
             setup=_tensors("backbone/model.safetensors", lambda t: t.__delitem__("norm.weight"))),
        Case("41.5 resume: an extra tensor in the critic's backbone", RESUME, (weights, "field 'lm_head.weight'"),
             setup=_tensors("backbone/model.safetensors", _copied("norm.weight", "lm_head.weight"))),
        Case("41.5 resume: critic/backbone/model.safetensors an empty file", RESUME, (weights, "truncated"),
             setup=_critic(_replace("backbone/model.safetensors", b""))),
        Case("41.5 resume: a FIFO in place of critic/backbone/model.safetensors", RESUME, (weights, "regular file"),
             setup=_critic(_replace("backbone/model.safetensors", "<fifo>"))),
        Case("41.5 resume: critic/critic.json deleted", RESUME, (record, "does not exist"),
             setup=_critic(_replace("critic.json", None))),
        Case("41.5 resume: a folder in place of critic/critic.json", RESUME, (record, "directory"),
             setup=_critic(_replace("critic.json", "<dir>"))),
        Case("41.5 resume: critic/critic.json of garbage bytes", RESUME, (record,),
             setup=_critic(_replace("critic.json", bytes(range(256))))),
        Case("41.5 resume: critic/critic.json of another layer count", RESUME, (record, "field 'num_layers'", "3"),
             setup=_record(lambda r: r.update(num_layers=3, layers_trained=3))),
        Case("41.5 resume: the checkpoint's critic/ folder deleted", RESUME, (CRITIC, "does not exist"),
             setup=_critic(shutil.rmtree)),
        Case("41.5 resume: a file in place of the checkpoint's critic/ folder", RESUME, (CRITIC, "not a folder"),
             setup=_critic(lambda folder: (shutil.rmtree(folder), folder.write_bytes(b"critic\n")))),
        # a critic training its last layer only: its folder holds that layer, the frozen rest is the policy's copy
        Case("41.5 resume: NaN in a partial critic's trained layer", RESUME, (trained, "layers.1.mlp.up_proj.weight",
                                                                             "NaN"),
             setup=_tensors("trained_layers.safetensors", _nan_tensor("layers.1.mlp.up_proj.weight"),
                            PARTIAL_CRITIC_RECIPE)),
        Case("41.5 resume: a frozen layer's tensor in a partial critic's trained layers", RESUME,
             (trained, "field 'layers.0.mlp.up_proj.weight'", "trained layers"),
             setup=_tensors("trained_layers.safetensors",
                            _copied("layers.1.mlp.up_proj.weight", "layers.0.mlp.up_proj.weight"),
                            PARTIAL_CRITIC_RECIPE)),
        Case("41.5 resume: a partial critic copied from another model", RESUME, (record, "field 'backbone'"),
             setup=_record(lambda r: r.update(backbone={"model": "other", "revision": "x"}), PARTIAL_CRITIC_RECIPE)),
        Case("41.5 resume: a partial critic whose record says 2 trained layers", RESUME, (record,),
             setup=_record(lambda r: r.update(layers_trained=2), PARTIAL_CRITIC_RECIPE)),
    ]


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
        # the generation state (item 4: a checkpoint inside a generation batch resumes on that batch)
        Case("41.4 resume: generation-0.pt deleted (inside a generation batch)", RESUME, (GENERATION, "does not exist"),
             setup=_no_generation(REUSED_RECIPE)),
        Case("41.4 resume: generation-0.pt deleted (on a batch boundary)", RESUME, (GENERATION, "does not exist"),
             setup=_no_generation(PROBE_RECIPE)),
        Case("41.4 resume: generation-0.pt of garbage bytes", RESUME, (GENERATION, "torch archive"),
             setup=_raw_generation(bytes(range(256)) * 4)),
        Case("41.4 resume: generation-0.pt an empty file", RESUME, (GENERATION, "empty"), setup=_raw_generation(b"")),
        Case("41.4 resume: generation-0.pt holding a list", RESUME, (GENERATION, "field 'step'", "list"),
             setup=_generation_saved(lambda s: [s])),
        Case("41.4 resume: generation-0.pt with an extra key", RESUME, (GENERATION, "field 'extra'"),
             setup=_generation(lambda s: s.update(extra=1))),
        Case("41.4 resume: generation-0.pt without its micro-step counter", RESUME, (GENERATION, "field 'step'",
                                                                                    "missing"),
             setup=_generation(lambda s: s.__delitem__("step"))),
        Case("41.4 resume: generation-0.pt with the counter a string", RESUME, (GENERATION, "field 'step'", "'1'"),
             setup=_generation(lambda s: s.update(step="1"))),
        Case("41.4 resume: generation-0.pt with the counter -1", RESUME, (GENERATION, "field 'step'", "-1"),
             setup=_generation(lambda s: s.update(step=-1))),
        Case("41.4 resume: generation-0.pt of another checkpoint (global_step 5)", RESUME,
             (GENERATION, "field 'global_step'", "5"), setup=_generation(lambda s: s.update(global_step=5))),
        Case("41.4 resume: generation-0.pt without the batch it falls inside", RESUME,
             (GENERATION, "field 'batch'", "missing"), setup=_generation(lambda s: s.update(batch=None))),
        Case("41.4 resume: generation-0.pt with a batch on a boundary", RESUME, (GENERATION, "field 'batch'", "null"),
             setup=_generation(lambda s: s.update(batch=[]), PROBE_RECIPE)),
        Case("41.4 resume: generation-0.pt with two slices of one", RESUME, (GENERATION, "field 'batch'", "2 slices"),
             setup=_generation(lambda s: s.update(batch=s["batch"] * 2))),
        Case("41.4 resume: generation-0.pt whose slice is a string", RESUME, (GENERATION, "field 'batch[0]'", "str"),
             setup=_generation(lambda s: s.update(batch=["prompt_ids"]))),
        Case("41.4 resume: generation-0.pt with an extra key in the batch", RESUME,
             (GENERATION, "batch[0].pixel_values", "text-only"),
             setup=_generation(_slice(lambda p: p.update(pixel_values=p["advantages"])))),
        Case("41.4 resume: generation-0.pt without the old log-probs", RESUME,
             (GENERATION, "batch[0].old_per_token_logps", "missing"),
             setup=_generation(_slice(lambda p: p.__delitem__("old_per_token_logps")))),
        Case("41.4 resume: generation-0.pt with completion_ids a list", RESUME,
             (GENERATION, "batch[0].completion_ids", "list"),
             setup=_generation(_slice(lambda p: p.update(completion_ids=p["completion_ids"].tolist())))),
        Case("41.4 resume: generation-0.pt with float token ids", RESUME,
             (GENERATION, "batch[0].prompt_ids", "integer"),
             setup=_generation(_slice(lambda p: p.update(prompt_ids=p["prompt_ids"].double())))),
        Case("41.4 resume: generation-0.pt with a token beyond the vocabulary", RESUME,
             (GENERATION, "batch[0].completion_ids", "vocabulary"),
             setup=_generation(_slice(_token_beyond_vocabulary))),
        Case("41.4 resume: generation-0.pt with a prompt mask of another length", RESUME,
             (GENERATION, "batch[0].prompt_mask", "shape"),
             setup=_generation(_slice(lambda p: p.update(prompt_mask=p["prompt_mask"][:, 1:].clone())))),
        Case("41.4 resume: generation-0.pt with a row too many", RESUME, (GENERATION, "batch[0].advantages", "4 rows"),
             setup=_generation(_slice(lambda p: p.update(advantages=p["advantages"].repeat(2, 1))))),
        Case("41.4 resume: generation-0.pt with a mask of 2s", RESUME,
             (GENERATION, "batch[0].completion_mask", "0 or 1"),
             setup=_generation(_slice(lambda p: p.update(completion_mask=p["completion_mask"] * 2)))),
        Case("41.4 resume: generation-0.pt with NaN in the advantages", RESUME,
             (GENERATION, "batch[0].advantages", "NaN"), setup=_generation(_slice(_nan_advantage))),
        Case("41.4 resume: generation-0.pt with num_items_in_batch -1", RESUME,
             (GENERATION, "batch[0].num_items_in_batch", ">= 0"),
             setup=_generation(_slice(lambda p: p.update(num_items_in_batch=p["num_items_in_batch"] * 0 - 1)))),
        # Numca's value tables (persist: true), checkpointed since item 4
        Case("41.4 resume: Numca's estimator-0.pt deleted", RESUME, (STATE, "does not exist"),
             setup=_numca_state(None)),
        Case("41.4 resume: Numca's estimator-0.pt with NaN in a table", RESUME, (STATE, ".total", "NaN"),
             setup=_numca_state(lambda s: _first_table(s)["total"].__setitem__(0, float("nan")))),
        Case("41.4 resume: Numca's estimator-0.pt with a count of 0", RESUME, (STATE, ".count", ">= 1"),
             setup=_numca_state(lambda s: _first_table(s)["count"].__setitem__(0, 0.0))),
        Case("41.4 resume: Numca's estimator-0.pt holding a probe's history", RESUME,
             (STATE, "field 'history'", "Numca"), setup=_numca_state(lambda s: s.update(history=[]))),
        *critic_cases(),
    ]
