"""Library functions reject bad inputs with a ValueError / InputError naming them (SPEC §12,
issue "Reliability"): non-finite rewards and advantages, non-binary masks, sampling settings
out of range, a damaged model cache, an unreachable hub, an unknown device, an empty task
source, and every input of ``token_advantages`` that was read as something else or failed deep
in torch (issue 62: adversarial review cb60262, F11 and F12)."""

from __future__ import annotations

import math
import os
import shutil
import time

import pytest
import torch

from hista import estimators, losses, tasks
from hista.advantages import REWARD_BOUND, token_advantages
from hista.errors import InputError
from hista.estimators.base import group_std, scale_advantages
from hista.estimators.gae import segment_gae
from hista.estimators.hista import knn_average
from hista.models import check_device, check_weights
from hista.rollout import SamplingConfig
from hista.types import Rollout, RolloutGroup

pytestmark = pytest.mark.xdist_group("library-inputs")  # its module fixtures are built once (tests/conftest.py)

BAD = [math.nan, math.inf, -math.inf]


# --- rewards ----------------------------------------------------------------------------------


@pytest.mark.parametrize("reward", BAD)
def test_rollout_rejects_a_non_finite_reward(reward):
    with pytest.raises(ValueError, match=r"Rollout\.reward is (nan|inf|-inf); rewards must be finite"):
        Rollout(prompt_ids=[1], completion_ids=[2, 3], reward=reward)


def _group(rewards, length=3):
    return RolloutGroup([Rollout(prompt_ids=[1], completion_ids=list(range(length)), reward=r) for r in rewards])


@pytest.mark.parametrize("reward", BAD)
def test_a_reward_made_non_finite_after_construction_is_caught_by_the_estimator(reward):
    group = _group([1.0, 0.0, 1.0])
    group.rollouts[1].reward = reward
    with pytest.raises(ValueError, match="rewards"):
        estimators.get("grpo").token_advantages(group)
    with pytest.raises(ValueError, match="rewards"):
        estimators.get("grpo").baselines(group)


@pytest.mark.parametrize("reward", BAD)
def test_reward_tensor_helpers_reject_non_finite_rewards(reward):
    rewards = torch.tensor([1.0, reward, 0.0])
    with pytest.raises(ValueError, match="rewards"):
        group_std(rewards)
    with pytest.raises(ValueError, match="rewards"):
        scale_advantages([torch.ones(3)], rewards)
    with pytest.raises(ValueError, match="rewards"):
        knn_average(torch.ones(1, 3), torch.ones(1, 3, dtype=torch.bool), rewards, torch.tensor([2]), 1.0, 1.0, 0.5)
    with pytest.raises(ValueError, match="values"):
        segment_gae([0, 2, 3], torch.tensor([0.5, 0.5, reward]), 3)
    with pytest.raises(ValueError, match="batch_std"):
        scale_advantages([torch.ones(3)], torch.tensor([1.0, 0.0]), "batch", batch_std=reward)


def test_continuation_rewards_must_be_finite():
    from hista.types import State

    with pytest.raises(ValueError, match="non-finite"):
        estimators.get("mc").state_values(_group([1.0, 0.0]), [State(rollout=0, t=1, continuations=[1.0, math.nan])])


def test_finite_rewards_give_the_same_advantages_as_before():
    group = _group([1.0, 0.0, 0.0, 1.0])
    adv = estimators.get("grpo").token_advantages(group)
    std = torch.tensor([1.0, 0.0, 0.0, 1.0]).std(unbiased=True).item()
    assert adv[0].tolist() == pytest.approx([0.5 / (std + 1e-4)] * 3)
    assert adv[1].tolist() == pytest.approx([-0.5 / (std + 1e-4)] * 3)


# --- losses -----------------------------------------------------------------------------------


def _batch(B=2, T=4, seed=0):
    g = torch.Generator().manual_seed(seed)
    old = -torch.rand(B, T, generator=g) - 0.1
    logp = (old + 0.05 * torch.randn(B, T, generator=g)).requires_grad_(True)
    return {
        "logp": logp,
        "old_logp": old,
        "advantages": torch.randn(B, T, generator=g),
        "mask": torch.ones(B, T),
        "entropies": torch.rand(B, T, generator=g),
        "ref_logp": old.clone(),
    }


