"""Segment GAE, the group-mean baseline, Monte Carlo and the registry (SPEC §4.1, §4.4)."""

import json

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from hista.estimators import get, names, profiles, segment_gae
from hista.types import Rollout, RolloutGroup, State


def _group(rewards, lengths):
    return RolloutGroup([Rollout([1, 2], list(range(3, 3 + n)), r) for r, n in zip(rewards, lengths)], prompt_id="p")


def test_segment_gae_closed_forms():
    # nodes at 0, 2, 5, T=6 with values V = [0.5, 0.2, 0.9, 1.0]
    # δ = [-0.3, 0.7, 0.1]
    values = torch.tensor([0.5, 0.2, 0.9, 1.0])
    lam0 = segment_gae([0, 2, 5, 6], values, 6, 0.0)
    torch.testing.assert_close(lam0, torch.tensor([-0.3, -0.3, 0.7, 0.7, 0.7, 0.1]))
    # λ = 1: A_j = R − V_{j−1} = [0.5, 0.8, 0.1]
    lam1 = segment_gae([0, 2, 5, 6], values, 6, 1.0)
    torch.testing.assert_close(lam1, torch.tensor([0.5, 0.5, 0.8, 0.8, 0.8, 0.1]))
    # λ = 0.5: A_3 = 0.1, A_2 = 0.7 + 0.05 = 0.75, A_1 = -0.3 + 0.375 = 0.075
    half = segment_gae([0, 2, 5, 6], values, 6, 0.5)
    torch.testing.assert_close(half, torch.tensor([0.075, 0.075, 0.75, 0.75, 0.75, 0.1]))
    assert segment_gae([0, 0], torch.tensor([0.3, 1.0]), 0).shape == (0,)
    with pytest.raises(ValueError):
        segment_gae([0, 3, 2, 6], values, 6)
    with pytest.raises(ValueError):
        segment_gae([0, 2, 6], values, 6)


def test_group_mean_hand_example():
    g = _group([1.0, 0.0, 1.0, 0.0], [3, 1, 2, 0])
    # mean 0.5, unbiased std = sqrt(1/3) = 0.57735
    adv = get("grpo").token_advantages(g)
    scale = 0.57735027 + 1e-4
    assert [a.shape[0] for a in adv] == [3, 1, 2, 0]
    torch.testing.assert_close(adv[0], torch.full((3,), 0.5 / scale))
    torch.testing.assert_close(adv[1], torch.full((1,), -0.5 / scale))
    raw = get("grpo").token_advantages(g, scale="none")
    torch.testing.assert_close(raw[2], torch.full((2,), 0.5))
    # leave-one-out: rollout 0's baseline = mean(0, 1, 0) = 1/3 -> advantage 2/3
    loo = get("grpo", leave_one_out=True).token_advantages(g, scale="none")
    torch.testing.assert_close(loo[0], torch.full((3,), 2 / 3))
    # length-weighted (OPO): b = (3·1 + 1·0 + 2·1 + 0·0) / 6 = 5/6
    opo = get("grpo", length_weighted=True)
    torch.testing.assert_close(opo.state_values(g, [State(0, 1)]), torch.tensor([5 / 6]))
    torch.testing.assert_close(get("grpo").state_values(g, [State(0, 2), State(None, 0)]), torch.tensor([0.5, 0.5]))
    batch = get("grpo").token_advantages(g, scale="batch", batch_std=2.0)
    torch.testing.assert_close(batch[0], torch.full((3,), 0.5 / (2.0 + 1e-4)))


def test_group_of_one_and_all_equal():
    for name in ("grpo",):
        one = get(name).token_advantages(_group([1.0], [4]))
        assert torch.equal(one[0], torch.zeros(4))
        eq = get(name).token_advantages(_group([1.0, 1.0, 1.0], [2, 0, 5]))
        assert all(torch.equal(a, torch.zeros_like(a)) for a in eq)
        loo = get(name, leave_one_out=True).token_advantages(_group([1.0], [4]))
        assert torch.equal(loo[0], torch.zeros(4))


@settings(max_examples=40, deadline=None)
@given(rewards=st.lists(st.sampled_from([0.0, 1.0]), min_size=1, max_size=6), seed=st.integers(0, 1000))
def test_group_mean_permutation(rewards, seed):
    lengths = [(seed * (k + 3)) % 7 for k in range(len(rewards))]
    g = _group(rewards, lengths)
    perm = torch.randperm(len(rewards), generator=torch.Generator().manual_seed(seed)).tolist()
    gp = RolloutGroup([g.rollouts[k] for k in perm])
    for kw in ({}, {"leave_one_out": True}, {"length_weighted": True}):
        a, b = get("grpo", **kw).token_advantages(g), get("grpo", **kw).token_advantages(gp)
        for new, old in enumerate(perm):
            torch.testing.assert_close(b[new], a[old])
            assert not torch.isnan(b[new]).any()


def test_monte_carlo_values_and_advantages():
    g = _group([1.0, 0.0], [4, 3])
    mc = get("mc")
    v = mc.state_values(g, [State(0, 2, continuations=[1, 0, 0, 1]), State(1, 1, continuations=[0, 0, 1])])
    torch.testing.assert_close(v, torch.tensor([0.5, 1 / 3]))
    one = get("mc", num=1).state_values(g, [State(0, 2, continuations=[1, 0])])
    torch.testing.assert_close(one, torch.tensor([1.0]))
    with pytest.raises(ValueError, match="no continuation"):
        mc.state_values(g, [State(0, 2)])
    # advantages: rollout 0 has an MC value 0.25 at t=2; V(0) = group mean 0.5, V(T) = 1
    g.continuations[(0, 2)] = [1, 0, 0, 0]
    adv = mc.token_advantages(g, gae_lambda=0.0, scale="none")
    torch.testing.assert_close(adv[0], torch.tensor([-0.25, -0.25, 0.75, 0.75]))
    torch.testing.assert_close(adv[1], torch.full((3,), -0.5))
    torch.testing.assert_close(mc.state_values(g, [State(0, 2)]), torch.tensor([0.25]))


def test_registry_errors_and_config_json():
    assert {"grpo", "mc"} <= set(names())
    with pytest.raises(ValueError, match="valid"):
        get("nope")
    with pytest.raises(ValueError, match="leave_one_out"):
        get("grpo", leave_one_ot=True)
    est = get("grpo", leave_one_out=True)
    assert json.loads(est.config.to_json()) == {"leave_one_out": True, "length_weighted": False}
    with pytest.raises(ValueError):
        est.token_advantages(_group([1.0, 0.0], [1, 1]), gae_lambda=1.5)
    with pytest.raises(ValueError):
        est.token_advantages(_group([1.0, 0.0], [1, 1]), scale="weird")


@pytest.mark.parametrize("name", ["grpo", "mc"])
def test_unknown_profile_names_the_estimators_with_profiles(name):
    with pytest.raises(ValueError, match=f"estimator '{name}' has no profile 'reference'") as error:
        get(name, profile="reference")
    assert "hista (default, paper, reference)" in str(error.value) and "numca (default, reference)" in str(error.value)
    assert profiles(name) == ["default"] and profiles("numca") == ["default", "reference"]
    assert profiles("hista") == ["default", "paper", "reference"]
    assert "hista-reference" not in names() and get("numca", profile="reference").profile == "reference"
