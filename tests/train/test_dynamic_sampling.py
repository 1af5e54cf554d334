"""DAPO's dynamic sampling in ``hista train`` (issue 42 item 1; SPEC §9; hista.train.dynamic):
a step trains on exactly the configured number of whole groups with unequal rewards, drawing
more prompts for the missing ones; after ``max_rounds`` extra rounds it trains on what it has
and says so; every process agrees on what is kept; a resumed run draws and keeps what the
uninterrupted run did."""

from __future__ import annotations

import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from test_train import ROOT, SMOKE, _config, _dataset

from hista.cli import main
from hista.errors import InputError
from hista.train import dynamic
from hista.train.recipe import load_recipe


def _sparse_reward(prompts, completions, **_):
    """Rewards that can differ only for a quarter of the prompts ("What is i + i?", i % 4 == 0):
    the others' groups are all 0, uninformative."""
    return [float(len(c[-1]["content"]) % 2) if int(p[-1]["content"].split()[2]) % 4 == 0 else 0.0
            for p, c in zip(prompts, completions)]


def _zero_reward(completions, **_):
    return [0.0] * len(completions)


def _trainer(folder: Path, reward=_sparse_reward, dynamic_sampling=None, estimator="grpo", **config):
    """The tiny model for 3 steps (2 prompts x 4 rollouts a step, 16 prompts) with dynamic
    sampling (``max_rounds`` 12 unless ``dynamic_sampling`` says otherwise)."""
    from hista.models.loading import build_tiny
    from hista.train.trainer import HistaGRPOTrainer

    lm = build_tiny()
    return HistaGRPOTrainer(
        model=lm.model, reward_funcs=[reward], train_dataset=_dataset(16), processing_class=lm.tokenizer,
        args=_config(folder.parent, folder.name, **{**dict(per_device_train_batch_size=8, num_generations=4,
                                                           max_completion_length=12, max_steps=3), **config}),
        advantage_estimator={"name": estimator}, loss={"name": "dapo"},
        dynamic_sampling=dynamic_sampling if dynamic_sampling is not None else {"max_rounds": 12})


class _Kept:
    """Records what each step's advantages are computed on: the rows, their rewards, the prompts."""

    def __init__(self, trainer):
        self.steps, original = [], trainer.batch_advantages

        def spy(out, hidden, problem_ids=None):
            self.steps.append({"rows": out["completion_ids"].size(0), "rewards": trainer.batch_rewards.tolist(),
                               "prompts": out["prompt_ids"].tolist()})
            return original(out, hidden, problem_ids)

        trainer.batch_advantages = spy


# ---- the pure parts --------------------------------------------------------------------------

def test_informative_groups_are_those_with_unequal_rewards():
    rewards = torch.tensor([0.0, 0.0, 1.0, 0.0, 1.0, 1.0, 0.5, 0.5000001])
    assert dynamic.informative(rewards, 2).tolist() == [False, True, False, True]


def test_each_process_takes_its_informative_groups_in_round_order_then_fills():
    flags = [torch.tensor([[False, True], [False, False]]), torch.tensor([[True, True], [False, True]])]
    picks, filled = dynamic.choose(flags, 2)
    assert picks[0] == [(0, 1), (1, 0)]           # the first two informative groups, in order
    assert picks[1] == [(0, 0), (1, 1)]           # one informative group, filled with the earliest other
    assert filled == 1
    assert dynamic.enough(flags, 2) is False and dynamic.enough(flags[1:], 1) is True


def test_extra_prompts_are_a_function_of_seed_and_step():
    a = dynamic.extra_prompts(10, 0, 5, 1, 4)
    assert a == dynamic.extra_prompts(10, 0, 5, 1, 4)
    walked = a + dynamic.extra_prompts(10, 0, 5, 2, 4) + dynamic.extra_prompts(10, 0, 5, 3, 4)
    assert sorted(walked[:10]) == list(range(10)) and walked[10:] == walked[:2]  # one permutation, cycled
    assert a != dynamic.extra_prompts(10, 0, 6, 1, 4) and a != dynamic.extra_prompts(10, 1, 5, 1, 4)
    assert len(dynamic.extra_prompts(3, 0, 0, 2, 5)) == 5  # cycles past the dataset


