"""``hista sveb grad``: how close the policy-gradient step each estimator's credit makes comes to
the true gradient of expected reward (issue 64; docs/sveb.md "Update direction").

Reading order:

1. ``GradConfig``   (:mod:`hista.sveb.presets`) the settings: model, task, N prompts, R groups of
                    G rollouts per prompt, the training recipe's loss, clip and temperature, the
                    space (``head`` or ``all``)
2. ``sample``       OUT/pool.jsonl: R·G rollouts per prompt, verified (one line per prompt,
                    appended as it finishes: a rerun resumes)
3. ``measure``      OUT/steps.jsonl: for every prompt, group r (G rollouts) is the training
                    group and the other (R − 1)·G rollouts are the reference, the leave-one-out
                    REINFORCE gradient of expected reward (cross-fitting: the step and its
                    reference never share a rollout); every estimator's advantages on the R
                    groups → the recipe's per-token loss weights → its step → the metrics
4. ``step_metrics`` per step: cosine with the reference (the same before and after clipping:
                    clipping rescales a step), cosine of Adam's first update from that step
                    (clipped first, ``ĝ / (|ĝ| + ε)``), the share of the step's weight on the
                    tokens the reference moves most (top decile of |∇log π(y_t)·ref|), the norm,
                    and the share of the group's tokens whose advantage differs from GRPO's by
                    more than 0.1 (``differ``: where the estimator's credit is its own)

Summaries with bootstrap intervals over prompts and paired differences against GRPO are in
:mod:`hista.sveb.grad_summary`. A group whose rewards are all equal is skipped for every
estimator alike (dynamic sampling drops it; GRPO's step there is zero).
"""

from __future__ import annotations

import copy
import json
import math
from pathlib import Path
from typing import Callable, Mapping, Optional, Sequence

import torch
from tqdm.auto import tqdm

from .. import estimators, losses, provenance, tasks
from ..advantages import token_advantages
from ..errors import InputError
from ..estimators import Estimator
from ..jsonio import (
    append_jsonl,
    check_not_inputs,
    check_output_dir,
    cut_unterminated,
    loads,
    read_records,
    write_atomic,
)
from ..models.forward import decoder_layers, model_hidden_states
from ..rollout.engine import eos_ids
from ..rollout.sample import score
from ..types import Rollout
from .grad_space import SPACES, Rows
from .presets import GradConfig

#: the tokens a step's weight is measured on: the top fraction of |response| to the reference
TOP_FRACTION = 0.1
#: Adam's epsilon (torch and TRL's default)
ADAM_EPS = 1e-8
#: an advantage this far from the baseline's on the same token is credit of the estimator's own
#: (issue 65: the share of such tokens says whether an arm tests credit at all)
DIFFER = 0.1

#: a credit function: (prompt ids, completion ids per row, rewards, hidden states by layer, a group key per
#: row) -> per-token advantages [T_i] per row
Credit = Callable[[list[int], list[list[int]], list[float], Mapping[int, list[torch.Tensor]], list[str]],
                  list[torch.Tensor]]


# --- 2. sample ------------------------------------------------------------------------------

def check_settings(out: Path, settings: dict) -> None:
    """OUT/settings.json is written once; a rerun with other settings is refused (it would mix)."""
    path = out / "settings.json"
    if path.is_file():
        old = loads(path.read_text(), path=str(path))
        if old != settings:
            changed = sorted(k for k in set(old) | set(settings) if old.get(k) != settings.get(k))
            raise InputError(f"holds a measurement with other settings ({', '.join(changed)}); use another --out",
                             path=str(out))
    else:
        out.mkdir(parents=True, exist_ok=True)
        write_atomic(path, lambda f: json.dump(settings, f, indent=1, sort_keys=True))


