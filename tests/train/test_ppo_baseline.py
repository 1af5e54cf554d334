"""The PPO baseline in training (SPEC §4.5, §9): the ``critic`` estimator's recipe fields, the
online critic (advantages = GAE over its values, an update lowers its value loss, save and
restore), and short training runs on the tiny model with checkpoints, final model and resume."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch

from hista import estimators, losses
from hista.cli import main
from hista.critic.model import ValueModel
from hista.critic.online import OPTIMIZER, OnlineCritic, clipped_value_errors
from hista.errors import InputError
from hista.estimators.gae import gae_advantages, gae_targets
from hista.estimators.ppo import CriticConfig
from hista.train import load_recipe
from hista.train.limits import untrainable
from hista.types import Rollout, RolloutGroup

ROOT = Path(__file__).resolve().parents[2]
CPU_PPO = ROOT / "recipes" / "cpu-ppo.yaml"
GPU_PPO = ROOT / "recipes" / "gpu" / "qwen2.5-1.5b-math" / "dapo-critic.yaml"
CRITIC_KEYS = ("critic/value_loss", "critic/explained_variance", "critic/mean_abs_v_minus_group_mean",
               "critic/seconds")


pytestmark = pytest.mark.usefixtures("one_thread")  # tests/conftest.py


# ---- recipes --------------------------------------------------------------------------------

RECIPE = """model: tiny
tasks: builtin:arith?steps=1
advantage_estimator:
  name: critic
  {line}
trl:
  max_steps: 1
  per_device_train_batch_size: 4
  num_generations: 4
  bf16: false
