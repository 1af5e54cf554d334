"""Where the credit of a group's finished answers lies, under GRPO and Hista (an analysis after
seed 0, not part of DESIGN.md): hista-seed0's answers ran on past the ninth part to the 256-token
cap, and its logged mean advantage was negative from step 1 while GRPO's was positive.

For the first N problems of the pool (those whose 8 rollouts do not all earn one reward, as
dynamic sampling keeps them), the base model samples 8 rollouts at T 0.7 with 256 new tokens, as
the arms' step 1 does. The recipe masks a cut (truncated) rollout out of the loss, but its reward
still enters the group. For each estimator the script reports, over the finished rollouts (the
ones trained on): the mean advantage of their tokens, of each half, and of the last token (the
stop), and the share of them whose stop gets a negative advantage; once with every rollout in the
group (as the run does) and once with the cut rollouts left out of the group.

    python results/train-study-3/stop_credit.py [N [FIRST]]   # N = 16 groups from pool problem FIRST = 0:
                                                              # 13 minutes on a shared core

The last lines give the Hista − GRPO difference of the stop token's advantage over the same
finished rollouts with a 95% bootstrap interval that resamples groups.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import torch

from hista import rewards, tasks
from hista.advantages import token_advantages
from hista.models import load
from hista.rollout import SYSTEM_PROMPT, GenerateEngine, SamplingConfig
from hista.sveb import bootstrap_ci

HERE = Path(__file__).parent
CAP = 256


def sample(n: int, first: int, lm) -> list[dict]:
    """Per kept problem: prompt ids, 8 completions, their rewards and which were cut."""
    tok = lm.tokenizer
    engine = GenerateEngine(lm, SamplingConfig(temperature=0.7, max_new_tokens=CAP))
    pool = [json.loads(line)["id"] for line in (HERE / "pool.jsonl").read_text().splitlines()]
    records = {r["id"]: r for r in tasks.load(f"jsonl:{HERE / 'train.jsonl'}")}
    groups = []
    for k, pid in enumerate(pool[first:], start=first):
        if len(groups) == n:
            break
        rec = records[pid]
        chat = [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": rec["problem"]}]
        prompt = tok.apply_chat_template(chat, add_generation_prompt=True, tokenize=True, return_dict=True)["input_ids"]
        rollouts = engine.generate_from_ids([prompt], 8, seed=k)[0]
        ids = [list(r.completion_ids) for r in rollouts]
        paid = [float(rewards.verify(rec["verifier"], tok.decode(c, skip_special_tokens=True), rec["answer"]))
                for c in ids]
        cut = [len(c) >= CAP and c[-1] != tok.eos_token_id for c in ids]
        print(f"problem {k}: rewards {[round(x, 2) for x in paid]}, cut {sum(cut)}", file=sys.stderr, flush=True)
        if len(set(paid)) > 1:
            groups.append({"id": pid, "prompt": prompt, "ids": ids, "rewards": paid, "cut": cut})
    return groups


def credit(groups: list[dict], name: str, lm, keep_cut: bool) -> dict:
    """Mean advantages over the finished rollouts' tokens under ``name``, the groups holding their
    cut rollouts or not, and each finished rollout's stop advantage with its group (``stops``)."""
    rows = [(g["id"], g["prompt"], c, r, x) for g in groups for c, r, x in zip(g["ids"], g["rewards"], g["cut"])
            if keep_cut or not x]
    sizes = {}
    for gid, *_ in rows:
        sizes[gid] = sizes.get(gid, 0) + 1
    rows = [row for row in rows if sizes[row[0]] >= 2]  # a group needs two rollouts
    adv = token_advantages(name, [r[1] for r in rows], [r[2] for r in rows], [r[3] for r in rows],
                           [r[0] for r in rows], model=lm.model, tokenizer=lm.tokenizer)
    done = [i for i, r in enumerate(rows) if not r[4]]
    length = [len(rows[i][2]) for i in done]
    whole = torch.cat([adv[i, :n] for i, n in zip(done, length)])
    first = torch.cat([adv[i, :n // 2] for i, n in zip(done, length)])
    second = torch.cat([adv[i, n // 2:n] for i, n in zip(done, length)])
    stop = torch.tensor([adv[i, n - 1].item() for i, n in zip(done, length)])
    return {"tokens": whole.mean().item(), "first half": first.mean().item(), "second half": second.mean().item(),
            "stop": stop.mean().item(), "stop < 0": (stop < 0).float().mean().item(), "finished": len(done),
            "stops": [(rows[i][0], v) for i, v in zip(done, stop.tolist())],
            "finished rows": [(len(rows[i][2]), rows[i][3]) for i in done]}


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 16
    first = int(sys.argv[2]) if len(sys.argv) > 2 else 0
    torch.manual_seed(0)
    lm = load("smollm2-135m-instruct")
    groups = sample(n, first, lm)
    every = [(r, x) for g in groups for r, x in zip(g["rewards"], g["cut"])]
    finished = [r for r, x in every if not x]
    cut = [r for r, x in every if x]
    print(f"{len(groups)} groups, {len(every)} rollouts: {len(finished)} finished (mean reward "
          f"{sum(finished) / len(finished):.3f}), {len(cut)} cut at {CAP} tokens (mean reward "
          f"{sum(cut) / max(len(cut), 1):.3f})\n")
    print("| estimator | group | finished rollouts' tokens | first half | second half | stop token | stops < 0 |")
    print("|---|---|---|---|---|---|---|")
    stops = {}
    for name in ("grpo", "hista"):
        for keep_cut in (True, False):
            c = credit(groups, name, lm, keep_cut)
            stops[name, keep_cut] = c["stops"]
            if keep_cut:
                finished = c["finished rows"]  # (length, reward) of each finished rollout, the same for both
            print(f"| {name} | {'with the cut rollouts (the run)' if keep_cut else 'without them'} | "
                  f"{c['tokens']:+.3f} | {c['first half']:+.3f} | {c['second half']:+.3f} | {c['stop']:+.3f} | "
                  f"{c['stop < 0']:.0%} of {c['finished']} |")
    print()
    hista = [v for _, v in stops["hista", True]]
    grpo = [v for _, v in stops["grpo", True]]
    median = sorted(n for n, _ in finished)[len(finished) // 2]
    for label, pick in (("shorter", lambda n: n < median), ("longer", lambda n: n >= median)):
        k = [i for i, (n, _) in enumerate(finished) if pick(n)]
        def mean(xs: list[float], k: list[int] = k) -> float:
            return sum(xs[i] for i in k) / len(k)
        print(f"- the {len(k)} {label} finished rollouts (median {median} tokens): mean reward "
              f"{mean([r for _, r in finished]):.3f}, stop advantage Hista {mean(hista):+.3f}, GRPO {mean(grpo):+.3f}")
    for keep_cut in (True, False):
        ids = [g for g, _ in stops["grpo", keep_cut]]
        d = [h - g for (_, h), (_, g) in zip(stops["hista", keep_cut], stops["grpo", keep_cut])]
        lo, hi = bootstrap_ci(d, clusters=ids)
        print(f"- stop token, Hista − GRPO, {'with the cut rollouts' if keep_cut else 'without them'}: "
              f"{sum(d) / len(d):+.3f} [{lo:+.3f}, {hi:+.3f}] over {len(d)} finished rollouts in "
              f"{len(set(ids))} groups")


if __name__ == "__main__":
    main()
