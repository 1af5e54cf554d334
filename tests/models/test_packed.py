"""Linear layers on oneDNN's packed weights (hista.models.packed, SPEC §7, §12)."""

import copy

import pytest
import torch

from hista.models.packed import packed_linears

pytestmark = pytest.mark.skipif(not torch.backends.mkldnn.is_available(), reason="PyTorch without oneDNN")


def _logits(model, ids):
    return model(input_ids=ids).logits


def test_packed_forward_equals_the_plain_forward_and_is_undone(tiny):
    ids = torch.tensor([[5, 6, 7, 8, 9], [10, 11, 12, 13, 14]])
    q_proj = tiny.model.model.layers[0].self_attn.q_proj
    with torch.no_grad():
        plain = _logits(tiny.model, ids)
        with packed_linears(tiny.model):
            assert "forward" in q_proj.__dict__
            packed = _logits(tiny.model, ids)
            with packed_linears(tiny.model):  # re-entrant
                again = _logits(tiny.model, ids)
        assert "forward" not in q_proj.__dict__
    torch.testing.assert_close(packed, plain, atol=1e-5, rtol=0)
    torch.testing.assert_close(again, packed, atol=0, rtol=0)


def test_with_gradients_nothing_is_packed(tiny):
    with packed_linears(tiny.model):  # gradients on: a no-op
        assert "forward" not in tiny.model.model.layers[0].self_attn.q_proj.__dict__
        out = _logits(tiny.model, torch.tensor([[5, 6, 7]]))
    assert out.requires_grad


def test_siblings_share_one_product_and_each_gets_its_own_slice(tiny):
    attn = tiny.model.model.layers[0].self_attn
    x, y = torch.randn(2, 3, attn.q_proj.in_features), torch.randn(2, 3, attn.q_proj.in_features)
    with torch.no_grad(), packed_linears(tiny.model):
        calls = [(attn.q_proj, x), (attn.k_proj, x), (attn.k_proj, x), (attn.q_proj, y), (attn.v_proj, x),
                 (attn.v_proj, y)]
        outs = [module(inp) for module, inp in calls]
    for (module, inp), out in zip(calls, outs):
        torch.testing.assert_close(out, torch.nn.functional.linear(inp, module.weight, module.bias), atol=1e-5, rtol=0)


def test_changed_weights_are_packed_anew(tiny):
    model = copy.deepcopy(tiny.model)
    ids = torch.tensor([[5, 6, 7, 8]])
    with torch.no_grad():
        with packed_linears(model):
            before = _logits(model, ids)
        for parameter in model.parameters():
            parameter.add_(0.01)  # an optimizer step: in place, version counter bumped
        plain = _logits(model, ids)
        with packed_linears(model):
            after = _logits(model, ids)
    assert not torch.allclose(before, plain, atol=1e-3)
    torch.testing.assert_close(after, plain, atol=1e-5, rtol=0)


def test_a_fused_optimiser_step_needs_forget(tiny):
    """Fused AdamW (transformers' default optimiser) moves the weights in place without bumping
    their version counters, so the packed copies cannot see it: ``forget`` drops them and the
    next block multiplies with the new weights."""
    from hista.models.packed import forget

    model = copy.deepcopy(tiny.model)
    ids = torch.tensor([[5, 6, 7, 8]])
    optimiser = torch.optim.AdamW(model.parameters(), lr=1e-2, fused=True)
    with torch.no_grad(), packed_linears(model):
        before = _logits(model, ids)
    _logits(model, ids).sum().backward()
    versions = [p._version for p in model.parameters()]
    optimiser.step()
    with torch.no_grad():
        plain = _logits(model, ids)
        with packed_linears(model):
            stale = _logits(model, ids)
        forget(model)
        with packed_linears(model):
            after = _logits(model, ids)
    assert [p._version for p in model.parameters()] == versions  # the step left no trace
    assert not torch.allclose(before, plain, atol=1e-3)
    assert not torch.allclose(stale, plain, atol=1e-3)  # the version check alone multiplies old linear weights
    torch.testing.assert_close(after, plain, atol=1e-5, rtol=0)
