"""Tests of the policy losses (SPEC §5, docs/losses.md): hand example, invariants of the
trace losses, equality with TRL's GRPOTrainer._compute_loss, edge cases and errors."""

from __future__ import annotations

import math
from collections import defaultdict
from types import SimpleNamespace

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from hista.losses import discounted_cumsum, lookup, names, policy_loss, trace_log_ratio

ALL = names()  # every registered loss, plugins included: a new loss is tested on registration
AGGS = ["token-mean", "seq-mean-token-mean", "constant"]
FAST = settings(max_examples=20, deadline=None)


def make_batch(B, T, seed, per_token_adv=False, scale=0.3, min_len=0):
    """Random [B, T] batch in float64: right-padded mask, logp a leaf requiring grad."""
    g = torch.Generator().manual_seed(seed)
    lengths = torch.randint(min_len, T + 1, (B,), generator=g)
    mask = (torch.arange(T)[None, :] < lengths[:, None]).float()
    logp = (-3.0 * torch.rand(B, T, generator=g, dtype=torch.float64)).requires_grad_()
    old = logp.detach() + scale * torch.randn(B, T, generator=g, dtype=torch.float64)
    shape = (B, T) if per_token_adv else (B,)
    adv = torch.randn(*shape, generator=g, dtype=torch.float64)
    ent = 2.0 * torch.rand(B, T, generator=g, dtype=torch.float64)
    ref = logp.detach() + 0.2 * torch.randn(B, T, generator=g, dtype=torch.float64)
    return SimpleNamespace(logp=logp, old=old, adv=adv, mask=mask, ent=ent, ref=ref)


def value_and_grad(name, b, **cfg):
    loss, metrics = policy_loss(name, b.logp, b.old, b.adv, b.mask, entropies=b.ent, **cfg)
    (grad,) = torch.autograd.grad(loss, b.logp)
    return loss.detach(), grad, metrics


def assert_same(a, b):
    (va, ga, _), (vb, gb, _) = a, b
    torch.testing.assert_close(va, vb, rtol=1e-10, atol=1e-12)
    torch.testing.assert_close(ga, gb, rtol=1e-10, atol=1e-12)


def ref_agg(x, mask, aggregation):
    """Independent re-statement of the three aggregations of SPEC §5."""
    m = mask.float().to(x.dtype)
    if aggregation == "token-mean":
        return (x * m).sum() / m.sum().clamp(min=1.0)
    if aggregation == "seq-mean-token-mean":
        return ((x * m).sum(-1) / m.sum(-1).clamp(min=1.0)).mean()
    return (x * m).sum() / (mask.size(0) * mask.size(1))


# --- traces ---------------------------------------------------------------------------------


def test_hand_example_ptrace_trace():
    x = torch.tensor([[0.1, -0.2, 0.3]], dtype=torch.float64)
    z = trace_log_ratio(x, torch.ones(1, 3), lam=0.5)
    # z1 = 0.1; z2 = (0.5·0.1 − 0.2) / 1.5; z3 = (0.25·0.1 − 0.5·0.2 + 0.3) / 1.75
    torch.testing.assert_close(z, torch.tensor([[0.1, -0.1, 0.225 / 1.75]], dtype=torch.float64))
    assert z[0, 2].item() == pytest.approx(0.128571428, abs=1e-8)
    # ... and the ratio the loss uses is exp(z): at a one-token batch ratio_mean = exp(x).
    _, metrics = policy_loss("ptrace", x[:, :1], torch.zeros(1, 1), torch.ones(1), torch.ones(1, 1), lam=0.5)
    assert metrics["ratio_mean"] == pytest.approx(math.exp(0.1))


def naive_discounted_cumsum(x, decay):
    out = torch.zeros_like(x)
    for t in range(x.shape[-1]):
        for k in range(t + 1):
            out[..., t] += decay ** (t - k) * x[..., k]  # python 0**0 == 1
    return out


@pytest.mark.parametrize("decay", [0.0, 0.5, 0.9, 1.0])
@pytest.mark.parametrize("T,block", [(1, 128), (7, 128), (13, 4), (37, 4), (300, 128)])
def test_discounted_cumsum_matches_naive(decay, T, block):
    x = torch.randn(2, 3, T, dtype=torch.float64, generator=torch.Generator().manual_seed(T))
    torch.testing.assert_close(discounted_cumsum(x, decay, block=block), naive_discounted_cumsum(x, decay))