def test_merge_pads_the_prompt_left_and_the_completion_right():
    one = {"prompt_ids": torch.tensor([[5, 6], [7, 8]]), "prompt_mask": torch.ones(2, 2, dtype=torch.long),
           "completion_ids": torch.tensor([[1], [2]]), "completion_mask": torch.ones(2, 1, dtype=torch.long),
           "advantages": torch.tensor([0.1, 0.2]), "num_items_in_batch": torch.tensor(2)}
    two = {"prompt_ids": torch.tensor([[9]]), "prompt_mask": torch.ones(1, 1, dtype=torch.long),
           "completion_ids": torch.tensor([[3, 4, 5]]), "completion_mask": torch.tensor([[1, 1, 0]]),
           "advantages": torch.tensor([0.3]), "num_items_in_batch": torch.tensor(2)}
    h1, h2 = torch.arange(2 * 3 * 1.0).view(2, 3, 1), torch.tensor([[[7.0], [8.0], [9.0], [0.0]]])
    out, hidden = dynamic.merge([(one, h1, [1]), (two, h2, [0])], pad_id=0)
    assert out["prompt_ids"].tolist() == [[7, 8], [0, 9]] and out["prompt_mask"].tolist() == [[1, 1], [0, 1]]
    assert out["completion_ids"].tolist() == [[2, 0, 0], [3, 4, 5]]
    assert out["completion_mask"].tolist() == [[1, 0, 0], [1, 1, 0]]
    assert out["advantages"].tolist() == pytest.approx([0.2, 0.3]) and "num_items_in_batch" not in out
    assert hidden[:, :, 0].tolist() == [[3.0, 4.0, 5.0, 0.0, 0.0], [0.0, 7.0, 8.0, 9.0, 0.0]]
    with pytest.raises(ValueError, match="pixel_values"):
        dynamic.merge([({**one, "pixel_values": torch.zeros(1)}, None, [0])], pad_id=0)


def test_the_recipe_key_defaults_to_dapo_as_published(tmp_path):
    assert load_recipe(SMOKE).dynamic_sampling == {"max_rounds": dynamic.DEFAULT_MAX_ROUNDS}  # loss dapo
    assert load_recipe(SMOKE, ["loss.name=grpo"]).dynamic_sampling is False
    assert load_recipe(SMOKE, ["loss.name=grpo", "dynamic_sampling=true"]).dynamic_sampling == {"max_rounds": 4}
    assert load_recipe(SMOKE, ["dynamic_sampling=false"]).dynamic_sampling is False
    assert load_recipe(SMOKE, ["dynamic_sampling={max_rounds: 0}"]).dynamic_sampling == {"max_rounds": 0}
    assert load_recipe(SMOKE, ["dynamic_sampling={max_rounds: 1000}"]).dynamic_sampling == {"max_rounds": 1000}
    vllm = load_recipe(ROOT / "recipes" / "gpu" / "qwen3-1.7b-dapo-math" / "dapo.yaml")  # vLLM colocated
    assert vllm.trl["use_vllm"] is True and vllm.dynamic_sampling == {"max_rounds": 4}
    for bad, needle in (("{max_rounds: -1}", r"in \[0, 1000\]"), ("{max_rounds: 1001}", r"in \[0, 1000\]"),
                        ("{max_round: 2}", "unknown key 'max_round'"),
                        ("{}", "max_rounds"), ("{max_rounds: 1.5}", "integer"), ("3", "dynamic_sampling")):
        with pytest.raises(InputError, match=needle) as err:
            load_recipe(SMOKE, [f"dynamic_sampling={bad}"])
        assert err.value.field == "dynamic_sampling"


# ---- the trainer on the tiny model -----------------------------------------------------------

def test_a_step_trains_on_full_batches_of_informative_groups(tmp_path):
    """Three quarters of the groups have equal rewards; every trained batch still holds two
    whole groups of one prompt each, all with unequal rewards, from the prompts that can vary."""
    trainer = _trainer(tmp_path / "run")
    kept = _Kept(trainer)
    trainer.train()
    logs = [row for row in trainer.state.log_history if "loss" in row]
    assert len(kept.steps) == len(logs) == 3
    for step, row in zip(kept.steps, logs):
        assert step["rows"] == 8
        rewards = torch.tensor(step["rewards"])
        assert dynamic.informative(rewards, 4).all()
        for first in (0, 4):
            assert len({tuple(p) for p in step["prompts"][first: first + 4]}) == 1  # a whole group
        assert row["frac_reward_zero_std"] == 0.0 and row["dynamic_sampling/filled_groups"] == 0.0
        assert row["dynamic_sampling/rounds"] >= 1 and row["dynamic_sampling/rollouts_per_trained"] >= 1
        assert 0.0 <= row["dynamic_sampling/informative_frac"] <= 1.0
    assert any(row["dynamic_sampling/rounds"] > 1 for row in logs)  # it did have to sample more


