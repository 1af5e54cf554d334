"""Hista and the probe inside verl (docs/verl.md "Hista and the probe"): the layer captured on
verl's own actor worker during its old-log-prob forward (FSDP2 on CPU, run by
tests/integrations/verl_cpu_actor.py in a process of its own), the compressed states through a real
TransferQueue into verl's own advantage step of hista's trainer, against hista's estimators on
the same rollouts. Needs verl with its v1 trainer (TransferQueue); run by ``.ci/verl``."""

import os
import subprocess
import sys
import types
from pathlib import Path

import numpy as np
import pytest
import torch

from hista import estimators
from hista.errors import InputError
from hista.models.loading import build_tiny
from hista.types import Rollout, RolloutGroup

pytest.importorskip("verl")
trainer_base = pytest.importorskip("verl.trainer.ppo.v1.trainer_base")
tq = pytest.importorskip("transfer_queue")
from omegaconf import OmegaConf  # noqa: E402

from hista.integrations import verl as plugin  # noqa: E402
from hista.integrations import verl_hidden, verl_trainer  # noqa: E402

pytestmark = pytest.mark.xdist_group("verl-hidden")  # its module fixtures are built once (tests/conftest.py)

LAYERS = 4
ACTOR = Path(__file__).with_name("verl_cpu_actor.py")


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """A 4-layer Llama saved where verl's actor loads it, and the same model in memory."""
    loaded = build_tiny(seed=3, hidden_size=64, layers=LAYERS)
    folder = tmp_path_factory.mktemp("tiny")
    loaded.model.save_pretrained(folder)
    loaded.tokenizer.save_pretrained(folder)
    return folder, loaded.model


@pytest.fixture(scope="module")
def store():
    """A local Ray with verl's TransferQueue (CPU)."""
    import ray

    ray.init(num_cpus=3, include_dashboard=False, log_to_driver=False, ignore_reinit_error=True)
    tq.init(OmegaConf.create({"backend": {"SimpleStorage": {"num_data_storage_units": 1}}}))
    yield
    tq.close()
    ray.shutdown()


@pytest.fixture(autouse=True)
def fresh(monkeypatch):
    """No HISTA_ESTIMATOR and no kept estimator (the probe's history) from another test."""
    monkeypatch.delenv(plugin.ESTIMATOR_ENV, raising=False)
    plugin.reset_estimators()
    yield
    plugin.reset_estimators()


def _rows(seed: int, groups: int = 3, size: int = 4) -> list[tuple[str, list[int], list[int], float]]:
    """(uid, prompt ids, response ids, reward), groups interleaved as verl's balancing leaves them."""
    g = torch.Generator().manual_seed(seed)
    rows = []
    for k in range(groups):
        prompt = torch.randint(5, 900, (int(torch.randint(3, 9, (1,), generator=g)),), generator=g).tolist()
        for i in range(size):
            length = int(torch.randint(4, 24, (1,), generator=g))
            response = torch.randint(5, 900, (length,), generator=g).tolist()
            rows.append((f"u{seed}-{k}", prompt, response, float(i % 2 if k != 1 else (i == 0))))
    order = torch.randperm(len(rows), generator=g).tolist()
    return [rows[i] for i in order]