@pytest.mark.parametrize("name", losses.names())
@pytest.mark.parametrize("value", [0.5, -1.0, 2.0, math.nan])
def test_every_loss_rejects_a_non_binary_mask(name, value):
    b = _batch()
    b["mask"][0, 1] = value
    with pytest.raises(ValueError, match="mask"):
        losses.policy_loss(name, **b)


@pytest.mark.parametrize("name", losses.names())
def test_every_loss_accepts_bool_and_0_1_masks_alike(name):
    b = _batch()
    b["mask"][1, 2:] = 0
    as_float, _ = losses.policy_loss(name, **b)
    as_bool, _ = losses.policy_loss(name, **{**b, "mask": b["mask"].bool()})
    as_long, _ = losses.policy_loss(name, **{**b, "mask": b["mask"].long()})
    assert as_float.item() == as_bool.item() == as_long.item()


@pytest.mark.parametrize("name", losses.names())
@pytest.mark.parametrize("value", BAD)
def test_every_loss_rejects_non_finite_advantages(name, value):
    b = _batch()
    b["advantages"][1, 0] = value
    with pytest.raises(ValueError, match="advantages"):
        losses.policy_loss(name, **b)
    per_sequence = _batch()
    per_sequence["advantages"] = torch.tensor([0.5, value])
    with pytest.raises(ValueError, match="advantages"):
        losses.policy_loss(name, **per_sequence)


@pytest.mark.parametrize("name", losses.names())
def test_every_loss_rejects_non_finite_old_logp_and_ignores_padding(name):
    b = _batch()
    b["old_logp"][0, 3] = math.nan
    with pytest.raises(ValueError, match="old_logp"):
        losses.policy_loss(name, **b)
    b["mask"][0, 3] = 0  # padding is never read: NaN there is fine
    b["advantages"][0, 3] = math.nan
    loss, _ = losses.policy_loss(name, **b)
    assert torch.isfinite(loss)


def test_ref_logp_and_entropies_must_be_finite_where_used():
    b = _batch()
    b["ref_logp"][0, 0] = math.inf
    with pytest.raises(ValueError, match="ref_logp"):
        losses.policy_loss("grpo", beta=0.1, **b)
    losses.policy_loss("grpo", **b)  # beta = 0: ref_logp is not used
    b = _batch()
    b["entropies"][1, 1] = math.nan
    with pytest.raises(ValueError, match="entropies"):
        losses.policy_loss("strace", **b)


def test_aggregate_and_check_mask_reject_a_fractional_mask():
    with pytest.raises(ValueError, match="mask"):
        losses.aggregate(torch.ones(1, 3), torch.tensor([[1.0, 0.5, 0.0]]), "token-mean")
    assert losses.check_mask(torch.tensor([[1, 0]])).dtype == torch.bool


# --- sampling settings ------------------------------------------------------------------------


@pytest.mark.parametrize("field, value", [
    ("temperature", -0.1), ("temperature", math.nan), ("temperature", math.inf), ("temperature", "hot"),
    ("top_p", 0.0), ("top_p", 1.5), ("top_p", -0.5), ("top_p", math.nan),
    ("max_new_tokens", 0), ("max_new_tokens", 2.5), ("max_new_tokens", True),
    ("batch_size", 0), ("batch_size", -3), ("batch_size", 1.0),
])
def test_sampling_config_rejects_values_out_of_range(field, value):
    with pytest.raises(InputError) as err:
        SamplingConfig(**{field: value})
    assert err.value.field == field


def test_sampling_config_accepts_its_limits():
    SamplingConfig(temperature=0.0, top_p=1.0, max_new_tokens=1, batch_size=1)
    SamplingConfig(temperature=2, top_p=1e-6)


# --- models -----------------------------------------------------------------------------------


def test_hista_cache_that_is_a_file(tmp_path, monkeypatch):
    from hista.models import load, prepare_embedded

    cache = tmp_path / "cachefile"
    cache.write_text("keep me\n")
    monkeypatch.setenv("HISTA_CACHE", str(cache))
    with pytest.raises(InputError, match=r"HISTA_CACHE=.*cachefile is not a directory"):
        prepare_embedded(progress=False)
    with pytest.raises(InputError, match="is not a directory"):
        load("smollm2-135m-instruct", device="cpu")
    assert cache.read_text() == "keep me\n"


def test_hista_cache_whose_models_folder_is_a_file(tmp_path, monkeypatch):
    from hista.models import prepare_embedded

    (tmp_path / "models").write_text("x")
    monkeypatch.setenv("HISTA_CACHE", str(tmp_path))
    with pytest.raises(InputError, match=r"models is not a directory"):
        prepare_embedded(progress=False)


