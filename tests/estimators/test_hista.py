"""Hista (SPEC §4.3): a hand-computed group, invariants, state-value / GAE consistency, the
naive oracle, parity with the reference implementation (golden file), devices."""

from __future__ import annotations

import json
import math
import random
from pathlib import Path

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hista.estimators import get, min_distance
from hista.estimators.hista import Hista, default_nodes
from hista.estimators.hista_naive import knn_value, represent, start_value, state_value
from hista.estimators.hista_naive import min_distance as naive_min_distance
from hista.estimators.hista_reference import HistaReference, reference_nodes
from hista.types import Rollout, RolloutGroup, State

GOLDEN = Path(__file__).parents[1] / "data" / "hista_reference_golden.json"
STD_EPS = 1e-4


def group_of(hidden: list, rewards: list[float], prompt_len: int) -> RolloutGroup:
    """Rollouts whose hidden states are given as [P + T, H] arrays."""
    rollouts = []
    for h, r in zip(hidden, rewards):
        h = torch.as_tensor(h, dtype=torch.float32)
        t = h.shape[0] - prompt_len
        rollouts.append(Rollout(prompt_ids=[1] * prompt_len, completion_ids=[2] * t, reward=r, hidden=h))
    return RolloutGroup(rollouts)


def random_group(seed: int, sizes=(5, 40, 1, 23, 61), prompt_len=7, width=6, rewards=None) -> RolloutGroup:
    """A group with one shared prompt and drifting random completions."""
    gen = torch.Generator().manual_seed(seed)
    prompt = torch.randn(prompt_len, width, generator=gen) * 2
    hidden = [torch.cat([prompt, torch.randn(t, width, generator=gen).cumsum(0) * 0.5]) for t in sizes]
    if rewards is None:
        rewards = [float(torch.rand(1, generator=gen) < 0.5) for _ in sizes]
    return group_of(hidden, rewards, prompt_len)


# --- 1. a hand-computed group ---------------------------------------------------------------
#
# alpha = 0 (no smoothing: e_k = x_k), stride 1 (every vector kept), interval 2, k = 2 everywhere,
# min_distance 0.5. One prompt token at (0, 0), T = 4, so the nodes are c = 0, 2, 4 and a state
# with c tokens is the c + 1 vectors h_0..h_c. MinDistance(X, Y) = (sum over the longer prefix —
# the query's on a tie — of each vector's distance to its nearest vector of the other) / max len.
HAND = {
    "A": ([(0, 0), (4, 0), (4, 3), (4, 6), (4, 9)], 1.0),
    "B": ([(0, 0), (4, 0), (4, -3), (8, 0), (12, 0)], 0.0),
    "C": ([(0, 0), (0, 4), (3, 4), (6, 4), (9, 4)], 1.0),
    "D": ([(0, 0), (0, 4), (-3, 4), (0, 8), (0, 12)], 0.0),
}
HAND_CONFIG = dict(alpha=0.0, stride=1, interval=2, min_distance=0.5, max_k=2, min_k=2)


def hand_group() -> RolloutGroup:
    return group_of([h for h, _ in HAND.values()], [r for _, r in HAND.values()], prompt_len=1)


def test_hand_computed_node_values():
    # include_self=True (the paper's rule, which reads R_i; the default's is below).
    # Query A@2 = [(0,0),(4,0),(4,3)]; candidates: all nodes of B, C, D and A@0, A@2.
    #   A@2 itself: 0 -> clamped to 0.5                                  (reward 1)
    #   B@2 = [(0,0),(4,0),(4,-3)], tie, over the query: 0 + 0 + 3 = 3 / 3 = 1   (reward 0)
    #   C@2: 0 + |(4,0)-(0,0)| 4 + |(4,3)-(3,4)| √2 = (4+√2)/3 ≈ 1.80;  any X@0: (0+4+5)/3 = 3
    #   B@4: over B@4: 0 + 0 + 3 + 4 + 8 = 15 / 5 = 3;  C@4 ≈ 2.55, D@2 ≈ 2.71, D@4 ≈ 5.05
    #   k = 2 nearest: A@2 (w = 2), B@2 (w = 1): V = (2·1 + 1·0) / 3 = 2/3.
    # B@2 mirrors it (itself w 2 reward 0, A@2 at 1 w 1 reward 1): V = 1/3; C@2 and D@2 likewise
    # (C@2 ~ D@2 at distance 1): V(C@2) = 2/3, V(D@2) = 1/3.
    est = get("hista", include_self=True, **HAND_CONFIG)
    values = est.state_values(hand_group(), [State(rollout=i, t=2) for i in range(4)])
    assert torch.allclose(values, torch.tensor([2 / 3, 1 / 3, 2 / 3, 1 / 3]), atol=1e-6)


