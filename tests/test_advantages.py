"""``hista.advantages.token_advantages``: one call from a batch to per-token advantages (SPEC §3,
§4, §9; docs/estimators.md "Use in your own loop"), checked against hista's trainer on the same
batch, across layouts, with the model's own pass, and on bad input."""

from __future__ import annotations

import pytest
import torch

from hista import estimators
from hista.advantages import token_advantages
from hista.models.forward import hidden_states
from hista.models.loading import build_tiny

PROMPTS = [[5, 6, 7], [5, 6, 7], [5, 6, 7], [9, 10], [9, 10], [9, 10]]
COMPLETIONS = [[11, 12, 13, 14, 15, 16], [17, 18], [19, 20, 21, 22], [23, 24, 25], [26], [27, 28, 29, 30, 31]]
REWARDS = [1.0, 0.0, 1.0, 0.0, 1.0, 0.0]
KEYS = ["a", "a", "a", "b", "b", "b"]


@pytest.fixture(scope="module")
def tiny():
    return build_tiny()


def padded(prompts=PROMPTS, completions=COMPLETIONS, hidden_width=None, pad=0):
    """TRL's layout: prompts padded on the left, completions on the right (and hidden states)."""
    p, t = max(map(len, prompts)), max(map(len, completions))
    prompt_ids = torch.full((len(prompts), p), pad)
    prompt_mask = torch.zeros(len(prompts), p, dtype=torch.long)
    completion_ids = torch.full((len(prompts), t), pad)
    completion_mask = torch.zeros(len(prompts), t, dtype=torch.long)
    for i, (prompt, completion) in enumerate(zip(prompts, completions)):
        prompt_ids[i, p - len(prompt):], prompt_mask[i, p - len(prompt):] = torch.tensor(prompt), 1
        completion_ids[i, : len(completion)], completion_mask[i, : len(completion)] = torch.tensor(completion), 1
    hidden = None
    if hidden_width:
        hidden = torch.randn(len(prompts), p + t, hidden_width, generator=torch.Generator().manual_seed(0))
    return prompt_ids, prompt_mask, completion_ids, completion_mask, hidden


def _text_batch(tokenizer):
    """Completions whose text holds numbers (Numca's milestones)."""
    texts = [" 3 plus 4 is 7, so 7", " 7", " it is 12", " 2 then 5 gives 10", " 10", " 6 and 6"]
    prompts = [tokenizer("What is 3 + 4?")["input_ids"]] * 3 + [tokenizer("What is 2 * 5?")["input_ids"]] * 3
    return prompts, [tokenizer(t, add_special_tokens=False)["input_ids"] for t in texts]


def _trainer(tmp_path, tiny, name):
    pytest.importorskip("trl")
    from datasets import Dataset
    from trl import GRPOConfig

    from hista.train.trainer import HistaGRPOTrainer

    args = GRPOConfig(output_dir=str(tmp_path / name), per_device_train_batch_size=6, num_generations=3,
                      max_completion_length=8, max_steps=1, report_to="none", save_strategy="no", bf16=False,
                      activation_checkpointing=False, disable_tqdm=True, loss_type="dapo", beta=0.0)
    data = Dataset.from_list([{"prompt": [{"role": "user", "content": f"What is {i}?"}]} for i in range(6)])
    return HistaGRPOTrainer(model=tiny.model, reward_funcs=[lambda completions, **kw: [0.0] * len(completions)],
                            args=args, train_dataset=data, processing_class=tiny.tokenizer,
                            advantage_estimator={"name": name}, loss={"name": "dapo"}, rollout_engine="trl")


@pytest.mark.parametrize("name", ["grpo", "numca", "hista", "probe", "blend"])
def test_equal_to_the_trainers_own_advantages(tmp_path, tiny, name):
    """The trainer's advantages of a batch and this function's, on the same ids, rewards and
    hidden states: equal within 1e-6 (every registered estimator that reads the batch)."""
    trainer = _trainer(tmp_path, tiny, name)
    prompts, completions = _text_batch(tiny.tokenizer)
    prompt_ids, prompt_mask, completion_ids, completion_mask, hidden = padded(prompts, completions, hidden_width=64)
    trainer.batch_rewards = torch.tensor(REWARDS)
    out = {"prompt_ids": prompt_ids, "prompt_mask": prompt_mask, "completion_ids": completion_ids,
           "completion_mask": completion_mask}
    reads_hidden = trainer.estimator.needs_hidden
    want = trainer.batch_advantages(out, hidden if reads_hidden else None, KEYS)
    got = token_advantages(name, prompt_ids, completion_ids, REWARDS, KEYS, prompt_mask=prompt_mask,
                           completion_mask=completion_mask, hidden=hidden if reads_hidden else None,
                           tokenizer=tiny.tokenizer)
    assert want.abs().max() > 0
    torch.testing.assert_close(got, want.cpu(), atol=1e-6, rtol=0)