@pytest.fixture(scope="module")
def real_embedded():
    from hista.models import prepare_embedded

    return prepare_embedded(progress=False)


def _truncated_copy(real, target):
    target.mkdir(parents=True)
    for item in real.iterdir():
        if item.name != "model.safetensors":
            shutil.copy(item, target / item.name)
    with open(real / "model.safetensors", "rb") as fh:
        (target / "model.safetensors").write_bytes(fh.read(1 << 20))
    return target / "model.safetensors"


def test_truncated_safetensors_in_the_cache(real_embedded, tmp_path, monkeypatch):
    from hista.models import load

    weights = _truncated_copy(real_embedded, tmp_path / "models" / "smollm2-135m-instruct")
    monkeypatch.setenv("HISTA_CACHE", str(tmp_path))
    with pytest.raises(InputError, match="truncated") as err:
        load("smollm2-135m-instruct", device="cpu")
    assert err.value.path == str(weights)
    assert "remove the folder" in str(err.value) and str(weights.parent) in str(err.value)
    assert weights.stat().st_size == 1 << 20  # nothing was changed


def test_truncated_safetensors_in_a_local_model_folder(real_embedded, tmp_path):
    from hista.models import load

    weights = _truncated_copy(real_embedded, tmp_path / "mymodel")
    with pytest.raises(InputError, match="truncated") as err:
        load(str(tmp_path / "mymodel"), device="cpu")
    assert err.value.path == str(weights)


def test_check_weights_accepts_the_real_file_and_rejects_damage(real_embedded, tmp_path):
    check_weights(real_embedded, "fix")
    (tmp_path / "a.safetensors").write_bytes(b"\x01\x02")
    with pytest.raises(InputError, match="a.safetensors.*truncated"):
        check_weights(tmp_path, "fix")
    (tmp_path / "a.safetensors").write_bytes((10).to_bytes(8, "little") + b"not json!!")
    with pytest.raises(InputError, match="damaged"):
        check_weights(tmp_path, "fix")
    (tmp_path / "a.safetensors").unlink()
    os.mkfifo(tmp_path / "a.safetensors")  # refused at once, never opened (a FIFO would block)
    with pytest.raises(InputError, match="a.safetensors.*not a regular file"):
        check_weights(tmp_path, "fix")


def test_a_folder_that_is_not_a_model(tmp_path):
    from hista.models import load

    with pytest.raises(InputError) as err:
        load(str(tmp_path), device="cpu")
    assert err.value.path == str(tmp_path)


def test_unknown_hub_id_fails_fast_offline(monkeypatch):
    from hista.models import load

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    start = time.monotonic()
    with pytest.raises(InputError, match="cannot be reached") as err:
        load("nosuchowner/nosuchmodel", device="cpu")
    assert time.monotonic() - start < 10
    assert "nosuchowner/nosuchmodel" in str(err.value) and "not in the local Hugging Face cache" in str(err.value)


def test_unreachable_hub_loads_from_the_cache_only(monkeypatch):
    from hista import hub
    from hista.models import load

    for var in hub.OFFLINE_VARIABLES:
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setattr(hub, "reachable", lambda: False)
    start = time.monotonic()
    with pytest.raises(InputError, match="cannot be reached"):
        load("nosuchowner/nosuchmodel", device="cpu")
    assert time.monotonic() - start < 10


def test_check_device(monkeypatch):
    assert check_device("cpu") == "cpu"
    assert check_device(" CPU ") == "cpu"
    for bad in ("bogus", "", "cuda:x", "meta"):
        with pytest.raises(InputError) as err:
            check_device(bad)
        assert err.value.field == "device"
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    for name in ("cuda", "cuda:0"):
        with pytest.raises(InputError, match="cuda requested but no CUDA device is available") as err:
            check_device(name)
        assert err.value.field == "device"


def test_load_checks_the_device_before_loading(monkeypatch):
    from hista.models import load, loading

    monkeypatch.setattr(loading, "build_tiny", lambda: pytest.fail("loaded a model for a bad device"))
    with pytest.raises(InputError) as err:
        load("tiny", device="bogus")
    assert err.value.field == "device"


# --- task sources -----------------------------------------------------------------------------


