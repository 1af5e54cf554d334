"""The PPO critic (SPEC §4.5) on the tiny model: GAE(λ) targets by hand, the value model's
positions, fitting, save/load, PPO-1 cross-fitting, ``hista critic train`` and the SVEB
methods ppo-1 / ppo-n in ``sveb eval`` and ``sveb sweep``, with their bad inputs (exit 2)."""

from __future__ import annotations

import json
import shutil

import pytest
import torch

from hista import estimators
from hista.cli import main
from hista.critic.config import FitConfig
from hista.critic.fit import FrozenFeatures, fit, value_loss
from hista.critic.model import ValueModel
from hista.errors import InputError
from hista.estimators.gae import gae_advantages, gae_targets
from hista.sveb import cases as case_file
from hista.sveb.cases import problem_of
from hista.sveb.critics import CriticSet, case_groups
from hista.types import Rollout, RolloutGroup, State

BUILD = ["sveb", "build", "--model", "tiny", "--tasks", "builtin:arith", "--tasks", "builtin:choice",
         "--rollouts", "4", "--continuations", "3", "--max-new-tokens", "6", "--no-filter", "--seed", "5"]
FAST = ["--epochs", "1", "--layers", "1", "--device", "cpu"]


pytestmark = [pytest.mark.usefixtures("one_thread"), pytest.mark.xdist_group("critic")]  # tests/conftest.py


@pytest.fixture(scope="module")
def policy():
    from hista.models import load

    return load("tiny", device="cpu")


# --- GAE targets -----------------------------------------------------------------------------


def test_gae_targets_by_hand():
    values, reward = torch.tensor([0.2, 0.5, 0.4]), 1.0
    # δ = [0.5 − 0.2, 0.4 − 0.5, 1 − 0.4] = [0.3, −0.1, 0.6]
    # λ = 0.95: A_2 = 0.6, A_1 = −0.1 + 0.95·0.6 = 0.47, A_0 = 0.3 + 0.95·0.47 = 0.7465
    torch.testing.assert_close(gae_advantages(values, reward, 0.95), torch.tensor([0.7465, 0.47, 0.6]))
    torch.testing.assert_close(gae_targets(values, reward, 0.95), torch.tensor([0.9465, 0.97, 1.0]))
    # λ = 1: A_t = R − V_t and every target is exactly R (the Monte-Carlo return)
    torch.testing.assert_close(gae_advantages(values, reward, 1.0), torch.tensor([0.8, 0.5, 0.6]))
    assert torch.equal(gae_targets(values, reward, 1.0), torch.ones(3))
    # λ = 0: one-step TD targets V_{t+1}, the reward at the last token
    torch.testing.assert_close(gae_targets(values, reward, 0.0), torch.tensor([0.5, 0.4, 1.0]))
    assert gae_targets(torch.zeros(0), 1.0, 0.95).shape == (0,)
    with pytest.raises(ValueError, match="values"):
        gae_targets(torch.tensor([0.1, float("nan")]), 1.0, 0.95)
    with pytest.raises(ValueError, match="lam"):
        gae_targets(values, 1.0, 1.5)


# --- the value model -------------------------------------------------------------------------


def _group(prompt, specs):
    return RolloutGroup([Rollout(prompt, ids, reward) for ids, reward in specs])


# rewards: prompt A always 1, prompt B always 0, prompt C set by the first completion token
GROUPS = [
    _group([1, 2, 3], [([40, 41, 42, 43], 1.0), ([44, 41, 42, 43], 1.0), ([45, 46, 47, 48], 1.0), ([40, 46], 1.0)]),
    _group([5, 6], [([40, 41, 42, 43], 0.0), ([44, 41, 42, 43], 0.0), ([45, 46, 47, 48], 0.0), ([40, 46], 0.0)]),
    _group([7, 8, 9], [([50, 41, 42, 43], 1.0), ([51, 41, 42, 43], 0.0), ([50, 46, 47, 48], 1.0), ([51, 46], 0.0)]),
]