def test_hand_computed_states_between_nodes():
    est = get("hista", include_self=True, **HAND_CONFIG)
    group = hand_group()
    # A@1 = [(0,0),(4,0)]; own candidates only A@0 (c' <= 1). B@2 (longer, over B@2: 0+0+3) = 1,
    # then A@0, B@0, C@0, D@0 all at (0+4)/2 = 2 (rewards 1, 0, 1, 0) tied for the one place left:
    # each gets 1/4 of it, weight (1/4)·(1/2) = 1/8: V = (1·0 + (1+0+1+0)·1/8) / (1 + 4·1/8) = 1/6.
    # B@3 = [(0,0),(4,0),(4,-3),(8,0)]: B@2 (own) 0+0+0+4 = 4/4 = 1 (reward 0), A@2: 0+0+3+4 = 7/4
    # (reward 1), next A@4 = 18/5: V = (1/1.75) / (1 + 1/1.75) = 4/11.
    values = est.state_values(group, [State(0, 1), State(1, 3), State(0, 0), State(0, 4), State(1, 4)])
    assert torch.allclose(values, torch.tensor([1 / 6, 4 / 11, 0.5, 1.0, 0.0]), atol=1e-6)


def test_hand_computed_leave_one_out():
    # The default (include_self=False): A@2's nearest are B@2 (1, reward 0) and C@2 ((4+√2)/3,
    # reward 1): V = (1/d) / (1 + 1/d) = 1 / (1 + d) = 3 / (7 + √2). V(0) is the mean reward of
    # the other three rollouts: 1/3 for A and C, 2/3 for B and D; so A's λ = 1 advantages are
    # 1 − 1/3 on [0, 2) and 1 − V(A@2) on [2, 4).
    est = get("hista", **HAND_CONFIG)
    group = hand_group()
    value = est.state_values(group, [State(0, 2)])
    assert value.item() == pytest.approx(3 / (7 + math.sqrt(2)), abs=1e-6)
    starts = est.state_values(group, [State(i, 0) for i in range(4)])
    assert torch.allclose(starts, torch.tensor([1 / 3, 2 / 3, 1 / 3, 2 / 3]), atol=1e-6)
    adv = est.token_advantages(group, gae_lambda=1.0, scale="none")[0]
    later = 1 - 3 / (7 + math.sqrt(2))
    assert torch.allclose(adv, torch.tensor([2 / 3, 2 / 3, later, later]), atol=1e-6)


def test_hand_computed_advantages():
    # include_self=True: V_0 = group mean 0.5; V(2) from above; V(4) = R. Segments [0, 2), [2, 4).
    est = get("hista", include_self=True, **HAND_CONFIG)
    group = hand_group()
    lam1 = est.token_advantages(group, gae_lambda=1.0, scale="none")  # A_j = R − V_{j−1}
    lam0 = est.token_advantages(group, gae_lambda=0.0, scale="none")  # A_j = V_j − V_{j−1}
    third, sixth = 1 / 3, 1 / 6
    for adv, want in zip(lam1, [[.5, .5, third, third], [-.5, -.5, -third, -third]] * 2):
        assert torch.allclose(adv, torch.tensor(want), atol=1e-6)
    for adv, want in zip(lam0, [[sixth, sixth, third, third], [-sixth, -sixth, -third, -third]] * 2):
        assert torch.allclose(adv, torch.tensor(want), atol=1e-6)
    # group scaling: std of [1, 0, 1, 0] (unbiased) = √(1/3)
    scaled = est.token_advantages(group, gae_lambda=1.0)
    assert torch.allclose(scaled[0], lam1[0] / (math.sqrt(1 / 3) + STD_EPS), atol=1e-6)


