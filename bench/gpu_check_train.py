"""Part 3 of bench/gpu_check.sh: ``hista train`` in this process, then what it left and the GPU's peak memory.

    python bench/gpu_check_train.py [--parity-reward] RECIPE [KEY=VALUE ...] [--overwrite]

Runs ``hista.cli.main(["train", ...])`` as the ``hista`` console script would, then checks that
``metrics.jsonl`` holds one line per step up to ``trl.max_steps`` and that ``final/`` was written,
and prints the CUDA allocator's peak (proof that the run used the GPU). Exit 0 when all hold.

``--parity-reward`` replaces the verifier's reward by the parity of the completion's length (as
tests/train/test_train.py does): a random model never solves a problem, so with the real reward every
group's rewards are equal and every advantage is 0; with parity the estimator has a signal, and
the check also requires a nonzero advantage.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from arguments import checked, existing_file, override


def parity(completions: list, **_) -> list[float]:
    return [float(len(c[-1]["content"] if isinstance(c, list) else str(c)) % 2) for c in completions]


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--parity-reward", action="store_true", help="reward the parity of the completion's length")
    ap.add_argument("--overwrite", action="store_true", help="passed on to hista train")
    ap.add_argument("recipe", type=existing_file, help="the recipe YAML")
    ap.add_argument("overrides", nargs="*", type=override, metavar="KEY=VALUE", help="recipe overrides")
    args = ap.parse_args(argv)

    import torch

    import hista.train.run as run
    from hista.cli import main as hista_main
    from hista.train import load_recipe

    recipe = checked(ap, load_recipe, args.recipe, args.overrides)
    signal = args.parity_reward
    if signal:
        parity.__name__ = run.correct.__name__  # TRL logs rewards/<name>/...
        run.correct = parity
        print("[gpu_check] reward: parity of the completion's length (not the verifier)", flush=True)

    out = Path(recipe.output_dir)
    start = time.perf_counter()
    rc = hista_main(["train", args.recipe, *args.overrides, *(["--overwrite"] if args.overwrite else [])])
    seconds = time.perf_counter() - start
    print(f"[gpu_check] hista train: exit {rc} in {seconds:.1f} s", flush=True)
    if rc != 0:
        return rc
    metrics = out / "metrics.jsonl"
    rows = [json.loads(line) for line in metrics.read_text().splitlines()] if metrics.is_file() else []
    steps = [row["step"] for row in rows]
    final = (out / "final" / "config.json").is_file()
    want = int(recipe.trl["max_steps"])
    print(f"[gpu_check] metrics.jsonl steps {steps} (want 1..{want}); final/ written: {final}")
    for row in rows:
        print(f"[gpu_check] step {row['step']}: " + ", ".join(
            f"{key} {row[key]:.4g}" for key in ("reward", "reward_std", "advantages/std", "advantages/abs_max",
                                                "estimator/seconds", "entropy", "step_time") if key in row))
    if signal and not any(row.get("advantages/abs_max", 0) > 0 for row in rows):
        print("[gpu_check] error: every advantage was 0 although the rewards differ")
        return 1
    if torch.cuda.is_available():
        peak = torch.cuda.max_memory_allocated() / 2**20
        print(f"[gpu_check] device {torch.cuda.get_device_name()}: CUDA allocator peak {peak:.0f} MiB")
        if peak == 0:
            print("[gpu_check] error: CUDA is available but the run allocated nothing on it")
            return 1
    else:
        print("[gpu_check] no CUDA: the run was on the CPU")
    return 0 if final and steps and steps[-1] == want else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