def test_a_step_with_nothing_informative_stops_after_max_rounds_and_says_so(tmp_path, capsys):
    trainer = _trainer(tmp_path / "run", reward=_zero_reward, dynamic_sampling={"max_rounds": 2}, max_steps=1)
    kept = _Kept(trainer)
    trainer.train()
    row = next(row for row in trainer.state.log_history if "loss" in row)
    assert row["dynamic_sampling/rounds"] == 3 and row["dynamic_sampling/filled_groups"] == 2
    assert row["frac_reward_zero_std"] == 1.0 and kept.steps[0]["rows"] == 8
    assert "0 of 2 groups have unequal rewards after 2 extra rounds" in capsys.readouterr().out


@pytest.mark.parametrize("estimator", ["hista", "probe"])
def test_hidden_state_estimators_see_the_kept_groups(tmp_path, estimator):
    """The kept batch's hidden states come from one pass over it (TRL skips its own on these
    on-policy steps), so estimators that read them train as on any batch."""
    trainer = _trainer(tmp_path / "run", estimator=estimator, max_steps=2)
    kept = _Kept(trainer)
    trainer.train()
    logs = [row for row in trainer.state.log_history if "loss" in row]
    assert all(row["frac_reward_zero_std"] == 0.0 and row["advantages/abs_max"] > 0 for row in logs)
    assert all(step["rows"] == 8 for step in kept.steps)


def test_a_resume_draws_and_keeps_what_the_uninterrupted_run_did(tmp_path):
    """Engine rollouts, a checkpoint every step: resumed from checkpoint-1 of a copy of the run,
    each later step keeps the rewards and prompts the uninterrupted run kept, and the weights
    end bit for bit equal."""
    full = _trainer(tmp_path / "full", save_strategy="steps", save_steps=1)
    assert full.engine_rollouts
    kept_full = _Kept(full)
    full.train()
    shutil.copytree(tmp_path / "full", tmp_path / "run")
    for step in (2, 3):
        shutil.rmtree(tmp_path / "run" / f"checkpoint-{step}")
    resumed = _trainer(tmp_path / "run", save_strategy="steps", save_steps=1)
    kept = _Kept(resumed)
    resumed.train(resume_from_checkpoint=str(tmp_path / "run" / "checkpoint-1"))
    assert kept.steps == kept_full.steps[1:]
    for a, b in zip(full.model.state_dict().values(), resumed.model.state_dict().values()):
        assert torch.equal(a, b)


def test_two_processes_keep_whole_groups_and_agree(tmp_path):
    """Two CPU processes (gloo): each trains on its own two whole informative groups; both see
    the same kept rewards for the whole batch (they agree on what is kept and on the rounds)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_port",
                           str(port), str(ROOT / "tests" / "helpers" / "dynamic_run.py"), str(tmp_path)],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    ranks = [torch.load(tmp_path / f"rank{r}.pt", weights_only=False) for r in range(2)]
    assert len(ranks[0]["steps"]) == len(ranks[1]["steps"]) == 2
    for a, b in zip(ranks[0]["steps"], ranks[1]["steps"]):
        assert a["rewards"] == b["rewards"] and dynamic.informative(torch.tensor(a["rewards"]), 4).all()
        for rank in (a, b):
            assert rank["rows"] == 8
            ids = rank["problem_ids"]
            assert ids[:4] == [ids[0]] * 4 and ids[4:] == [ids[4]] * 4 and all(int(i) % 4 == 0 for i in ids)
    assert all(row["frac_reward_zero_std"] == 0.0 for rank in ranks for row in rank["logs"])


def test_hista_train_samples_dynamically_with_the_dapo_loss(tmp_path, capsys):
    out = tmp_path / "run"
    assert main(["train", str(SMOKE), "model=tiny", f"output_dir={out}", "trl.max_steps=1",
                 "trl.max_completion_length=8", "dynamic_sampling={max_rounds: 1}"]) == 0
    text = capsys.readouterr().out
    assert "dynamic sampling: step 0" in text  # the tiny model solves nothing: it says so
    assert "max_rounds: 1" in (out / "recipe.yaml").read_text()
