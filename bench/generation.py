"""Generation throughput of the rollout engine vs the model's raw forward (prefill) throughput.

    python bench/generation.py [--model smollm2-135m-instruct] [--new-tokens 32]

Prints generated tokens/s at batch 1, 16 and 64 (EOS disabled so every row decodes the same
number of tokens) and, in the same run, prefill tokens/s of one forward pass over
prompt + completion, with the ratio between the two (SPEC §12).
"""

from __future__ import annotations

import argparse
import time

import torch

from hista.models import forward, load
from hista.rollout import prompt_ids


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="smollm2-135m-instruct")
    ap.add_argument("--new-tokens", type=int, default=32)
    ap.add_argument("--batches", default="1,16,64")
    args = ap.parse_args()

    lm = load(args.model)
    print(f"model {lm.name} on {lm.device}, torch threads {torch.get_num_threads()}")
    _, prompt = prompt_ids(lm, "Start with 7. Add 5. Then multiply by 2. What number do you get?")
    print(f"prompt {len(prompt)} tokens, {args.new_tokens} new tokens per row\n")
    print(f"{'batch':>5s} {'gen s':>8s} {'gen tok/s':>10s} {'prefill tok/s':>14s} {'prefill/gen':>12s}")
    for batch in [int(b) for b in args.batches.split(",")]:
        ids = torch.tensor([prompt] * batch, device=lm.device)
        torch.manual_seed(0)
        start = time.perf_counter()
        with torch.no_grad():
            seqs = lm.model.generate(input_ids=ids, attention_mask=torch.ones_like(ids), do_sample=True,
                                     top_k=0, max_new_tokens=args.new_tokens, min_new_tokens=args.new_tokens,
                                     pad_token_id=lm.tokenizer.pad_token_id)
        gen_s = time.perf_counter() - start
        gen_rate = batch * args.new_tokens / gen_s
        completions = [row[len(prompt):].tolist() for row in seqs.cpu()]
        start = time.perf_counter()
        forward(lm, [prompt] * batch, completions, batch_size=min(batch, 16))
        pre_s = time.perf_counter() - start
        pre_rate = batch * (len(prompt) + args.new_tokens) / pre_s
        print(f"{batch:5d} {gen_s:8.2f} {gen_rate:10.1f} {pre_rate:14.1f} {pre_rate / gen_rate:11.1f}x", flush=True)


if __name__ == "__main__":
    main()
