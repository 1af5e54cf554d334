"""A policy-gradient loop of your own, with per-token advantages from hista.

    python examples/own_loop.py [--model smollm2-135m-instruct] [--estimator hista] [--steps 2]

Each step does the following:

1. Samples G completions for each of a few arithmetic problems with plain `model.generate`. The
   problems are ones the embedded model solves 15-75% of the time (measured for
   results/train-study-2).
2. Scores the completions with hista's math verifier.
3. Keeps the groups whose rewards differ. Dynamic sampling does the same: a group that is all
   right or all wrong has no credit to give.
4. Asks `hista.advantages.token_advantages` for the estimator's per-token advantages and for
   GRPO's, one call each.
5. Takes one policy-gradient step on the estimator's advantages.

It then prints three things:

- the response whose credit changes most along it, with the estimator's advantage beside GRPO's
  (a line per run of tokens with equal credit);
- on how many of the batch's tokens the two differ;
- what the step did to the log-probabilities of the rewarded and the unrewarded completions.

GRPO gives every token of a response the same number. Hista's credit changes along a response:
it values the states on it from the group's other responses that pass near it (hidden-state
neighbours), so a token after which success becomes likelier gets more credit. Any transformers
causal LM and its tokenizer work in place of `load(...)`.
"""
import argparse

import torch

from hista import estimators, rewards, tasks
from hista.advantages import token_advantages
from hista.models import load
from hista.rollout.config import SYSTEM_PROMPT

ap = argparse.ArgumentParser()
ap.add_argument("--model", default="smollm2-135m-instruct")
ap.add_argument("--estimator", default="hista")
ap.add_argument("--steps", type=int, default=2)
ap.add_argument("--problems", type=int, default=4, help="problems per step")
ap.add_argument("--group", type=int, default=8, help="completions per problem (G)")
ap.add_argument("--tasks", default="jsonl:results/train-study-2/pool-problems-1.jsonl")
args = ap.parse_args()

lm = load(args.model)
model, tok = lm.model, lm.tokenizer
tok.padding_side = "left"  # prompts padded on the left, completions on the right
estimator = estimators.get(args.estimator)  # one object for the whole run (the probe keeps a history in it)
grpo = estimators.get("grpo")
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-5)
problems = tasks.load(args.tasks, n=args.problems * args.steps)
torch.manual_seed(0)


def token_logps(ids, mask, start):
    logits = model(input_ids=ids, attention_mask=mask).logits[:, start - 1: -1]
    return torch.log_softmax(logits.float(), dim=-1).gather(-1, ids[:, start:].unsqueeze(-1)).squeeze(-1)


for step in range(args.steps):
    # 1-2. sample G completions per problem and score them
    batch = [p for p in problems[args.problems * step: args.problems * (step + 1)] for _ in range(args.group)]
    chats = [[{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": p["problem"]}]
             for p in batch]
    prompt = tok.apply_chat_template(chats, add_generation_prompt=True, padding=True, return_tensors="pt",
                                     return_dict=True)
    model.eval()
    with torch.no_grad():
        out = model.generate(**prompt, do_sample=True, temperature=0.7, max_new_tokens=64,
                             pad_token_id=tok.pad_token_id)
    completion_ids = out[:, prompt["input_ids"].size(1):]
    ends = completion_ids == tok.eos_token_id  # keep tokens up to and including the first EOS
    completion_mask = (ends.cumsum(1) - ends.long() == 0).long()
    texts = tok.batch_decode(completion_ids * completion_mask, skip_special_tokens=True)
    reward = torch.tensor([rewards.verify(p["verifier"], t, p["answer"]) for p, t in zip(batch, texts)])

    # 3. keep the groups with mixed rewards
    by_group = reward.view(-1, args.group)
    mixed = (by_group.max(1).values > by_group.min(1).values).repeat_interleave(args.group)
    print(f"step {step}: mean reward {reward.mean():.3f}, {int(mixed.sum()) // args.group} of {args.problems} "
          "groups with mixed rewards")
    if not mixed.any():
        continue
    keep = mixed.nonzero()[:, 0]
    prompt_ids, prompt_mask = prompt["input_ids"][keep], prompt["attention_mask"][keep]
    completion_ids, completion_mask, reward = completion_ids[keep], completion_mask[keep], reward[keep]
    ids = [batch[i]["id"] for i in keep]

    # 4. per-token advantages, [B, T], zero past each completion's end
    kwargs = dict(prompt_mask=prompt_mask, completion_mask=completion_mask, model=model, tokenizer=tok)
    adv = token_advantages(estimator, prompt_ids, completion_ids, reward.tolist(), ids, **kwargs)
    base = token_advantages(grpo, prompt_ids, completion_ids, reward.tolist(), ids, **kwargs)

    valid = completion_mask.bool()
    spread = adv.masked_fill(~valid, -1e9).max(1).values - adv.masked_fill(~valid, 1e9).min(1).values
    row = int(spread.argmax())  # the response whose credit changes most along it, token by token
    print(f"  a response (reward {reward[row]:.0f}) to {batch[int(keep[row])]['problem']!r}:")
    print(f"    {'grpo':>7s} {args.estimator:>7s}  tokens (a line per run of equal credit)")
    length, start = int(completion_mask[row].sum()), 0
    for t in range(1, length + 1):
        if t == length or (adv[row, t] - adv[row, start]).abs() + (base[row, t] - base[row, start]).abs() > 5e-4:
            text = tok.decode(completion_ids[row, start:t])
            print(f"    {base[row, start]:+7.3f} {adv[row, start]:+7.3f}  {text!r}")
            start = t
    differ = ((adv - base).abs() > 0.1) & valid
    print(f"  {args.estimator}'s credit differs from GRPO's by more than 0.1 on {int(differ.sum())} of "
          f"{int(valid.sum())} tokens")

    # 5. one policy-gradient step on the estimator's advantages (REINFORCE, token mean)
    model.train()
    full = torch.cat([prompt_ids, completion_ids], dim=1)
    mask = torch.cat([prompt_mask, completion_mask], dim=1)
    logp = token_logps(full, mask, prompt_ids.size(1))
    loss = -(adv * logp * completion_mask).sum() / completion_mask.sum()
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    model.eval()
    with torch.no_grad():
        moved = (token_logps(full, mask, prompt_ids.size(1)) - logp.detach()) * completion_mask
    right = reward.bool()
    per_token = [moved[rows].sum() / completion_mask[rows].sum() for rows in (right, ~right)]
    print(f"  the step moved the log-probability per token of the {int(right.sum())} rewarded completions by "
          f"{per_token[0]:+.4f}, of the {int((~right).sum())} unrewarded by {per_token[1]:+.4f}")
