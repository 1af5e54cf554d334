"""bf16 autocast against fp32 for the policy's training passes on the CPU: speed and numerics.

    python bench/bf16_numerics.py [--model smollm2-135m-instruct] [--task builtin:arith?steps=2]
        [--prompts 8] [--rollouts 4] [--max-new-tokens 96] [--repeats 3]

Samples one fixed batch with hista's engine (fp32, temperature 0.7), then runs the policy's
forward and backward on it in fp32 and under ``torch.autocast("cpu", dtype=torch.bfloat16)``
(fp32 master weights and gradients, as ``trl.bf16: true`` with ``trl.use_cpu: true`` trains).
Prints, side by side:

* seconds of the forward (log-probs) and of forward + backward, best of ``--repeats``, and the
  ratio bf16 / fp32;
* the log-prob gap over the completion tokens (max and mean |log p_bf16 - log p_fp32|) and the
  fraction of tokens whose importance ratio exp(gap) leaves [0.99, 1.01] or the PPO clip range
  [0.8, 1.28];
* the gradient of a fixed policy-gradient loss (-A_t log p_t summed over tokens, A_t from a
  seeded normal): cosine of the whole gradient bf16 against fp32, the lowest cosine of a single
  weight tensor, and the relative norm difference.

The CPU's bf16 support is printed first (``avx512_bf16``, ``amx_bf16`` in /proc/cpuinfo).
"""

from __future__ import annotations

import argparse
import contextlib
import time

from arguments import POSITIVE, checked


def cpu_flags() -> str:
    try:
        text = open("/proc/cpuinfo").read()
    except OSError:
        return "unknown"
    flags = set(next((line.split(":", 1)[1].split() for line in text.splitlines() if line.startswith("flags")), []))
    return ", ".join(f for f in ("avx512_bf16", "amx_bf16", "amx_tile") if f in flags) or "none of avx512_bf16, amx"


def batch(lm, task: str, prompts: int, rollouts: int, max_new_tokens: int):
    """input ids, attention mask and completion mask [B, L] of one sampled batch (right-padded)."""
    import torch

    from hista import tasks
    from hista.rollout.config import SamplingConfig
    from hista.rollout.engines import make_engine

    problems = tasks.load(task, n=prompts, seed=0, split="train")
    engine = make_engine("hf", lm, SamplingConfig(temperature=0.7, max_new_tokens=max_new_tokens))
    groups = engine.generate([p["problem"] for p in problems], rollouts, seed=0)
    rows = [(list(r.prompt_ids), list(r.completion_ids)) for g in groups for r in g]
    width = max(len(p) + len(c) for p, c in rows)
    pad = lm.tokenizer.pad_token_id or 0
    ids = torch.full((len(rows), width), pad, dtype=torch.long)
    attention = torch.zeros_like(ids)
    completion = torch.zeros_like(ids, dtype=torch.bool)
    for i, (p, c) in enumerate(rows):
        ids[i, : len(p) + len(c)] = torch.tensor(p + c)
        attention[i, : len(p) + len(c)] = 1
        completion[i, len(p): len(p) + len(c)] = True
    return ids, attention, completion


def token_logps(model, ids, attention, bf16: bool):
    """log p(token_t | tokens_<t) [B, L-1] of every position, fp32 or under bf16 autocast."""
    import torch

    ctx = torch.autocast("cpu", dtype=torch.bfloat16) if bf16 else contextlib.nullcontext()
    with ctx:
        logits = model(input_ids=ids, attention_mask=attention).logits[:, :-1]
    return torch.log_softmax(logits.float(), dim=-1).gather(-1, ids[:, 1:, None]).squeeze(-1)


