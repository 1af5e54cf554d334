"""Speed of PPO critic training against the model's own forward pass (SPEC §4.5, §12; issue 13).

    python bench/critic.py                         # embedded SmolLM2-135M, 4 groups x G 16, prompt 80, T 40
    python bench/critic.py --model tiny --groups 2

Prints, side by side on the same random rollouts (G completions of T tokens sharing one prompt):

- forward: the policy's base model over every prompt + completion token, without gradients
  (the model's forward throughput, the yardstick);
- critic epoch, features: one training epoch (forward + backward + AdamW) of a critic with the
  last --layers layers trained, on features its frozen layers computed once (the default on
  the CPU), plus the one-off cost of those features;
- critic epoch, full passes: the same epoch running the whole backbone every step (what a
  critic with every layer trained, or a model whose frozen layers cannot be skipped, costs).

Tokens/s counts prompt + completion tokens of every rollout once per epoch; the ratio is to
the forward's tokens/s. A critic's training costs features + epochs x epoch time.
"""

from __future__ import annotations

import argparse
import time

import torch
from arguments import NON_NEGATIVE, POSITIVE, checked

from hista.critic.config import FitConfig
from hista.critic.fit import FrozenFeatures, fit
from hista.critic.model import ValueModel
from hista.models import load
from hista.types import Rollout, RolloutGroup


def make_groups(groups: int, G: int, prompt: int, T: int, vocab: int, seed: int = 0) -> list[RolloutGroup]:
    """Random token rollouts: ``groups`` prompts of ``prompt`` tokens, G completions of T tokens each."""
    g = torch.Generator().manual_seed(seed)
    out = []
    for k in range(groups):
        prompt_ids = torch.randint(10, vocab, (prompt,), generator=g).tolist()
        rollouts = [Rollout(prompt_ids, torch.randint(10, vocab, (T,), generator=g).tolist(), float(i % 2))
                    for i in range(G)]
        out.append(RolloutGroup(rollouts, prompt_id=f"p{k}"))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", default="smollm2-135m-instruct")
    parser.add_argument("--groups", type=POSITIVE, default=4)
    parser.add_argument("--G", type=POSITIVE, default=16)
    parser.add_argument("--prompt", type=POSITIVE, default=80)
    parser.add_argument("--T", type=POSITIVE, default=40)
    parser.add_argument("--layers", type=NON_NEGATIVE, default=2)
    parser.add_argument("--batch-size", type=POSITIVE, default=8)
    args = parser.parse_args()

    lm = checked(parser, load, args.model, device="cpu")
    groups = make_groups(args.groups, args.G, args.prompt, args.T, lm.tokenizer.vocab_size)
    rows = [r for g in groups for r in g.rollouts]
    tokens = sum(len(r.prompt_ids) + len(r.completion_ids) for r in rows)
    print(f"model {lm.name}, threads {torch.get_num_threads()}: {args.groups} groups x G {args.G}, prompt "
          f"{args.prompt}, T {args.T} ({tokens} tokens); critic trains the last {args.layers} layers, batch "
          f"{args.batch_size}")

    critic = ValueModel.from_policy(lm, layers=args.layers)
    start = time.perf_counter()
    with torch.no_grad():
        for i in range(0, len(rows), args.batch_size):
            chunk = rows[i : i + args.batch_size]
            critic.sequence_values([r.prompt_ids for r in chunk], [r.completion_ids for r in chunk])
    forward = time.perf_counter() - start

    config = FitConfig(epochs=1, batch_size=args.batch_size)
    cache = FrozenFeatures()
    start = time.perf_counter()
    cache.get(critic, [(r.prompt_ids, r.completion_ids, r.reward) for r in rows], batch_size=args.batch_size,
              progress=False)
    features = time.perf_counter() - start
    start = time.perf_counter()
    fit(critic, groups, config, progress=False, features=cache)
    fast = time.perf_counter() - start

    slow_critic = ValueModel.from_policy(lm, layers=args.layers)
    slow_critic._tail_exact = False  # force full passes through the backbone
    start = time.perf_counter()
    fit(slow_critic, groups, config, progress=False)
    slow = time.perf_counter() - start

    base = tokens / forward
    print(f"{'pass':34} {'seconds':>8} {'tok/s':>8} {'vs forward':>10}")
    for name, seconds in (("forward (no gradients)", forward), ("frozen-layer features (once)", features),
                          ("critic epoch, on features", fast), ("critic epoch, full passes", slow)):
        print(f"{name:34} {seconds:8.2f} {tokens / seconds:8.0f} {tokens / seconds / base:10.2f}")
    for epochs in (1, 4):
        print(f"{epochs} epoch(s): features + epochs {features + epochs * fast:.1f}s vs full passes "
              f"{epochs * slow:.1f}s ({epochs * slow / (features + epochs * fast):.1f}x)")


if __name__ == "__main__":
    main()
