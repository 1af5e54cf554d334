"""Bad inputs of issue 29 (reliability, second pass) outside the evaluation and critic commands
(those are in bad_inputs_evaluation.py and bad_inputs_critic.py): files that are not a command's
own, outputs pointed at inputs, a run refused late, resume of another run, a layer the model
does not have, FIFOs and devices as inputs, numbers and nesting no parser can read, a problem
id holding '#', pickled weights, and small ones. Each exits 2 with a located message and
changes or creates no file (tests/reliability/test_bad_inputs.py)."""

from __future__ import annotations

import os
from pathlib import Path

from bad_inputs import BUILD, CASES_FILE, DIR, EVAL, FIFO, FILTER, RECIPE, RESULTS_FILE, SAMPLE, SWEEP, Case, _with

BIG = "9" * 5000  # over Python's 4,300-digit limit for int(str)
TASK = b'{"problem": "What is 2 + 3?", "answer": "5"}\n'
METHODS_FILE = ["sveb", "eval", "--cases", "cases.jsonl", "--methods-file", "methods.yaml", "--out", "results.json"]
DRY = ["train", "recipe.yaml"]  # overrides follow, then "--dry-run" (the order the old code accepts too)


def _parts(root: Path) -> None:
    """Two parts of a sharded tiny build (p1.jsonl, p2.jsonl and their manifests)."""
    from hista.cli import main

    for k in (1, 2):
        argv = _with(_with(BUILD, "--out", str(root / f"p{k}.jsonl")), "--problems", "2") + ["--shard", f"{k}/2"]
        assert main(argv) == 0


def _finished_run(root: Path) -> None:
    """A finished one-step tiny run in ``run/`` from ``recipe.yaml`` (its checkpoint-1 and final)."""
    from hista.cli import main

    (root / "recipe.yaml").write_text(RECIPE.replace("bf16: false", "bf16: false\n  save_steps: 1"))
    assert main(["train", str(root / "recipe.yaml"), f"output_dir={root / 'run'}"]) == 0
    text = (root / "run" / "recipe.yaml").read_text().replace(str(root / "run"), "run")
    (root / "run" / "recipe.yaml").write_text(text)  # the run as `output_dir: run` wrote it, relative to root


def _pickled_model(root: Path) -> None:
    """A model folder whose weights are a pickle that runs code (``pytorch_model.bin``)."""
    import torch

    from hista.models import load

    lm = load("tiny", device="cpu")
    lm.model.config.save_pretrained(root / "m")
    lm.tokenizer.save_pretrained(root / "m")

    class Runs:
        def __reduce__(self):
            return (os.getpid, ())

    torch.save({"weight": Runs()}, root / "m" / "pytorch_model.bin")


