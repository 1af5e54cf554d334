"""Numca inside verl (docs/verl.md): hista's verl trainers hand the registered ``hista_numca``
estimator the responses. Needs verl; the trainer test also needs verl's v1 trainer
(TransferQueue) and starts a local Ray with a TransferQueue on CPU. Run by ``.ci/verl``."""

import types

import numpy as np
import pytest
import torch

from hista import estimators
from hista.advantages import build_group
from hista.models.loading import tokenizer_for_tiny

pytest.importorskip("verl")
core_algos = pytest.importorskip("verl.trainer.ppo.core_algos")
from hista.integrations import verl_trainer  # noqa: E402

TEXTS = {  # three prompts, four responses each, rewards by whether the final number is right
    "p0": [("7 + 5 = 12. 12 * 2 = 24. The answer is \\boxed{24}.", 1.0),
           ("7 + 5 = 13. 13 * 2 = 26. The answer is \\boxed{26}.", 0.0),
           ("7 + 5 = 12, and 12 * 2 = 24, so \\boxed{24}", 1.0),
           ("Adding gives 12; doubling gives 25. \\boxed{25}", 0.0)],
    "p1": [("3 * 4 = 12. 12 - 2 = 10. \\boxed{10}", 1.0),
           ("3 * 4 = 12. 12 - 2 = 9. \\boxed{9}", 0.0),
           ("3 * 4 = 7. 7 - 2 = 5. \\boxed{5}", 0.0),
           ("3 * 4 = 12. 12 - 2 = 10. \\boxed{10}", 1.0)],
    "p2": [("The sum is 9. \\boxed{9}", 1.0), ("The sum is 8. \\boxed{8}", 0.0),
           ("4 + 5 = 9 \\boxed{9}", 1.0), ("4 + 5 = 10 \\boxed{10}", 0.0)],
}


@pytest.fixture(scope="module")
def tokenizer():
    return tokenizer_for_tiny()


def _rows(tokenizer, order):
    """(uid, token ids, reward) per row in ``order``, responses ending with EOS."""
    rows = [(uid, tokenizer(text, add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id], reward)
            for uid, items in TEXTS.items() for text, reward in items]
    return [rows[i] for i in order]


def _expected(tokenizer, rows, lam=1.0, scale="group"):
    """hista's Numca on the same groups, as hista train builds them."""
    est = estimators.get("numca")
    out = {}
    for uid in TEXTS:
        members = [k for k, row in enumerate(rows) if row[0] == uid]
        group = build_group([[] for _ in members], [rows[k][1] for k in members], [rows[k][2] for k in members],
                            problem_id=uid, tokenizer=tokenizer)
        for k, adv in zip(members, est.token_advantages(group, gae_lambda=lam, scale=scale)):
            out[k] = adv
    return out


def _padded(rows):
    width = max(len(ids) for _, ids, _ in rows)
    mask = torch.zeros(len(rows), width)
    rewards = torch.zeros(len(rows), width)
    for k, (_, ids, reward) in enumerate(rows):
        mask[k, : len(ids)] = 1
        rewards[k, len(ids) - 1] = reward
    return mask, rewards