@pytest.mark.parametrize("decay", [0.0, 0.7, 1.0])
def test_discounted_cumsum_gradcheck(decay):
    x = torch.randn(2, 11, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda v: discounted_cumsum(v, decay, block=3), (x,))


def test_long_sequence_trace_is_cheap_and_differentiable():
    b = make_batch(2, 8192, seed=0, per_token_adv=True, scale=0.05, min_len=4000)
    for name in ("ptrace", "strace", "grpo_lambda"):
        loss, grad, _ = value_and_grad(name, b)
        assert torch.isfinite(loss) and torch.isfinite(grad).all()


# --- invariants (SPEC §5) -------------------------------------------------------------------


shapes = dict(B=st.integers(1, 4), T=st.integers(1, 12), seed=st.integers(0, 2**31 - 1),
              per_token=st.booleans(), agg=st.sampled_from(AGGS))


@FAST
@given(**shapes, name=st.sampled_from(["ptrace", "strace", "grpo_lambda"]))
def test_lambda_zero_equals_token_level_grpo(B, T, seed, per_token, agg, name):
    b = make_batch(B, T, seed, per_token)
    eps = dict(eps_low=0.2, eps_high=0.28, aggregation=agg)
    assert_same(value_and_grad(name, b, lam=0.0, **eps), value_and_grad("grpo", b, **eps))


@FAST
@given(**shapes, lam=st.sampled_from([0.3, 0.9, 1.0]))
def test_strace_with_all_tokens_equals_ptrace(B, T, seed, per_token, agg, lam):
    b = make_batch(B, T, seed, per_token)
    cfg = dict(lam=lam, aggregation=agg)
    out = value_and_grad("strace", b, top_entropy_fraction=1.0, **cfg)
    assert_same(out, value_and_grad("ptrace", b, **cfg))
    assert out[2]["kept_frac"] == (1.0 if b.mask.sum() > 0 else 0.0)


@FAST
@given(**shapes)
def test_uniform_ptrace_equals_gspo(B, T, seed, per_token, agg):
    b = make_batch(B, T, seed, per_token, scale=1e-3)  # drift of order ε: some sequences clip
    eps = dict(eps_low=3e-4, eps_high=4e-4, aggregation=agg)
    assert_same(value_and_grad("ptrace", b, trace="uniform", lam=0.5, **eps), value_and_grad("gspo", b, **eps))


@FAST
@given(B=st.integers(1, 4), T=st.integers(1, 12), seed=st.integers(0, 2**31 - 1), per_token=st.booleans())
def test_value_at_theta_old(B, T, seed, per_token):
    b = make_batch(B, T, seed, per_token)
    b.old = b.logp.detach().clone()
    adv = b.adv.reshape(B, -1).expand(B, T)
    for name in ALL:
        agg = lookup(name).aggregation
        loss, _, metrics = value_and_grad(name, b)
        if name == "cispo":
            # SPEC table: the CISPO value is −agg(A · log π), not −agg(A); its gradient matches.
            torch.testing.assert_close(loss, -ref_agg(adv * b.logp.detach(), b.mask, agg))
            continue
        torch.testing.assert_close(loss, -ref_agg(adv, b.mask, agg), msg=name)
        if b.mask.sum() > 0:
            assert metrics["ratio_mean"] == metrics["ratio_min"] == metrics["ratio_max"] == 1.0


@FAST
@given(B=st.integers(1, 4), T=st.integers(1, 12), seed=st.integers(0, 2**31 - 1), per_token=st.booleans())
def test_cispo_gradient_at_theta_old_is_policy_gradient(B, T, seed, per_token):
    b = make_batch(B, T, seed, per_token)
    b.old = b.logp.detach().clone()
    _, grad, _ = value_and_grad("cispo", b)
    adv = b.adv.reshape(B, -1).expand(B, T)
    surrogate = -ref_agg(torch.exp(b.logp - b.logp.detach()) * adv, b.mask, "token-mean")
    (expected,) = torch.autograd.grad(surrogate, b.logp)
    torch.testing.assert_close(grad, expected)


