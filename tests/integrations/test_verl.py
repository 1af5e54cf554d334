"""hista inside verl (docs/verl.md): the plugin's registered losses and estimators against hista's
own, and verl's settings that give hista's other losses. Needs verl (``pip install
'hista[verl]'``, in an environment of its own: ``.ci/run`` builds ``.venv-verl``); skipped
without it (the check command's refusal is tested in test_plugins.py)."""

import types

import pytest
import torch

from hista import estimators, losses
from hista.cli import main

AGGREGATIONS = {"token-mean": "token-mean", "seq-mean-token-mean": "seq-mean-token-mean"}


verl = pytest.importorskip("verl")
core_algos = pytest.importorskip("verl.trainer.ppo.core_algos")
from hista.integrations import verl as plugin  # noqa: E402


def _batch(seed: int, b: int = 6, t: int = 9, spread: float = 0.3):
    g = torch.Generator().manual_seed(seed)
    old = -torch.rand(b, t, generator=g) * 3
    logp = (old + spread * torch.randn(b, t, generator=g)).requires_grad_(True)
    adv = torch.randn(b, t, generator=g)
    lengths = torch.randint(1, t + 1, (b,), generator=g)
    mask = (torch.arange(t)[None, :] < lengths[:, None]).float()
    return logp, old, adv, mask


def _config(**kw):
    """What verl's actor hands a loss: its ActorConfig (clip ratios; empty global batch
    information, as on one process)."""
    from verl.workers.config.actor import ActorConfig

    return ActorConfig(strategy="fsdp", ppo_mini_batch_size=4, ppo_micro_batch_size_per_gpu=2, rollout_n=4, **kw)


def test_the_plugin_registered_on_verls_import(capsys):
    """verl's own plugin discovery imported hista's module: the names are in verl's registries."""
    for name in plugin.LOSSES:
        assert core_algos.get_policy_loss_fn(name).__name__ == f"hista_{name}_loss"
    for name in plugin.ESTIMATORS:
        assert core_algos.get_adv_estimator_fn(name).__name__ == f"hista_{plugin.ESTIMATORS[name]}_estimator"
    assert main(["verl", "check"]) == 0
    out = capsys.readouterr().out
    assert "hista = hista.integrations.verl" in out and "loss_mode=ptrace: registered by hista" in out


@pytest.mark.parametrize("name", plugin.LOSSES)
@pytest.mark.parametrize("mode", AGGREGATIONS)
@pytest.mark.parametrize("seed", [0, 1])
def test_registered_losses_equal_hista_in_value_and_gradient(name, mode, seed, monkeypatch):
    monkeypatch.setenv(plugin.LOSS_ENV, "{lam: 0.7}")
    logp, old, adv, mask = _batch(seed)
    got, metrics = core_algos.get_policy_loss_fn(name)(old, logp, adv, mask, loss_agg_mode=mode,
                                                        config=_config(clip_ratio_low=0.2, clip_ratio_high=0.28))
    (grad_got,) = torch.autograd.grad(got, logp)
    want, _ = losses.policy_loss(name, logp, old, adv, mask, lam=0.7, eps_low=0.2, eps_high=0.28,
                                 aggregation=AGGREGATIONS[mode])
    (grad_want,) = torch.autograd.grad(want, logp)
    torch.testing.assert_close(got, want)
    torch.testing.assert_close(grad_got, grad_want)
    assert {"actor/pg_clipfrac", "actor/ppo_kl", "actor/hista_ratio_mean"} <= set(metrics)
    # λ reached the loss: another λ gives another value
    other, _ = losses.policy_loss(name, logp, old, adv, mask, lam=0.95, eps_low=0.2, eps_high=0.28,
                                  aggregation=AGGREGATIONS[mode])
    assert not torch.allclose(other, got)


