"""What each part of `hista sveb grad` costs (docs/sveb.md "Update direction"), and the time of a
whole measurement projected from it.

    python bench/grad_cost.py [--model smollm2-135m-instruct] [--problems 2] [--groups 9] [--group-size 8]

Samples R·G rollouts for each of `--problems` problems of setting 1 of results/train-study-2 (its
recipe's temperature and completion cap), then times, per problem: sampling, the model's pass (the
output layer's features and the estimators' hidden states), the reference parts (two output-layer
products per group), one group's reference (the total less its part) and every token's response to
it, the estimators' advantages (grpo, hista, numca, probe), one group's Gram matrix, one step's
cosine from it, and one step materialised for Adam's cosine. Prints the figures side by side and a
projection for N = 32 with and without Adam.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import time
from collections import defaultdict
from pathlib import Path

import torch
from arguments import POSITIVE, checked

from hista import estimators, losses
from hista.models import load
from hista.models.forward import decoder_layers
from hista.rollout.config import SamplingConfig
from hista.rollout.engine import GenerateEngine, eos_ids
from hista.rollout.sample import score
from hista.sveb.grad import (
    estimator_credit,
    features_and_hidden,
    loss_weights,
    part_sums,
    pool_record,
    reference,
    reference_parts,
)
from hista.sveb.grad_space import HeadSpace, Rows

ROOT = Path(__file__).resolve().parents[1]


@contextlib.contextmanager
def timed(parts: dict, name: str):
    start = time.perf_counter()
    yield
    parts[name] += time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="smollm2-135m-instruct")
    parser.add_argument("--problems", type=POSITIVE, default=2)
    parser.add_argument("--groups", type=POSITIVE, default=9)
    parser.add_argument("--group-size", type=POSITIVE, default=8)
    args = parser.parse_args()
    lm = checked(parser, load, args.model)
    problems = [json.loads(line) for line in open(ROOT / "results/train-study-2/pool-problems-1.jsonl")]
    engine = GenerateEngine(lm, SamplingConfig(temperature=0.7, max_new_tokens=96))
    names = ["grpo", "hista", "numca", "probe"]
    credits = {n: estimator_credit(estimators.get(n), lm.tokenizer, decoder_layers(lm.model)) for n in names}
    layers = {layer for _, layer in credits.values() if layer is not None}
    R, G = args.groups, args.group_size
    parts: dict[str, float] = defaultdict(float)  # seconds, summed over the problems
    dapo = losses.get("dapo")
    chosen = problems[: args.problems]
    with timed(parts, "sampling"):  # one engine call for every problem, as the command samples
        sampled = engine.generate([p["problem"] for p in chosen], R * G, seed=0, prompt_seeds=range(len(chosen)))
    for problem, rollouts in zip(chosen, sampled):
        score(problem, rollouts)
        record = pool_record(problem, rollouts, set(eos_ids(lm)))
        for i, row in enumerate(record["rows"]):  # mixed rewards, so that no group is skipped
            row["reward"] = float(i % 2)
        prompt, comps = record["prompt_ids"], [r["completion_ids"] for r in record["rows"]]
        with timed(parts, "model pass"):
            feats, hidden = features_and_hidden(lm.model, prompt, comps, layers, 8, lm.tokenizer.pad_token_id or 0)
        space = HeadSpace(lm.model, Rows(prompt, comps, feats), 0.7)
        groups = [list(range(j * G, (j + 1) * G)) for j in range(R)]
        with timed(parts, "reference parts"):
            pieces = reference_parts(space, record["rows"], groups)
            total = part_sums(pieces, range(R))
        group_rewards = [[record["rows"][i]["reward"] for i in g] for g in groups]
        with timed(parts, "reference"):
            ref = reference(pieces, group_rewards, range(1, R), total)
        with timed(parts, "response"):
            space.response(groups[0], ref)
        keys = [f"{j}" for j in range(R) for _ in range(G)]
        rewards = [r["reward"] for r in record["rows"]]
        with timed(parts, "advantages"):
            adv = {n: fn(prompt, comps, rewards, hidden, keys) for n, (fn, _) in credits.items()}
        members = groups[0]
        with timed(parts, "Gram"):
            gram = space.gram(members)
        w = loss_weights(dapo, [space.logps[i] for i in members], [adv["grpo"][i] for i in members], [True] * G,
                         [space.entropies[i] for i in members])
        weights = dict(zip(members, w))
        with timed(parts, "cosine"):
            space.norm(weights, gram)
        with timed(parts, "Adam step"):
            space.step(weights)
    n = args.problems
    per = {k: v / n for k, v in parts.items()}
    print(f"{args.model}, {torch.get_num_threads()} threads, R = {R}, G = {G}; seconds per problem "
          "(reference, response, Gram, cosine and Adam step: per group or step)")
    print("| part | seconds |\n|---|---|")
    for k, v in per.items():
        print(f"| {k} | {v:.2f} |")
    E = len(names)
    base = per["sampling"] + per["model pass"] + per["reference parts"] + per["advantages"] + R * (
        per["reference"] + per["response"] + per["Gram"] + E * per["cosine"])
    print(f"\nprojected for N = 32, {E} estimators: {32 * base / 60:.1f} min without Adam, "
          f"{32 * (base + R * E * per['Adam step']) / 60:.1f} min with "
          f"(ratio {1 + R * E * per['Adam step'] / base:.2f})")


if __name__ == "__main__":
    main()