"""


@pytest.mark.parametrize("line, field, needle", [
    ("lam: 1.5", "lam", "[0, 1]"),
    ("lam: x", "lam", "expected a number"),
    ("critic_lr: 0", "critic_lr", "> 0"),
    ("critic_lr: .inf", "critic_lr", "finite"),
    ("critic_lr: 1e-5", "critic_lr", "expected a number, got a string"),
    ("value_clip: -0.2", "value_clip", "or null"),
    ("critic_layers: -1", "critic_layers", "integer >= 0"),
    ("critic_layers: 1.5", "critic_layers", "expected an integer"),
    ("critic_epochs: 0", "critic_epochs", ">= 1"),
    ("critic_batch_size: 0", "critic_batch_size", ">= 1"),
    ("critic_batch_size: true", "critic_batch_size", "boolean"),
    ("critic_steps: 2", None, "critic_steps"),
])
def test_bad_critic_fields_name_the_field_and_line(tmp_path, capsys, line, field, needle):
    path = tmp_path / "r.yaml"
    path.write_text(RECIPE.format(line=line))
    with pytest.raises(InputError) as err:
        load_recipe(path)
    exc = err.value
    assert needle in exc.message, str(exc)
    if field is None:  # an unknown parameter: the section, and the line of the section
        assert exc.field == "advantage_estimator" and exc.line == 3
    else:
        assert exc.field == f"advantage_estimator.{field}" and exc.line == 5 and f"{path}:5:" in str(exc)
    assert main(["train", str(path), f"output_dir={tmp_path / 'run'}", "--dry-run"]) == 2
    assert needle in capsys.readouterr().err


def test_critic_defaults_and_what_training_accepts():
    recipe = load_recipe(CPU_PPO)
    est = recipe.estimator_config()
    assert est["name"] == "critic" and est["scale"] == "none" and est["gae_lambda"] == 1.0
    # gae_lambda follows lam unless set; scale stays what the recipe says
    est = load_recipe(CPU_PPO, ["advantage_estimator.lam=0.95"]).estimator_config()
    assert est["gae_lambda"] == 0.95
    est = load_recipe(CPU_PPO, ["advantage_estimator.lam=0.95", "advantage_estimator.gae_lambda=1.0",
                                "advantage_estimator.scale=batch"]).estimator_config()
    assert (est["gae_lambda"], est["scale"]) == (1.0, "batch")
    assert load_recipe(CPU_PPO, ["advantage_estimator={name: grpo}"]).estimator_config()["scale"] == "group"
    config = estimators.get("critic").config
    assert (config.lam, config.critic_lr, config.value_clip, config.critic_layers, config.critic_epochs,
            config.critic_batch_size) == (1.0, 1e-5, 0.2, None, 1, 8)
    for loss in losses.names():
        beta = {"beta": 0.01} if losses.lookup(loss).needs_ref_logp else {}
        assert untrainable(estimators.get("critic"), losses.get(loss, **beta)) is None, loss
    for name in ("ppo-1", "ppo-n", "mc"):
        field, message = untrainable(estimators.get(name), losses.get("dapo"))
        assert field == "advantage_estimator.name" and "training does not provide" in message
        with pytest.raises(InputError, match="training does not provide"):
            load_recipe(CPU_PPO, [f"advantage_estimator={{name: {name}}}"])


def test_sveb_refuses_the_training_critic():
    from hista.sveb.methods import build_methods

    with pytest.raises(InputError, match="needs a learned model, which sveb eval does not provide"):
        build_methods(["critic"])


def test_gpu_ppo_recipe(monkeypatch):
    monkeypatch.chdir(ROOT)  # accelerate_config paths are relative to the repository root
    recipe = load_recipe(GPU_PPO.relative_to(ROOT))
    est = recipe.estimator_config()
    assert recipe.model == "Qwen/Qwen2.5-1.5B" and recipe.task_specs == ["hf:math@train"]
    assert est["name"] == "critic" and est["critic_layers"] is None and est["scale"] == "none"
    assert recipe.accelerate_config == "configs/accelerate/zero2-4gpus.yaml" and recipe.world_size == 4
    with pytest.raises(InputError, match="ZeRO-3") as err:  # the critic copies weights ZeRO-3 would shard
        load_recipe(GPU_PPO.relative_to(ROOT), ["accelerate_config=configs/accelerate/zero3.yaml"])
    assert err.value.field == "accelerate_config"


# ---- the online critic ----------------------------------------------------------------------

def _group(prompt, specs):
    return RolloutGroup([Rollout(prompt, ids, reward) for ids, reward in specs], prompt_id=str(prompt))


# rewards: prompt A always 1, prompt B 0 or 1 by the first token
GROUPS = [
    _group([1, 2, 3], [([40, 41, 42, 43], 1.0), ([44, 41, 42], 1.0), ([45, 46, 47, 48, 49], 1.0), ([40], 1.0)]),
    _group([7, 8], [([50, 41, 42, 43], 1.0), ([51, 41, 42, 43], 0.0), ([50, 46], 1.0), ([51, 46, 47], 0.0)]),
]


def _critic(checkpointing: bool = False, **config) -> OnlineCritic:
    from hista.models.loading import build_tiny

    config = CriticConfig(**{"critic_layers": 1, "critic_lr": 1e-3, "critic_batch_size": 4, **config})
    critic = OnlineCritic.from_policy(build_tiny(), config, seed=0, checkpointing=checkpointing)
    with torch.no_grad():  # a head that reads the hidden states, so values differ by token
        critic.model.head.weight.normal_(0.0, 0.05, generator=torch.Generator().manual_seed(1))
    return critic


def _all_values(critic: OnlineCritic) -> list[torch.Tensor]:
    """The critic's current values of every rollout of GROUPS, in order."""
    return [v for g in GROUPS for v in critic.model.values(g.rollouts[0].prompt_ids,
                                                            [r.completion_ids for r in g.rollouts])]


