"""Bad inputs of the critic commands (issue 29, items 12 and 18): ``hista critic train`` over a
damaged or another request's critic folder, and ``sveb eval --critic`` over a damaged one.
:func:`cases` is appended to the table of ``tests/reliability/bad_inputs.py``.

Each case starts from a real PPO-1 critic folder (2 folds, head only, one epoch) that
``hista critic train`` writes once per process into a cache folder (a few seconds: the tiny
model), copied into the case's folder as ``critic/`` beside ``cases.jsonl`` and then damaged."""

from __future__ import annotations

import atexit
import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Callable, Optional

from bad_inputs import CASES_FILE, Case, _case_lines

FAST = ["--epochs", "1", "--layers", "0", "--device", "cpu"]
#: the request that wrote the cached critic folder; rerunning it resumes (keeps) every critic
TRAIN = ["critic", "train", "--cases", "cases.jsonl", "--mode", "ppo-1", "--lam", "1", "--folds", "2",
         "--out", "critic", *FAST]
EVAL = ["sveb", "eval", "--cases", "cases.jsonl", "--methods", "ppo-1", "--critic", "critic", "--out",
        "results.json", "--device", "cpu"]
FOLD = "critic/fold-0"

_cache: Optional[Path] = None


def trained() -> Path:
    """A folder holding ``cases.jsonl`` (the tiny cases) and ``critic/``, the PPO-1 critics
    :data:`TRAIN` writes; trained once per process by a real ``hista critic train``."""
    global _cache
    if _cache is None:
        folder = Path(tempfile.mkdtemp(prefix="hista-critic-cases-"))
        atexit.register(shutil.rmtree, folder, True)
        shutil.copy(CASES_FILE, folder / "cases.jsonl")
        proc = subprocess.run([sys.executable, "-m", "hista.cli", *TRAIN], cwd=folder, capture_output=True,
                              text=True, stdin=subprocess.DEVNULL, timeout=300)
        if proc.returncode != 0:
            raise RuntimeError(f"hista critic train failed:\n{proc.stderr[-3000:]}")
        _cache = folder
    return _cache


def _critic(damage: Optional[Callable[[Path], None]] = None) -> Callable[[Path], None]:
    """A case setup: the trained critic folder and its cases copied into ``root``, then
    ``damage(root)``."""

    def setup(root: Path) -> None:
        source = trained()
        shutil.copy(source / "cases.jsonl", root / "cases.jsonl")
        shutil.copytree(source / "critic", root / "critic")
        if damage is not None:
            damage(root)

    return setup


def _write(name: str, data: bytes) -> Callable[[Path], None]:
    return lambda root: (root / name).write_bytes(data)


def _truncate(name: str) -> Callable[[Path], None]:
    def damage(root: Path) -> None:
        path = root / name
        path.write_bytes(path.read_bytes()[:-4])
    return damage


def _edit(name: str, edit: Callable[[dict], None]) -> Callable[[Path], None]:
    """Rewrite the JSON file ``name`` after ``edit`` of its object."""
    def damage(root: Path) -> None:
        path = root / name
        record = json.loads(path.read_text())
        edit(record)
        path.write_text(json.dumps(record, indent=1))
    return damage


def _trains_on_what_it_scores(info: dict) -> None:
    """The fold's critic.json claims it also trained on the problem it scores."""
    training = info["training"]
    training["problems"] = sorted(set(training["problems"]) | set(info["fold"]["scores"]))
    training["groups"].update({p: "0" * 16 for p in info["fold"]["scores"]})


def _lam(argv: list[str], value: str) -> list[str]:
    out = list(argv)
    out[out.index("--lam") + 1] = value
    return out


def _one_problem(root: Path) -> None:
    (root / "one.jsonl").write_text(CASES_FILE.read_text().splitlines()[0] + "\n")


def cases() -> list[Case]:
    """The critic folders' bad inputs, in the order of the issue."""
    conf, head, layers = f"{FOLD}/critic.json", f"{FOLD}/value_head.safetensors", f"{FOLD}/trained_layers.safetensors"
    train_ppo1 = [a for a in TRAIN if a not in ("--folds", "2")]
    ref = TRAIN.copy()
    ref[ref.index("cases.jsonl")] = "./cases.jsonl"
    ref = _lam(ref, "0.95")
    one = ["critic", "train", "--cases", "one.jsonl", "--mode", "ppo-1", "--lam", "1", "--out", "c1", *FAST]
    assert len({r["key"] for r in _case_lines()}) == 2
    return [
        # 12. hista critic train resuming over a damaged critic folder
        Case("critic train resume: fold critic.json not JSON", TRAIN, (conf, "bad JSON"),
             setup=_critic(_write(conf, b'{"format": "hista-critic/1", '))),
        Case("critic train resume: fold critic.json without training", TRAIN, (conf, "training"),
             setup=_critic(_edit(conf, lambda r: r.pop("training")))),
        Case("critic train resume: train.json binary", TRAIN, ("critic/train.json", "UTF-8"),
             setup=_critic(_write("critic/train.json", b"\x89PNG\r\n\x1a\n\x00\xff\xfe"))),
        Case("critic train resume: truncated value_head.safetensors", TRAIN, (head, "truncated"),
             setup=_critic(_truncate(head))),
        Case("critic train resume: fold trained on the problems it scores", TRAIN, (conf, "training.problems"),
             setup=_critic(_edit(conf, _trains_on_what_it_scores))),
        # 12. sveb eval --critic over a damaged critic folder
        Case("sveb eval --critic: fold critic.json without training", EVAL, (conf, "training"),
             setup=_critic(_edit(conf, lambda r: r.pop("training")))),
        Case("sveb eval --critic: training.problems a string", EVAL, (conf, "training.problems"),
             setup=_critic(_edit(conf, lambda r: r["training"].update(problems=r["training"]["problems"][0])))),
        Case("sveb eval --critic: truncated value_head.safetensors", EVAL, (head, "truncated"),
             setup=_critic(_truncate(head))),
        Case("sveb eval --critic: truncated trained_layers.safetensors", EVAL, (layers, "truncated"),
             setup=_critic(_truncate(layers))),
        Case("sveb eval --critic: value head of another hidden size", EVAL, (head, "hidden size"),
             setup=_critic(_edit(conf, lambda r: r.update(hidden_size=32)))),
        # 18. --folds: the reason, the default's rule, the same cases under another path
        Case("critic train --folds 1", [a if a != "2" else "1" for a in TRAIN], ("--folds", "PPO-1")),
        Case("critic train ppo-1 (default --folds) on one problem", one, ("one.jsonl", "--folds", "2 problems"),
             setup=_one_problem),
        Case("critic train resume via ./cases.jsonl with another --lam", ref, ("critic/train.json", "lams"),
             setup=_critic()),
        Case("critic train ppo-1 without --folds: the request of --folds 2", _lam(train_ppo1, "0.5"),
             ("critic/train.json", "lams"), setup=_critic()),
    ]
