"""One declaration of what an estimator needs, read by every consumer (issue 67, item 2): a toy
estimator that reads a critic folder and one that reads hidden states, registered here and
nowhere else, are served or refused by SVEB (eval and grad), training, the own-loop API and verl
without a change to their code."""

from __future__ import annotations

import importlib

import pytest
import torch

from hista import estimators, losses
from hista.advantages import token_advantages
from hista.errors import InputError
from hista.estimators.base import Estimator, ReadsCritic


class ToyCritic(ReadsCritic):
    """Values from a critic folder, as PPO-1 reads one."""

    label = "Toy critic"

    def critic_requirement(self) -> dict:
        return {"mode": "ppo-1", "lam": 1.0}

    def use_critic(self, critic):
        self.critic = critic
        return self

    def _raw_advantages(self, group, gae_lambda):
        return [torch.zeros(len(r.completion_ids)) for r in group.rollouts]

    def state_values(self, group, states):
        return torch.zeros(len(states))


class ToyHidden(Estimator):
    """Credit from the hidden states of its layer: each completion token's mean state."""

    label = "Toy hidden"
    needs_hidden = True

    def _raw_advantages(self, group, gae_lambda):
        return [r.hidden[len(r.prompt_ids):].float().mean(-1) for r in group.rollouts]

    def state_values(self, group, states):
        return torch.zeros(len(states))


@pytest.fixture
def toys():
    """The two toys registered for one test, and verl's derived estimator list read again with
    them; both undone after."""
    from hista.integrations import verl_settings

    registered = {"toy-critic": ToyCritic, "toy-hidden": ToyHidden}
    for name, cls in registered.items():
        estimators.register(name)(cls)
    try:
        yield importlib.reload(verl_settings)
    finally:
        for name in registered:
            del estimators.REGISTRY._items[name]
        importlib.reload(verl_settings)


def test_the_declaration_is_read_off_the_class():
    assert estimators.needs(ToyHidden) == estimators.Needs(hidden=True)
    assert estimators.needs(ToyCritic()) == estimators.Needs(critic="folder")
    assert estimators.needs(estimators.estimator_class("critic")).critic == "policy"
    assert estimators.needs(estimators.estimator_class("probe")).across_groups
    assert {c: estimators.refusal(c, ToyHidden) for c in estimators.CONSUMERS} == dict.fromkeys(estimators.CONSUMERS)


def test_every_consumer_serves_or_refuses_the_toys_by_their_declaration(toys, tiny):
    from hista.sveb.grad import estimator_credit
    from hista.sveb.methods import build_methods
    from hista.train.limits import untrainable

    # SVEB eval: the hidden-state toy is served; the critic toy reads a --critic folder
    assert build_methods(["toy-hidden"])["toy-hidden"].critic is None
    assert build_methods(["toy-critic"], critics=True)["toy-critic"].critic == {"mode": "ppo-1", "lam": 1.0}
    with pytest.raises(InputError, match="reads a trained critic: pass --critic"):
        build_methods(["toy-critic"])
    # SVEB grad and training: a batch of rollouts and its hidden states, no critic folder
    assert estimator_credit(ToyHidden(), tiny.tokenizer, 2)[1] == -1
    with pytest.raises(InputError, match="toy-critic needs a learned model"):
        estimator_credit(ToyCritic(), tiny.tokenizer, 2)
    assert untrainable(ToyHidden(), losses.get("dapo")) is None
    assert untrainable(ToyCritic(), losses.get("dapo")) == (
        "advantage_estimator.name", "estimator 'toy-critic' needs a learned model, which training does not provide")
    # the own-loop API: hidden states from the model, run once here
    prompts, completions = [[1, 2, 3]] * 2, [[4, 5], [6]]
    adv = token_advantages("toy-hidden", prompts, completions, [1.0, 0.0], ["p", "p"], model=tiny.model)
    assert adv.shape == (2, 2) and bool(adv[0].ne(0).all()) and adv[1, 1] == 0
    with pytest.raises(ValueError, match="toy-critic needs a learned model"):
        token_advantages("toy-critic", prompts, completions, [1.0, 0.0], ["p", "p"])
    # verl: the names its trainers feed, derived from the declarations when the module is read
    assert "hista_toy-hidden" in toys.ESTIMATORS and "hista_toy-hidden" in toys.HIDDEN_ESTIMATORS
    assert "hista_toy-critic" not in toys.ESTIMATORS
