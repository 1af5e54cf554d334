"""Measure a study setting's difficulty-filtered pool once (README.md, "Pools"), as `hista train`
would at its start, into runs/train-study-2/pool-K/pool.new/ (resumable; pool/ when that holds
it), and copy pool.jsonl and accuracy.jsonl here as pool-K.jsonl and pool-accuracy-K.jsonl
(settings.json as pool-settings-K.json), and the kept problems' records as pool-problems-K.jsonl
(the SVEB cases' problems). run.sh rebuilds the folder in each run from these files; the recipes
have the same pool settings (pool_filter.seed 0), so no run measures it again.

    OMP_NUM_THREADS=2 python results/train-study-2/pool.py 1
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

from hista.train import load_recipe, measure_pool

here = Path(__file__).parent
key = sys.argv[1]
recipe = load_recipe(here / f"recipe-{key}.yaml", [f"output_dir=runs/train-study-2/pool-{key}"])
_, folder = measure_pool(recipe)
shutil.copy(folder / "pool.jsonl", here / f"pool-{key}.jsonl")
shutil.copy(folder / "accuracy.jsonl", here / f"pool-accuracy-{key}.jsonl")
shutil.copy(folder / "settings.json", here / f"pool-settings-{key}.json")
kept = {json.loads(line)["id"] for line in (folder / "pool.jsonl").read_text().splitlines()}
train = (here / f"train-{key}.jsonl").read_text().splitlines(keepends=True)
(here / f"pool-problems-{key}.jsonl").write_text("".join(line for line in train if json.loads(line)["id"] in kept))
print(f"pool {key}: {len(kept)} of {len(train)} problems kept")
