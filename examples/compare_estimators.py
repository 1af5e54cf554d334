"""SVEB on your own groups: estimators' state values against Monte-Carlo values.

    python examples/compare_estimators.py [--model smollm2-135m-instruct] [--estimators grpo,hista,numca]

Samples G completions for problems that the embedded model solves some of the time (measured for
results/train-study-2), keeping the first two whose groups hold both rewarded and unrewarded
completions. It then picks a state halfway through four completions of each (two rewarded, two
not, where there are) and
estimates each state's value from K continuations sampled from it; that is the Monte-Carlo
target SVEB uses. Each estimator then values the same states from the group alone, and the
script prints those values beside the target with each estimator's mean absolute error.

As in SVEB (docs/sveb.md "Protocols"), an estimator sees the state's own rollout without its
reward. A baseline for a state must not know how that rollout ends: GRPO's value is then the
mean reward of the *other* rollouts. Hista's value comes from the rollouts whose hidden states
pass near the state, and Numca's from the rollouts that have written the same numbers so far.
Where the estimators disagree with GRPO, the Monte-Carlo column says which one is closer.
"""
import argparse
import itertools

from hista import estimators, rewards, tasks
from hista.advantages import build_group
from hista.estimators.leakage import without_reward
from hista.models import load
from hista.models.forward import decoder_layers, hidden_states
from hista.rollout.config import SYSTEM_PROMPT, SamplingConfig
from hista.rollout.engine import GenerateEngine
from hista.types import State

ap = argparse.ArgumentParser()
ap.add_argument("--model", default="smollm2-135m-instruct")
ap.add_argument("--estimators", default="grpo,hista,numca")
ap.add_argument("--group", type=int, default=8)
ap.add_argument("--continuations", type=int, default=8)
ap.add_argument("--tasks", default="jsonl:results/train-study-2/pool-problems-1.jsonl")
args = ap.parse_args()

lm = load(args.model)
model, tok = lm.model, lm.tokenizer
engine = GenerateEngine(lm, SamplingConfig(temperature=0.7, max_new_tokens=48))
seeds = itertools.count()


def sample(prefixes: list[list[int]], n: int) -> list[list[int]]:
    """n completions of each token-id prefix from hista's engine (tokens up to the first EOS), the
    rows of one prefix sharing its encoding; each call draws with a seed of its own."""
    groups = engine.generate_from_ids(prefixes, n, seed=next(seeds))
    return [rollout.completion_ids for group in groups for rollout in group]


def reward(problem: dict, ids: list[int]) -> float:
    return rewards.verify(problem["verifier"], tok.decode(ids, skip_special_tokens=True), problem["answer"])


methods = {name: estimators.get(name) for name in args.estimators.split(",")}
layers = {m.hidden_layer(decoder_layers(model)) for m in methods.values() if m.needs_hidden}
rows, used = [], 0
for number, problem in enumerate(tasks.load(args.tasks, n=8)):
    if used == 2:
        break
    chat = [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": problem["problem"]}]
    prompt = tok.apply_chat_template(chat, add_generation_prompt=True, tokenize=True, return_dict=True)["input_ids"]
    completions = sample([prompt], args.group)
    score = [reward(problem, c) for c in completions]
    if len(set(score)) == 1:  # all right or all wrong: every baseline is that reward, nothing to compare
        print(f"problem #{number}: all {args.group} rewards are {score[0]:.0f}, skipped")
        continue
    used += 1
    right, wrong = [i for i, r in enumerate(score) if r], [i for i, r in enumerate(score) if not r]
    picked = (right[:2] + wrong)[:2] + (wrong[:2] + right)[:2]  # two rewarded and two unrewarded where there are
    states = [State(rollout=i, t=len(completions[i]) // 2) for i in sorted(set(picked))]  # each halfway through
    heads = [prompt + completions[s.rollout][: s.t] for s in states]
    tails = sample(heads, args.continuations)
    k_ = args.continuations
    mc = [sum(reward(problem, h[len(prompt):] + c) for c in tails[k * k_: (k + 1) * k_]) / k_
          for k, h in enumerate(heads)]
    hidden = {layer: hidden_states(lm, [prompt] * len(completions), completions, layer=layer) for layer in layers}
    for k, s in enumerate(states):
        values = {}
        for name, method in methods.items():
            states_of = hidden[method.hidden_layer(decoder_layers(model))] if method.needs_hidden else None
            group = build_group([prompt] * len(completions), completions, score, hidden=states_of, tokenizer=tok)
            values[name] = float(method.state_values(without_reward(group, s.rollout), [s])[0])
        text = tok.decode(completions[s.rollout][: s.t], skip_special_tokens=True)
        rows.append((f"#{number}", s.rollout, s.t, mc[k], values, text, score[s.rollout]))

print(f"{'state':24s} {'MC':>6s} " + " ".join(f"{n:>7s}" for n in methods) + "  the response so far (its reward)")
for pid, i, t, target, by, text, r in rows:
    shown = text if len(text) <= 48 else "..." + text[-45:]
    print(f"{pid:>4s} rollout {i} t={t:<3d}   {target:6.3f} " + " ".join(f"{by[n]:7.3f}" for n in methods)
          + f"  {shown!r} ({r:.0f})")
for n in methods:
    print(f"MAE against Monte Carlo ({args.continuations} continuations per state), {n}: "
          f"{sum(abs(by[n] - target) for _, _, _, target, by, _, _ in rows) / len(rows):.3f} over {len(rows)} states")