def test_bad_loss_parameters_name_the_variable(monkeypatch):
    from hista.errors import InputError

    logp, old, adv, mask = _batch(0)
    monkeypatch.setenv(plugin.LOSS_ENV, "[0.7]")
    with pytest.raises(InputError, match=plugin.LOSS_ENV):
        core_algos.get_policy_loss_fn("ptrace")(old, logp, adv, mask, config=_config())


@pytest.mark.parametrize("norm", [True, False])
def test_registered_estimator_equals_hista_and_verls_grpo(norm):
    from hista.types import Rollout, RolloutGroup

    g = torch.Generator().manual_seed(3)
    b, t = 12, 7
    lengths = torch.randint(1, t + 1, (b,), generator=g)
    mask = (torch.arange(t)[None, :] < lengths[:, None]).float()
    rewards = torch.randint(0, 2, (b,), generator=g).float()
    rewards[:4] = torch.tensor([1.0, 0.0, 1.0, 1.0])
    token_rewards = torch.zeros(b, t)
    token_rewards[torch.arange(b), lengths - 1] = rewards
    import numpy as np

    index = np.array(["p0"] * 4 + ["p1"] * 4 + ["p2"] * 4, dtype=object)[torch.randperm(b, generator=g).numpy()]
    config = types.SimpleNamespace(norm_adv_by_std_in_grpo=norm, lam=1.0)
    got, returns = core_algos.get_adv_estimator_fn("hista_grpo")(token_level_rewards=token_rewards,
                                                                  response_mask=mask, index=index, config=config)
    torch.testing.assert_close(got, returns)
    est = estimators.get("grpo")
    for key in ("p0", "p1", "p2"):
        rows = [i for i in range(b) if index[i] == key]
        group = RolloutGroup([Rollout(prompt_ids=[], completion_ids=[0] * int(lengths[i]), reward=float(rewards[i]))
                              for i in rows], prompt_id=key)
        for i, adv in zip(rows, est.token_advantages(group, gae_lambda=1.0, scale="group" if norm else "none")):
            torch.testing.assert_close(got[i, : int(lengths[i])], adv)
            assert not got[i, int(lengths[i]):].any()
    verls, _ = core_algos.compute_grpo_outcome_advantage(token_rewards, mask, index, norm_adv_by_std_in_grpo=norm)
    # the same up to the epsilon added to the std: verl 1e-6, hista 1e-4 (SPEC §4.1)
    torch.testing.assert_close(got, verls, atol=2e-3, rtol=1e-3)


@pytest.mark.parametrize("name", sorted(plugin.EQUIVALENT))
@pytest.mark.parametrize("seed", [0, 1])
def test_verl_settings_give_hista_losses(name, seed):
    """Each documented verl setting gives hista's loss in value and gradient, with ratios far
    enough from 1 that clipping (and, for dapo with verl's default, the dual clip) matters. GSPO
    with one advantage per sequence, its own setting: with token-level advantages verl's gspo
    is GSPO-token, whose gradient differs from hista's (docs/verl.md)."""
    settings = {k.rsplit(".", 1)[-1]: v for k, v in plugin.EQUIVALENT[name].items()}
    logp, old, adv, mask = _batch(seed, spread=1.5 if name != "gspo" else 1e-3)
    if name == "gspo":
        adv = adv[:, :1].expand_as(adv)
    cfg = _config(**{k: v for k, v in settings.items() if k.startswith("clip_ratio")})
    got, _ = core_algos.get_policy_loss_fn(settings["loss_mode"])(old, logp, adv, mask,
                                                                  loss_agg_mode=settings["loss_agg_mode"], config=cfg)
    (grad_got,) = torch.autograd.grad(got, logp)
    want, _ = losses.policy_loss(name, logp, old, adv, mask)
    (grad_want,) = torch.autograd.grad(want, logp)
    torch.testing.assert_close(got, want, atol=1e-6, rtol=1e-5)
    torch.testing.assert_close(grad_got, grad_want, atol=1e-6, rtol=1e-5)