def sample(config: GradConfig, out: Path, engine, *, progress: bool = True) -> list[dict]:
    """OUT/pool.jsonl: ``groups × group_size`` verified rollouts of each of the config's problems,
    a line per prompt appended as its rollouts finish (a rerun samples only the missing ones:
    prompt k's rollouts depend on the seed and k alone). The missing prompts' rollouts go through
    one engine call, so the decoder's batch stays full from one prompt to the next."""
    problems = [p for spec in config.tasks
                for p in tasks.load(spec, n=config.problems, seed=config.seed, split=config.split)]
    path = out / "pool.jsonl"
    cut_unterminated(path)
    done = {r["id"] for r in read_records(path, "sveb grad pool")}
    n = config.groups * config.group_size
    ends = set(eos_ids(engine.lm))
    todo = [(k, p) for k, p in enumerate(problems) if p["id"] not in done]

    def finished(i: int, rollouts: list[Rollout]) -> None:
        problem = todo[i][1]
        score(problem, rollouts)
        append_jsonl(path, [pool_record(problem, rollouts, ends)])

    with tqdm(total=len(todo) * n, desc="sampling", unit="seq", disable=not progress) as bar:
        if todo:
            engine.generate([p["problem"] for _, p in todo], n, seed=config.seed,
                            prompt_seeds=[k for k, _ in todo], progress=bar.update, on_group=finished)
    by_id = {r["id"]: r for r in read_records(path, "sveb grad pool")}
    return [by_id[p["id"]] for p in problems]


def pool_record(problem: dict, rollouts: Sequence[Rollout], ends: set) -> dict:
    """A line of OUT/pool.jsonl: the problem, its prompt ids and each rollout's completion ids,
    reward and whether it was cut at the cap (no end-of-sequence token: ``mask_truncated``)."""
    return {"id": problem["id"], "problem": problem["problem"], "answer": problem["answer"],
            "prompt_ids": rollouts[0].prompt_ids,
            "rows": [{"completion_ids": r.completion_ids, "reward": r.reward,
                      "truncated": not r.completion_ids or r.completion_ids[-1] not in ends} for r in rollouts]}


# --- 3. measure -----------------------------------------------------------------------------

def estimator_credit(est: Estimator, tokenizer, num_layers: int) -> tuple[Credit, Optional[int]]:
    """A registered estimator as a credit function over a prompt's R groups (one call, every
    group its own key, so that no value table carries from one group to the next; an estimator
    that learns across groups, the probe, fits each group on the prompt's other groups only: each
    call starts from the estimator as built), and the hidden layer it reads (None when it reads
    none)."""
    what = estimators.refusal("sveb grad", est)
    if what is not None:
        raise InputError(f"{est.name} needs {what}; grad measures the estimators that read a batch of rollouts "
                         "alone", field="methods")
    layer = est.hidden_layer(num_layers) if est.needs_hidden else None

    def credit(prompt, comps, rewards, hidden, keys):
        # the estimator as built, for every prompt: no history (the probe's recent batches) carries from
        # one prompt to the next, so that a prompt's record depends on it alone and a resumed run is exact
        adv = token_advantages(copy.deepcopy(est), [prompt] * len(comps), comps, rewards, keys,
                               hidden=hidden[layer] if layer is not None else None,
                               tokenizer=tokenizer if est.needs_text else None)
        return [adv[i, : len(c)] for i, c in enumerate(comps)]

    return credit, layer


def loss_weights(loss: losses.Loss, logps: list[torch.Tensor], advantages: list[torch.Tensor],
                 mask_rows: list[bool], entropies: list[torch.Tensor]) -> list[torch.Tensor]:
    """``−∂L/∂log π_t`` of the recipe's loss for one group at the first iteration (log π = the
    sampling policy's, ratio 1): the weight of each token's score gradient in the step."""
    width = max(len(x) for x in logps)

    def pad(xs):
        return torch.stack([torch.nn.functional.pad(x.float(), (0, width - len(x))) for x in xs])

    old = pad(logps)
    mask = torch.stack([torch.arange(width) < len(x) for x in logps]) & torch.tensor(mask_rows)[:, None]
    if not mask.any():
        return [torch.zeros(len(x)) for x in logps]
    logp = old.clone().requires_grad_(True)
    value, _ = loss(logp, old, pad(advantages), mask, entropies=pad(entropies) if loss.needs_entropy else None,
                    ref_logp=old if loss.needs_ref_logp else None)
    grad = torch.autograd.grad(value, logp)[0]
    return [-grad[i, : len(x)].detach() for i, x in enumerate(logps)]