@pytest.mark.parametrize("lam, scale", [(1.0, "none"), (0.9, "none"), (0.9, "group")])
def test_critic_advantages_are_gae_over_its_values(lam, scale):
    critic = _critic(lam=lam)
    est = estimators.get("critic", lam=lam).use_critic(critic)
    critic.observe(GROUPS)
    assert critic.model.head.bias.item() == pytest.approx(6 / 8)  # the first batch's mean reward
    for group in GROUPS:
        values = critic.model.values(group.rollouts[0].prompt_ids, [r.completion_ids for r in group.rollouts])
        std = group.rewards.std() if scale == "group" else torch.tensor(0.0)
        want = [gae_advantages(v, r.reward, lam) / (float(std) + 1e-4 if scale == "group" else 1.0)
                for v, r in zip(values, group.rollouts)]
        got = est.token_advantages(group, gae_lambda=est.default_gae_lambda(), scale=scale)
        for g, w in zip(got, want):
            torch.testing.assert_close(g, w)
        assert len({round(float(x), 6) for x in values[0]}) > 1  # the values differ by token: the test can tell
    before = [critic.values(g.rollouts[0].prompt_ids, [r.completion_ids for r in g.rollouts]) for g in GROUPS]
    critic.update(GROUPS)
    after = critic.model.values(GROUPS[1].rollouts[0].prompt_ids, [r.completion_ids for r in GROUPS[1].rollouts])
    assert not torch.allclose(after[0], before[1][0])  # the update moved the critic


@pytest.mark.parametrize("lam, clip", [(1.0, 0.2), (0.95, None)])
def test_one_update_lowers_the_value_loss(lam, clip):
    critic = _critic(lam=lam, value_clip=clip, critic_epochs=2)
    critic.observe(GROUPS)
    rollouts = [r for g in GROUPS for r in g.rollouts]
    old = torch.cat(_all_values(critic))
    assert torch.equal(old, torch.cat([critic.values(r.prompt_ids, [r.completion_ids])[0] for r in rollouts]))
    targets = torch.cat([gae_targets(v, r.reward, lam) for v, r in zip(_all_values(critic), rollouts)])
    means = torch.cat([torch.full((len(r.completion_ids),), g.rewards.mean().item()) for g in GROUPS
                       for r in g.rollouts])
    metrics = critic.update(GROUPS)
    assert set(metrics) == set(CRITIC_KEYS) and metrics["critic/seconds"] > 0
    before, after = (float(((v - targets) ** 2).mean()) for v in (old, torch.cat(_all_values(critic))))
    assert after < 0.8 * before, (before, after)  # the regression towards the batch's fixed targets
    assert metrics["critic/explained_variance"] == pytest.approx(
        1 - float((targets - old).var(unbiased=False)) / float(targets.var(unbiased=False)), rel=1e-5)
    assert metrics["critic/mean_abs_v_minus_group_mean"] == pytest.approx(float((old - means).abs().mean()))
    assert critic.updates == 1


@pytest.mark.parametrize("layers", [1, None])
def test_activation_checkpointing_gives_the_same_update(layers):
    plain, checkpointed = _critic(critic_layers=layers), _critic(checkpointing=True, critic_layers=layers)
    assert checkpointed.model.backbone.is_activation_checkpointing
    assert not plain.model.backbone.is_activation_checkpointing
    for critic in (plain, checkpointed):
        critic.observe(GROUPS)
        critic.update(GROUPS)
    for a, b in zip(_all_values(plain), _all_values(checkpointed)):
        torch.testing.assert_close(a, b)
    assert not torch.allclose(torch.cat(_all_values(plain)), torch.cat(_all_values(_critic(critic_layers=layers))))


def test_clipped_value_errors_by_hand():
    values, targets, old = torch.tensor([0.5, 0.0, 0.9]), torch.tensor([1.0, 1.0, 0.0]), torch.tensor([0.2, 0.1, 0.5])
    assert torch.equal(clipped_value_errors(values, targets, old, None), (values - targets) ** 2)
    # clipped values: 0.2 + 0.2 = 0.4 (error 0.36 > 0.25), 0.0 inside (error 1), 0.5 + 0.2 = 0.7 (0.49 < 0.81)
    torch.testing.assert_close(clipped_value_errors(values, targets, old, 0.2), torch.tensor([0.36, 1.0, 0.81]))


