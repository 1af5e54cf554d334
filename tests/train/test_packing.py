"""The packed loss forward (issue 42 item 3; SPEC §9; hista.train.packing): one row per distinct
prompt, no padding, the same log-probs, entropies and gradients as TRL's padded forward."""

from __future__ import annotations

import pytest
import torch
from test_train import _config, _dataset, _parity_reward

from hista.train import packing


def _batch(seed: int = 0, vocab: int = 40):
    """Rows of two prompts (3 and 5 tokens, left-padded to 6), interleaved, with completions of
    lengths 4, 0, 7, 2, 5, 1 (right-padded to 7; the 0 is a row whose mask was cleared)."""
    g = torch.Generator().manual_seed(seed)
    prompts = [torch.randint(3, vocab, (3,), generator=g), torch.randint(3, vocab, (5,), generator=g)]
    lengths = [4, 0, 7, 2, 5, 1]
    prompt_ids = torch.zeros(6, 6, dtype=torch.long)
    prompt_mask = torch.zeros(6, 6, dtype=torch.long)
    completion_ids = torch.randint(3, vocab, (6, 7), generator=g)
    completion_mask = torch.zeros(6, 7, dtype=torch.long)
    for i, t in enumerate(lengths):
        p = prompts[i % 2]
        prompt_ids[i, 6 - p.numel():] = p
        prompt_mask[i, 6 - p.numel():] = 1
        completion_mask[i, :t] = 1
    completion_ids[completion_mask == 0] = 2  # padding
    return {"prompt_ids": prompt_ids, "prompt_mask": prompt_mask, "completion_ids": completion_ids,
            "completion_mask": completion_mask}, prompts, lengths


def test_each_prompt_is_packed_once_with_its_rollouts_segments():
    inputs, prompts, lengths = _batch()
    packed = packing.pack(**inputs, pad_token_id=2)
    assert packed.input_ids.shape[0] == 2  # two distinct prompts
    a = packed.input_ids[0]
    # prompt A but its last token, then rows 0, 2, 4: the prompt's last token and the completion but its last
    want = torch.cat([prompts[0][:-1]] + [torch.cat([prompts[0][-1:], inputs["completion_ids"][i, :lengths[i] - 1]])
                                          for i in (0, 2, 4)])
    assert torch.equal(a[: want.numel()], want)
    assert (packed.shift_labels[0, :2] == packing.IGNORE).all()
    assert torch.equal(packed.shift_labels[0, 2:6], inputs["completion_ids"][0, :4])
    # positions restart after the prompt in every segment
    assert packed.position_ids[0, :6].tolist() == [0, 1, 2, 3, 4, 5]
    assert packed.position_ids[0, 6:13].tolist() == [2, 3, 4, 5, 6, 7, 8]
    # a segment sees the prompt and itself, never another rollout
    mask = packed.attention_mask[0, 0]
    assert mask[6, :2].all() and mask[6, 6] and not mask[6, 2:6].any()
    assert not mask[:, 2:6][6:].any()
    assert packed.input_ids.numel() < inputs["prompt_ids"].numel() + inputs["completion_ids"].numel()


def test_unpack_puts_each_position_back_where_the_padded_layout_has_it():
    inputs, _, lengths = _batch()
    packed = packing.pack(**inputs, pad_token_id=2)
    values = packed.shift_labels.float()  # the label a position scores is the token it is scored for
    out = packing.unpack(values, packed)
    want = inputs["completion_ids"].float() * inputs["completion_mask"]
    assert torch.equal(out, want)
    assert out[1].abs().sum() == 0  # the cleared row reads 0, as TRL's labels of -100 do


def test_a_prompt_with_more_rollouts_than_a_row_holds_starts_another_row():
    """Rows no longer than max(a padded row, row_limit): prompt A's three rollouts (4 + 7 + 5
    tokens after its 2) take two rows of 13 at most, prompt B's one; every value comes back."""
    inputs, prompts, _ = _batch()
    packed = packing.pack(**inputs, pad_token_id=2, row_limit=0)
    assert packed.input_ids.shape == (3, 13)
    assert torch.equal(packed.input_ids[1, :2], prompts[0][:-1])  # the prompt again
    assert torch.equal(packing.unpack(packed.shift_labels.float(), packed),
                       inputs["completion_ids"].float() * inputs["completion_mask"])