def cases() -> list[Case]:
    """Every bad input of issue 29's items 1-18 that a command line can show (items 4-6 are
    tested in tests/train/test_train.py, 16 in tests/test_jsonio.py, 10-12 in the other modules)."""
    valid_cases = {"cases.jsonl": CASES_FILE.read_bytes()}
    recipe = {"recipe.yaml": RECIPE.encode()}
    cut_other = CASES_FILE.read_bytes() + b'{"continuations":[0'
    return [
        # 1. a file that is not the command's own is never cut
        Case("29.1 sveb build --out notes with an unterminated last line", _with(BUILD, "--out", "notes.txt"),
             ("notes.txt",), {"notes.txt": b"my notes\nline two"}),
        Case("29.1 sveb build --out a one-line file without a newline", _with(BUILD, "--out", "v.jsonl"),
             ("v.jsonl",), {"v.jsonl": b"hello"}),
        Case("29.1 sveb build over cases of other settings with a cut last line (refused after the model loads)",
             BUILD, ("cases.jsonl", "other settings"), {"cases.jsonl": cut_other}),
        Case("29.1 sveb sweep over a values file that is not one", SWEEP, ("values.jsonl",),
             {**valid_cases, "sweep/values.jsonl": b"junk"}),
        # 2. an output that is an input (and an unrelated file at an output path)
        Case("29.2 sveb eval --out the cases file", _with(EVAL, "--out", "cases.jsonl"), ("cases.jsonl", "input"),
             valid_cases),
        Case("29.2 sveb eval --out someone's notes", _with(EVAL, "--out", "notes.txt"), ("notes.txt", "JSON object"),
             {**valid_cases, "notes.txt": b"my notes\n"}),
        Case("29.2 sveb merge --out one of its parts", ["sveb", "merge", "p1.jsonl", "p2.jsonl", "--out", "p1.jsonl"],
             ("p1.jsonl", "input"), setup=_parts),
        Case("29.2 sveb merge --out a part's manifest", ["sveb", "merge", "p1.jsonl", "p2.jsonl", "--out",
                                                         "p1.jsonl.shard.json"], ("shard.json",), setup=_parts),
        Case("29.2 sveb split --out the folder whose report.jsonl is the cases",
             ["sveb", "split", "--cases", "out/report.jsonl", "--out", "out"], ("report.jsonl", "input"),
             {"out/report.jsonl": CASES_FILE.read_bytes()}),
        Case("29.2 sveb report --out the folder whose report.json is the results",
             ["sveb", "report", "--results", "rep/report.json", "--out", "rep"], ("report.json", "input"),
             {"rep/report.json": RESULTS_FILE.read_bytes()}),
        Case("29.2 sveb sweep --out the folder whose values.jsonl is the cases",
             _with(_with(SWEEP, "--cases", "s/values.jsonl"), "--out", "s"), ("values.jsonl", "input"),
             {"s/values.jsonl": CASES_FILE.read_bytes()}),
        Case("29.2 sample --out its jsonl task file",
             _with(_with(SAMPLE, "--tasks", "jsonl:t.jsonl"), "--out", "t.jsonl"), ("t.jsonl", "input"),
             {"t.jsonl": TASK}),
        Case("29.2 sample --out someone's notes", _with(SAMPLE, "--out", "notes.txt"), ("notes.txt", "JSON lines"),
             {"notes.txt": b"my notes\n"}),
        Case("29.2 tasks filter --out its task file", ["tasks", "filter", "jsonl:t.jsonl", *FILTER[3:-1], "t.jsonl"],
             ("t.jsonl", "input"), {"t.jsonl": TASK}),
        Case("29.2 sveb build --out its task file", _with(_with(BUILD, "--tasks", "jsonl:t.jsonl"), "--out", "t.jsonl"),
             ("t.jsonl", "input"), {"t.jsonl": TASK}),
        Case("29.2 train with the run's own recipe.yaml as the recipe", ["train", "run/recipe.yaml", "--dry-run"],
             ("recipe.yaml", "copy it out"), {"run/recipe.yaml": RECIPE.encode()}),
        Case("29.2 train with a task file that is the run's metrics.jsonl",
             [*DRY, "tasks=jsonl:run/metrics.jsonl", "--dry-run"], ("metrics.jsonl", "input"),
             {**recipe, "run/metrics.jsonl": TASK}),
        # 3. a run refused late writes nothing
        Case("29.3 train refused over its eval suites", ["train", "recipe.yaml"], ("nosuch/dataset",),
             {"recipe.yaml": (RECIPE + "eval:\n  suites: hf:nosuch/dataset\n  every: 1\n").encode()},
             env={"HF_HUB_OFFLINE": "1", "HISTA_HF_TIMEOUT": "2"}),
        # 7. resume of another run
        Case("29.7 train resume=true with another seed", ["train", "recipe.yaml", "resume=true", "seed=5"],
             ("recipe.yaml", "seed", "trained with"), setup=_finished_run),
        Case("29.7 train resume=true with another loss", ["train", "recipe.yaml", "resume=true", "loss.name=grpo"],
             ("loss.name",), setup=_finished_run),
        Case("42 train resume=true with dynamic sampling off", ["train", "recipe.yaml", "resume=true",
                                                                "dynamic_sampling=false"],
             ("dynamic_sampling={'max_rounds': 4}, not False",), setup=_finished_run),
        # 8. a layer the model does not have, at dry run
        Case("29.8 train --dry-run advantage_estimator.layer=999",
             [*DRY, "advantage_estimator.name=hista", "advantage_estimator.layer=999", "--dry-run"],
             ("recipe.yaml", "advantage_estimator.layer", "999"), recipe),
        # 9. FIFOs and devices as inputs
        Case("29.9 train a FIFO recipe", ["train", "pipe"], ("pipe", "FIFO"), {"pipe": FIFO}),
        Case("29.9 train /dev/zero", ["train", "/dev/zero"], ("/dev/zero", "character device")),
        Case("29.9 jsonl: task file is a FIFO", ["tasks", "preview", "jsonl:t.jsonl"], ("t.jsonl", "FIFO"),
             {"t.jsonl": FIFO}),
        Case("29.9 jsonl: task file is a directory", ["tasks", "preview", "jsonl:t.jsonl"], ("t.jsonl", "directory"),
             {"t.jsonl": DIR}),
        # 13. numbers and nesting no parser reads
        Case("29.13 override with a 5,000-digit seed", [*DRY, f"seed={BIG}", "--dry-run"], ("seed", "number"),
             recipe),
        Case("29.13 override nested 5,000 deep", [*DRY, "trl.max_steps=" + "[" * 5000 + "]" * 5000, "--dry-run"],
             ("trl.max_steps", "nested"), recipe),
        Case("29.13 --methods with a 5,000-digit layer", _with(EVAL, "--methods", f"hista?layer={BIG}"),
             ("layer", "number"), valid_cases),
        Case("29.13 --grid with a 5,000-digit value", _with(SWEEP, "--grid", f"layer={BIG}"), ("--grid", "number"),
             valid_cases),
        Case("29.13 --methods-file with a 5,000-digit number", METHODS_FILE, ("methods.yaml", "number"),
             {**valid_cases, "methods.yaml": f"- {{name: hista, params: {{layer: {BIG}}}}}\n".encode()}),
        Case("29.13 --methods-file nested 5,000 deep", METHODS_FILE, ("methods.yaml", "nested"),
             {**valid_cases, "methods.yaml": b"- " + b"[" * 5000 + b"]" * 5000 + b"\n"}),
        Case("29.13 a run's recipe.yaml with a 5,000-digit number (hista eval --model RUN)",
             ["eval", "--model", "run", "--suite", "builtin", "--out", "r.json"], ("recipe.yaml", "number"),
             {"run/recipe.yaml": f"model: tiny\nseed: {BIG}\n".encode(), "run/final/config.json": b"{}\n"}),
        # 14. a problem id holding '#'
        Case("29.14 jsonl task id holding #", ["tasks", "preview", "jsonl:t.jsonl"], ("t.jsonl:1", "id", "#"),
             {"t.jsonl": b'{"id": "p#1", "problem": "What is 2 + 3?", "answer": "5"}\n'}),
        # 17. pickled weights
        Case("29.17 a model folder with pickled pytorch_model.bin", _with(SAMPLE, "--model", "m"),
             ("pytorch_model.bin", "weights_only"), setup=_pickled_model),
        # 18. smaller ones
        Case("29.18 --methods ','", _with(EVAL, "--methods", ","), ("--methods", "no method"), valid_cases),
        Case("29.18 train output_dir under /dev", [*DRY, "output_dir=/dev/hista-test", "--dry-run"],
             ("output_dir", "/dev"), recipe),
    ]

