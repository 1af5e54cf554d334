"""SVEB on your own groups: two estimators' state values against Monte-Carlo values.

    python examples/compare_estimators.py [--model smollm2-135m-instruct] [--estimators grpo,hista]

Samples G completions for a few problems, picks states halfway through some of them, estimates
each state's value by K continuations sampled from it (the Monte-Carlo target SVEB uses), and
prints every estimator's value beside it and its mean absolute error.
"""
import argparse

import torch

from hista import estimators, rewards, tasks
from hista.advantages import build_group
from hista.models import load
from hista.models.forward import decoder_layers, hidden_states
from hista.types import State

ap = argparse.ArgumentParser()
ap.add_argument("--model", default="smollm2-135m-instruct")
ap.add_argument("--estimators", default="grpo,hista")
ap.add_argument("--group", type=int, default=8)
ap.add_argument("--continuations", type=int, default=8)
args = ap.parse_args()

lm = load(args.model)
model, tok = lm.model, lm.tokenizer
tok.padding_side = "left"
torch.manual_seed(0)


def sample(prefixes: list[list[int]], n: int) -> list[list[int]]:
    """n completions of each token-id prefix (plain generate; tokens up to the first EOS)."""
    rows = [p for p in prefixes for _ in range(n)]
    width = max(map(len, rows))
    ids = torch.tensor([[tok.pad_token_id] * (width - len(r)) + r for r in rows])
    mask = torch.tensor([[0] * (width - len(r)) + [1] * len(r) for r in rows])
    with torch.no_grad():
        out = model.generate(input_ids=ids, attention_mask=mask, do_sample=True, temperature=0.7,
                             max_new_tokens=48, pad_token_id=tok.pad_token_id)[:, width:].tolist()
    return [c[: c.index(tok.eos_token_id) + 1] if tok.eos_token_id in c else c for c in out]


methods = {name: estimators.get(name) for name in args.estimators.split(",")}
layers = {m.hidden_layer(decoder_layers(model)) for m in methods.values() if m.needs_hidden}
rows = []
for number, problem in enumerate(tasks.load("builtin:arith?steps=1", n=2, seed=1, split="train")):
    chat = [{"role": "user", "content": problem["problem"]}]
    prompt = tok.apply_chat_template(chat, add_generation_prompt=True, tokenize=True, return_dict=True)["input_ids"]
    completions = sample([prompt], args.group)
    score = [rewards.verify(problem["verifier"], tok.decode(c, skip_special_tokens=True), problem["answer"])
             for c in completions]
    states = [State(rollout=i, t=len(completions[i]) // 2) for i in range(4)]
    heads = [prompt + completions[s.rollout][: s.t] for s in states]
    tails = sample(heads, args.continuations)
    mc = [sum(rewards.verify(problem["verifier"], tok.decode(h[len(prompt):] + c, skip_special_tokens=True),
                             problem["answer"]) for c in tails[k * args.continuations: (k + 1) * args.continuations])
          / args.continuations for k, h in enumerate(heads)]
    hidden = {layer: hidden_states(lm, [prompt] * len(completions), completions, layer=layer) for layer in layers}
    values = {}
    for name, method in methods.items():
        states_of = hidden[method.hidden_layer(decoder_layers(model))] if method.needs_hidden else None
        group = build_group([prompt] * len(completions), completions, score, hidden=states_of, tokenizer=tok)
        values[name] = method.state_values(group, states).tolist()
    for k, s in enumerate(states):
        rows.append((f"#{number}", s.rollout, s.t, mc[k], {n: v[k] for n, v in values.items()}))

print(f"{'state':28s} {'MC':>6s} " + " ".join(f"{n:>8s}" for n in methods))
for pid, i, t, target, by in rows:
    print(f"{pid:>8s} rollout {i} t={t:<3d}    {target:6.3f} " + " ".join(f"{by[n]:8.3f}" for n in methods))
for n in methods:
    print(f"MAE against Monte Carlo ({args.continuations} continuations per state), {n}: "
          f"{sum(abs(by[n] - target) for _, _, _, target, by in rows) / len(rows):.3f} over {len(rows)} states")
