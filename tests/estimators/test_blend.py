"""The blend of Hista and Numca (docs/estimators.md "Blend"): its values are the weighted mean of
its members', its advantage chain reads them at the union of their value points, and its
weight is checked."""

from __future__ import annotations

import pytest
import torch

from hista.estimators import get
from hista.types import Rollout, RolloutGroup, State

TEXTS = [
    (" 3 + 4 = 7 so 7 x 2 = 14 and the answer is 14", 1.0),
    (" 3 + 4 = 8 so 8 x 2 = 16 and the answer is 16", 0.0),
    (" 3 + 4 = 7 so 7 x 2 = 15 and the answer is 15", 0.0),
    (" 3 + 4 = 7 then 7 x 2 = 14 and the answer is 14", 1.0),
    (" 4 + 3 = 7 so 7 x 2 = 14 so 14", 1.0),
    (" 3 + 4 = 8 so 8 x 2 = 16 and 16", 0.0),
]


def _group(seed: int = 0) -> RolloutGroup:
    """Rollouts with one token per word, text offsets and random-walk hidden states."""
    gen = torch.Generator().manual_seed(seed)
    prompt = torch.randn(4, 16, generator=gen)
    rollouts = []
    for text, reward in TEXTS:
        words = text.split(" ")[1:]
        offsets, pos = [], 0
        for w in words:
            offsets.append((pos, pos + len(w) + 1))
            pos += len(w) + 1
        steps = torch.randn(len(words), 16, generator=gen).cumsum(0) * 0.5
        rollouts.append(Rollout(list(range(1, 5)), [100 + len(w) for w in words], reward, completion_text=text,
                                offsets=offsets, hidden=torch.cat([prompt, prompt[-1] + steps])))
    return RolloutGroup(rollouts, prompt_id="p")


def _every_state(group: RolloutGroup) -> list[State]:
    return [State(rollout=i, t=t) for i, r in enumerate(group.rollouts) for t in range(len(r.completion_ids) + 1)]


@pytest.mark.parametrize("weight", [0.0, 0.3, 0.5, 1.0])
def test_values_are_the_weighted_mean_of_hista_and_numca(weight):
    group = _group()
    states = _every_state(group)
    blend = get("blend", hista_weight=weight).state_values(group, states)
    hista = get("hista").state_values(group, states)
    numca = get("numca").state_values(group, states)
    assert torch.allclose(blend, weight * hista + (1 - weight) * numca, atol=1e-6)


def test_value_points_are_the_union_of_the_members():
    group = _group()
    blend = get("blend")
    hista, numca = get("hista").value_points(group), get("numca").value_points(group)
    assert blend.value_points(group) == [sorted(set(h) | set(n)) for h, n in zip(hista, numca)]
    assert any(set(n) - set(h) for h, n in zip(hista, numca))  # Numca adds points between Hista's nodes


def test_numca_value_points_are_its_segment_starts():
    """Numca's values change only at its points: 0 and the milestones (the tokens that make a
    number whole: here the word after it)."""
    group = _group()
    numca = get("numca")
    for i, (points, r) in enumerate(zip(numca.value_points(group), group.rollouts)):
        values = numca.state_values(group, [State(rollout=i, t=t) for t in range(len(r.completion_ids))])
        changes = [t for t in range(1, len(values)) if values[t] != values[t - 1]]
        assert set(changes) <= set(points) and points[0] == 0


def test_weight_zero_gives_numca_advantages():
    """With w = 0 the chain reads Numca's values at a superset of Numca's points, where they are
    constant: at λ = 1, Numca's own advantages (at λ < 1 a point where the value does not change
    still discounts the segments before it, so the two differ)."""
    group = _group()
    blend = get("blend", hista_weight=0.0).token_advantages(group, gae_lambda=1.0, scale="none")
    numca = get("numca").token_advantages(group, gae_lambda=1.0, scale="none")
    for b, n in zip(blend, numca):
        assert torch.allclose(b, n, atol=1e-6)


def test_advantages_read_the_blended_values_at_the_points():
    group = _group(1)
    est = get("blend")
    adv = est.token_advantages(group, gae_lambda=1.0, scale="none")
    for i, (points, r) in enumerate(zip(est.value_points(group), group.rollouts)):
        values = est.state_values(group, [State(rollout=i, t=c) for c in points])
        bounds = [*points, len(r.completion_ids)]
        for k, v in enumerate(values):
            segment = adv[i][bounds[k]:bounds[k + 1]]
            assert torch.allclose(segment, torch.full_like(segment, r.reward - float(v)), atol=1e-6)


@pytest.mark.parametrize("weight", [-0.1, 1.5, float("nan")])
def test_a_weight_outside_zero_one_is_refused(weight):
    with pytest.raises(ValueError, match="hista_weight"):
        get("blend", hista_weight=weight)


def test_declarations_cover_both_members():
    est = get("blend")
    assert est.needs_hidden and est.needs_text
    assert est.hidden_layer(30) == get("hista").hidden_layer(30) == -8
    assert get("blend", layer=-4).hidden_layer(30) == -4