def reference_parts(space, rows: Sequence[dict], groups: list[list[int]]) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Per group: (Σ R_i ∇log π(y_i), Σ ∇log π(y_i)) over its rows, every completion token counted:
    one step per distinct reward over the rows that earned it (``s_r``), so that every token goes
    through one output-layer product, then ``(Σ_r r·s_r, Σ_r s_r)``."""
    parts = []
    for members in groups:
        by_reward: dict[float, list[int]] = {}
        for i in members:
            by_reward.setdefault(rows[i]["reward"], []).append(i)
        u = v = None
        for r, m in by_reward.items():  # one [V·d] sum alive at a time, whatever the number of rewards
            s = space.step({i: torch.ones(len(rows[i]["completion_ids"])) for i in m})
            u = s * r if u is None else u.add_(s, alpha=r)
            v = s if v is None else v.add_(s)
        parts.append((u, v))
    return parts


def part_sums(parts, groups: Sequence[int]) -> tuple[torch.Tensor, torch.Tensor]:
    """The reference parts of ``groups`` summed: (Σ R_i ∇log π(y_i), Σ ∇log π(y_i)) over their rows."""
    groups = list(groups)
    u, v = parts[groups[0]][0].clone(), parts[groups[0]][1].clone()
    for k in groups[1:]:
        u += parts[k][0]
        v += parts[k][1]
    return u, v


def reference(parts, rewards_by_group: list[list[float]], keep: Sequence[int],
              total: Optional[tuple[torch.Tensor, torch.Tensor]] = None) -> torch.Tensor:
    """The leave-one-out REINFORCE gradient over the rows of groups ``keep``:
    ``(Σ R_i g_i − R̄ Σ g_i) / (n − 1)``, i.e. ``1/n Σ (R_i − mean of the others) g_i``.
    ``total``: the parts summed over every group; the sums over ``keep`` are then that less the
    groups left out (one subtraction for a leave-one-group-out reference, not R − 1 additions)."""
    keep = list(keep)
    if total is None:
        u, v = part_sums(parts, keep)
    else:
        u, v = total[0].clone(), total[1].clone()
        for k in sorted(set(range(len(parts))) - set(keep)):
            u -= parts[k][0]
            v -= parts[k][1]
    rewards = [x for k in keep for x in rewards_by_group[k]]
    n = len(rewards)
    if one_reward(rewards_by_group, keep):  # exactly 0: computed, it would be the rounding noise of u − R v
        return u.zero_()
    return u.sub_(v, alpha=sum(rewards) / n).div_(n - 1)


def one_reward(rewards_by_group: list[list[float]], groups: Sequence[int]) -> bool:
    """Whether every rollout of ``groups`` earned the same reward: their leave-one-out REINFORCE
    estimate is then exactly 0."""
    return len({x for k in groups for x in rewards_by_group[k]}) == 1


def cosine(a: torch.Tensor, b: torch.Tensor) -> float:
    na, nb = float(a.norm()), float(b.norm())
    return float(a @ b) / (na * nb) if na > 0 and nb > 0 else 0.0


def step_metrics(space, weights: dict[int, torch.Tensor], ref: torch.Tensor, ref_norm: float,
                 response: dict[int, torch.Tensor], gram, config: "GradConfig") -> dict:
    """The metrics of one step against its reference (module docstring, 4). ``<step, ref>`` is
    ``Σ_t w_t (∇log π_t · ref)`` and its norm comes from the space's Gram matrix: only Adam's
    first update needs the step itself."""
    w = torch.cat([weights[r] for r in weights]).float()
    r = torch.cat([response[k] for k in weights])
    norm = space.norm(weights, gram)
    out = {"cosine": float(w @ r) / (norm * ref_norm) if norm > 0 and ref_norm > 0 else 0.0, "norm": norm}
    if config.adam:
        step = space.step(weights)
        clipped = step.mul_(min(1.0, config.max_grad_norm / norm)) if norm > 0 else step
        out["adam"] = cosine(clipped.div_(clipped.abs().add_(ADAM_EPS)), ref)
    top = torch.topk(r.abs(), max(1, math.ceil(TOP_FRACTION * r.numel()))).indices
    total = float(w.abs().sum())
    out["top_share"] = float(w[top].abs().sum()) / total if total > 0 else 0.0
    return out


def features_and_hidden(model, prompt: list[int], comps: list[list[int]], layers: set, batch_size: int,
                        pad: int) -> tuple[list[torch.Tensor], dict[int, list[torch.Tensor]]]:
    """The output layer's input at the positions that predict each completion token (hidden
    state −1, after the final norm) and the hidden states of ``layers``, in one pass."""
    wanted = sorted({-1} | layers)
    states = model_hidden_states(model, [prompt] * len(comps), comps, layers=wanted, batch_size=batch_size, pad=pad)
    p = len(prompt)
    feats = [s[p - 1: p - 1 + len(c)] for s, c in zip(states[-1], comps)]
    return feats, states


def measure_prompt(model, record: dict, credits: Mapping[str, tuple[Credit, Optional[int]]], config: GradConfig,
                   loss: losses.Loss, *, batch_size: int = 8, pad: int = 0, baseline: Optional[str] = None) -> dict:
    """Every estimator's R steps on one prompt of the pool, against their cross-fitted references;
    with a ``baseline`` (GRPO's label), each step also records ``differ``: the share of the group's
    tokens whose advantage differs from the baseline's by more than :data:`DIFFER`."""
    rows = record["rows"]
    R, G = config.groups, config.group_size
    groups = [list(range(k * G, (k + 1) * G)) for k in range(R)]
    rewards = [[rows[i]["reward"] for i in g] for g in groups]
    flat_rewards = [x for r in rewards for x in r]
    if one_reward(rewards, range(R)):  # one reward for every rollout: the reference is 0, no step to measure
        return {"id": record["id"], "accuracy": sum(flat_rewards) / len(flat_rewards), "flat_groups": R,
                "split_half": None, "steps": {name: [None] * R for name in credits}}
    comps = [r["completion_ids"] for r in rows]
    prompt = record["prompt_ids"]
    layers = {layer for _, layer in credits.values() if layer is not None}
    need_feats = config.params == "head"
    feats, hidden = (features_and_hidden(model, prompt, comps, layers, batch_size, pad) if need_feats or layers
                     else (None, {}))
    space = SPACES[config.params](model, Rows(prompt, comps, feats), config.temperature)
    parts = reference_parts(space, rows, groups)
    total = part_sums(parts, range(R))
    half = R // 2
    halves = [range(half), range(half, R)]
    split_half = (cosine(reference(parts, rewards, halves[0]), reference(parts, rewards, halves[1], total))
                  if not any(one_reward(rewards, h) for h in halves) else None)  # a 0 half: none
    flat = [len(set(r)) == 1 for r in rewards]
    keys = [f"{record['id']}#{k}" for k in range(R) for _ in range(G)]
    advantages = {name: fn(prompt, comps, flat_rewards, hidden, keys) for name, (fn, _) in credits.items()}
    steps: dict[str, list[Optional[dict]]] = {name: [] for name in credits}
    for k, members in enumerate(groups):
        others = [j for j in range(R) if j != k]
        if flat[k] or one_reward(rewards, others):  # no step, or a reference of exactly 0
            for name in credits:
                steps[name].append(None)
            continue
        ref = reference(parts, rewards, others, total)
        response, gram, ref_norm = space.response(members, ref), space.gram(members), float(ref.norm())
        for name in credits:
            w = loss_weights(loss, [space.logps[i] for i in members], [advantages[name][i] for i in members],
                             [not (config.mask_truncated and rows[i]["truncated"]) for i in members],
                             [space.entropies[i] for i in members])
            metrics = step_metrics(space, dict(zip(members, w)), ref, ref_norm, response, gram, config)
            if baseline is not None:
                gap = torch.cat([advantages[name][i] - advantages[baseline][i] for i in members]).abs()
                metrics["differ"] = float((gap > DIFFER).float().mean()) if gap.numel() else 0.0
            steps[name].append(metrics)
    return {"id": record["id"], "accuracy": sum(flat_rewards) / len(flat_rewards), "flat_groups": sum(flat),
            "split_half": split_half, "steps": steps}


def measure(config: GradConfig, out: Path, model, pool: Sequence[dict],
            credits: Mapping[str, tuple[Credit, Optional[int]]], *, pad: int = 0, progress: bool = True,
            baseline: Optional[str] = None) -> list[dict]:
    """OUT/steps.jsonl: :func:`measure_prompt` for every prompt of ``pool`` not measured yet,
    a line each as it finishes (a rerun resumes; a prompt's record depends on it alone)."""
    path = out / "steps.jsonl"
    cut_unterminated(path)
    done = {r["id"] for r in read_records(path, "sveb grad measurement")}
    loss = losses.get(config.loss, **config.loss_config)
    model.eval()
    for record in tqdm([r for r in pool if r["id"] not in done], desc="measuring", unit="prompt",
                       disable=not progress):
        append_jsonl(path, [measure_prompt(model, record, credits, config, loss, pad=pad, baseline=baseline)])
    by_id = {r["id"]: r for r in read_records(path, "sveb grad measurement")}
    return [by_id[r["id"]] for r in pool if r["id"] in by_id]


#: the files a measurement writes in its folder
OUTPUTS = ("settings.json", "pool.jsonl", "steps.jsonl", "grad.json", "grad.md")


def check_out(out: Path, config: GradConfig, inputs: Sequence[str | Path]) -> None:
    """Refuse an output folder whose files would replace an input, or that holds rollouts or
    measurements not written by a measurement (no settings.json beside them): nothing is
    appended to a file that is not this command's."""
    check_not_inputs([out / name for name in OUTPUTS], [*tasks.input_files(config.tasks), *inputs])
    check_output_dir(out, OUTPUTS)
    if not (out / "settings.json").is_file() and any((out / n).exists() for n in ("pool.jsonl", "steps.jsonl")):
        raise InputError("holds pool.jsonl or steps.jsonl without the settings.json a measurement writes first: "
                         "not an output of sveb grad; choose another --out", path=str(out))


def run(config: GradConfig, out: str | Path, methods: Sequence[str], *, lm=None, progress: bool = True,
        inputs: Sequence[str | Path] = ()) -> dict:
    """Sample, measure and summarise into OUT (resumable at every stage); ``inputs``: the other
    files the command read (a methods file, a recipe), which no output may replace."""
    from ..rollout.config import SamplingConfig
    from ..rollout.engines import load_model, make_engine
    from .grad_summary import summarise, write_outputs
    from .methods import build_methods

    out = Path(out)
    check_out(out, config, inputs)
    try:
        losses.get(config.loss, **config.loss_config)
    except ValueError as exc:
        raise InputError(str(exc), field="loss") from None
    built = build_methods(methods)
    check_settings(out, {**config.settings(), "methods": list(methods)})
    lm = lm or load_model("hf", config.model)
    engine = make_engine("hf", lm, SamplingConfig(temperature=config.temperature, max_new_tokens=config.max_new_tokens,
                                                  batch_size=config.batch_size))
    pool = sample(config, out, engine, progress=progress)
    num_layers = decoder_layers(lm.model)
    credits = {m.label: estimator_credit(m.estimator, lm.tokenizer, num_layers) for m in built.values()}
    baseline = next((m.label for m in built.values() if m.baseline), None)
    records = measure(config, out, lm.model, pool, credits, pad=lm.tokenizer.pad_token_id or 0, progress=progress,
                      baseline=baseline)
    summary = {**summarise(records, list(credits), baseline), "code": provenance.code()}
    write_outputs(out, summary)
    return summary
