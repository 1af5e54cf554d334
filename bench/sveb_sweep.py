"""Wall time of a 24-point ``sveb sweep`` against one ``sveb eval`` of grpo + hista (SPEC §8, §12).

    python bench/sveb_sweep.py CASES.jsonl [--grid 'layer=-1,-2;interval=10,25,50;stride=1,5;max_k=8,66']
        [--device cpu] [--threads 1]

Loads the model that built the cases once, then times ``evaluate(cases, ["grpo", "hista"])``
and ``sweep(cases, base="hista", grid=GRID)`` into a fresh temporary folder (nothing resumed),
both without progress bars and with the same loaded model, and prints both wall times and their
ratio, also without the sweep's fixed cost of writing its outputs (heatmaps: about a second,
which dominates on a file of a few tiny cases). A sweep computes the hidden states of all its
layers in one forward pass per case, so the target is a ratio of at most 3 for 24 points. The
default grid uses layers -1 and -2, which every model has (the tiny test model has 2 layers).
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import torch
from arguments import POSITIVE, checked, device, existing_file

from hista.models import load
from hista.sveb import sweep as sweep_module
from hista.sveb.cases import read_cases
from hista.sveb.eval import evaluate
from hista.sveb.grid import parse_grid
from hista.sveb.sweep import sweep

GRID = "layer=-1,-2;interval=10,25,50;stride=1,5;max_k=8,66"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("cases", type=existing_file, help="a cases JSONL written by sveb build")
    ap.add_argument("--grid", default=GRID, help="the sweep's grid (default: %(default)s)")
    ap.add_argument("--device", type=device, default=None, help="cpu or cuda (default: cuda if available)")
    ap.add_argument("--threads", type=POSITIVE, default=None,
                    help="torch CPU threads (default: torch's; 1 on a machine busy with other work)")
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    grid = checked(ap, parse_grid, args.grid)
    read = checked(ap, read_cases, args.cases)
    records, model = read.records, read.model
    points = 1
    for values in grid.values():
        points *= len(values)
    start = time.perf_counter()
    lm = load(model, device=args.device)
    print(f"{len(records)} cases of {model}; model loaded in {time.perf_counter() - start:.1f} s on {lm.device}")

    start = time.perf_counter()
    evaluate(args.cases, ["grpo", "hista"], lm=lm, progress=False, n_boot=200)
    eval_s = time.perf_counter() - start
    print(f"eval grpo,hista:        {eval_s:8.2f} s  ({eval_s / len(records):.3f} s per case)")

    outputs = {"s": 0.0}
    write_outputs = sweep_module.write_outputs

    def timed_outputs(*a, **kw):
        start = time.perf_counter()
        try:
            return write_outputs(*a, **kw)
        finally:
            outputs["s"] += time.perf_counter() - start

    sweep_module.write_outputs = timed_outputs
    with tempfile.TemporaryDirectory() as tmp:
        start = time.perf_counter()
        sweep(args.cases, Path(tmp) / "sweep", base="hista", grid=args.grid, lm=lm, progress=False, n_boot=200)
        sweep_s = time.perf_counter() - start
    print(f"sweep of {points:3d} points:   {sweep_s:8.2f} s  ({sweep_s / len(records):.3f} s per case), of which "
          f"{outputs['s']:.2f} s writing sweep.json, sweep.md and the heatmaps (a fixed cost)")
    print(f"ratio sweep / eval:     {sweep_s / eval_s:8.2f}  (target <= 3); without the fixed output cost "
          f"{(sweep_s - outputs['s']) / eval_s:.2f}")


if __name__ == "__main__":
    main()