@pytest.mark.parametrize("content", ["", "\n\n", "  \n\t\n"])
def test_an_empty_task_file_holds_no_problems(tmp_path, content):
    path = tmp_path / "empty.jsonl"
    path.write_text(content)
    for n in (None, 5):
        with pytest.raises(InputError, match="holds no problems") as err:
            tasks.load(f"jsonl:{path}", n=n)
        assert str(path) in str(err.value)
    assert tasks.load(f"jsonl:{path}", n=0) == []


@pytest.mark.parametrize("raw, needle", [(f"{{lam: {'9' * 5000}}}", "number"), ("[" * 5000 + "]" * 5000, "nested"),
                                         ("{a: [1", "YAML")])
def test_verl_settings_in_the_environment_are_parsed_safely(monkeypatch, raw, needle):
    """Issue 29, item 13: HISTA_LOSS / HISTA_ESTIMATOR go through the one YAML helper: a
    5,000-digit number or deep nesting is an InputError naming the variable, not a crash."""
    from hista.integrations.verl import settings

    monkeypatch.setenv("HISTA_LOSS", raw)
    with pytest.raises(InputError, match=needle) as info:
        settings("HISTA_LOSS")
    assert info.value.field == "HISTA_LOSS"


# --- token_advantages: the inputs of F11 (read silently) and F12 (deep errors) ----------------

PROMPTS = [[1, 2, 3]] * 4
COMPLETIONS = [[5, 6], [8, 9, 10]] * 2
PADDED = dict(prompt_ids=torch.tensor(PROMPTS), completion_ids=torch.tensor([[5, 6, 0, 0], [8, 9, 10, 0]] * 2))
MASK = torch.tensor([[1, 1, 0, 0], [1, 1, 1, 0]] * 2)
LONG = dict(prompt_ids=[[1] * 8] * 2, completion_ids=[[5] * 4096] * 2, rewards=[1, 0], groups=[0, 0])  # 4104 > 4096
NAN_STATES = [torch.full((len(p) + len(c), 64), math.nan) for p, c in zip(PROMPTS, COMPLETIONS)]

# (the input, the call's changes, how the error message starts); "tiny" stands for the tiny model
# or its tokenizer. Each call returned advantages or raised elsewhere before (the comment).
ADVANTAGE_INPUTS = [
    # F11, read silently as something else
    ("mask*2", dict(**PADDED, completion_mask=MASK * 2), "completion_mask: holds 2"),  # padding read as tokens
    ("mask*0.5", dict(**PADDED, completion_mask=MASK * 0.5), "completion_mask: holds 0.5"),  # truncated
    ("float ids", dict(completion_ids=[[5.7, 6.2]] * 4), "completion_ids: expected lists of int"),  # 5.7 read as 5
    ("string ids", dict(completion_ids=[["5", "6"]] * 4), "completion_ids: expected lists of int"),  # "5" read as 5
    ("past the context", dict(LONG, estimator="hista", model="tiny"),
     "completion_ids: row 0 holds 8 prompt + 4096 completion tokens, past the model's context of 4096"),
    ("NaN hidden", dict(estimator="hista", hidden=NAN_STATES), "hidden: the hidden states of row 0 hold"),
    ("±3e38 rewards", dict(rewards=[3e38, -3e38, 3e38, -3e38]), "rewards: holds 3e+38"),  # all advantages 0
    ("numca, id past the vocabulary", dict(estimator="numca", completion_ids=[[5, 10**6]] * 4, tokenizer="tiny"),
     "completion_ids: row 0 holds id 1000000; token ids are [0, 49152), the vocabulary of the tokenizer"),
    # F12, raised deep in torch/transformers or without the argument
    ("hista+model, empty prompts", dict(estimator="hista", prompt_ids=[[]] * 4, model="tiny"),
     "prompt_ids: row 0 is empty"),  # RuntimeError in torch's embedding
    ("hista+model, float id tensors", dict(estimator="hista", prompt_ids=PADDED["prompt_ids"].float(),
                                           completion_ids=PADDED["completion_ids"].float(), completion_mask=MASK,
                                           model="tiny"),
     "prompt_ids: expected token ids of an integer dtype, got torch.float32"),  # RuntimeError in torch's embedding
    ("numca, negative id", dict(estimator="numca", completion_ids=[[5, -3]] * 4, tokenizer="tiny"),
     "completion_ids: row 0 holds id -3"),  # OverflowError in the tokenizer
    ("rewards=None", dict(rewards=None), "rewards: expected 4 real numbers, got None"),  # TypeError, unnamed
    ("rewards of strings", dict(rewards=["1", "0", "1", "0"]), "rewards: expected 4 real numbers"),  # ValueError
    ("unhashable group keys", dict(groups=[[0], [0], [1], [1]]), "groups: the key of row 0 is [0]"),  # TypeError
    ("batch_size=0", dict(estimator="hista", model="tiny", batch_size=0), "batch_size: expected a positive int"),
    ("batch_size=-1", dict(estimator="hista", model="tiny", batch_size=-1), "batch_size: expected a positive int"),
    # beyond the review's list: the same checks elsewhere
    ("model, id past the vocabulary", dict(estimator="hista", completion_ids=[[5, 10**6]] * 4, model="tiny"),
     "completion_ids: row 0 holds id 1000000; token ids are [0, 49152), the vocabulary of the model"),
    ("NaN prompt mask", dict(**PADDED, prompt_mask=torch.tensor([[1.0, math.nan, 1.0]] * 4)), "prompt_mask: holds nan"),
    ("bool id tensors", dict(prompt_ids=PADDED["prompt_ids"] > 0, completion_ids=PADDED["completion_ids"] > 0),
     "prompt_ids: expected token ids of an integer dtype, got torch.bool"),
    ("complex rewards", dict(rewards=torch.tensor([1, 0, 1, 0], dtype=torch.complex64)), "rewards: expected 4 real"),
    ("rewards past the bound", dict(rewards=[2e15, 0, 1, 0]), "rewards: holds 2e+15"),
    ("tensor group keys", dict(groups=list(torch.tensor([0, 0, 1, 1]))), "groups: the key of row 0 is tensor(0)"),
    ("batch_size=2.0", dict(batch_size=2.0), "batch_size: expected a positive int"),
]


