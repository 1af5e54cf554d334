"""Issue 63, part 1: a baseline for the state s_t of rollout i may use s_t and the *other* rollouts
of the group, never rollout i's reward or its tokens after t. Run over every registered estimator
and profile (plugins included, through the registry): flipping R_i, or replacing rollout i's tokens
after t (their text and hidden states with them), leaves V_i(s_t) unchanged for every t < T_i.
The exceptions are named with their reason; an estimator written to leak fails the check."""

from __future__ import annotations

import dataclasses
import random
from typing import Optional, Sequence

import pytest
import torch
from test_estimator_contract import IDS, METHODS, PIECES, _estimator, _group, _rollout, critic  # noqa: F401

from hista import estimators
from hista.estimators import Estimator
from hista.estimators.leakage import reward_leak
from hista.types import Rollout, RolloutGroup, State

#: (name, profile) -> why it may read R_i; everything else must not
EXCEPTIONS = {
    ("grpo", "default"): "the group mean holds R_i with weight 1/G: it only rescales the advantage by (G-1)/G",
    ("numca", "reference"): "reproduces the public reference (tests/data/numca_reference_golden.json): its table "
                            "counts rollout i itself (a macro state reached by rollout i alone is valued at R_i) and "
                            "its state of s_t is the whole completion's milestone path",
    ("hista", "paper"): "reproduces the paper's rule, which reads R_i: V(s_0) and the kNN fallback are the group "
                        "mean, and rollout i's own earlier nodes, labelled R_i, are candidates (include_self)",
    ("hista", "reference"): "reproduces the reference's rule, which reads R_i: rollout i's own nodes among the "
                            "neighbours at the clamped distance (and its trainer's chain starts at the group mean)",
}
#: (name, profile) -> how it leaks today: defects of issue 63, each to be fixed and then dropped
#: from here (the test fails when one stops leaking, so that this list stays true)
DEFECTS: dict = {}


def _specs(seed: int) -> list[tuple[list[str], float]]:
    rng = random.Random(seed)
    return [([rng.choice(PIECES) for _ in range(rng.randint(4, 10))], float(k % 2)) for k in range(6)]


def _with_rollout(group: RolloutGroup, i: int, rollout: Rollout) -> RolloutGroup:
    rollouts = list(group.rollouts)
    rollouts[i] = rollout
    return dataclasses.replace(group, rollouts=rollouts)


def _rewritten_after(est, rollout: Rollout, t: int, seed: int) -> Rollout:
    """``rollout`` with its tokens after t replaced (its text, offsets and hidden states too)."""
    rng = random.Random(seed)
    pieces = [PIECES[i - 10] for i in rollout.completion_ids[:t]]
    pieces += [rng.choice([p for p in PIECES if PIECES.index(p) + 10 != old]) for old in rollout.completion_ids[t:]]
    new = _rollout(est, pieces, rollout.reward, seed, prompt_len=len(rollout.prompt_ids))
    if rollout.hidden is None:
        return new
    cut = len(rollout.prompt_ids) + t
    return dataclasses.replace(new, hidden=torch.cat([rollout.hidden[:cut], new.hidden[cut:]]))


def _fitted(est: Estimator, seed: int) -> Estimator:
    """An estimator that learns across groups, fitted on other groups (as SVEB and training do)."""
    if not isinstance(est, estimators.LearnsAcrossGroups):
        return est
    others = [_group(est, _specs(seed + 100 + k), seed + 100 + k) for k in range(4)]
    data = est.data(others[0])
    for g in others[1:]:
        data = data + est.data(g)
    return est.fitted(data)


def leaks(est: Estimator, group: RolloutGroup, seed: int = 0, atol: float = 1e-6) -> Optional[str]:
    """Where V_i(s_t) of ``group`` changes with rollout i's reward or its tokens after t, or None."""
    for i, rollout in enumerate(group.rollouts):
        states = [State(rollout=i, t=t) for t in range(len(rollout.completion_ids))]
        moved = reward_leak(est, group, states)
        if moved.max() > atol:
            t = int(moved.argmax())
            return f"V_{i}(s_{t}) moves by {float(moved[t]):.3g} when R_{i} flips"
        base = est.state_values(group, states)
        for t in range(len(rollout.completion_ids)):
            changed = _with_rollout(group, i, _rewritten_after(est, rollout, t, seed + 7 * i + t))
            value = est.state_values(changed, [State(rollout=i, t=t)])
            if (value - base[t]).abs().max() > atol:
                return f"V_{i}(s_{t}) moves by {float((value - base[t]).abs()):.3g} with rollout {i}'s tokens after {t}"
    return None


@pytest.mark.parametrize("name, profile", METHODS, ids=IDS)
@pytest.mark.parametrize("seed", range(2))
def test_no_value_reads_its_own_rollouts_outcome(name, profile, seed, request):
    est = _fitted(_estimator(name, profile, request), seed)
    found = leaks(est, _group(est, _specs(seed), seed), seed)
    if (name, profile) in EXCEPTIONS or (name, profile) in DEFECTS:
        assert found is not None, f"{name}-{profile} is listed as leaking but does not: drop it from the list"
    else:
        assert found is None, f"{name}-{profile}: {found}"


@pytest.mark.parametrize("option", [{"answered": "reward", "drop_last": True}, {"leave_one_out": False},
                                    {"states": "path", "merge_tokens": 50, "drop_last": True}],
                         ids=["answered=reward", "leave_one_out=False", "states=path"])
def test_numcas_leaking_options_leak(option):
    """Numca's options kept to reproduce earlier figures each break the rule (docs/estimators.md
    "Numca"): the answer valued at R_i, a table that counts rollout i, the state of s_t from the
    whole completion."""
    est = estimators.get("numca", **option)
    assert any(leaks(est, _group(est, _specs(seed), seed), seed) for seed in range(2))


class _OwnReward(Estimator):
    """Written to leak: the value of every state of rollout i is R_i."""

    def _raw_advantages(self, group: RolloutGroup, gae_lambda: float) -> list[torch.Tensor]:
        return [torch.zeros(len(r.completion_ids)) for r in group.rollouts]

    def state_values(self, group: RolloutGroup, states: Sequence[State]) -> torch.Tensor:
        return torch.tensor([group.rollouts[s.rollout].reward for s in states], dtype=torch.float32)


def test_an_estimator_written_to_leak_fails_the_check():
    est = _OwnReward()
    assert leaks(est, _group(est, _specs(0))) == "V_0(s_0) moves by 1 when R_0 flips"
