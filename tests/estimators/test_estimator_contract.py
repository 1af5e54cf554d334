"""The estimator contract (SPEC §3, §12; CONTRIBUTING.md), run over every
registered estimator and profile, plugins included: a new estimator is tested the moment it is
registered. Degenerate groups give finite outputs or a clear ValueError; the configuration
survives a JSON round trip; what an estimator declares it needs is all it needs."""

from __future__ import annotations

import json
import random

import pytest
import torch

from hista import estimators
from hista.errors import InputError
from hista.types import Rollout, RolloutGroup, State

pytestmark = pytest.mark.xdist_group("estimator-contract")  # its module fixtures are built once (tests/conftest.py)

METHODS = [(name, profile) for name in estimators.names() for profile in estimators.profiles(name)]
IDS = [name if profile == "default" else f"{name}-{profile}" for name, profile in METHODS]
PIECES = [" 3", " +", " 4", " =", " 7", ".", " so", " 12", " and", " x"]


def _rollout(est, pieces: list[str], reward: float, seed: int, prompt_len: int = 3, width: int = 8) -> Rollout:
    """A rollout carrying what ``est`` declares it needs: hidden states, text and offsets."""
    ids = [10 + PIECES.index(p) for p in pieces]
    text, offsets = "", []
    for p in pieces:
        offsets.append((len(text), len(text) + len(p)))
        text += p
    hidden = None
    if est.needs_hidden:
        gen = torch.Generator().manual_seed(seed)
        shared = torch.randn(prompt_len, width, generator=torch.Generator().manual_seed(99))  # one prompt
        hidden = torch.cat([shared, torch.randn(len(ids), width, generator=gen)])
    return Rollout(list(range(1, prompt_len + 1)), ids, reward, completion_text=text if est.needs_text else "",
                   offsets=offsets if est.needs_text else None, hidden=hidden)


def _group(est, specs: list[tuple[list[str], float]], seed: int = 0) -> RolloutGroup:
    rollouts = [_rollout(est, pieces, reward, seed + k) for k, (pieces, reward) in enumerate(specs)]
    group = RolloutGroup(rollouts, prompt_id="p")
    if est.needs_continuations:
        rng = random.Random(seed)
        for i, r in enumerate(rollouts):
            for t in range(len(r.completion_ids) + 1):
                group.continuations[(i, t)] = [float(rng.random() < 0.5) for _ in range(3)]
    return group


def _random_specs(seed: int, size: int, longest: int = 12) -> list[tuple[list[str], float]]:
    rng = random.Random(seed)
    return [([rng.choice(PIECES) for _ in range(rng.randint(1, longest))], float(rng.random() < 0.5))
            for _ in range(size)]


@pytest.fixture(scope="module")
def critic():
    """A critic on the tiny model with a random head, for estimators that read one
    (``ReadsCritic``: PPO-1 / PPO-N, SPEC §4.5)."""
    from hista.critic.model import ValueModel
    from hista.models import load

    model = ValueModel.from_policy(load("tiny", device="cpu"), layers=0, init_value=0.5)
    with torch.no_grad():
        model.head.weight.normal_(0.0, 0.1, generator=torch.Generator().manual_seed(0))
    return model


def _estimator(name: str, profile: str, request):
    """The estimator, handed a critic when it declares it reads one."""
    est = estimators.get(name, profile=profile)
    if isinstance(est, estimators.ReadsCritic):
        est.use_critic(request.getfixturevalue("critic"))
    return est


DEGENERATE = {
    "empty completion": [([], 1.0), ([" 3", " +", " 4"], 0.0), ([" 12"], 1.0)],
    "group of one": [([" 3", " +", " 4", " =", " 7"], 1.0)],
    "all-equal rewards": [([" 3", " 4"], 1.0), ([" 12", " and", " 7", "."], 1.0), ([" x"], 1.0)],
    "all-empty": [([], 0.0), ([], 1.0)],
}


