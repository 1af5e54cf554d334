"""Nucleus (top-p) filtering: hista's sampler against transformers' TopPLogitsWarper, which sorts
every row of the vocabulary (what hista's sampler did before issue 66).

    python bench/top_p.py [--model smollm2-135m-instruct] [--rows 1000] [--settings 0.7:0.9,1.0:0.95]

The next-token logits of one chat prompt on ``--model`` (the tiny test model has near-uniform
logits: its nucleus is most of the vocabulary), repeated over ``--rows`` rows, at each
``temperature:top_p`` of ``--settings``. For each setting, in one run: the nucleus size, seconds
per call of both filters (best of ``--repeats``, taken in turn), their ratio, and how many tokens
each keeps or drops differently from an exact float64 reading of the same rule (keep a token
while the probability of the tokens above it is below top_p).
"""

from __future__ import annotations

import argparse
import time

from arguments import POSITIVE, checked, comma_list


def setting(text: str) -> tuple[float, float]:
    """An argparse type: ``T:P``, a temperature > 0 and a top_p in (0, 1)."""
    try:
        temperature, top_p = (float(part) for part in text.split(":"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not T:P (e.g. 0.7:0.9)") from None
    if not (temperature > 0 and 0 < top_p < 1):
        raise argparse.ArgumentTypeError(f"{text!r} is out of range: T > 0 and 0 < P < 1")
    return temperature, top_p


def exact(logits, top_p: float):
    """The kept tokens [rows, V] by the rule read in float64 over a full sort."""
    import torch

    probs = logits.double().softmax(dim=-1)
    ordered, order = probs.sort(dim=-1, descending=True)
    keep = ordered.cumsum(dim=-1) - ordered < top_p
    keep[..., 0] = True
    return torch.zeros_like(keep).scatter(-1, order, keep)


def main() -> None:
    import torch

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="smollm2-135m-instruct")
    ap.add_argument("--rows", type=POSITIVE, default=1000)
    ap.add_argument("--settings", type=comma_list(setting), default=[(0.7, 0.9), (1.0, 0.95), (0.1, 0.5)])
    ap.add_argument("--repeats", type=POSITIVE, default=3)
    args = ap.parse_args()

    from transformers.generation.logits_process import TopPLogitsWarper

    from hista.models import load
    from hista.rollout import prompt_ids
    from hista.rollout.sampling import _top_p_filter

    lm = checked(ap, load, args.model, device="cpu")
    _, ids = prompt_ids(lm, "What is 17 + 25? Explain each step.")
    with torch.no_grad():
        last = lm.model(input_ids=torch.tensor([ids])).logits[0, -1].float()
    print(f"{args.model}, vocabulary {last.numel():,}, {args.rows} rows, {torch.get_num_threads()} threads\n")
    print("| T | top_p | nucleus | transformers (sort) s | hista s | ratio | off the exact rule: transformers "
          "| hista |")
    print("|---|---|---|---|---|---|---|---|")
    for temperature, top_p in args.settings:
        logits = (last / temperature).expand(args.rows, -1).contiguous()
        filters = {"sort": lambda x=logits, p=top_p: TopPLogitsWarper(p)(None, x.clone()),
                   "hista": lambda x=logits, p=top_p: _top_p_filter(x, p)}
        best = dict.fromkeys(filters, float("inf"))
        for _ in range(args.repeats):
            for name, run in filters.items():
                start = time.perf_counter()
                run()
                best[name] = min(best[name], time.perf_counter() - start)
        truth = exact(logits[:1], top_p)
        off = {name: int(((run()[:1] > float("-inf")) != truth).sum()) for name, run in filters.items()}
        print(f"| {temperature:g} | {top_p:g} | {int(truth.sum()):,} | {best['sort']:.3f} | {best['hista']:.3f} | "
              f"{best['sort'] / best['hista']:.1f} | {off['sort']} | {off['hista']} |")


if __name__ == "__main__":
    main()