def test_values_sit_at_the_last_token_of_each_state(policy):
    critic = ValueModel.from_policy(policy, init_value=0.5)
    with torch.no_grad():
        critic.head.weight.normal_(0.0, 0.5, generator=torch.Generator().manual_seed(1))
    prompt, long, short = [1, 2, 3], [40, 41, 42, 43, 44], [45, 46]
    v_long, v_short, v_empty = critic.values(prompt, [long, short, []])
    assert v_long.shape == (5,) and v_short.shape == (2,) and v_empty.shape == (0,)
    for t in range(5):  # V_t = the value after the prompt and the first t tokens
        alone = critic.values(prompt, [long[:t]], terminal=True)[0]
        assert alone.shape == (t + 1,)
        torch.testing.assert_close(alone[-1], v_long[t], atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(critic.values(prompt, [short])[0], v_short, atol=1e-5, rtol=1e-5)  # padding
    with pytest.raises(ValueError, match="vocabulary"):
        critic.values(prompt, [[10**7]])


def test_layers_to_train(policy):
    def trainable(critic):
        return {n.split(".")[0] + ("." + n.split(".")[1] if n.startswith("layers.") else "")
                for n, p in critic.backbone.named_parameters() if p.requires_grad}

    assert trainable(ValueModel.from_policy(policy, layers=None)) == {"embed_tokens", "layers.0", "layers.1", "norm"}
    assert trainable(ValueModel.from_policy(policy, layers=1)) == {"layers.1", "norm"}
    head_only = ValueModel.from_policy(policy, layers=0)
    assert trainable(head_only) == set() and head_only.head.weight.requires_grad
    with pytest.raises(InputError, match="has 2"):
        ValueModel.from_policy(policy, layers=3)
    assert all(p.requires_grad for p in policy.model.parameters())  # the policy itself is left alone


def test_critic_overfits_a_tiny_set(policy):
    critic = ValueModel.from_policy(policy, layers=1, init_value=0.5)
    assert value_loss(critic, GROUPS, 1.0) == pytest.approx(0.25)
    history = fit(critic, GROUPS, FitConfig(lam=1.0, epochs=40, lr=1e-2, batch_size=4), progress=False)
    assert len(history) == 40 and history[-1]["loss"] < history[0]["loss"]
    # the floor is 0.25 × (4 first tokens of prompt C) / 40 tokens = 0.025: its V_0 cannot tell the rewards apart
    assert value_loss(critic, GROUPS, 1.0) < 0.04
    # λ < 1 bootstraps on the critic's values, and value clipping bounds each epoch's move
    again = ValueModel.from_policy(policy, layers=1, init_value=0.5)
    fit(again, GROUPS, FitConfig(lam=0.95, epochs=3, lr=1e-2, batch_size=4, value_clip=0.2), progress=False)
    assert value_loss(again, GROUPS, 0.95) < 0.25


def test_frozen_layers_run_once_and_give_the_same_values(policy, monkeypatch):
    critic = ValueModel.from_policy(policy, layers=1)
    with torch.no_grad():
        critic.head.weight.normal_(generator=torch.Generator().manual_seed(0))
    assert critic.can_skip_frozen()
    assert not ValueModel.from_policy(policy, layers=0).can_skip_frozen()  # nothing trained before the head
    assert not ValueModel.from_policy(policy, layers=None).can_skip_frozen()  # nothing frozen
    rollouts = [r for g in GROUPS for r in g.rollouts]
    prompts, comps = [r.prompt_ids for r in rollouts], [r.completion_ids for r in rollouts]
    with torch.no_grad():
        full = critic.sequence_values(prompts, comps)
        fast = critic.sequence_values(prompts, comps, features=critic.features(prompts, comps, batch_size=2))
    assert len(fast) == len(rollouts) and all(torch.allclose(a, b, atol=1e-5) for a, b in zip(full, fast))
    by_values = [v for g in GROUPS for v in critic.values(g.rollouts[0].prompt_ids,
                                                          [r.completion_ids for r in g.rollouts])]
    assert all(torch.allclose(a, b, atol=1e-5) for a, b in zip(full, by_values))
    # two critics sharing a FrozenFeatures compute each rollout's frozen layers once
    calls = []
    real = ValueModel.features
    monkeypatch.setattr(ValueModel, "features", lambda self, p, c, **kw: calls.append(len(c)) or real(self, p, c, **kw))
    shared = FrozenFeatures()
    for _ in range(2):
        fit(ValueModel.from_policy(policy, layers=1), GROUPS, FitConfig(epochs=2, lam=0.9, batch_size=2),
            progress=False, features=shared)
    assert sum(calls) == len(rollouts) + 2 * 2  # every rollout once, plus each critic's 2-row probe
    # critics of sveb eval share one bounded cache: a group's frozen layers run once for all of them
    calls.clear()
    alone = ValueModel.from_policy(policy, layers=1)
    pair = [ValueModel.from_policy(policy, layers=1) for _ in range(2)]
    for c in pair:
        c.shared_features = FrozenFeatures(keep_prompts=1)
    pair[1].shared_features = pair[0].shared_features
    for g in GROUPS:
        prompt, group_comps = g.rollouts[0].prompt_ids, [r.completion_ids for r in g.rollouts]
        expected = alone.values(prompt, group_comps)
        for c in pair:
            assert all(torch.equal(a, b) for a, b in zip(c.values(prompt, group_comps), expected))
    assert sum(calls) == 2 * len(rollouts) + 3 * 2  # alone's and the pair's, each once; three probes
    assert len(pair[0].shared_features.recent) == 1  # only the last group is held


@pytest.mark.parametrize("layers", [1, None])
def test_save_and_load_give_identical_values(policy, tmp_path, layers):
    critic = ValueModel.from_policy(policy, layers=layers, init_value=0.3)
    fit(critic, GROUPS, FitConfig(epochs=2, lr=1e-2, batch_size=4), progress=False)
    critic.info.update(mode="ppo-n", lam=1.0)
    critic.save_pretrained(tmp_path / "c")
    stored = sorted(p.name for p in (tmp_path / "c").iterdir())
    assert stored == (["critic.json", "trained_layers.safetensors", "value_head.safetensors"] if layers
                      else ["backbone", "critic.json", "value_head.safetensors"])
    loaded = ValueModel.from_pretrained(tmp_path / "c", device="cpu")
    assert loaded.layers_trained == critic.layers_trained and loaded.info["mode"] == "ppo-n"
    for g in GROUPS:
        prompt, comps = g.rollouts[0].prompt_ids, [r.completion_ids for r in g.rollouts]
        for a, b in zip(critic.values(prompt, comps), loaded.values(prompt, comps)):
            assert torch.equal(a, b)


def test_ppo_estimators_read_a_critic(policy):
    assert {"ppo-1", "ppo-n"} <= set(estimators.names())
    est = estimators.get("ppo-n", lam=0.95)
    assert isinstance(est, estimators.ReadsCritic) and est.critic_requirement() == {"mode": "ppo-n", "lam": 0.95}
    group = GROUPS[2]
    with pytest.raises(ValueError, match="hista critic train --mode ppo-n"):
        est.state_values(group, [State(0, 1)])
    critic = ValueModel.from_policy(policy, init_value=0.5)
    with torch.no_grad():
        critic.head.weight.normal_(0.0, 0.5, generator=torch.Generator().manual_seed(2))
    est.use_critic(critic)
    values = critic.values(group.rollouts[0].prompt_ids, [r.completion_ids for r in group.rollouts])
    got = est.state_values(group, [State(0, 0), State(1, 2), State(3, 2)])  # t = T of rollout 3: its reward
    torch.testing.assert_close(got, torch.tensor([values[0][0], values[1][2], 0.0]))
    adv = est.token_advantages(group, gae_lambda=0.95, scale="none")
    for a, v, r in zip(adv, values, group.rollouts):
        torch.testing.assert_close(a, gae_advantages(v, r.reward, 0.95))
    with pytest.raises(ValueError, match="lam"):
        estimators.get("ppo-1", lam=2)


# --- hista critic train and sveb eval ------------------------------------------------------


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """Cases of 4 problems on the tiny model, with rewards set to vary (the tiny model never
    answers right, and a critic of all-zero rewards has nothing to learn)."""
    folder = tmp_path_factory.mktemp("critic")
    raw = folder / "raw.jsonl"
    assert main(BUILD + ["--problems", "2", "--out", str(raw)]) == 0
    records = case_file.read(raw)
    for n, record in enumerate(records):
        for i, rollout in enumerate(record["rollouts"]):
            rollout["reward"] = float((i + n) % 3 == 0)
    out = folder / "cases.jsonl"
    out.write_text("".join(case_file.dumps(r) for r in records))
    return out


@pytest.fixture(scope="module")
def critics(built, tmp_path_factory):
    folder = tmp_path_factory.mktemp("critics")
    one, many = folder / "ppo1", folder / "ppon"
    assert main(["critic", "train", "--cases", str(built), "--mode", "ppo-1", "--lam", "1.0", "--folds", "2",
                 "--out", str(one), *FAST]) == 0
    assert main(["critic", "train", "--cases", str(built), "--mode", "ppo-n", "--lam", "0.95", "--out", str(many),
                 *FAST]) == 0
    return one, many


def test_several_critics_in_one_run_and_resume(built, tmp_path, capsys):
    out = tmp_path / "set"
    argv = ["critic", "train", "--cases", str(built), "--mode", "ppo-1,ppo-n", "--lam", "0.95,1", "--folds", "2",
            "--out", str(out), *FAST]
    assert main(argv) == 0
    assert sorted(p.name for p in out.iterdir()) == ["ppo-1-0.95", "ppo-1-1", "ppo-n-0.95", "ppo-n-1", "train.json"]
    assert json.loads((out / "ppo-n-0.95" / "critic.json").read_text())["lam"] == 0.95
    kept = (out / "ppo-n-0.95" / "value_head.safetensors").read_bytes()
    # an interrupted run: fold 1 of ppo-1 λ=1 and its index are missing; the rerun trains only that
    shutil.rmtree(out / "ppo-1-1" / "fold-1")
    (out / "ppo-1-1" / "folds.json").unlink()
    capsys.readouterr()
    assert main(argv) == 0
    printed = capsys.readouterr().out
    assert printed.count("(written before, kept)") == 5 and "ppo-1-1/fold-1:" in printed
    assert (out / "ppo-1-1" / "fold-1" / "critic.json").is_file() and (out / "ppo-1-1" / "folds.json").is_file()
    assert (out / "ppo-n-0.95" / "value_head.safetensors").read_bytes() == kept
    methods = "grpo,ppo-1?lam=0.95,ppo-1?lam=1,ppo-n?lam=0.95,ppo-n?lam=1"
    assert main(["sveb", "eval", "--cases", str(built), "--out", str(tmp_path / "r.json"), "--methods", methods,
                 "--critic", str(out), "--device", "cpu"]) == 0
    assert len(json.loads((tmp_path / "r.json").read_text())["critics"]) == 4


def test_ppo1_folds_never_train_on_the_problems_they_score(built, critics):
    one, _ = critics
    records = case_file.read(built)
    problems = {problem_of(r["key"]) for r in records}
    index = json.loads((one / "folds.json").read_text())
    assert set(index["problems"]) == problems and index["dirs"] == ["fold-0", "fold-1"]
    scored = set()
    for f, sub in enumerate(index["dirs"]):
        info = json.loads((one / sub / "critic.json").read_text())
        held = {p for p, k in index["problems"].items() if k == f}
        assert info["fold"]["scores"] == sorted(held) and held
        assert not held & set(info["training"]["problems"])
        assert set(info["training"]["problems"]) == problems - held
        assert info["policy"] == {"model": "tiny", "revision": "tiny-seed0-h64-l2"}
        assert info["lam"] == 1.0 and info["gamma"] == 1.0 and info["mode"] == "ppo-1" and info["layers_trained"] == 1
        assert info["training"]["cases"] == str(built) and info["training"]["settings"] == records[0]["settings"]
        scored |= held
    assert scored == problems
    # the critic sveb eval hands each case never saw the case's problem
    critic_set = CriticSet(one, device="cpu")
    for record in records:
        assert problem_of(record["key"]) not in critic_set.for_case(record).info["training"]["problems"]
    # several states of one problem share one group: trained on once
    doubled = records + [dict(r, key=r["key"] + "-again") for r in records]
    assert len(case_groups(doubled)) == len(case_groups(records)) == len(problems)


def test_ppo1_folds_hold_a_question_drawn_twice_together(built, critics, tmp_path, capsys):
    """Problem ids whose cases share a prompt are one problem: PPO-1's folds keep them in one
    fold, and sveb eval refuses critics whose folds tore such a problem apart."""
    records = case_file.read(built)
    first = min(problem_of(r["key"]) for r in records)
    copy = [dict(r, key="zz-" + r["key"], rollouts=[dict(o, reward=1.0 - o["reward"]) for o in r["rollouts"]])
            for r in records if problem_of(r["key"]) == first]  # drawn again: other rollouts
    twice = tmp_path / "twice.jsonl"
    twice.write_text("".join(case_file.dumps(r) for r in records + copy))
    out = tmp_path / "ppo1"
    assert main(["critic", "train", "--cases", str(twice), "--mode", "ppo-1", "--lam", "1.0", "--folds", "4",
                 "--out", str(out), *FAST]) == 0  # four questions, five problem ids: a fold each
    index = json.loads((out / "folds.json").read_text())["problems"]
    assert index[first] == index["zz-" + first] and len(set(index.values())) == 4
    # the fixture's critics put the four problems in two folds: asking all four with one prompt tears them
    torn = tmp_path / "torn.jsonl"
    torn.write_text("".join(case_file.dumps(dict(r, prompt_ids=records[0]["prompt_ids"])) for r in records))
    code = main(["sveb", "eval", "--cases", str(torn), "--out", str(tmp_path / "r.json"), "--methods", "ppo-1?lam=1",
                 "--critic", str(critics[0]), "--device", "cpu"])
    assert code == 2 and "share a prompt in different folds" in capsys.readouterr().err


def test_sveb_eval_with_ppo_methods(built, critics, tmp_path):
    one, many = critics
    out = tmp_path / "results.json"
    methods = "grpo,ppo-1,ppo-n?lam=0.95"
    assert main(["sveb", "eval", "--cases", str(built), "--out", str(out), "--methods", methods,
                 "--critic", str(one), "--critic", str(many), "--device", "cpu"]) == 0
    results = json.loads(out.read_text())
    assert results["methods"]["ppo-n?lam=0.95"] == {
        "name": "ppo-n", "config": {"lam": 0.95}, "estimator_label": "PPO-N", "labelled": False,
        "critic": {"mode": "ppo-n", "lam": 0.95}, "baseline": False}
    assert results["critics"]["ppo-1"]["folds"] == ["fold-0", "fold-1"]
    assert results["critics"]["ppo-n?lam=0.95"]["mode"] == "ppo-n"
    records = case_file.read(built)
    index = json.loads((one / "folds.json").read_text())
    for record, row in zip(records, results["cases"]):
        assert all(isinstance(v, float) for v in row["values"].values())
        fold = ValueModel.from_pretrained(one / index["dirs"][index["problems"][problem_of(record["key"])]],
                                          device="cpu")
        rollout, t = record["rollouts"][record["state"]["rollout"]], record["state"]["t"]
        expected = fold.values(record["prompt_ids"], [rollout["completion_ids"]])[0][t]
        assert row["values"]["ppo-1"] == pytest.approx(float(expected), abs=1e-6)
    # a folder of critic folders works too, and sweeps take --critic
    assert main(["sveb", "eval", "--cases", str(built), "--out", str(tmp_path / "again.json"), "--methods", methods,
                 "--critic", str(one.parent), "--device", "cpu"]) == 0
    assert json.loads((tmp_path / "again.json").read_text())["cases"] == results["cases"]
    assert main(["sveb", "sweep", "--cases", str(built), "--out", str(tmp_path / "sweep"), "--base", "ppo-1",
                 "--grid", "lam=1.0", "--critic", str(one), "--device", "cpu"]) == 0


def _subset(built, tmp_path, n_problems=2):
    records = case_file.read(built)
    keep = sorted({problem_of(r["key"]) for r in records})[:n_problems]
    path = tmp_path / "subset.jsonl"
    path.write_text("".join(case_file.dumps(r) for r in records if problem_of(r["key"]) in keep))
    return path


def test_bad_inputs_exit_2(built, critics, tmp_path, capsys):
    one, many = critics
    out = tmp_path / "results.json"

    def run_eval(methods, *critic_dirs, cases=built):
        argv = ["sveb", "eval", "--cases", str(cases), "--out", str(out), "--methods", methods, "--device", "cpu"]
        for d in critic_dirs:
            argv += ["--critic", str(d)]
        code = main(argv)
        return code, capsys.readouterr().err

    code, err = run_eval("grpo,ppo-1")
    assert code == 2 and "--critic" in err and "hista critic train --mode ppo-1" in err
    code, err = run_eval("ppo-1?lam=0.95", one, many)
    assert code == 2 and "needs a ppo-1 critic trained with lam=0.95" in err and str(many) in err
    code, err = run_eval("ppo-n?lam=0.95", tmp_path)
    assert code == 2 and "holds no critic" in err
    code, err = run_eval("grpo", many)
    assert code == 2 and "no method reads a critic" in err
    # a critic trained on rollouts of another model
    other = tmp_path / "other"
    other.mkdir()
    for name in ("critic.json", "trained_layers.safetensors", "value_head.safetensors"):
        (other / name).write_bytes((many / name).read_bytes())
    info = json.loads((other / "critic.json").read_text())
    info["policy"]["model"] = "smollm2-135m-instruct"
    (other / "critic.json").write_text(json.dumps(info))
    code, err = run_eval("ppo-n?lam=0.95", other)
    assert code == 2 and "trained on rollouts of smollm2-135m-instruct" in err and str(built) in err
    # a PPO-N critic of other problems, a PPO-1 critic whose folds miss problems of the cases
    subset = _subset(built, tmp_path)
    assert main(["critic", "train", "--cases", str(subset), "--mode", "ppo-n", "--lam", "1", "--out",
                 str(tmp_path / "n-sub"), *FAST]) == 0
    assert main(["critic", "train", "--cases", str(subset), "--mode", "ppo-1", "--lam", "1", "--folds", "2", "--out",
                 str(tmp_path / "1-sub"), *FAST]) == 0
    capsys.readouterr()
    code, err = run_eval("ppo-n", tmp_path / "n-sub")
    assert code == 2 and "trained on other problems than the cases'" in err
    code, err = run_eval("ppo-1", tmp_path / "1-sub")
    assert code == 2 and "folds do not cover 2 of the cases' 4 problems" in err
    assert run_eval("ppo-n", tmp_path / "n-sub", cases=subset)[0] == 0  # its own cases are fine
    # hista critic train refuses before training
    train = ["critic", "train", "--cases", str(built), "--lam", "1"]
    assert main(train + ["--mode", "ppo-1", "--folds", "5", "--out", str(tmp_path / "x")]) == 2
    assert "5 folds but the cases hold 4 problems" in capsys.readouterr().err
    assert main(train + ["--mode", "ppo-n", "--out", str(many), *FAST]) == 2
    err = capsys.readouterr().err
    assert "holds critics of another request (lams: [0.95] there, [1.0] now)" in err and "train.json" in err
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "notes.txt").write_text("mine")
    assert main(train + ["--mode", "ppo-n", "--out", str(tmp_path / "full")]) == 2
    assert "is not empty" in capsys.readouterr().err
    assert (tmp_path / "full" / "notes.txt").read_text() == "mine"
    assert main(train + ["--mode", "ppo-n", "--layers", "3", "--out", str(tmp_path / "y")]) == 2
    assert "the backbone has 2" in capsys.readouterr().err
    assert not (tmp_path / "y").exists()
    with pytest.raises(SystemExit):
        main(train + ["--mode", "ppo-2", "--out", str(tmp_path / "z")])
    assert not (tmp_path / "x").exists() and not (tmp_path / "z").exists()


