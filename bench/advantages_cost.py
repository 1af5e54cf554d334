"""What `hista.advantages.token_advantages` costs next to a plain forward of the same batch
(docs/estimators.md "Use in your own loop").

    python bench/advantages_cost.py [--model smollm2-135m-instruct] [--prompts 4] [--group 8] [--tokens 128]

A batch of G completions of `--tokens` random tokens for each of `--prompts` chat prompts. Timed,
best of `--repeats`, one process: a plain no-grad forward of the padded batch (logits, what a loop
computes for its log-probs anyway), the advantages of grpo, numca (text decoding), hista and probe
with the model given (their hidden-state pass inside), and hista from hidden states already at
hand; figures and ratios to the plain forward side by side.
"""

from __future__ import annotations

import argparse
import time

from arguments import POSITIVE, checked

from hista.advantages import token_advantages
from hista.models import load
from hista.models.forward import decoder_layers, hidden_states


def best(fn, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


def main() -> None:
    import torch

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="smollm2-135m-instruct")
    ap.add_argument("--prompts", type=POSITIVE, default=4)
    ap.add_argument("--group", type=POSITIVE, default=8)
    ap.add_argument("--tokens", type=POSITIVE, default=128)
    ap.add_argument("--repeats", type=POSITIVE, default=3)
    args = ap.parse_args()
    lm = checked(ap, load, args.model)
    tok, model = lm.tokenizer, lm.model
    g = torch.Generator().manual_seed(0)
    prompts, completions, keys = [], [], []
    for p in range(args.prompts):
        chat = [{"role": "user", "content": f"What is {p} + {p + 3}? Explain."}]
        prompt = tok.apply_chat_template(chat, add_generation_prompt=True, return_dict=True)["input_ids"]
        for _ in range(args.group):
            prompts.append(prompt)
            completions.append(torch.randint(100, 10000, (args.tokens,), generator=g).tolist())
            keys.append(p)
    rewards = torch.randint(0, 2, (len(prompts),), generator=g).float()
    width = max(map(len, prompts))
    ids = torch.tensor([[tok.pad_token_id] * (width - len(p)) + p + c for p, c in zip(prompts, completions)])
    mask = torch.tensor([[0] * (width - len(p)) + [1] * (len(p) + len(c)) for p, c in zip(prompts, completions)])

    def plain():
        with torch.no_grad():
            model(input_ids=ids, attention_mask=mask)

    rows = [("plain forward (logits)", best(plain, args.repeats))]
    for name in ("grpo", "numca", "hista", "probe"):
        rows.append((f"token_advantages {name}" + (", model given" if name in ("hista", "probe") else ""),
                     best(lambda n=name: token_advantages(n, prompts, completions, rewards, keys, model=model,
                                                          tokenizer=tok), args.repeats)))
    from hista import estimators

    layer = estimators.get("hista").hidden_layer(decoder_layers(model))
    states = hidden_states(lm, prompts, completions, layer=layer)
    rows.append(("token_advantages hista, states given",
                 best(lambda: token_advantages("hista", prompts, completions, rewards, keys, hidden=states),
                      args.repeats)))
    base = rows[0][1]
    print(f"{lm.name}: {args.prompts} prompts x {args.group} completions of {args.tokens} tokens "
          f"(prompts {width} tokens), {torch.get_num_threads()} threads, best of {args.repeats}\n")
    print("| what | seconds | vs plain forward |\n|---|---|---|")
    for what, seconds in rows:
        print(f"| {what} | {seconds:.3f} | {seconds / base:.2f}x |")


if __name__ == "__main__":
    main()
