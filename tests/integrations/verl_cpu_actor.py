"""verl's own actor worker on CPU, run as a script by tests/integrations/test_verl_hidden.py (a process of its
own: it installs a CPU platform in verl and a gloo process group, both process-wide).

    python tests/integrations/verl_cpu_actor.py SPEC.pt OUT.pt

SPEC.pt holds the model folder, the layout (packed, dynamic batch size) and a list of calls, each
rows (prompt ids, response ids) with a capture switch (None:
verl's forward alone). The script builds hista's capturing
actor worker (``verl_hidden.HistaActorRolloutRefWorker``) from verl's own trainer config with
FSDP2 in float32, calls its ``compute_log_prob`` on the rows as verl's trainer sends them, and
saves the returned fields and whether any hook is left on the model.

What CPU needs (none of it changes verl's code): a verl platform for the CPU (verl falls back to
CUDA without an accelerator), the gloo process group made here (verl's own asks for "cpu:gloo"
twice), ``VERL_ENGINE_DEVICE=cuda`` (verl registers its FSDP engine for cuda and npu only), and
zeros for the accelerator memory statistics verl logs, which ``torch.cpu`` lacks. ``fsdp`` (FSDP1)
cannot run on CPU (verl sets ``sync_module_states``); ``fsdp2`` can.
"""

import os
import socket
import sys
from contextlib import contextmanager

import torch

with socket.socket() as _s:
    _s.bind(("127.0.0.1", 0))
    _PORT = str(_s.getsockname()[1])
for _k, _v in dict(MASTER_ADDR="127.0.0.1", MASTER_PORT=_PORT, RANK="0", WORLD_SIZE="1", LOCAL_RANK="0").items():
    os.environ[_k] = _v
os.environ["VERL_ENGINE_DEVICE"] = "cuda"

from verl.plugin.platform import PlatformBase, PlatformRegistry, set_platform  # noqa: E402


@PlatformRegistry.register(platform="hista-test-cpu")
class PlatformCPU(PlatformBase):
    """The CPU as a verl platform: device "cpu", backend gloo, no accelerator features."""

    device_name = "cpu"
    vendor_name = "cpu"
    device_module = torch.cpu

    def is_available(self): return True
    def current_device(self): return "cpu"
    def device_count(self): return 1
    def set_device(self, device_index): pass
    def synchronize(self, device_index=None): pass
    def manual_seed(self, seed): torch.manual_seed(seed)
    def manual_seed_all(self, seed): torch.manual_seed(seed)
    def set_allocator_settings(self, settings): pass
    def empty_cache(self): pass
    def get_device_capability(self, device_index=0): return None, None
    def communication_backend_name(self): return "gloo"
    def visible_devices_envvar(self): return "CUDA_VISIBLE_DEVICES"
    def profiler_start(self): pass
    def profiler_stop(self): pass
    def ray_resource_name(self): return "CPU"
    def ray_noset_envvars(self): return []
    def is_ipc_supported(self): return False
    def cudart(self): return None

    @contextmanager
    def nvtx_range(self, msg):
        yield


for _name in ("max_memory_allocated", "max_memory_reserved", "memory_allocated", "memory_reserved"):
    if not hasattr(torch.cpu, _name):
        setattr(torch.cpu, _name, lambda *a, **k: 0)
if not hasattr(torch.cpu, "empty_cache"):
    torch.cpu.empty_cache = lambda *a, **k: None
set_platform(PlatformCPU())


def actor_config(model: str, packed: bool, dynamic: bool):
    """The ``actor_rollout_ref`` section of verl's own ppo_trainer.yaml for a CPU run."""
    import verl
    from hydra import compose, initialize_config_dir

    a = "actor_rollout_ref"
    overrides = [f"{a}.model.path={model}", f"{a}.model.use_remove_padding={packed}",
                 f"{a}.model.enable_gradient_checkpointing=False",
                 f"+{a}.model.override_config.attn_implementation=sdpa",
                 f"{a}.actor.strategy=fsdp2", f"{a}.actor.fsdp_config.strategy=fsdp2",
                 f"{a}.actor.fsdp_config.model_dtype=fp32", f"{a}.actor.fsdp_config.use_torch_compile=False",
                 f"{a}.actor.use_torch_compile=False", f"{a}.actor.ppo_mini_batch_size=4",
                 f"{a}.actor.use_dynamic_bsz={dynamic}", f"{a}.actor.ppo_max_token_len_per_gpu=64",
                 f"{a}.actor.ppo_micro_batch_size_per_gpu=3", f"{a}.rollout.log_prob_use_dynamic_bsz={dynamic}",
                 f"{a}.rollout.log_prob_max_token_len_per_gpu=64", f"{a}.rollout.log_prob_micro_batch_size_per_gpu=3",
                 f"{a}.actor.optim.total_training_steps=1"]
    overrides += [f"+{a}.actor.fsdp_config.mixed_precision.{k}=fp32"
                  for k in ("param_dtype", "reduce_dtype", "buffer_dtype")]
    with initialize_config_dir(config_dir=os.path.join(os.path.dirname(verl.__file__), "trainer", "config"),
                               version_base=None):
        return compose(config_name="ppo_trainer", overrides=overrides)[a]


def main(spec_path: str, out_path: str) -> None:
    import torch.distributed as dist
    from verl.utils import tensordict_utils as tu

    from hista.integrations import verl_hidden

    spec = torch.load(spec_path, weights_only=False)
    dist.init_process_group("gloo")
    worker = verl_hidden.HistaActorRolloutRefWorker(config=actor_config(spec["model"], spec["packed"], spec["dynamic"]),
                                                    role="actor")
    worker.init_model()
    module = worker.actor.engine.module

    def hooks() -> int:
        return sum(len(m._forward_hooks) + len(m._forward_pre_hooks) for m in module.modules())

    before = hooks()  # FSDP2's own
    results = []
    for call_rows, capture in spec["calls"]:
        rows = []
        for prompt, response in call_rows:
            row = {"prompts": torch.tensor(prompt), "responses": torch.tensor(response),
                   "response_mask": torch.ones(len(response), dtype=torch.int64),
                   "input_ids": torch.tensor(prompt + response),
                   "position_ids": torch.arange(len(prompt) + len(response))}
            row["loss_mask"] = row["response_mask"]
            rows.append(row)
        data = tu.list_of_dict_to_tensordict(rows)
        tu.assign_non_tensor(data, calculate_entropy=True, compute_loss=False, temperature=1.0)
        if capture is not None:
            tu.assign_non_tensor(data, **{verl_hidden.CAPTURE: capture})
        out = worker.compute_log_prob(data)
        states = out[verl_hidden.STATES].unbind() if verl_hidden.STATES in out.keys() else None
        results.append({"keys": sorted(out.keys()), "states": None if states is None else [s.clone() for s in states],
                        "log_probs": [t.clone() for t in out["log_probs"].unbind()], "hooks_added": hooks() - before,
                        "wrapped": "prepare_model_outputs" in vars(worker.actor.engine)})
    torch.save(results, out_path)
    dist.destroy_process_group()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
