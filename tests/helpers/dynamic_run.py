"""Run by tests/train/test_dynamic_sampling.py under `torch.distributed.run --nproc_per_node 2` (gloo,
CPU): two training steps on the tiny model with dynamic sampling, 2 groups of 4 rollouts per
process, and a reward that only a quarter of the prompts can vary on. Each rank saves, per step,
the prompts of the rows it trained on and the kept rewards of all processes as it saw them.

    python -m torch.distributed.run --nproc_per_node 2 dynamic_run.py OUT
"""

import os
import sys

import torch
from datasets import Dataset
from trl import GRPOConfig

from hista.models.loading import build_tiny
from hista.train.trainer import HistaGRPOTrainer

out_dir = sys.argv[1]
steps = []
original = HistaGRPOTrainer.batch_advantages


def spy(self, out, hidden, problem_ids=None):
    steps.append({"problem_ids": list(problem_ids), "rewards": self.batch_rewards.tolist(),
                  "rows": out["completion_ids"].size(0)})
    return original(self, out, hidden, problem_ids)


HistaGRPOTrainer.batch_advantages = spy


def reward(completions, problem_id, **_):
    return [float(len(c[-1]["content"]) % 2) if int(p) % 4 == 0 else 0.0 for c, p in zip(completions, problem_id)]


lm = build_tiny()
data = Dataset.from_list([{"prompt": [{"role": "user", "content": f"What is {i} + {i}?"}], "problem_id": str(i)}
                          for i in range(32)])
args = GRPOConfig(output_dir=f"{out_dir}/run", per_device_train_batch_size=8, num_generations=4,
                  max_completion_length=12, max_steps=2, report_to="none", seed=0, save_strategy="no",
                  bf16=False, disable_tqdm=True, activation_checkpointing=False, use_cpu=True, logging_steps=1)
trainer = HistaGRPOTrainer(model=lm.model, reward_funcs=[reward], args=args, train_dataset=data,
                           processing_class=lm.tokenizer, advantage_estimator={"name": "grpo"},
                           loss={"name": "dapo"}, dynamic_sampling={"max_rounds": 12})
trainer.train()
logs = [row for row in trainer.state.log_history if "loss" in row]
torch.save({"steps": steps, "logs": logs}, f"{out_dir}/rank{trainer.accelerator.process_index}.pt")
trainer.accelerator.wait_for_everyone()
torch.distributed.destroy_process_group()
sys.stdout.flush()
sys.stderr.flush()
os._exit(0)