def test_training_still_refuses_critic_methods():
    from hista import losses
    from hista.train.limits import untrainable

    field, message = untrainable(estimators.get("ppo-1"), losses.get("grpo"))
    assert field == "advantage_estimator.name" and "learned model" in message


# --- damaged critic folders, --folds and resumed requests (issue 29) ---------------------------


def test_a_damaged_critic_folder_is_named_before_anything_loads(policy, tmp_path):
    from hista.critic.model import check_folder

    folder = ValueModel.from_policy(policy, layers=None).save_pretrained(tmp_path / "c")
    assert check_folder(folder)["weights"] == "backbone"
    weights = folder / "backbone" / "model.safetensors"
    sound = weights.read_bytes()
    weights.write_bytes(sound[: len(sound) // 2])
    with pytest.raises(InputError, match=r"backbone/model.safetensors: is truncated .* hista critic train"):
        ValueModel.from_pretrained(folder, device="cpu")
    weights.write_bytes(sound)
    (folder / "backbone" / "config.json").unlink()
    with pytest.raises(InputError, match="backbone/config.json: is missing"):
        check_folder(folder)
    head = ValueModel.from_policy(policy, layers=1).save_pretrained(tmp_path / "h") / "value_head.safetensors"
    head.unlink()
    with pytest.raises(InputError, match="value_head.safetensors: is missing"):
        check_folder(tmp_path / "h")
    head.mkdir()
    with pytest.raises(InputError, match="value_head.safetensors: is not a regular file"):
        check_folder(tmp_path / "h")


def test_default_folds_follow_the_library_and_cases_are_known_by_content(built, tmp_path, monkeypatch, capsys):
    """--folds defaults to the library's rule (5, or one per problem when the cases hold fewer),
    and rerunning a request resumes it whatever path names its cases: they are compared by
    their rollouts."""
    from hista.sveb.critic_training import train_critics

    subset = _subset(built, tmp_path)  # 2 problems: 2 folds
    train = ["critic", "train", "--mode", "ppo-1", "--lam", "1", "--out", "c", *FAST]
    monkeypatch.chdir(tmp_path)
    assert main(train + ["--cases", str(subset)]) == 0
    index = json.loads((tmp_path / "c" / "folds.json").read_text())
    assert index["folds"] == 2 and index["dirs"] == ["fold-0", "fold-1"]
    kept = {p: p.read_bytes() for p in (tmp_path / "c").rglob("*.safetensors")}
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "elsewhere" / "same.jsonl").write_bytes(subset.read_bytes())
    for cases in ("./subset.jsonl", "subset.jsonl", "elsewhere/../subset.jsonl", "elsewhere/same.jsonl"):
        capsys.readouterr()
        assert main(train + ["--cases", cases]) == 0, capsys.readouterr().err
        assert capsys.readouterr().out.count("(written before, kept)") == 2
    # the library's default is the CLI's: the same request, resumed
    result = train_critics(subset, tmp_path / "c", mode="ppo-1", lam=1.0, layers=1, fit_config=FitConfig(epochs=1),
                           device="cpu", progress=False)
    assert [c.get("resumed") for c in result["critics"]] == [True, True]
    assert {p: p.read_bytes() for p in (tmp_path / "c").rglob("*.safetensors")} == kept
    # a kept critic is checked against the request: another fold's critic in fold-0's place
    other = json.loads((tmp_path / "c" / "fold-1" / "critic.json").read_text())
    (tmp_path / "c" / "fold-0" / "critic.json").write_text(json.dumps(other))
    with pytest.raises(InputError, match=r"fold-0/critic.json: field 'fold'"):
        train_critics(subset, tmp_path / "c", mode="ppo-1", lam=1.0, layers=1, fit_config=FitConfig(epochs=1),
                      device="cpu", progress=False)
    # cases of other rollouts are another request
    records = case_file.read(subset)
    records[0]["rollouts"][0]["reward"] = 1.0 - records[0]["rollouts"][0]["reward"]
    (tmp_path / "other.jsonl").write_text("".join(case_file.dumps(r) for r in records))
    capsys.readouterr()
    assert main(train + ["--cases", "other.jsonl"]) == 2
    assert "field 'groups': holds critics of other cases" in capsys.readouterr().err