@pytest.mark.parametrize("change, start", [case[1:] for case in ADVANTAGE_INPUTS],
                         ids=[case[0] for case in ADVANTAGE_INPUTS])
def test_token_advantages_refuses_the_input_naming_the_argument(tiny, change, start):
    call = dict(estimator="grpo", prompt_ids=PROMPTS, completion_ids=COMPLETIONS, rewards=[1, 0, 1, 0],
                groups=[0, 0, 1, 1])
    call.update(change)
    for name, value in (("model", tiny.model), ("tokenizer", tiny.tokenizer)):
        if call.get(name) == "tiny":
            call[name] = value
    with pytest.raises(ValueError) as caught:
        token_advantages(**call)
    assert str(caught.value).startswith(start), caught.value


def test_token_advantages_takes_the_good_forms_of_those_inputs(tiny):
    """Bool, integer and float 0/1 masks, integer ids of any dtype or numpy, rewards up to the
    bound and of any real type, tuple keys, NaN in the padding of hidden states: the same
    advantages as plain lists."""
    import numpy as np

    plain = token_advantages("grpo", PROMPTS, COMPLETIONS, [1, 0, 1, 0], [0, 0, 1, 1])
    for mask in (MASK, MASK.bool(), MASK.float(), MASK.to(torch.int8)):
        for dtype in (torch.long, torch.int32, torch.uint8):
            ids = {k: v.to(dtype) for k, v in PADDED.items()}
            got = token_advantages("grpo", **ids, rewards=[1, 0, 1, 0], groups=[0, 0, 1, 1], completion_mask=mask)
            torch.testing.assert_close(got, torch.nn.functional.pad(plain, (0, 1)))  # one padding column
    numpy_rows = [np.array(c, dtype=np.int64) for c in COMPLETIONS]
    for rewards in (np.array([1.0, 0.0, 1.0, 0.0]), [True, False, True, False], torch.tensor([1, 0, 1, 0])):
        got = token_advantages("grpo", PROMPTS, numpy_rows, rewards, [("q", 0), ("q", 0), ("q", 1), ("q", 1)])
        torch.testing.assert_close(got, plain)
    big = token_advantages("grpo", PROMPTS, COMPLETIONS, [REWARD_BOUND, -REWARD_BOUND] * 2, [0, 0, 1, 1])
    torch.testing.assert_close(big, plain, atol=1e-3, rtol=0)  # ±1e15: finite, not all zero
    hidden = torch.randn(4, 7, 64)
    hidden[0, 5:] = math.nan  # row 0's completion padding: never read
    token_advantages("hista", **PADDED, rewards=[1, 0, 1, 0], groups=[0, 0, 1, 1], completion_mask=MASK,
                     hidden=hidden)