def test_numca_estimator_reads_the_responses_a_hista_trainer_holds(tokenizer):
    order = torch.randperm(12, generator=torch.Generator().manual_seed(0)).tolist()
    rows = _rows(tokenizer, order)
    mask, rewards = _padded(rows)
    index = np.array([uid for uid, _, _ in rows], dtype=object)
    config = types.SimpleNamespace(norm_adv_by_std_in_grpo=True, lam=1.0)
    fn = core_algos.get_adv_estimator_fn("hista_numca")
    with pytest.raises(RuntimeError, match="trainer.v1.trainer_mode=hista_sync"):
        fn(token_level_rewards=rewards, response_mask=mask, index=index, config=config)
    token = verl_trainer.RESPONSES.set(verl_trainer.responses([torch.tensor(ids) for _, ids, _ in rows], tokenizer))
    try:
        got, returns = fn(token_level_rewards=rewards, response_mask=mask, index=index, config=config)
        with pytest.raises(RuntimeError, match="do not match"):
            fn(token_level_rewards=rewards[:5], response_mask=mask[:5], index=index[:5], config=config)
    finally:
        verl_trainer.RESPONSES.reset(token)
    torch.testing.assert_close(got, returns)
    expected = _expected(tokenizer, rows)
    grpo = estimators.get("grpo")
    differs = False
    for k, (_, ids, _) in enumerate(rows):
        torch.testing.assert_close(got[k, : len(ids)], expected[k])
        assert not got[k, len(ids):].any()
        differs |= bool((expected[k] - expected[k][-1]).abs().max() > 1e-3)
    assert differs and grpo is not None  # Numca's values move inside responses, unlike GRPO's one number


def test_hista_trainers_are_registered_beside_verls():
    trainer_base = pytest.importorskip("verl.trainer.ppo.v1.trainer_base")
    for mode in verl_trainer.MODES:
        cls = trainer_base.get_trainer_cls(f"hista_{mode}")
        assert issubclass(cls, trainer_base.get_trainer_cls(mode)) and issubclass(cls, verl_trainer.HistaSteps)


def test_a_hista_trainer_computes_numca_advantages_through_verls_transfer_queue(tokenizer):
    """verl's own _compute_advantage of the sync trainer, on a batch in a real TransferQueue
    (local Ray on CPU), with hista's added step: the advantages verl writes back equal hista's
    Numca on the same groups."""
    trainer_base = pytest.importorskip("verl.trainer.ppo.v1.trainer_base")
    tq = pytest.importorskip("transfer_queue")
    import ray
    from omegaconf import OmegaConf
    from transfer_queue import KVBatchMeta
    from verl.utils.tensordict_utils import list_of_dict_to_tensordict

    rows = _rows(tokenizer, list(range(12)))
    # logical CPUs for TransferQueue's controller and storage actor (each asks for one)
    ray.init(num_cpus=3, include_dashboard=False, log_to_driver=False, ignore_reinit_error=True)
    try:
        tq.init(OmegaConf.create({"backend": {"SimpleStorage": {"num_data_storage_units": 1}}}))
        keys = [f"{uid}_{k % 4}_0" for k, (uid, _, _) in enumerate(rows)]
        fields = []
        for uid, ids, reward in rows:  # as verl's agent loop writes a finished response
            score = torch.zeros(len(ids))
            score[-1] = reward
            fields.append({"uid": uid, "responses": torch.tensor(ids), "rm_scores": score,
                           "response_mask": torch.ones(len(ids), dtype=torch.int64)})
        fields = list_of_dict_to_tensordict(fields)
        tq.kv_batch_put(keys=keys, partition_id="train", fields=fields, tags=[{"status": "success"}] * len(rows))
        trainer = object.__new__(trainer_base.get_trainer_cls("hista_sync"))  # verl's workers are not needed here
        trainer.tokenizer = tokenizer
        trainer.config = OmegaConf.create({
            "algorithm": {"adv_estimator": "hista_numca", "use_kl_in_reward": False, "gamma": 1.0, "lam": 1.0,
                          "norm_adv_by_std_in_grpo": True, "rollout_correction": None},
            "actor_rollout_ref": {"rollout": {"n": 4}}})
        metrics = {}
        trainer._compute_advantage(KVBatchMeta(partition_id="train", keys=keys, tags=[{}] * len(keys)), metrics)
        got = tq.kv_batch_get(keys=keys, partition_id="train", select_fields=["advantages"])["advantages"]
        expected = _expected(tokenizer, rows)
        for k, adv in enumerate(got.unbind()):
            torch.testing.assert_close(adv.float(), expected[k])
        assert verl_trainer.RESPONSES.get() is None  # nothing held once the step is over
    finally:
        tq.close()
        ray.shutdown()