def test_layouts_and_row_order_do_not_matter(tiny):
    prompts, completions = _text_batch(tiny.tokenizer)
    prompt_ids, prompt_mask, completion_ids, completion_mask, _ = padded(prompts, completions)
    for name in ("grpo", "numca"):
        tensors = token_advantages(name, prompt_ids, completion_ids, REWARDS, KEYS, prompt_mask=prompt_mask,
                                   completion_mask=completion_mask, tokenizer=tiny.tokenizer)
        lists = token_advantages(name, prompts, completions, REWARDS, KEYS, tokenizer=tiny.tokenizer)
        torch.testing.assert_close(lists, tensors)
        order = [3, 0, 4, 1, 5, 2]  # the groups' rows interleaved
        mixed = token_advantages(name, [prompts[i] for i in order], [completions[i] for i in order],
                                 [REWARDS[i] for i in order], [KEYS[i] for i in order], tokenizer=tiny.tokenizer)
        torch.testing.assert_close(mixed, lists[order])
        assert (tensors[~completion_mask.bool()] == 0).all()


def test_the_models_own_pass_and_the_probes_history(tiny):
    hista = estimators.get("hista", layer=-2)
    states = hidden_states(tiny, PROMPTS, COMPLETIONS, layer=-2)
    with_model = token_advantages(hista, PROMPTS, COMPLETIONS, REWARDS, KEYS, model=tiny.model)
    given = token_advantages(hista, PROMPTS, COMPLETIONS, REWARDS, KEYS, hidden=states)
    torch.testing.assert_close(with_model, given)
    assert with_model.abs().max() > 0
    probe = estimators.get("probe")
    for step in range(3):  # the object the caller holds keeps the history across batches
        token_advantages(probe, PROMPTS, COMPLETIONS, REWARDS, KEYS, model=tiny.model)
        assert len(probe.history) == step + 1


@pytest.mark.parametrize("change, argument", [
    (dict(rewards=REWARDS[:5]), "rewards"),
    (dict(rewards=[1.0, float("nan"), 0.0, 0.0, 1.0, 0.0]), "rewards"),
    (dict(groups=["a", "a", "a", "b", "b", "c"]), "groups"),
    (dict(groups=KEYS[:4]), "groups"),
    (dict(completion_ids=COMPLETIONS[:5]), "completion_ids"),
    (dict(estimator="hista"), "model"),
    (dict(estimator="numca", tokenizer=None), "tokenizer"),
    (dict(estimator="mc"), "estimator"),
    (dict(estimator=estimators.get("hista", layer=7), model="tiny"), "model"),
    (dict(estimator="hista", hidden=[torch.zeros(2, 4)] * 6), "hidden[0]"),
])
def test_bad_input_names_the_argument(tiny, change, argument):
    call = dict(estimator="grpo", prompt_ids=PROMPTS, completion_ids=COMPLETIONS, rewards=REWARDS, groups=KEYS,
                tokenizer=tiny.tokenizer)
    call.update(change)
    if call.get("model") == "tiny":
        call["model"] = tiny.model
    with pytest.raises(ValueError) as caught:
        token_advantages(**call)
    assert str(caught.value).startswith(argument), caught.value


def test_bad_padded_input_names_the_argument():
    prompt_ids, prompt_mask, completion_ids, completion_mask, hidden = padded(hidden_width=8)
    base = dict(prompt_mask=prompt_mask, completion_mask=completion_mask)
    with pytest.raises(ValueError, match="^completion_mask: shape"):
        token_advantages("grpo", prompt_ids, completion_ids, REWARDS, KEYS, prompt_mask=prompt_mask,
                         completion_mask=completion_mask[:, :2])
    with pytest.raises(ValueError, match="^completion_mask: a completion's tokens come first"):
        token_advantages("grpo", prompt_ids, completion_ids, REWARDS, KEYS, prompt_mask=prompt_mask,
                         completion_mask=completion_mask.flip(1))
    with pytest.raises(ValueError, match="^hidden: shape"):
        token_advantages("hista", prompt_ids, completion_ids, REWARDS, KEYS, hidden=hidden[:, 1:], **base)
    with pytest.raises(ValueError, match="^prompt_ids, completion_ids"):
        token_advantages("grpo", prompt_ids, COMPLETIONS, REWARDS, KEYS)


def test_one_way_back_from_groups_to_rows():
    """Issue 67 item 3: token_advantages, the trainer and the verl plugin cut a batch by
    group_rows and write advantages back with scatter: rows named per group, or consecutive."""
    from hista.advantages import group_rows, scatter

    assert group_rows(["b", "a", "b", "a"], 4) == {"b": [0, 2], "a": [1, 3]}
    with pytest.raises(ValueError, match="group 'c' has one row"):
        group_rows(["a", "a", "c"], 3)
    assert group_rows(["a", "a", "c"], 3, singles=True) == {"a": [0, 1], "c": [2]}
    per_group = [[torch.tensor([1.0, 2.0]), torch.tensor([3.0])], [torch.tensor([4.0])]]
    named = scatter(per_group, (3, 3), rows=[[2, 0], [1]])
    assert named.tolist() == [[3.0, 0.0, 0.0], [4.0, 0.0, 0.0], [1.0, 2.0, 0.0]]
    assert scatter(per_group, (3, 2)).tolist() == [[1.0, 2.0], [3.0, 0.0], [4.0, 0.0]]
    with pytest.raises(ValueError, match="3 rollouts but the batch has 4 rows"):
        scatter(per_group, (4, 2))
