"""Run by tests/test_train.py under `accelerate launch --num_processes 2 --cpu`: one training
step on the tiny model with groups of 4 rollouts split 2 + 2 across the processes. Each rank
saves what it saw locally and the per-token advantages it kept."""

import os
import sys

import torch
from datasets import Dataset
from trl import GRPOConfig

from hista.models.loading import build_tiny
from hista.train.trainer import HistaGRPOTrainer

out_dir, estimator = sys.argv[1], sys.argv[2]
saved = {}
original = HistaGRPOTrainer._token_advantages


def spy(self, out, hidden, problem_ids=None):
    adv = original(self, out, hidden, problem_ids)
    rows = []
    for i in range(out["completion_ids"].size(0)):
        pm, n = out["prompt_mask"][i].bool(), int(out["completion_mask"][i].sum())
        p = out["prompt_ids"].size(1)
        rows.append({"prompt_ids": out["prompt_ids"][i][pm].tolist(),
                     "completion_ids": out["completion_ids"][i, :n].tolist(),
                     "hidden": None if hidden is None else torch.cat([hidden[i, :p][pm], hidden[i, p:p + n]]),
                     "advantages": adv[i, :n].clone()})
    saved.update(rank=self.accelerator.process_index, rows=rows, rewards=self._hista_rewards.tolist())
    return adv


HistaGRPOTrainer._token_advantages = spy


def reward(completions, **_):
    return [float(len(c[-1]["content"]) % 3 == 0) + 0.1 * len(c[-1]["content"]) for c in completions]


lm = build_tiny()
data = Dataset.from_list([{"prompt": [{"role": "user", "content": f"What is {i} + {i}?"}]} for i in range(8)])
args = GRPOConfig(output_dir=f"{out_dir}/run", per_device_train_batch_size=2, num_generations=4,
                  max_completion_length=6, max_steps=1, report_to="none", seed=0, save_strategy="no",
                  bf16=False, disable_tqdm=True, activation_checkpointing=False, use_cpu=True)
trainer = HistaGRPOTrainer(model=lm.model, reward_funcs=[reward], args=args, train_dataset=data,
                           processing_class=lm.tokenizer, advantage_estimator={"name": estimator},
                           loss={"name": "dapo"})
trainer.train()
torch.save(saved, f"{out_dir}/rank{saved['rank']}.pt")
# Shut the gloo group down before the interpreter exits; otherwise a rank can abort in teardown.
trainer.accelerator.wait_for_everyone()
torch.distributed.destroy_process_group()
# Leave without the interpreter's teardown: gloo's threads can still abort it ("terminate called
# without an active exception") on a loaded machine, after all the work above is saved.
sys.stdout.flush()
sys.stderr.flush()
os._exit(0)