def _check_outputs(est, group: RolloutGroup) -> None:
    """token_advantages and state_values are finite, of the right shape, float32 — or the
    estimator refuses with a ValueError that says something."""
    try:
        adv = est.token_advantages(group, gae_lambda=0.9)
    except ValueError as exc:
        assert str(exc).strip()
    else:
        assert len(adv) == len(group.rollouts)
        for a, r in zip(adv, group.rollouts):
            assert a.shape == (len(r.completion_ids),) and a.dtype == torch.float32
            assert torch.isfinite(a).all()
    states = [State(rollout=i, t=t) for i, r in enumerate(group.rollouts) for t in {0, len(r.completion_ids) // 2}]
    try:
        values = est.state_values(group, states)
    except ValueError as exc:
        assert str(exc).strip()
    else:
        assert values.shape == (len(states),) and torch.isfinite(values).all()


@pytest.mark.parametrize("name, profile", METHODS, ids=IDS)
@pytest.mark.parametrize("case", sorted(DEGENERATE))
def test_degenerate_groups_give_finite_outputs_or_a_clear_error(name, profile, case, request):
    est = _estimator(name, profile, request)
    _check_outputs(est, _group(est, DEGENERATE[case]))


@pytest.mark.parametrize("name, profile", METHODS, ids=IDS)
def test_nan_hidden_states_give_finite_outputs_or_a_clear_error(name, profile, request):
    est = _estimator(name, profile, request)
    group = _group(est, _random_specs(1, 4))
    for r in group.rollouts:
        if r.hidden is not None:
            r.hidden[len(r.prompt_ids):] = float("nan")
    _check_outputs(est, group)


@pytest.mark.parametrize("name, profile", METHODS, ids=IDS)
@pytest.mark.parametrize("seed", range(3))
def test_random_groups_give_finite_outputs(name, profile, seed, request):
    est = _estimator(name, profile, request)
    group = _group(est, _random_specs(seed, 5), seed)
    adv = est.token_advantages(group)
    assert all(torch.isfinite(a).all() for a in adv)
    if profile != "default":
        return  # a reproduction profile keeps its original's tie-breaking by rollout order
    # permuting the rollouts permutes the advantages (a group is a set)
    order = list(range(5))[::-1]
    again = est.token_advantages(RolloutGroup([group.rollouts[k] for k in order], prompt_id="q",
                                              continuations={(order.index(i), t): v
                                                             for (i, t), v in group.continuations.items()}))
    for new, old in enumerate(order):
        torch.testing.assert_close(again[new], adv[old], atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("name, profile", METHODS, ids=IDS)
def test_config_round_trips_through_json(name, profile):
    est = estimators.get(name, profile=profile)
    record = json.loads(json.dumps(est.to_dict()))
    again = estimators.from_dict(record)
    assert type(again) is type(est) and again.config == est.config and again.name == name
    assert again.profile == profile and est.method_label()


@pytest.mark.parametrize("name, profile", METHODS, ids=IDS)
def test_declarations_and_strict_configuration(name, profile):
    est = estimators.get(name, profile=profile)
    for flag in ("needs_hidden", "needs_text", "needs_continuations"):
        assert isinstance(getattr(est, flag), bool)
    # an opt-in protocol is a type, and brings its methods: they are not on every estimator
    assert isinstance(est, estimators.ReadsCritic) == hasattr(est, "use_critic")
    assert isinstance(est, estimators.LearnsAcrossGroups) == hasattr(est, "for_batch")
    assert isinstance(est.hidden_layer(30), int) and -31 <= est.hidden_layer(30) <= -1
    assert est.__doc__ and type(est).state_values.__doc__
    with pytest.raises(InputError, match="bogus_parameter"):
        estimators.get(name, profile=profile, bogus_parameter=1)
    with pytest.raises(InputError, match="no profile"):
        estimators.get(name, profile="no-such-profile")


def _fitted(est, group: RolloutGroup, seed: int):
    """The estimator ready to score ``group``: one that learns across groups (the probe) is
    fitted on three other random groups of the same batch first."""
    if not isinstance(est, estimators.LearnsAcrossGroups):
        return est
    others = [_group(est, _random_specs(100 + seed * 7 + k, 5), 100 + seed * 7 + k) for k in range(3)]
    return est.for_batch(others + [group])[-1]


def _identity_gaps(est, seed: int) -> list[float]:
    """|A(λ=1)[t] − (R_i − V(i, t))| at every state the advantage chain reads a value at
    (``value_points``), and |A − (R − V(point))| at every token of the segment that point starts."""
    group = _group(est, _random_specs(seed, 6, longest=90), seed)  # long enough for several milestones and nodes
    est = _fitted(est, group, seed)
    adv = est.token_advantages(group, gae_lambda=1.0, scale="none")
    points = est.value_points(group)
    states = [State(rollout=i, t=t) for i, ts in enumerate(points) for t in ts]
    values = est.state_values(group, states).tolist() if states else []
    gaps, k = [], 0
    for i, ts in enumerate(points):
        r = group.rollouts[i]
        ends = list(ts[1:]) + [len(r.completion_ids)]
        for t, end in zip(ts, ends):
            gaps += [abs(float(adv[i][u]) - (r.reward - values[k])) for u in range(t, end)]
            k += 1
    return gaps


@pytest.mark.parametrize("name, profile", METHODS, ids=IDS)
def test_state_values_are_the_values_the_advantages_read(name, profile, request):
    """The value/advantage identity (docs/estimators.md): an estimator's ``state_values`` and
    ``token_advantages`` describe one estimator, so SVEB scores what training uses. With λ = 1
    and no scaling, every token from a state the advantage chain reads up to the next such
    state gets A = R_i − V(i, state). A profile that reproduces a public implementation whose
    training and SVEB rules disagree (``reproduces``) is exempt, and must really differ on one
    of these groups (otherwise its exemption is stale)."""
    est = _estimator(name, profile, request)
    gaps = [gap for seed in range(6) for gap in _identity_gaps(est, seed)]
    assert gaps, "no token was checked"
    if est.reproduces:
        assert max(gaps) > 1e-4, f"{name}-{profile} declares reproduces= but satisfies the identity"
    else:
        assert max(gaps) < 1e-5
