"""Run by tests/train/test_train.py under `torch.distributed.run --nproc_per_node N` (gloo, CPU): for
each configuration ESTIMATOR:PER_DEVICE:G, one training step on the tiny model with PER_DEVICE rows
per process and groups of G rollouts, so groups lie on one process (PER_DEVICE a multiple of G) or
span several. Each rank saves, per configuration, what it saw locally, the per-token advantages it
kept, and every collective or point-to-point call made while the advantages were computed (name,
tensor bytes, peer), in OUT/K/rankR.pt (K: the configuration's place in the list). One launch
serves every configuration of a process count.

    python -m torch.distributed.run --nproc_per_node N split_groups.py OUT ESTIMATOR:PER_DEVICE:G ...

ESTIMATOR is a name or name-profile (``hista-paper``).
"""

import os
import sys

import torch
from datasets import Dataset
from trl import GRPOConfig

from hista.models.loading import build_tiny
from hista.train.trainer import HistaGRPOTrainer

out_dir, configurations = sys.argv[1], [c.split(":") for c in sys.argv[2:]]
saved = {}
calls = []
original = HistaGRPOTrainer.batch_advantages
COLLECTIVES = ("all_gather", "all_gather_into_tensor", "all_gather_object", "all_reduce", "broadcast",
               "broadcast_object_list", "gather", "gather_object", "scatter", "scatter_object_list",
               "reduce_scatter", "reduce_scatter_tensor", "all_to_all", "all_to_all_single", "send", "recv",
               "isend", "irecv", "send_object_list", "recv_object_list")
PEER = {"send": "dst", "isend": "dst", "send_object_list": "dst", "recv": "src", "irecv": "src",
        "recv_object_list": "src"}


def _bytes(value):
    if isinstance(value, torch.Tensor):
        return value.numel() * value.element_size()
    if isinstance(value, (list, tuple)):
        return sum(_bytes(v) for v in value)
    return 0


def _counted(name, fn):
    def wrapper(*args, **kwargs):
        if saved.get("counting"):
            peer = kwargs.get(PEER[name], args[1] if len(args) > 1 else None) if name in PEER else None
            calls.append((name, _bytes(args) + _bytes(list(kwargs.values())), peer))
        return fn(*args, **kwargs)
    return wrapper


for _name in COLLECTIVES:
    if hasattr(torch.distributed, _name):
        setattr(torch.distributed, _name, _counted(_name, getattr(torch.distributed, _name)))


def spy(self, out, hidden, problem_ids=None):
    saved["counting"] = True
    try:
        adv = original(self, out, hidden, problem_ids)
    finally:
        saved["counting"] = False
    rows = []
    for i in range(out["completion_ids"].size(0)):
        pm, n = out["prompt_mask"][i].bool(), int(out["completion_mask"][i].sum())
        p = out["prompt_ids"].size(1)
        rows.append({"prompt_ids": out["prompt_ids"][i][pm].tolist(),
                     "completion_ids": out["completion_ids"][i, :n].tolist(),
                     "hidden": None if hidden is None else torch.cat([hidden[i, :p][pm], hidden[i, p:p + n]]),
                     "advantages": adv[i, :n].clone()})
    saved.update(rank=self.accelerator.process_index, rows=rows, rewards=self.batch_rewards.tolist(),
                 calls=list(calls), local=self.groups_are_local(out["completion_ids"].size(0)))
    return adv


HistaGRPOTrainer.batch_advantages = spy


def reward(completions, **_):
    return [float(len(c[-1]["content"]) % 3 == 0) + 0.1 * len(c[-1]["content"]) for c in completions]


data = Dataset.from_list([{"prompt": [{"role": "user", "content": f"What is {i} + {i}?"}]} for i in range(16)])
for k, (estimator, per_device, group) in enumerate(configurations):
    saved.clear()
    calls.clear()
    lm = build_tiny()
    args = GRPOConfig(output_dir=f"{out_dir}/{k}/run", per_device_train_batch_size=int(per_device),
                      num_generations=int(group), max_completion_length=6, max_steps=1, report_to="none", seed=0,
                      save_strategy="no", bf16=False, disable_tqdm=True, activation_checkpointing=False, use_cpu=True)
    trainer = HistaGRPOTrainer(model=lm.model, reward_funcs=[reward], args=args, train_dataset=data,
                               processing_class=lm.tokenizer,
                               advantage_estimator=dict(zip(("name", "profile"), estimator.split("-"))),
                               loss={"name": "dapo"})
    trainer.train()
    os.makedirs(f"{out_dir}/{k}", exist_ok=True)
    torch.save(saved, f"{out_dir}/{k}/rank{saved['rank']}.pt")
# Shut the gloo group down before the interpreter exits; otherwise a rank can abort in teardown.
trainer.accelerator.wait_for_everyone()
torch.distributed.destroy_process_group()
# Leave without the interpreter's teardown: gloo's threads can still abort it ("terminate called
# without an active exception") on a loaded machine, after all the work above is saved.
sys.stdout.flush()
sys.stderr.flush()
os._exit(0)