def test_a_micro_batch_of_empty_completions_packs_to_nothing_scored():
    inputs, _, _ = _batch()
    inputs["completion_mask"][:] = 0
    packed = packing.pack(**inputs, pad_token_id=2)
    assert packed.where.numel() == 0 and not packed.scored.any()
    values = torch.ones(packed.input_ids.shape, requires_grad=True)
    out = packing.unpack(values, packed)
    assert out.abs().sum() == 0 and out.requires_grad  # still part of the graph


def test_a_mask_that_is_not_a_prefix_is_not_packed():
    mask = torch.tensor([[1, 1, 0], [1, 0, 0]])
    assert packing.packable(mask)
    assert not packing.packable(torch.tensor([[1, 0, 1]]))


@pytest.mark.parametrize("attention,row_limit", [("sdpa", None), ("eager", None), ("sdpa", 0)])
def test_packed_forward_matches_trls_padded_forward(tmp_path, monkeypatch, attention, row_limit):
    """Log-probs, entropies (at temperature 0.7, through TRL's fused head) and the gradient of a
    policy-gradient loss agree with TRL's padded forward on a shuffled batch of two groups, in
    one row per prompt or (``row_limit`` 0) rows split."""
    from hista.models.loading import build_tiny
    from hista.train.trainer import HistaGRPOTrainer

    if row_limit is not None:
        monkeypatch.setattr(packing, "ROW_LIMIT", row_limit)

    lm = build_tiny()
    lm.model.set_attn_implementation(attention)
    trainer = HistaGRPOTrainer(model=lm.model, reward_funcs=[_parity_reward], train_dataset=_dataset(),
                               processing_class=lm.tokenizer, args=_config(tmp_path, "p", temperature=0.7),
                               advantage_estimator={"name": "grpo"}, loss={"name": "dapo"})
    inputs, _, _ = _batch(vocab=lm.model.config.vocab_size)
    assert trainer._packs(trainer.model, inputs)
    mask = inputs["completion_mask"].bool()
    weights = torch.randn(mask.shape, generator=torch.Generator().manual_seed(1)) * mask
    results = []
    for packed in (False, True):
        trainer.model.zero_grad(set_to_none=True)
        if packed:
            logp, entropy = trainer._packed_logps(trainer.model, inputs)
        else:
            logp, entropy, _ = trainer._get_per_token_logps_and_entropies(
                trainer.model, torch.cat([inputs["prompt_ids"], inputs["completion_ids"]], 1),
                torch.cat([inputs["prompt_mask"], inputs["completion_mask"]], 1), 7, compute_entropy=True)
        (weights * logp).sum().backward()
        grad = torch.cat([p.grad.flatten() for p in trainer.model.parameters() if p.grad is not None])
        results.append((logp.detach(), entropy.detach(), grad))
    (logp0, ent0, grad0), (logp1, ent1, grad1) = results
    assert logp0[mask].abs().min() > 0  # real log-probs
    torch.testing.assert_close(logp1, logp0, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(ent1[mask], ent0[mask], atol=1e-5, rtol=1e-5)
    assert float(torch.nn.functional.cosine_similarity(grad0, grad1, dim=0)) > 0.99999
    torch.testing.assert_close(grad1, grad0, atol=1e-5, rtol=1e-4)


def test_packed_loss_false_keeps_trls_forward(tmp_path):
    from hista.models.loading import build_tiny
    from hista.train.trainer import HistaGRPOTrainer

    lm = build_tiny()
    trainer = HistaGRPOTrainer(model=lm.model, reward_funcs=[_parity_reward], train_dataset=_dataset(),
                               processing_class=lm.tokenizer, args=_config(tmp_path, "p"),
                               advantage_estimator={"name": "grpo"}, loss={"name": "dapo"}, packed_loss=False)
    assert not trainer._packs(trainer.model, _batch()[0])