def test_save_and_load_restore_the_critic_and_its_optimiser(tmp_path):
    critic = _critic()
    critic.observe(GROUPS)
    critic.update(GROUPS)
    critic.save(tmp_path / "critic")
    loaded = ValueModel.from_pretrained(tmp_path / "critic", device="cpu")
    prompt, completions = GROUPS[1].rollouts[0].prompt_ids, [r.completion_ids for r in GROUPS[1].rollouts]
    for a, b in zip(loaded.values(prompt, completions), critic.model.values(prompt, completions)):
        torch.testing.assert_close(a, b)
    again = _critic()
    again.load(tmp_path / "critic")
    assert again.updates == 1 and again.model.head.bias.item() == critic.model.head.bias.item()
    for key in ("observe", "update"):  # the same next step: weights, optimiser and shuffling restored
        getattr(critic, key)(GROUPS)
        getattr(again, key)(GROUPS)
    for a, b in zip(again.model.values(prompt, completions), critic.model.values(prompt, completions)):
        torch.testing.assert_close(a, b)
    (tmp_path / "critic" / OPTIMIZER).unlink()
    with pytest.raises(InputError, match="optimiser state"):
        again.load(tmp_path / "critic")


# ---- training on the tiny model -------------------------------------------------------------

def _rows(out: Path) -> list[dict]:
    return [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]


def test_training_with_the_critic_saves_and_resumes_it(tmp_path, capsys):
    out = tmp_path / "run"
    args = ["train", str(CPU_PPO), "model=tiny", f"output_dir={out}", "trl.max_completion_length=8",
            "trl.per_device_train_batch_size=8", "trl.num_generations=4", "trl.save_steps=2",
            "advantage_estimator.critic_layers=1"]
    assert main(args + ["trl.max_steps=2"]) == 0
    rows = _rows(out)
    assert [r["step"] for r in rows] == [1, 2]
    for row in rows:
        for key in CRITIC_KEYS:
            assert key in row, key
        assert row["critic/seconds"] > 0 and row["critic/value_loss"] >= 0
    assert "v_loss" in capsys.readouterr().out
    saved = out / "checkpoint-2" / "critic"
    assert (saved / OPTIMIZER).is_file() and not (out / "final" / "critic" / OPTIMIZER).exists()
    loaded = ValueModel.from_pretrained(out / "final" / "critic", device="cpu")
    info = json.loads((saved / "critic.json").read_text())
    assert loaded.layers_trained == 1 and info["mode"] == "online" and info["training"]["updates"] == 2
    assert info["policy"]["model"] == "tiny" and info["training"]["online"]["critic_layers"] == 1
    shutil.rmtree(out / "final")  # killed after its last checkpoint: the resume writes final/ from it
    assert main(args + ["trl.max_steps=2", "resume=true"]) == 0
    assert (out / "final" / "critic" / "critic.json").is_file() and not (out / "final" / "critic" / OPTIMIZER).exists()
    assert main(args + ["trl.max_steps=3", "resume=true"]) == 0
    assert [r["step"] for r in _rows(out)] == [1, 2, 3]
    assert json.loads((out / "final" / "critic" / "critic.json").read_text())["training"]["updates"] == 3


@pytest.mark.parametrize("loss", ["strace", "gspo", "cispo"])
def test_the_critic_trains_with_other_losses(tmp_path, loss):
    out = tmp_path / "run"
    assert main(["train", str(CPU_PPO), "model=tiny", f"output_dir={out}", f"loss.name={loss}",
                 "trl.max_steps=1", "trl.max_completion_length=8", "trl.per_device_train_batch_size=8",
                 "trl.num_generations=4", "advantage_estimator.critic_layers=0"]) == 0
    row, = _rows(out)
    assert all(key in row for key in CRITIC_KEYS) and torch.isfinite(torch.tensor(row["loss"]))


def test_a_damaged_critic_checkpoint_names_the_file(tmp_path):
    """A truncated weight file of a saved critic is named before anything loads (issue 29)."""
    critic = _critic()
    critic.save(tmp_path / "critic")
    head = tmp_path / "critic" / "value_head.safetensors"
    head.write_bytes(head.read_bytes()[:-3])
    with pytest.raises(InputError, match=r"value_head.safetensors: is truncated .*another checkpoint"):
        _critic().load(tmp_path / "critic")