# --- 2. properties --------------------------------------------------------------------------


@st.composite
def groups(draw, max_rollouts=4, max_len=12):
    """Small groups with a shared prompt, configs with small stride/interval/k."""
    count = draw(st.integers(1, max_rollouts))
    prompt_len = draw(st.integers(0, 3))
    width = draw(st.integers(1, 3))
    value = st.floats(-8, 8, allow_nan=False, width=32)
    prompt = draw(st.lists(st.lists(value, min_size=width, max_size=width), min_size=prompt_len,
                           max_size=prompt_len))
    hidden, rewards = [], []
    for _ in range(count):
        t = draw(st.integers(0, max_len))
        rows = draw(st.lists(st.lists(value, min_size=width, max_size=width), min_size=t, max_size=t))
        hidden.append(torch.tensor(prompt + rows, dtype=torch.float32).reshape(prompt_len + t, width))
        rewards.append(draw(st.sampled_from([0.0, 1.0, 0.25])))
    max_k = draw(st.integers(1, 8))
    config = dict(alpha=draw(st.sampled_from([0.0, 0.5, 0.7])), stride=draw(st.integers(1, 3)),
                  interval=draw(st.integers(1, 5)), min_distance=draw(st.sampled_from([0.1, 1.0, 5.0])),
                  max_k=max_k, min_k=draw(st.integers(1, max_k)), include_self=draw(st.booleans()))
    return group_of(hidden, rewards, prompt_len), config


FAST = settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@FAST
@given(groups(), st.randoms(use_true_random=False), st.sampled_from([0.0, 0.5, 1.0]))
def test_permuting_rollouts_permutes_outputs(case, rnd, lam):
    group, config = case
    est = get("hista", **config)
    order = list(range(len(group)))
    rnd.shuffle(order)
    permuted = RolloutGroup([group.rollouts[i] for i in order])
    adv, adv_p = est.token_advantages(group, gae_lambda=lam), est.token_advantages(permuted, gae_lambda=lam)
    for k, i in enumerate(order):
        assert torch.allclose(adv_p[k], adv[i], atol=1e-5)
    states = [State(i, t) for i, r in enumerate(group.rollouts) for t in range(len(r.completion_ids) + 1)]
    where = {i: k for k, i in enumerate(order)}
    values = est.state_values(group, states)
    values_p = est.state_values(permuted, [State(where[s.rollout], s.t) for s in states])
    assert torch.allclose(values, values_p, atol=1e-5)


@FAST
@given(groups(), st.floats(-1, 1, width=32), st.sampled_from(["default", "reference"]))
def test_equal_rewards_give_zero_advantages(case, reward, profile):
    group, config = case
    if profile == "reference":
        config = {k: v for k, v in config.items() if k != "include_self"}
        reward = float(reward > 0)  # the reference's weighted average is exact for 0/1 only
    for r in group.rollouts:
        r.reward = reward
    for adv in get("hista", profile=profile, **config).token_advantages(group):
        assert torch.count_nonzero(adv) == 0