def best_of(repeats: int, fn) -> tuple[float, object]:
    best, out = float("inf"), None
    for _ in range(repeats):
        start = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - start)
    return best, out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="smollm2-135m-instruct")
    ap.add_argument("--task", default="builtin:arith?steps=2")
    ap.add_argument("--prompts", type=POSITIVE, default=8)
    ap.add_argument("--rollouts", type=POSITIVE, default=4)
    ap.add_argument("--max-new-tokens", type=POSITIVE, default=96)
    ap.add_argument("--repeats", type=POSITIVE, default=3)
    args = ap.parse_args()
    import torch

    from hista import tasks
    from hista.models import load

    checked(ap, tasks.check_spec, args.task)
    lm = load(args.model, device="cpu")
    model = lm.model
    ids, attention, completion = batch(lm, args.task, args.prompts, args.rollouts, args.max_new_tokens)
    mask = completion[:, 1:]
    advantages = torch.randn(mask.shape, generator=torch.Generator().manual_seed(0)) * mask
    print(f"CPU bf16 support: {cpu_flags()}; torch {torch.__version__}, {torch.get_num_threads()} threads")
    print(f"batch: {ids.shape[0]} rows x {ids.shape[1]} positions, {int(mask.sum())} completion tokens "
          f"({100 * (1 - float(attention.float().mean())):.0f}% padding)")

    results = {}
    for name, bf16 in (("fp32", False), ("bf16 autocast", True)):
        model.eval()
        with torch.no_grad():
            forward_s, logps = best_of(args.repeats, lambda bf16=bf16: token_logps(model, ids, attention, bf16))

        def step(bf16=bf16):
            model.zero_grad(set_to_none=True)
            loss = -(advantages * token_logps(model, ids, attention, bf16)).sum() / mask.sum()
            loss.backward()
            return {k: p.grad.detach().clone() for k, p in model.named_parameters() if p.grad is not None}

        model.train()
        step_s, grads = best_of(args.repeats, step)
        results[name] = {"forward": forward_s, "step": step_s, "logps": logps, "grads": grads}
    fp32, bf16 = results["fp32"], results["bf16 autocast"]
    print("\n| seconds (best of %d) | fp32 | bf16 autocast | bf16 / fp32 |\n|---|---|---|---|" % args.repeats)
    for key, label in (("forward", "forward (no grad, log-probs)"), ("step", "forward + backward")):
        print(f"| {label} | {fp32[key]:.2f} | {bf16[key]:.2f} | {bf16[key] / fp32[key]:.2f}x |")
    gap = (bf16["logps"] - fp32["logps"])[mask]
    ratio = gap.exp()
    keys = [k for k in fp32["grads"] if k in bf16["grads"]]
    a = torch.cat([fp32["grads"][k].flatten() for k in keys]).double()  # 135M terms: sum in float64
    b = torch.cat([bf16["grads"][k].flatten() for k in keys]).double()
    cos = float(torch.nn.functional.cosine_similarity(a, b, dim=0))
    per = {k: float(torch.nn.functional.cosine_similarity(fp32["grads"][k].flatten().double(),
                                                          bf16["grads"][k].flatten().double(), dim=0))
           for k in keys if fp32["grads"][k].norm() > 0}
    worst = min(per, key=per.get)
    print("\n| numerics, bf16 autocast against fp32 | value |\n|---|---|")
    print(f"| log-prob gap over completion tokens: max / mean | {gap.abs().max():.4f} / {gap.abs().mean():.4f} |")
    print(f"| tokens with ratio outside [0.99, 1.01] | {100 * float(((ratio - 1).abs() > 0.01).float().mean()):.1f}% |")
    print(f"| tokens with ratio outside the clip range [0.8, 1.28] | "
          f"{100 * float(((ratio < 0.8) | (ratio > 1.28)).float().mean()):.2f}% |")
    print(f"| gradient cosine, whole model | {cos:.4f} |")
    print(f"| lowest cosine of one weight tensor | {per[worst]:.4f} ({worst}) |")
    print(f"| relative norm difference, whole gradient | {float((b - a).norm() / a.norm()):.4f} |")


if __name__ == "__main__":
    main()