def test_strace_selects_top_fraction():
    b = make_batch(4, 50, seed=3, min_len=50)
    _, m = policy_loss("strace", b.logp, b.old, b.adv, b.mask, entropies=b.ent)
    assert m["kept_frac"] == pytest.approx(0.2, abs=0.01)


# --- equality with TRL ----------------------------------------------------------------------


class _Accelerator:
    num_processes = 1

    def reduce(self, x, reduction="sum"):
        return x

    def gather(self, x):
        return x

    def pad_across_processes(self, x, dim=0, pad_index=0):
        return x


@pytest.fixture(scope="module")
def trl_trainer_class():
    trl = pytest.importorskip("trl")
    return trl.GRPOTrainer


def trl_loss(cls, b, *, loss_type, eps_low, eps_high, level="token", beta=0.0):
    """Run TRL's own GRPOTrainer._compute_loss on a bare instance fed our tensors."""
    t = object.__new__(cls)
    B, T = b.logp.shape
    t.loss_type, t.importance_sampling_level = loss_type, level
    t.epsilon_low, t.epsilon_high, t.beta = eps_low, eps_high, beta
    t.top_entropy_quantile, t.off_policy_mask_threshold = 1.0, None
    t.use_vllm = t.vllm_importance_sampling_correction = False
    t.aux_loss_enabled = t._entropy_bonus_enabled = False
    t.current_gradient_accumulation_steps, t.max_completion_length = 1, T
    t.args = SimpleNamespace(delta=None, use_bias_correction_kl=False, steps_per_generation=1)
    t.accelerator = _Accelerator()
    t.model = SimpleNamespace(training=True)
    t._metrics = defaultdict(lambda: defaultdict(list))
    t._get_per_token_logps_and_entropies = lambda *a, **k: (b.logp, b.ent, None)
    inputs = {
        "prompt_ids": torch.ones(B, 2, dtype=torch.long), "prompt_mask": torch.ones(B, 2, dtype=torch.long),
        "completion_ids": torch.ones(B, T, dtype=torch.long), "completion_mask": b.mask.long(),
        "advantages": b.adv, "old_per_token_logps": b.old, "num_items_in_batch": b.mask.sum(),
    }
    if beta:
        inputs["ref_per_token_logps"] = b.ref
    loss = t._compute_loss(None, inputs)
    (grad,) = torch.autograd.grad(loss, b.logp)
    return loss.detach(), grad, t._metrics["train"]


TRL_CASES = {
    "grpo": dict(loss_type="grpo", eps_low=0.2, eps_high=0.2),
    "dapo": dict(loss_type="dapo", eps_low=0.2, eps_high=0.28),
    "dr_grpo": dict(loss_type="dr_grpo", eps_low=0.2, eps_high=0.2),
    "cispo": dict(loss_type="cispo", eps_low=0.2, eps_high=5.0),
    "gspo": dict(loss_type="grpo", eps_low=3e-4, eps_high=4e-4, level="sequence"),
}


@pytest.mark.parametrize("per_token", [False, True], ids=["adv_B", "adv_BT"])
@pytest.mark.parametrize("name", sorted(TRL_CASES))
def test_matches_trl(trl_trainer_class, name, per_token):
    for seed in range(3):
        # gspo: sequence log-ratios of order ε so some sequences clip and some do not;
        # cispo: log-ratios of a few units so some ratios pass the cap of 5.
        scale = {"gspo": 1e-3, "cispo": 1.5}.get(name, 0.5)
        b = make_batch(3, 9, seed, per_token, scale=scale)
        ours = value_and_grad(name, b)
        theirs = trl_loss(trl_trainer_class, b, **TRL_CASES[name])
        assert_same(ours, theirs)
        if name in ("grpo", "dapo", "dr_grpo"):
            assert ours[2]["clip_frac_high"] == pytest.approx(theirs[2]["clip_ratio/high_mean"][0])
            assert ours[2]["clip_frac_low"] == pytest.approx(theirs[2]["clip_ratio/low_mean"][0])
        if name == "cispo":
            assert ours[2]["clip_frac_high"] == pytest.approx(theirs[2]["cispo_clip_ratio"][0])


