"""A GRPO-style policy-gradient loop of your own, with Hista's per-token advantages.

    python examples/own_loop.py [--model smollm2-135m-instruct] [--estimator hista] [--steps 3]

Each step samples G completions for a few arithmetic problems with plain `model.generate`,
scores them with hista's math verifier, asks `hista.advantages.token_advantages` for per-token
advantages (one call; Hista runs the model once for its hidden states) and takes one REINFORCE
step on them. Any transformers causal LM and its tokenizer work in place of `load(...)`.
"""
import argparse

import torch

from hista import estimators, rewards, tasks
from hista.advantages import token_advantages
from hista.models import load

ap = argparse.ArgumentParser()
ap.add_argument("--model", default="smollm2-135m-instruct")
ap.add_argument("--estimator", default="hista")
ap.add_argument("--steps", type=int, default=3)
ap.add_argument("--group", type=int, default=4)
args = ap.parse_args()

lm = load(args.model)
model, tok = lm.model, lm.tokenizer
tok.padding_side = "left"  # prompts padded on the left, completions on the right
estimator = estimators.get(args.estimator)  # one object for the whole run (the probe keeps a history in it)
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-6)
problems = tasks.load("builtin:arith?steps=1", n=4 * args.steps, seed=0, split="train")
torch.manual_seed(0)

for step in range(args.steps):
    batch = [p for p in problems[4 * step: 4 * step + 4] for _ in range(args.group)]  # G rows per problem
    chats = [[{"role": "user", "content": p["problem"]}] for p in batch]
    prompt = tok.apply_chat_template(chats, add_generation_prompt=True, padding=True, return_tensors="pt",
                                     return_dict=True)
    model.eval()
    with torch.no_grad():
        out = model.generate(**prompt, do_sample=True, temperature=0.7, max_new_tokens=48,
                             pad_token_id=tok.pad_token_id)
    completion_ids = out[:, prompt["input_ids"].size(1):]
    ends = completion_ids == tok.eos_token_id  # keep tokens up to and including the first EOS
    completion_mask = (ends.cumsum(1) - ends.long() == 0).long()
    texts = tok.batch_decode(completion_ids * completion_mask, skip_special_tokens=True)
    reward = [rewards.verify(p["verifier"], text, p["answer"]) for p, text in zip(batch, texts)]

    adv = token_advantages(estimator, prompt["input_ids"], completion_ids, reward, [p["id"] for p in batch],
                           prompt_mask=prompt["attention_mask"], completion_mask=completion_mask,
                           model=model, tokenizer=tok)  # [B, T], zero past each completion's end

    model.train()
    ids = torch.cat([prompt["input_ids"], completion_ids], dim=1)
    mask = torch.cat([prompt["attention_mask"], completion_mask], dim=1)
    logits = model(input_ids=ids, attention_mask=mask).logits[:, prompt["input_ids"].size(1) - 1: -1]
    logp = torch.log_softmax(logits.float(), dim=-1).gather(-1, completion_ids.unsqueeze(-1)).squeeze(-1)
    loss = -(adv * logp * completion_mask).sum() / completion_mask.sum()
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    valid = adv[completion_mask.bool()]
    print(f"step {step}: mean reward {sum(reward) / len(reward):.3f}, {args.estimator} advantages over "
          f"{valid.numel()} tokens: mean {valid.mean():+.4f}, |max| {valid.abs().max():.4f}, "
          f"distinct per row {sum(len(set(r[m.bool()].tolist())) for r, m in zip(adv, completion_mask)) / len(adv):.1f}"
          f"; loss {loss.item():+.4f}")