@FAST
@given(groups(), st.sampled_from(["default", "reference"]), st.sampled_from(["nan", "huge", "none"]))
def test_degenerate_inputs_give_finite_outputs(case, profile, poison):
    # empty completions and groups of one come from the strategy (T >= 0, G >= 1)
    group, config = case
    if profile == "reference":
        config = {k: v for k, v in config.items() if k != "include_self"}
    last = group.rollouts[-1]
    if poison == "nan" and last.hidden.shape[0] > 0:
        last.hidden[last.hidden.shape[0] // 2 :] = float("nan")
    if poison == "huge":
        last.hidden *= 1e30
    est = get("hista", profile=profile, **config)
    adv = est.token_advantages(group)
    assert [a.shape[0] for a in adv] == [len(r.completion_ids) for r in group.rollouts]
    assert all(bool(torch.isfinite(a).all()) for a in adv)
    states = [State(i, t) for i, r in enumerate(group.rollouts) for t in range(len(r.completion_ids) + 1)]
    assert bool(torch.isfinite(est.state_values(group, states)).all())


def test_nan_hidden_states_count_as_infinitely_far():
    # Rollout 2 turns NaN from its 10th completion token on: its later nodes weigh nothing, so
    # it behaves as if those nodes were absent; its own queries after that fall back to V(0),
    # the mean reward of the other rollouts.
    group = random_group(0, sizes=(30, 30, 30), rewards=[1.0, 0.0, 1.0])
    group.rollouts[2].hidden[7 + 10 :] = float("nan")
    est = get("hista", interval=5, max_k=4, min_k=2, min_distance=0.5)
    values = est.state_values(group, [State(2, 20), State(0, 20)])
    assert values[0].item() == pytest.approx(1 / 2)  # every distance NaN -> the others' mean
    assert 0.0 <= values[1].item() <= 1.0


def test_missing_or_mismatched_hidden_states_raise():
    group = random_group(1)
    group.rollouts[1].hidden = None
    with pytest.raises(ValueError, match=r"rollouts\[1\]\.hidden is None"):
        get("hista").token_advantages(group)
    group = random_group(1)
    group.rollouts[3].hidden = torch.zeros(5, 6)  # assigned after construction: not checked there
    for profile in ("default", "reference"):
        with pytest.raises(ValueError, match=r"rollouts\[3\]\.hidden has shape \(5, 6\); expected \[30, H\]"):
            get("hista", profile=profile).token_advantages(group)
    with pytest.raises(ValueError, match="expected"):
        Rollout(prompt_ids=[1], completion_ids=[2, 3], hidden=torch.zeros(2, 4))


def test_config_validation_and_record():
    est = get("hista", profile="reference", max_k=10)
    assert isinstance(est, Hista) and est.to_dict()["config"]["profile"] == "reference"
    assert est.to_dict()["config"]["max_k"] == 10 and get("hista").config.profile == "default"
    for bad in (dict(profile="nope"), dict(alpha=1.0), dict(stride=0), dict(min_distance=0.0),
                dict(min_k=7, max_k=6), dict(power=-1.0), dict(profile="reference", include_self=False),
                dict(nodes=3)):
        with pytest.raises(ValueError):
            get("hista", **bad)


# --- 3-4. state values agree with the GAE chain; GAE closed forms ---------------------------


def chain_values(est, group, i):
    """Nodes of rollout i and V at them, read back from λ = 0 unscaled advantages:
    A_j = V_j − V_{j−1}, so V_j = V_0 + Σ A over the segment starts."""
    nodes = default_nodes(len(group.rollouts[i].completion_ids), est.config.interval)
    adv = est.token_advantages(group, gae_lambda=0.0, scale="none")[i]
    values = [start_value(group.rewards.tolist(), i, est.config.include_self)]
    for start in nodes[:-1]:
        values.append(values[-1] + float(adv[start]))
    return nodes, values


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_state_values_at_nodes_equal_the_gae_chain(seed):
    group = random_group(seed)
    est = get("hista", interval=6, max_k=9, min_k=3, min_distance=1.0)
    for i, r in enumerate(group.rollouts):
        nodes, values = chain_values(est, group, i)
        got = est.state_values(group, [State(i, c) for c in nodes])
        assert torch.allclose(got, torch.tensor(values), atol=1e-5), (i, nodes)
        others = [o.reward for o in group.rollouts if o is not r]
        assert got[-1].item() == r.reward and got[0].item() == pytest.approx(sum(others) / len(others))


@FAST
@given(groups(max_len=10))
def test_state_values_at_nodes_equal_the_gae_chain_property(case):
    group, config = case
    est = get("hista", **config)
    for i, r in enumerate(group.rollouts):
        if not r.completion_ids:
            continue
        nodes, values = chain_values(est, group, i)
        got = est.state_values(group, [State(i, c) for c in nodes])
        assert torch.allclose(got, torch.tensor(values), atol=1e-5)


@pytest.mark.parametrize("lam", [0.0, 1.0, 0.6])
def test_gae_closed_forms(lam):
    # λ = 1: A = R − V(segment start); λ = 0: A = V(segment end) − V(segment start);
    # otherwise A_j = δ_j + λ A_{j+1}. V from state_values.
    group = random_group(4)
    est = get("hista", interval=7, max_k=12, min_k=2, min_distance=0.5)
    adv = est.token_advantages(group, gae_lambda=lam, scale="none")
    for i, r in enumerate(group.rollouts):
        nodes = default_nodes(len(r.completion_ids), 7)
        v = est.state_values(group, [State(i, c) for c in nodes]).tolist()
        running, want = 0.0, []
        for j in range(len(nodes) - 1, 0, -1):
            running = (v[j] - v[j - 1]) + lam * running
            want = [running] * (nodes[j] - nodes[j - 1]) + want
        if lam == 1.0:
            assert want == pytest.approx([r.reward - v[j - 1] for j in range(1, len(nodes))
                                          for _ in range(nodes[j] - nodes[j - 1])], abs=1e-6)
        assert torch.allclose(adv[i], torch.tensor(want), atol=1e-5)


def test_external_prefix_state():
    group = random_group(5)
    est = get("hista", interval=6, max_k=9, min_k=3, min_distance=1.0)
    source = group.rollouts[1]
    c = 17
    prefix = Rollout(prompt_ids=source.prompt_ids, completion_ids=source.completion_ids[:c],
                     hidden=source.hidden[: len(source.prompt_ids) + c].clone())
    value = est.state_values(group, [State(rollout=1, prefix=prefix)])
    assert 0.0 <= value.item() <= 1.0
    with pytest.raises(ValueError, match="evaluated as a whole"):
        est.state_values(group, [State(rollout=1, t=3, prefix=prefix)])
    with pytest.raises(ValueError, match="reference"):
        get("hista", profile="reference").state_values(group, [State(prefix=prefix)])


# --- 5. the fast kernels and the estimator against the naive oracle (hista_naive) ------------


def random_prefixes(gen: torch.Generator, count: int, shared: int, width: int) -> list[torch.Tensor]:
    """Sequences of compressed vectors with a common (bit-identical) start, some empty."""
    start = torch.randn(shared, width, generator=gen)
    return [torch.cat([start, torch.randn(int(n), width, generator=gen)])[: int(n) + shared] if n >= 0
            else torch.zeros(0, width) for n in torch.randint(-1, 8, (count,), generator=gen)]


@pytest.mark.parametrize("block", [None, 8])
@pytest.mark.parametrize("normalise", [True, False])
@pytest.mark.parametrize("seed", range(4))
def test_distance_kernels_match_the_naive_oracle(seed, normalise, block, monkeypatch):
    if block is not None:  # tiny blocks: every rollout pair in its own chunk
        monkeypatch.setattr(min_distance, "BLOCK_ELEMENTS", block)
    gen = torch.Generator().manual_seed(seed)
    vectors = random_prefixes(gen, 4, shared=3, width=3)
    counts = [int(e.shape[0]) for e in vectors]
    node_vectors = [sorted({0, n, *torch.randint(0, n + 1, (3,), generator=gen).tolist()}) for n in counts]
    stacked = torch.zeros(len(vectors), max(counts), 3)
    for i, e in enumerate(vectors):
        stacked[i, : counts[i]] = e
    prefixes = [e[:n].tolist() for e, nodes in zip(vectors, node_vectors) for n in nodes]
    table = min_distance.node_distances(stacked, counts, node_vectors, normalise)
    want = torch.tensor([[naive_min_distance(a, b, normalise) for b in prefixes] for a in prefixes])
    assert torch.allclose(table, want, atol=1e-5, rtol=1e-5)
    query = torch.cat([vectors[1][:2], torch.randn(6, 3, generator=gen)])
    query_vectors = [0, 1, 3, 8]
    dist = min_distance.query_distances(query, query_vectors, stacked, counts, node_vectors, normalise)
    want = torch.tensor([[naive_min_distance(query[:n].tolist(), b, normalise) for b in prefixes]
                         for n in query_vectors])
    assert torch.allclose(dist, want, atol=1e-5, rtol=1e-5)


def test_naive_knn_shares_tied_places():
    # k = 2: the nearest (d 1, reward 1) and one place shared by two tied at d 2 (rewards 0 and 1)
    assert knn_value([1.0, 2.0, 2.0, 9.0], [1.0, 0.0, 1.0, 0.0], 2, 0.5, 1.0, 0.5) == pytest.approx(
        (1 + 0.25) / (1 + 0.5))
    assert knn_value([math.inf, math.nan], [1.0, 0.0], 2, 0.5, 1.0, 0.25) == 0.25


ORACLE_FLAGS = [{}, dict(include_self=True), dict(include_prompt=False), dict(normalise=False)]


def oracle_case(seed: int, flags: dict) -> tuple[RolloutGroup, dict]:
    """A small random group (even seeds: one shared prompt and a duplicated rollout, so that
    distances tie) and a small random configuration."""
    rng, gen = random.Random(seed), torch.Generator().manual_seed(seed)
    prompt_len, width = rng.randint(1, 4), rng.randint(1, 3)
    prompt = torch.randn(prompt_len, width, generator=gen)
    hidden = []
    for _ in range(rng.randint(2, 6)):
        own = prompt if seed % 2 == 0 else torch.randn(prompt_len, width, generator=gen)
        hidden.append(torch.cat([own, torch.randn(rng.randint(0, 16), width, generator=gen).cumsum(0)]))
    if seed % 2 == 0:
        hidden.append(hidden[0].clone())
    rewards = [rng.choice([0.0, 1.0, 0.25]) for _ in hidden]
    max_k = rng.randint(1, 12)
    config = dict(alpha=rng.choice([0.0, 0.5, 0.7]), stride=rng.randint(1, 3), interval=rng.randint(1, 6),
                  min_distance=rng.choice([0.05, 0.5, 5.0]), max_k=max_k, min_k=rng.randint(1, max_k),
                  power=rng.choice([1.0, 2.0]), **flags)
    return group_of(hidden, rewards, prompt_len), config


def naive_values(group: RolloutGroup, cfg) -> tuple[dict[tuple[int, int], float], float]:
    """V at every state (rollout i, c) by the oracle (V(0) and the fallback: ``start_value``,
    V(T) = R_i), and V of rollout 0 as an external prefix whose k follows the last rollout's
    length."""
    def rep(r: Rollout, c: int) -> list:
        return represent(r.hidden.tolist(), len(r.prompt_ids), c, cfg.alpha, cfg.stride, cfg.include_prompt)

    rewards = group.rewards.tolist()
    nodes = [(i, c, rep(r, c), r.reward) for i, r in enumerate(group.rollouts)
             for c in default_nodes(len(r.completion_ids), cfg.interval)]
    values = {}
    for i, r in enumerate(group.rollouts):
        length = len(r.completion_ids)
        start = start_value(rewards, i, cfg.include_self)
        for c in range(length + 1):
            values[i, c] = (r.reward if c == length else start if c == 0
                            else state_value(rep(r, c), i, c, length, nodes, cfg, start))
    c, length = len(group.rollouts[0].completion_ids), len(group.rollouts[-1].completion_ids)
    external = state_value(rep(group.rollouts[0], c), None, min(c, length), length, nodes, cfg,
                           start_value(rewards, None, cfg.include_self))
    return values, external


@pytest.mark.parametrize("flags", ORACLE_FLAGS, ids=["plain", "self", "no_prompt", "no_normalise"])
@pytest.mark.parametrize("seed", range(8))
def test_default_profile_matches_the_naive_oracle(seed, flags):
    group, config = oracle_case(seed, flags)
    est = get("hista", **config)
    want, want_external = naive_values(group, est.config)
    states = [State(i, c) for i, c in want]
    got = est.state_values(group, states)
    assert torch.allclose(got, torch.tensor([want[s.rollout, s.t] for s in states]), atol=1e-5), config
    # node values through λ = 0 advantages: every token of segment [c_{j−1}, c_j) gets V(c_j) − V(c_{j−1})
    adv = est.token_advantages(group, gae_lambda=0.0, scale="none")
    for i, r in enumerate(group.rollouts):
        nodes = default_nodes(len(r.completion_ids), est.config.interval)
        expected = [want[i, b] - want[i, a] for a, b in zip(nodes, nodes[1:]) for _ in range(b - a)]
        assert torch.allclose(adv[i], torch.tensor(expected), atol=1e-5), (config, i)
    # an external prefix (rollout 0 as a whole), k relative to the last rollout's length
    first = group.rollouts[0]
    prefix = Rollout(prompt_ids=first.prompt_ids, completion_ids=first.completion_ids, hidden=first.hidden.clone())
    external = est.state_values(group, [State(rollout=len(group) - 1, prefix=prefix)])
    assert external.item() == pytest.approx(want_external, abs=1e-5)


# --- the structure rule ---------------------------------------------------------------------


def test_structure_rule_follows_the_model_and_the_responses():
    """docs/estimators.md "Structure rule": the layer at depth 23/30 (SmolLM2's 30 layers: −8;
    a 36-layer Qwen: −9; tiny's 2: −1), the paper's stride 5, interval 12 for short responses,
    grown to keep at most 25 nodes per rollout or twice the paper's; explicit values win."""
    from hista.estimators.hista import MAX_INTERVAL, RULE_NODES, rule_interval

    est = get("hista")
    assert [est.hidden_layer(n) for n in (30, 36, 28, 2)] == [-8, -9, -8, -1]
    with pytest.raises(ValueError, match="num_layers"):
        est.hidden_layer()
    assert get("hista", layer=-4).hidden_layer(36) == -4 and get("probe").hidden_layer(30) == -12
    assert rule_interval(29) == rule_interval(256) == rule_interval(RULE_NODES * 12) == 12
    assert rule_interval(RULE_NODES * 12 + 1) == 13 and rule_interval(500) == 20
    assert rule_interval(601) == rule_interval(8192) == MAX_INTERVAL == 25
    group = random_group(4)
    assert est.resolved(group) == {"interval": 12, "stride": 5}
    assert get("hista", interval=50, stride=2).resolved(group) == {"interval": 50, "stride": 2}
    assert get("hista", profile="paper").resolved(group) == {"interval": 50, "stride": 5}
    assert get("hista", profile="paper").hidden_layer(30) == -1
    # the rule is applied, not just reported: the default equals the explicit setting it resolves to
    explicit = get("hista", interval=12, stride=5)
    for got, want in zip(est.token_advantages(group), explicit.token_advantages(group)):
        torch.testing.assert_close(got, want)
    with pytest.raises(ValueError, match="no structure rule"):
        get("hista", profile="reference", interval=None)


# --- reference profile ----------------------------------------------------------------------


def test_reference_profile_is_a_hista_subclass():
    est = get("hista", profile="reference", interval=10)
    assert isinstance(est, HistaReference) and isinstance(est, Hista) and est.needs_hidden
    assert type(get("hista")) is Hista and est.method_label() == "Hista-reference"
    assert est.hidden_layer() == -1 and get("hista", layer=-2).hidden_layer() == -2


def test_reference_node_grid():
    # grid anchored at the first prompt token: multiples of 50 below the last position P+T−1,
    # plus P+T−1; kept if > P − 50, the first moved to P.
    assert reference_nodes(64, 200, 50) == [64, 100, 150, 200, 250, 263]
    assert reference_nodes(10, 5, 50) == [10, 14]
    assert reference_nodes(100, 1, 50) == [100]
    assert default_nodes(200, 50) == [0, 50, 100, 150, 200] and default_nodes(0, 50) == [0]


def test_reference_last_token_gets_zero():
    group = random_group(6, sizes=(80, 120, 64), rewards=[1.0, 0.0, 1.0])
    adv = get("hista", profile="reference", interval=20, max_k=8, min_k=2).token_advantages(group)
    assert all(a[-1].item() == 0.0 for a in adv)
    assert any(bool((a[:-1] != 0).any()) for a in adv)


def _tensors(obj):
    """Golden JSON -> Python objects, with ``{"tensor": [...], "dtype": ...}`` as tensors."""
    if isinstance(obj, dict) and set(obj) == {"tensor", "dtype"}:
        return torch.tensor(obj["tensor"], dtype=getattr(torch, obj["dtype"]))
    if isinstance(obj, dict):
        return {k: _tensors(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_tensors(v) for v in obj]
    return obj


def test_reference_profile_matches_reference_implementation():
    """tests/data/hista_reference_golden.json: seeded random groups and the outputs of the
    reference implementation (github.com/VOXXXX1874/Hista @ 56d9e7f: HistaTrainer's advantages
    with its group scaling, and its SVEB state-value rule) on them."""
    golden = _tensors(json.loads(GOLDEN.read_text()))
    assert len(golden["cases"]) >= 5
    for case in golden["cases"]:
        group = group_of(case["hidden"], case["rewards"], case["prompt_len"])
        est = get("hista", profile="reference", **case["config"])
        adv = est.token_advantages(group, gae_lambda=case["gae_lambda"])
        for mine, theirs in zip(adv, case["advantages"]):
            assert torch.allclose(mine, theirs, atol=1e-5, rtol=0), case["config"]
        states = [State(rollout=i, t=t) for i, t in case["states"]]
        assert torch.allclose(est.state_values(group, states), case["state_values"], atol=1e-5, rtol=0)


# --- 6. devices -----------------------------------------------------------------------------


def test_outputs_follow_the_hidden_states_dtype_and_device():
    group = random_group(7)
    for r in group.rollouts:
        r.hidden = r.hidden.to(torch.bfloat16)
    for profile in ("default", "reference"):
        est = get("hista", profile=profile, interval=6)
        adv = est.token_advantages(group)
        assert all(a.dtype == torch.float32 and a.device.type == "cpu" for a in adv)
        assert est.state_values(group, [State(0, 3)]).device.type == "cpu"


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("profile", ["default", "reference"])
def test_cuda_matches_cpu(profile):
    gen = torch.Generator().manual_seed(8)
    group = group_of([torch.randn(9 + t, 16, generator=gen) for t in (40, 75, 3, 60)], [1.0, 0.0, 1.0, 0.0], 9)
    est = get("hista", profile=profile, interval=10, max_k=8, min_k=2, min_distance=1.0)
    states = [State(0, 20), State(1, 75), State(3, 33)]
    cpu_adv, cpu_values = est.token_advantages(group), est.state_values(group, states)
    for r in group.rollouts:
        r.hidden = r.hidden.cuda()
    gpu_adv, gpu_values = est.token_advantages(group), est.state_values(group, states)
    assert all(a.device.type == "cuda" for a in gpu_adv) and gpu_values.device.type == "cuda"
    for a, b in zip(cpu_adv, gpu_adv):
        assert torch.allclose(a, b.cpu(), atol=1e-4)
    assert torch.allclose(cpu_values, gpu_values.cpu(), atol=1e-4)


@pytest.mark.parametrize("include_prompt", [True, False])
def test_precomputed_representations_give_the_same_advantages(include_prompt):
    """Split training estimation (SPEC §9): representations computed per rollout (as on the
    process holding it), with the shared prompt vectors taken from another rollout of the
    group, give the advantages of the estimator reading hidden states. The reference profile
    has none (it is sent hidden states)."""
    g = torch.Generator().manual_seed(5)
    prompt = [3, 1, 4, 1, 5, 9, 2]
    prompt_states = torch.randn(len(prompt), 16, generator=g)
    rollouts = []
    for i, length in enumerate([23, 11, 17, 30]):
        hidden = torch.cat([prompt_states, torch.randn(length, 16, generator=g)])
        rollouts.append(Rollout(prompt_ids=prompt, completion_ids=list(range(length)), reward=float(i % 2),
                                hidden=hidden))
    est = get("hista", interval=4, stride=3, max_k=6, min_k=2, include_prompt=include_prompt)
    want = est.token_advantages(RolloutGroup(rollouts), gae_lambda=0.9)
    found = [est.represent(r) for r in rollouts]
    shared = found[0][1]
    assert shared == ((len(prompt) - 1) // 3 + 1 if include_prompt else 0)
    head = found[0][0][:shared]  # the prompt's vectors of one rollout serve the group
    stripped = [Rollout(prompt_ids=r.prompt_ids, completion_ids=r.completion_ids, reward=r.reward) for r in rollouts]
    group = RolloutGroup(stripped, representations=[torch.cat([head, rep[n:]]) for rep, n in found])
    for got, expected in zip(est.token_advantages(group, gae_lambda=0.9), want):
        torch.testing.assert_close(got, expected)
    assert get("hista", profile="reference").represent(rollouts[0]) is None
    default = get("hista", include_prompt=include_prompt).represent(rollouts[0])  # the rule's stride 5
    assert default[1] == ((len(prompt) - 1) // 5 + 1 if include_prompt else 0)
    assert get("hista", profile="paper").represent(rollouts[0])