def _actor(folder, calls, tmp_path, packed=True, dynamic=True):
    """verl's actor worker (hista's capturing one) on ``calls``: [(rows, capture)], in a process of
    its own; its outputs per call."""
    spec, out = tmp_path / "spec.pt", tmp_path / "out.pt"
    torch.save({"model": str(folder), "packed": packed, "dynamic": dynamic, "calls": calls}, spec)
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    done = subprocess.run([sys.executable, str(ACTOR), str(spec), str(out)], capture_output=True, text=True, env=env,
                          timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    return torch.load(out, weights_only=False)


def _capture(name: str, params: dict) -> dict:
    return {"estimator": name, "params": params, "dtype": "float32"}


def _trainer(name: str):
    trainer = object.__new__(trainer_base.get_trainer_cls("hista_sync"))  # verl's workers are not needed here
    trainer.config = OmegaConf.create({
        "algorithm": {"adv_estimator": name, "use_kl_in_reward": False, "gamma": 1.0, "lam": 1.0,
                      "norm_adv_by_std_in_grpo": True, "rollout_correction": None},
        "actor_rollout_ref": {"rollout": {"n": 4}}})
    return trainer


def _put(rows, tag: str, tagged: bool):
    """``rows`` in the TransferQueue as verl's agent loop leaves them (``tagged``: with the
    lengths verl's tags carry); their batch."""
    from transfer_queue import KVBatchMeta
    from verl.utils.tensordict_utils import list_of_dict_to_tensordict

    keys = [f"{tag}_{k}_0" for k in range(len(rows))]
    fields, tags = [], []
    for uid, prompt, response, reward in rows:
        score = torch.zeros(len(response))
        score[-1] = reward
        fields.append({"uid": uid, "prompts": torch.tensor(prompt), "responses": torch.tensor(response),
                       "rm_scores": score, "response_mask": torch.ones(len(response), dtype=torch.int64)})
        tags.append({"status": "success", **({"prompt_len": len(prompt), "response_len": len(response)} if tagged
                                             else {})})
    tq.kv_batch_put(keys=keys, partition_id="train", fields=list_of_dict_to_tensordict(fields), tags=tags)
    return KVBatchMeta(partition_id="train", keys=keys, tags=tags)


def _advantages(name: str, batch, states) -> list[torch.Tensor]:
    """The actor's ``states`` into the batch (as verl's worker puts its outputs), then verl's own
    advantage step of hista's sync trainer: the advantages verl writes back, row by row."""
    from tensordict import TensorDict

    tq.kv_batch_put(keys=batch.keys, partition_id="train", fields=TensorDict(
        {verl_hidden.STATES: torch.nested.as_nested_tensor(states, layout=torch.jagged)}, batch_size=len(states)))
    _trainer(name)._compute_advantage(batch, {})
    got = tq.kv_batch_get(keys=batch.keys, partition_id="train", select_fields=["advantages"])["advantages"]
    tq.kv_clear(keys=batch.keys, partition_id="train")
    assert verl_trainer.STATES.get() is None  # nothing held once the step is over
    return [a.float() for a in got.unbind()]


def _groups(model, est, rows) -> tuple[list[list[int]], list[RolloutGroup]]:
    """hista's own groups of ``rows``: hidden states of ``est``'s layer from a plain transformers
    forward, one sequence at a time."""
    layer = est.hidden_layer(LAYERS)
    members: dict[str, list[int]] = {}
    for k, row in enumerate(rows):
        members.setdefault(row[0], []).append(k)
    groups = []
    with torch.no_grad():
        for uid, ks in members.items():
            rollouts = []
            for k in ks:
                _, prompt, response, reward = rows[k]
                out = model(input_ids=torch.tensor([prompt + response]), output_hidden_states=True)
                rollouts.append(Rollout(prompt_ids=prompt, completion_ids=response, reward=reward,
                                        hidden=out.hidden_states[layer][0]))
            groups.append(RolloutGroup(rollouts, prompt_id=uid))
    return list(members.values()), groups


@pytest.mark.parametrize("params,packed,dynamic", [({}, True, True), ({"stride": 3, "interval": 4}, False, False)])
def test_hista_in_verl_equals_hista(tiny, store, tmp_path, monkeypatch, params, packed, dynamic):
    """Captured on verl's actor (packed with dynamic micro-batches, or padded in fixed ones),
    advantages from verl's advantage step equal get("hista") on the same rollouts; the same
    actor without the switch returns verl's fields alone and leaves no hook behind."""
    folder, model = tiny
    if params:
        monkeypatch.setenv(plugin.ESTIMATOR_ENV, "{stride: 3, interval: 4}")
    est = estimators.get("hista", **params)
    rows = _rows(0)
    batch = _put(rows, f"h{len(params)}", tagged=packed)
    capture = _trainer("hista_hista")._capture_switch()  # the driver's step before the forward
    assert capture == _capture("hista", params)
    pairs = [(p, r) for _, p, r, _ in rows]
    calls = [(pairs, capture), (pairs, None), (pairs, {**capture, "dtype": "bfloat16"})]
    captured, plain, halved = _actor(folder, calls, tmp_path, packed, dynamic)
    for full, half in zip(captured["states"], halved["states"]):  # states_dtype: rounded after smoothing
        assert half.dtype == torch.bfloat16 and torch.equal(half, full.to(torch.bfloat16))
    assert verl_hidden.STATES in captured["keys"] and verl_hidden.STATES not in plain["keys"]
    assert captured["hooks_added"] == plain["hooks_added"] == 0 and not captured["wrapped"]
    for a, b in zip(captured["log_probs"], plain["log_probs"]):  # the capture leaves verl's own outputs alone
        torch.testing.assert_close(a, b, rtol=0, atol=0)
    got = _advantages("hista_hista", batch, captured["states"])
    members, groups = _groups(model, est, rows)
    for ks, group in zip(members, groups):
        for k, want in zip(ks, est.token_advantages(group)):
            torch.testing.assert_close(got[k], want, rtol=0, atol=1e-5)
    assert any(float(a.max() - a.min()) > 1e-3 for a in got)  # values move inside responses, unlike GRPO's


def test_probe_in_verl_equals_the_probe_with_its_history_across_a_checkpoint(tiny, store, tmp_path):
    """Two steps of hista_probe through verl's actor and advantage step equal get("probe")
    fitted batch after batch (the second step's fits read the first's history), also when
    the probe's history goes through verl's checkpoint folder between the steps."""
    folder, model = tiny
    first, second = _rows(1), _rows(2)
    calls = [([(p, r) for _, p, r, _ in rows], _capture("probe", {})) for rows in (first, second)]
    states = [call["states"] for call in _actor(folder, calls, tmp_path)]
    reference = estimators.get("probe")
    expected = []
    for rows in (first, second):
        members, groups = _groups(model, reference, rows)
        out = {}
        for ks, group, fitted in zip(members, groups, reference.for_batch(groups)):
            out.update(zip(ks, fitted.token_advantages(group)))
        expected.append(out)
    got = _advantages("hista_probe", _put(first, "p1", tagged=False), states[0])
    checkpoint = tmp_path / "global_step_1"
    verl_trainer.save_probe(str(checkpoint))
    plugin.reset_estimators()  # a new process: the probe starts empty and is restored from the checkpoint
    verl_trainer.load_probe(str(checkpoint))
    got_second = _advantages("hista_probe", _put(second, "p2", tagged=True), states[1])
    for rows, out, want in ((first, got, expected[0]), (second, got_second, expected[1])):
        for k in range(len(rows)):
            torch.testing.assert_close(out[k], want[k], rtol=0, atol=1e-5)
    assert any(float(a.max() - a.min()) > 1e-3 for a in got_second)
    with pytest.raises(InputError, match="has no hista_probe.pt"):
        verl_trainer.load_probe(str(tmp_path / "global_step_9"))


def _run_config(**changes):
    """verl's own trainer config (ppo_trainer.yaml) with hista's trainer and ``changes``."""
    import verl
    from hydra import compose, initialize_config_dir

    folder = os.path.join(os.path.dirname(verl.__file__), "trainer", "config")
    with initialize_config_dir(config_dir=folder, version_base=None):
        config = compose(config_name="ppo_trainer", overrides=["trainer.use_v1=True",
                                                               "trainer.v1.trainer_mode=hista_sync",
                                                               "critic.enable=False"])
    for key, value in changes.items():
        OmegaConf.update(config, key, value, force_add=True)
    return config


@pytest.mark.parametrize("estimator,swapped", [("hista_grpo", False), ("hista_numca", False), ("hista_hista", True),
                                               ("hista_probe", True)])
def test_the_capture_worker_replaces_verls_only_for_a_hidden_state_estimator(estimator, swapped):
    trainer = object.__new__(trainer_base.get_trainer_cls("hista_sync"))
    trainer.config = _run_config(**{"algorithm.adv_estimator": estimator})
    trainer._init_resource_pool_mgr()
    classes = [remote.__ray_actor_class__ for remote in trainer.role_worker_mapping.values()]
    assert any(cls is verl_hidden.HistaActorRolloutRefWorker for cls in classes) is swapped
    assert all(cls.__module__.startswith("verl.") for cls in classes) is not swapped


@pytest.mark.parametrize("change,field", [
    ({"actor_rollout_ref.actor.strategy": "megatron"}, "actor_rollout_ref.actor.strategy"),
    ({"actor_rollout_ref.actor.ulysses_sequence_parallel_size": 2},
     "actor_rollout_ref.actor.ulysses_sequence_parallel_size"),
    ({"algorithm.rollout_correction.bypass_mode": True}, "algorithm.rollout_correction.bypass_mode"),
])
def test_a_configuration_the_capture_cannot_serve_fails_at_start_naming_it(change, field):
    config = _run_config(**{"algorithm.adv_estimator": "hista_hista", **change})
    with pytest.raises(InputError) as caught:
        verl_hidden.check(config, estimators.get("hista"), LAYERS)
    assert field in str(caught.value) and "\n" not in str(caught.value)


def test_a_layer_beyond_the_model_and_an_unknown_dtype_fail_naming_the_setting(tiny, monkeypatch):
    folder, _ = tiny
    config = _run_config(**{"algorithm.adv_estimator": "hista_probe", "actor_rollout_ref.model.path": str(folder)})
    verl_trainer.check_start(config)  # the default layer is inside the model's depth (read from its config)
    monkeypatch.setenv(plugin.ESTIMATOR_ENV, "{layer: -9}")
    with pytest.raises(InputError, match="HISTA_ESTIMATOR.layer"):
        verl_trainer.check_start(config)
    monkeypatch.setenv(plugin.ESTIMATOR_ENV, "{states_dtype: float8}")
    with pytest.raises(InputError, match="HISTA_ESTIMATOR.states_dtype"):
        plugin.estimator_for("hista_hista")


def test_a_hidden_state_estimator_without_its_states_names_the_trainer_modes_and_the_field(store):
    from transfer_queue import KVBatchMeta

    fn = __import__("verl.trainer.ppo.core_algos", fromlist=["x"]).get_adv_estimator_fn("hista_hista")
    mask = torch.ones(2, 3)
    with pytest.raises(RuntimeError, match="trainer.v1.trainer_mode=hista_sync"):
        fn(token_level_rewards=mask, response_mask=mask, index=np.array(["a", "a"], dtype=object),
           config=types.SimpleNamespace(norm_adv_by_std_in_grpo=True, lam=1.0))
    from verl.utils.tensordict_utils import list_of_dict_to_tensordict

    keys = ["m_0_0", "m_1_0"]
    rows = [{"uid": "a", "prompts": torch.tensor([1, 2]), "responses": torch.tensor([3, 4, 5][: 2 + k]),
             "rm_scores": torch.zeros(2 + k), "response_mask": torch.ones(2 + k, dtype=torch.int64)} for k in range(2)]
    tq.kv_batch_put(keys=keys, partition_id="train", fields=list_of_dict_to_tensordict(rows),
                    tags=[{"status": "success"}] * 2)
    trainer = object.__new__(trainer_base.get_trainer_cls("hista_sync"))
    trainer.config = OmegaConf.create({"algorithm": {"adv_estimator": "hista_hista"}})
    with pytest.raises(RuntimeError, match="no field 'hista_states'"):
        trainer._states(KVBatchMeta(partition_id="train", keys=keys, tags=[{}] * 2))
    tq.kv_clear(keys=keys, partition_id="train")