@pytest.mark.parametrize("name", ["grpo", "dapo"])
def test_kl_matches_trl(trl_trainer_class, name):
    for seed in range(3):
        b = make_batch(3, 9, seed, per_token_adv=bool(seed % 2))
        ours = value_and_grad(name, b, beta=0.04, ref_logp=b.ref)
        theirs = trl_loss(trl_trainer_class, b, beta=0.04, **TRL_CASES[name])
        assert_same(ours, theirs)
        assert ours[2]["kl"] == pytest.approx(theirs[2]["kl"][0])


# --- edge cases -----------------------------------------------------------------------------


@pytest.mark.parametrize("name", ALL)
def test_all_masked_and_zero_advantage_give_zero(name):
    b = make_batch(3, 5, seed=1)
    b.mask = torch.zeros(3, 5)
    loss, grad, metrics = value_and_grad(name, b)
    assert loss.item() == 0.0 and torch.count_nonzero(grad) == 0
    assert all(v == 0.0 for v in metrics.values())

    b = make_batch(3, 5, seed=2, per_token_adv=True)
    b.adv = torch.zeros_like(b.adv)
    loss, grad, _ = value_and_grad(name, b)
    assert loss.item() == 0.0 and torch.count_nonzero(grad) == 0


@pytest.mark.parametrize("name", ALL)
@pytest.mark.parametrize("B,T", [(1, 1), (1, 6), (4, 1)])
def test_small_shapes_are_finite(name, B, T):
    for dtype in (torch.float64, torch.float32):
        b = make_batch(B, T, seed=B * 10 + T, min_len=1)
        b.logp = b.logp.detach().to(dtype).requires_grad_()
        loss, grad, metrics = value_and_grad(name, b, beta=0.1, ref_logp=b.ref)
        assert torch.isfinite(loss) and torch.isfinite(grad).all()
        assert all(math.isfinite(v) for v in metrics.values())


def test_padding_values_do_not_leak():
    b = make_batch(2, 6, seed=5)
    b.mask = torch.tensor([[1, 1, 1, 0, 0, 0], [1, 1, 1, 1, 1, 0]]).float()
    base = {n: value_and_grad(n, b) for n in ALL}
    pad = b.mask == 0
    b.old = torch.where(pad, torch.full_like(b.old, 40.0), b.old)
    b.ent = torch.where(pad, torch.full_like(b.ent, 1e3), b.ent)
    for n in ALL:
        assert_same(value_and_grad(n, b), base[n])


# --- errors ---------------------------------------------------------------------------------


def test_errors():
    b = make_batch(2, 4, seed=0)
    args = (b.logp, b.old, b.adv, b.mask)
    with pytest.raises(ValueError, match="unknown loss 'ppo'.*grpo_lambda"):
        policy_loss("ppo", *args)
    with pytest.raises(ValueError, match="clip_eps.*'dapo'"):
        policy_loss("dapo", *args, clip_eps=0.1)
    with pytest.raises(ValueError, match="gamma.*'ptrace'"):
        policy_loss("ptrace", *args, gamma=0.9)
    with pytest.raises(ValueError, match="eps_high.*'cispo'"):
        policy_loss("cispo", *args, eps_high=5.0)
    with pytest.raises(ValueError, match="strace.*entropies"):
        policy_loss("strace", *args)
    with pytest.raises(ValueError, match="ref_logp"):
        policy_loss("grpo", *args, beta=0.1)
    with pytest.raises(ValueError, match="aggregation"):
        policy_loss("grpo", *args, aggregation="sum")
    with pytest.raises(ValueError, match="max_len"):
        policy_loss("grpo", *args, max_len=8)
    with pytest.raises(ValueError, match="trace"):
        policy_loss("ptrace", *args, trace="linear")
    with pytest.raises(ValueError, match="lam"):
        policy_loss("ptrace", *args, lam=1.5)
    with pytest.raises(ValueError, match="old_logp"):
        policy_loss("grpo", b.logp, b.old[:, :3], b.adv, b.mask)
    with pytest.raises(ValueError, match="mask"):
        policy_loss("grpo", b.logp, b.old, b.adv, b.mask[:1])
    with pytest.raises(ValueError, match="advantages"):
        policy_loss("grpo", b.logp, b.old, torch.zeros(3), b.mask)
    with pytest.raises(ValueError, match="entropies"):
        policy_loss("strace", *args, entropies=torch.zeros(2, 5))
    with pytest.raises(ValueError, match="ref_logp"):
        policy_loss("grpo", *args, beta=0.1, ref_logp=torch.zeros(2))
