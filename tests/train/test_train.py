"""Training (SPEC §9): recipes and their validation, hidden-state capture from TRL's log-prob
pass, the TRL subclass against plain TRL, end-to-end runs on the tiny model, resume."""

import json
from pathlib import Path
from typing import Optional

import pytest
import torch
import yaml

from hista import provenance
from hista.cli import main
from hista.errors import InputError
from hista.train import load_recipe

ROOT = Path(__file__).resolve().parents[2]
SMOKE = ROOT / "recipes" / "cpu-smoke.yaml"
GPU_RECIPES = sorted(p for p in (ROOT / "recipes" / "gpu").glob("*/*.yaml") if p.name != "base.yaml")


# ---- recipes ----------------------------------------------------------------------------

def test_smoke_recipe_loads_with_overrides():
    r = load_recipe(SMOKE, ["advantage_estimator.name=hista", "loss.name=strace", "loss.lam=0.5", "trl.max_steps=2"])
    assert r.model == "smollm2-135m-instruct"
    assert r.estimator_config()["name"] == "hista" and r.loss == {"name": "strace", "lam": 0.5}
    assert r.trl["max_steps"] == 2
    assert r.batch_layout() == {"rollouts_per_optimizer_step": 16, "generation_batch": 16,
                                "prompts_per_generation": 2, "num_generations": 8, "rows_per_process": 16,
                                "group_local": True}


def test_dr_grpo_defaults_to_unscaled_advantages():
    assert load_recipe(SMOKE, ["loss.name=dr_grpo"]).estimator_config()["scale"] == "none"
    assert load_recipe(SMOKE).estimator_config()["scale"] == "group"


@pytest.mark.parametrize("overrides, field, needle", [
    (["bogus=1"], "bogus", "unknown key"),
    (["loss.name=nope"], "loss.name", "unknown loss"),
    (["loss.eps_hi=0.3"], "loss", "eps_hi"),
    (["advantage_estimator.alpha_typo=1"], "advantage_estimator", "alpha_typo"),
    (["advantage_estimator.name=critic9"], "advantage_estimator", "critic9"),
    (["advantage_estimator.name=mc"], "advantage_estimator.name", "continuations"),
    (["advantage_estimator.name=grpo", "advantage_estimator.profile=reference"], "advantage_estimator",
     "estimators with profiles: hista"),
    (["trl.epsilon=0.3"], "trl.epsilon", "loss.eps_low"),
    (["trl.not_a_field=1"], "trl.not_a_field", "GRPOConfig"),
    (["trl.num_generations=6"], "trl.num_generations", "multiple of num_generations"),
    (["tasks=builtin:nope"], "tasks", "nope"),
    (["world_size=0"], "world_size", "positive"),
    (["world_size=4", "trl.per_device_train_batch_size=4"], "trl.per_device_train_batch_size", "span processes"),
    (["eval.suites=nope", "eval.every=2"], "eval.suites", "unknown suite"),
    (["eval.suites=builtin"], "eval.every", "required"),
    (["eval.suites=builtin", "eval.every=0"], "eval.every", ">= 1"),
    (["eval.suites=builtin", "eval.every=2", "eval.k=0"], "eval.k", ">= 1"),
    (["eval.suites=builtin", "eval.every=2", "eval.temperature=-1"], "eval.temperature", ">= 0"),
    (["eval.suites=builtin", "eval.every=2", "eval.at_start=3"], "eval.at_start", "true or false"),
    (["eval.suites=[]", "eval.every=2"], "eval.suites", "list of them"),
    (["eval.suits=builtin", "eval.every=2"], "eval.suits", "unknown key"),
    (["eval=3"], "eval", "must be"),
    (["rollout_engine=vllm"], "rollout_engine", "auto, hista, trl"),
])
def test_bad_recipes_name_the_field(overrides, field, needle):
    with pytest.raises(InputError) as err:
        load_recipe(SMOKE, overrides)
    assert err.value.field == field and needle in str(err.value) and str(SMOKE) in str(err.value)


def test_recipe_errors_carry_the_line(tmp_path):
    path = tmp_path / "r.yaml"
    path.write_text("model: tiny\ntasks: builtin:arith\nloss:\n  name: dapo\n  cap: 3\n")
    with pytest.raises(InputError) as err:
        load_recipe(path)
    assert f"{path}:3:" in str(err.value) and "cap" in str(err.value)
    path.write_text("model: tiny\ntasks: [builtin:arith\n")
    with pytest.raises(InputError, match="not valid YAML"):
        load_recipe(path)
    path.write_text("base: r.yaml\nmodel: tiny\n")
    with pytest.raises(InputError, match="includes itself"):
        load_recipe(path)
    path.write_text("model: tiny\ntasks: builtin:arith\neval:\n  suites: builtin\n  every: 5\n  limit: -2\n")
    with pytest.raises(InputError) as err:
        load_recipe(path)
    assert f"{path}:6:" in str(err.value) and err.value.field == "eval.limit"
    assert load_recipe(path, ["eval.limit=8", "trl.bf16=false"]).eval == {"suites": "builtin", "every": 5, "limit": 8}


def test_cli_dry_run_and_bad_recipe_exit_codes(capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # the dry run checks output_dir (runs/cpu-smoke) too: not this checkout's
    assert main(["train", str(SMOKE), "--dry-run"]) == 0
    assert "2 prompts x 8 rollouts" in capsys.readouterr().out
    assert main(["train", str(SMOKE), "loss.name=nope", "--dry-run"]) == 2
    assert "unknown loss" in capsys.readouterr().err


def _paper_expectations(recipe):
    family = recipe.source.split("/")[-2]
    return {
        "qwen2.5-1.5b-math": ("Qwen/Qwen2.5-1.5B", ["hf:math@train"], 32, 4),
        "qwen2.5-1.5b-instruct-hybrid": ("Qwen/Qwen2.5-1.5B-Instruct", None, 16, 4),
        "qwen3-1.7b-dapo-math": ("Qwen/Qwen3-1.7B-Base", ["hf:dapo-math"], 16, 8),
    }[family]


@pytest.mark.parametrize("path", GPU_RECIPES, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_gpu_recipe_validates_without_a_gpu(path, monkeypatch):
    monkeypatch.chdir(ROOT)  # accelerate_config paths are relative to the repository root
    r = load_recipe(path.relative_to(ROOT))
    model, specs, g, world = _paper_expectations(r)
    assert r.model == model and r.world_size == world
    if specs is not None:
        assert r.task_specs == specs
    t = r.trl
    assert (t["learning_rate"], t["lr_scheduler_type"], t["temperature"]) == (1e-6, "constant", 0.7)
    assert t["max_completion_length"] == 4096 and t["bf16"] and t["activation_checkpointing"]
    assert t["use_vllm"] and t["vllm_mode"] == "colocate" and r.loss.get("beta", 0.0) == 0.0
    layout = r.batch_layout()
    assert layout["num_generations"] == g
    # 4 optimiser steps per generation batch, whole groups everywhere
    assert layout["generation_batch"] == 4 * layout["rollouts_per_optimizer_step"]
    assert layout["rollouts_per_optimizer_step"] % g == 0 and layout["group_local"]
    launch = yaml.safe_load((ROOT / r.accelerate_config).read_text())
    assert launch["num_processes"] * 1 == r.world_size and launch["distributed_type"] == "DEEPSPEED"
    loss = r.loss
    if loss["name"] == "dapo":
        assert (loss.get("eps_low", 0.2), loss["eps_high"]) == (0.2, 0.28)
    elif loss["name"] == "cispo":
        assert loss["cap"] == 5.0
    elif loss["name"] in ("strace", "ptrace", "grpo_lambda"):
        assert loss["lam"] == 0.9 and loss.get("top_entropy_fraction", 0.2) == 0.2
    assert r.estimator_config()["name"] in ("grpo", "numca", "hista", "critic")


def test_every_paper_combination_has_a_recipe():
    names = {f"{p.parent.name}/{p.stem}" for p in GPU_RECIPES}
    for family in ("qwen2.5-1.5b-math", "qwen2.5-1.5b-instruct-hybrid"):
        for loss in ("dapo", "cispo"):
            for est in ("grpo", "numca", "hista"):
                assert f"{family}/{loss}-{est}" in names
    for loss in ("strace", "ptrace", "grpo-lambda"):
        assert f"qwen3-1.7b-dapo-math/{loss}" in names
    for config in ("zero2", "zero3", "zero3-2nodes"):
        cfg = yaml.safe_load((ROOT / "configs" / "accelerate" / f"{config}.yaml").read_text())
        assert cfg["deepspeed_config"]["zero_stage"] == int(config[4])


# ---- hidden states from TRL's log-prob pass -----------------------------------------------

def test_capture_matches_a_plain_forward():
    from trl.trainer.utils import add_fused_lm_head

    from hista.models.capture import capture_logprob_pass
    from hista.models.loading import build_tiny

    lm = build_tiny()
    plain = lm.model
    ids = torch.randint(0, 500, (3, 12))
    attn = torch.ones_like(ids)
    with torch.no_grad():
        ref = plain(input_ids=ids, attention_mask=attn, output_hidden_states=True)
    add_fused_lm_head(plain, outputs=("log_probs", "entropy"))
    labels = ids.clone()
    labels[:, :5] = -100
    with capture_logprob_pass(plain) as record, torch.no_grad():
        out = plain(input_ids=ids, attention_mask=attn, labels=labels, fused_lm_head=True)
        plain.generate(ids[:, :4], max_new_tokens=3, do_sample=False, pad_token_id=0)  # not recorded
    with capture_logprob_pass(plain) as grad_record:
        plain(input_ids=ids, attention_mask=attn, labels=labels, fused_lm_head=True)  # grad pass: not recorded
    hidden, entropy = record.rows(3)
    assert len(record.hidden) == 1 and not grad_record.hidden
    torch.testing.assert_close(hidden, ref.hidden_states[-1], atol=1e-5, rtol=1e-5)
    logp = torch.log_softmax(ref.logits[:, :-1].float(), -1)
    want = -(logp.exp() * logp).sum(-1)[:, -7:]
    torch.testing.assert_close(entropy[:, -7:], want, atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(out.log_probs[:, -7:], logp.gather(-1, ids[:, 1:, None])[..., 0][:, -7:],
                               atol=1e-5, rtol=1e-5)


# ---- the trainer against TRL, end to end on the tiny model --------------------------------

def _parity_reward(completions, **_):
    return [float(len(c[-1]["content"]) % 2) for c in completions]


def _dataset(n=8):
    from datasets import Dataset

    return Dataset.from_list([{"prompt": [{"role": "user", "content": f"What is {i} + {i}?"}]} for i in range(n)])


def _config(tmp_path, name, **kw):
    from trl import GRPOConfig

    base = dict(output_dir=str(tmp_path / name), per_device_train_batch_size=8, num_generations=4,
                max_completion_length=8, max_steps=1, learning_rate=1e-3, report_to="none", seed=3,
                logging_steps=1, save_strategy="no", activation_checkpointing=False, disable_tqdm=True, bf16=False,
                loss_type="dapo", epsilon=0.2, epsilon_high=0.28, beta=0.0)
    return GRPOConfig(**{**base, **kw})


def test_grpo_estimator_with_dapo_loss_trains_exactly_like_trl(tmp_path):
    """Same seed, same completions: hista's grpo advantages + dapo loss move the weights
    exactly as TRL's own GRPOTrainer with loss_type='dapo' (with TRL's padded loss forward:
    the packed one rounds differently, tests/train/test_packing.py compares it)."""
    from trl import GRPOTrainer

    from hista.models.loading import build_tiny
    from hista.train.trainer import HistaGRPOTrainer

    models = []
    for cls, extra in ((GRPOTrainer, {}),
                       (HistaGRPOTrainer, {"advantage_estimator": {"name": "grpo"}, "loss": {"name": "dapo"},
                                           "rollout_engine": "trl", "packed_loss": False})):
        lm = build_tiny()
        trainer = cls(model=lm.model, reward_funcs=[_parity_reward], args=_config(tmp_path, cls.__name__),
                      train_dataset=_dataset(), processing_class=lm.tokenizer, **extra)
        before = {k: v.clone() for k, v in trainer.model.state_dict().items()}
        trainer.train()
        models.append((before, trainer.model.state_dict(), trainer))
    (b0, a0, t0), (b1, a1, t1) = models
    log0, log1 = t0.state.log_history[0], t1.state.log_history[0]
    assert log1["reward_std"] > 0 and log1["advantages/abs_max"] > 0  # a real signal, not zero advantages
    assert log1["grad_norm"] == pytest.approx(log0["grad_norm"], rel=1e-5)
    moved = max((a0[k] - b0[k]).abs().max().item() for k in a0)
    assert moved > 1e-4
    for k in a0:
        torch.testing.assert_close(a1[k], a0[k], atol=1e-6, rtol=1e-5)


def test_hista_uses_trls_old_logprob_pass_when_it_runs(tmp_path, monkeypatch):
    """With 2 steps per generation TRL computes old log-probs itself: Hista's hidden states
    come from that pass and no extra forward is made."""
    from hista.models.loading import build_tiny
    from hista.train.trainer import HistaGRPOTrainer

    def no_extra_pass(self, out):
        raise AssertionError("an extra log-prob pass was run although TRL ran one")

    monkeypatch.setattr(HistaGRPOTrainer, "old_logprob_pass", no_extra_pass)
    lm = build_tiny()
    trainer = HistaGRPOTrainer(
        model=lm.model, reward_funcs=[_parity_reward], train_dataset=_dataset(), processing_class=lm.tokenizer,
        args=_config(tmp_path, "h", per_device_train_batch_size=4, steps_per_generation=2, max_steps=2),
        advantage_estimator={"name": "hista"}, loss={"name": "strace"},
    )
    trainer.train()
    logs = [row for row in trainer.state.log_history if "loss" in row]
    assert len(logs) == 2 and logs[0]["advantages/abs_max"] > 0  # one generation batch feeds both steps
    assert all(0.0 < row["loss/kept_frac"] <= 1.0 for row in logs)
    assert logs[1]["loss/ratio_max"] > 1.0  # the second step is off-policy against TRL's old log-probs


def test_unsupported_trl_flags_are_refused(tmp_path):
    from hista.models.loading import build_tiny
    from hista.train.trainer import HistaGRPOTrainer

    lm = build_tiny()
    with pytest.raises(ValueError, match="top_entropy_quantile"):
        HistaGRPOTrainer(model=lm.model, reward_funcs=[_parity_reward], train_dataset=_dataset(),
                         processing_class=lm.tokenizer, args=_config(tmp_path, "u", top_entropy_quantile=0.2),
                         advantage_estimator={"name": "grpo"}, loss={"name": "dapo"})


@pytest.mark.parametrize("estimator, loss", [("grpo", "dapo"), ("numca", "dapo"), ("hista", "strace"),
                                             ("hista", "gspo"), ("grpo", "dr_grpo"), ("probe", "dapo"),
                                             ("blend", "dapo")])
def test_train_two_steps_on_tiny(tmp_path, capsys, estimator, loss):
    out = tmp_path / "run"
    code = main(["train", str(SMOKE), "model=tiny", f"output_dir={out}", f"advantage_estimator.name={estimator}",
                 f"loss.name={loss}", "trl.max_steps=2", "trl.max_completion_length=12", "trl.save_steps=2"])
    assert code == 0
    text = capsys.readouterr().out
    assert "trained 2 steps" in text and str(out / "metrics.jsonl") in text
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [1, 2]
    for key in ("reward", "reward_std", "advantages/mean", "advantages/std", "advantages/abs_max",
                "loss/clip_frac_low", "loss/clip_frac_high", "entropy", "completions/mean_length",
                "estimator/seconds"):
        assert key in rows[0], key
    assert "estimator/time_frac" in rows[1]
    if estimator in ("hista", "probe", "blend"):  # the layer read (tiny: 2 layers) and Hista's resolved structure
        assert rows[0]["estimator/layer"] == {"hista": -1, "probe": -2, "blend": -1}[estimator]
    if estimator in ("hista", "blend"):
        assert rows[0]["estimator/interval"] == 12 and rows[0]["estimator/stride"] == 5
    if estimator == "probe":  # its history of recent batches is in the checkpoint, for a resume
        state = torch.load(out / "checkpoint-2" / "estimator-0.pt", weights_only=True)
        assert len(state["history"]) == 2 and state["history"][0]["weight"] > 0
    assert all(torch.isfinite(torch.tensor(r["loss"])) for r in rows)
    assert (out / "checkpoint-2").is_dir() and (out / "final" / "config.json").is_file()
    saved = yaml.safe_load((out / "recipe.yaml").read_text())
    assert saved["loss"]["name"] == loss and "trl" in saved["versions"]
    assert saved["code"] == provenance.code() and all(r["commit"] == saved["code"]["commit"] for r in rows)


def test_one_run_builds_one_recipe_estimator_loss_and_evaluation_plan(tmp_path, monkeypatch):
    """Issue 67 item 1: one `hista train` parses its recipe into one Recipe, and validation, the
    checks before the run, the resume point and the trainer read its one estimator (it was built
    six times), its one policy loss (built twice) and its one parsed ``eval`` section (three)."""
    from hista.estimators.base import Estimator
    from hista.losses import Loss
    from hista.train import evaluate
    from hista.train.recipe import Recipe

    built = []

    def count(cls, method):
        original = getattr(cls, method)

        def counted(self, *args, **kwargs):
            built.append(type(self).__name__)
            return original(self, *args, **kwargs)
        monkeypatch.setattr(cls, method, counted)

    for cls, method in ((Recipe, "__post_init__"), (Estimator, "__init__"), (Loss, "__init__")):
        count(cls, method)
    parse = evaluate.parse
    monkeypatch.setattr(evaluate, "parse", lambda section: built.append("TrainEval") or parse(section))
    assert main(["train", str(SMOKE), "model=tiny", f"output_dir={tmp_path / 'run'}", "advantage_estimator.name=hista",
                 "loss.name=cispo", "trl.max_steps=1", "trl.max_completion_length=8",
                 "eval.suites=builtin:arith?steps=1", "eval.every=1", "eval.limit=2", "eval.max_new_tokens=8",
                 "eval.at_start=false"]) == 0
    assert sorted(built) == ["Hista", "Loss", "Recipe", "TrainEval"]
    assert (tmp_path / "run" / "eval" / "step-1.json").is_file()  # the plan was used


def test_training_resumes_from_its_checkpoint(tmp_path, capsys):
    out = tmp_path / "run"
    args = ["train", str(SMOKE), "model=tiny", f"output_dir={out}", "trl.max_completion_length=8",
            "trl.save_steps=1"]
    assert main(args + ["trl.max_steps=2"]) == 0
    capsys.readouterr()
    assert main(args + ["trl.max_steps=3", "resume=true"]) == 0
    text = capsys.readouterr().out
    assert "trained 3 steps (resumed from" in text and "checkpoint-2" in text
    steps = [json.loads(line)["step"] for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert steps == [1, 2, 3]
    capsys.readouterr()
    before = (out / "metrics.jsonl").read_bytes()
    assert main(args + ["trl.max_steps=1"]) == 2  # a fresh run into an earlier run's folder is refused
    assert "holds an earlier run (metrics.jsonl, checkpoint-1, checkpoint-2, checkpoint-3, final)" in \
        capsys.readouterr().err
    assert (out / "metrics.jsonl").read_bytes() == before
    assert main(args + ["trl.max_steps=1", "--overwrite"]) == 0  # replaced: a new log, no old checkpoints
    steps = [json.loads(line)["step"] for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert steps == [1]
    assert sorted(p.name for p in out.glob("checkpoint-*")) == ["checkpoint-1"]


def test_evaluation_during_training(tmp_path, capsys):
    """A recipe eval section: the policy is evaluated before the first step, every 2 steps and
    at the last one; the numbers join metrics.jsonl; the evaluation before training is the one
    hista eval gives for the same model and settings; an overwritten run loses its old eval/."""
    from hista.evaluation import EvalConfig, evaluate

    out = tmp_path / "run"
    settings = {"suites": "builtin:arith?steps=1", "k": 2, "temperature": 1.0, "limit": 3, "max_new_tokens": 6}
    args = ["train", str(SMOKE), "model=tiny", f"output_dir={out}", "trl.max_completion_length=8",
            "trl.save_steps=3", "trl.max_steps=3", "eval.every=2", *(f"eval.{k}={v}" for k, v in settings.items())]
    assert main(args) == 0
    text = capsys.readouterr().out
    assert "eval at step 0" in text and "eval at step 2" in text and "eval at step 3" in text
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [0, 1, 2, 3]
    key = "eval/builtin:arith?steps=1/avg@2"
    assert [key in r for r in rows] == [True, False, True, True]
    assert "loss" not in rows[0] and "pass@2" in " ".join(rows[2])
    for step in (0, 2, 3):
        results = json.loads((out / "eval" / f"step-{step}.json").read_text())
        assert results["summary"]["benchmarks"]["builtin:arith?steps=1"]["avg"]["mean"] == \
            pytest.approx(next(r[key] for r in rows if r["step"] == step))
        assert len(results["problems"]) == 3 and results["settings"]["model"] == f"{out}@step-{step}"
    alone = evaluate(EvalConfig(model="tiny", **{**settings, "suites": [settings["suites"]]}), tmp_path / "e.json",
                     progress=False)
    at_start = json.loads((out / "eval" / "step-0.json").read_text())
    assert [s["text"] for p in at_start["problems"] for s in p["samples"]] == \
        [s["text"] for p in json.loads(Path(alone["results"]).read_text())["problems"] for s in p["samples"]]
    capsys.readouterr()
    assert main([*args, "trl.max_steps=1", "eval.at_start=false", "--overwrite"]) == 0
    assert sorted(p.name for p in (out / "eval").glob("*.json")) == ["step-1.json"]


@pytest.mark.slow
@pytest.mark.parametrize("estimator, loss", [("grpo", "dapo"), ("numca", "dapo"), ("hista", "dapo"),
                                             ("hista", "strace")])
def test_cpu_smoke_recipe_on_the_embedded_model(tmp_path, capsys, estimator, loss):
    out = tmp_path / "run"
    assert main(["train", str(SMOKE), f"output_dir={out}", f"advantage_estimator.name={estimator}",
                 f"loss.name={loss}"]) == 0
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert len(rows) == 5


def test_reward_curves_from_metrics_files(tmp_path):
    from hista.train import plot_reward_curves, read_metrics, reward_summary
    from hista.train.curves import moving_average

    path = tmp_path / "metrics.jsonl"
    rows = [{"step": s, "reward": r} for s, r in [(1, 0.0), (2, 1.0), (2, 0.5), (3, 1.0)]]  # step 2 resumed
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    got = read_metrics(path)
    assert [r["reward"] for r in got] == [0.0, 0.5, 1.0]
    assert moving_average(torch.tensor([1.0, 3.0, 5.0]).numpy(), 2).tolist() == [1.0, 2.0, 4.0]
    assert reward_summary(got, last=2) == {"steps": 3, "mean": 0.5, "first2": 0.25, "last2": 0.75}
    png = plot_reward_curves({"a": path, "b": path}, tmp_path / "c.png", window=2)
    assert png.read_bytes()[:4] == b"\x89PNG"
    rows = [{"step": 0, "eval/arith/avg@1": 0.2}, *rows, {"step": 3, "reward": 1.0, "eval/arith/avg@1": 0.6}]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))  # evaluations during training
    assert reward_summary(read_metrics(path), last=2)["steps"] == 3
    png = plot_reward_curves({"a": path}, tmp_path / "d.png", window=2)
    assert png.read_bytes()[:4] == b"\x89PNG"


#: (estimator, processes, per_device, group) of the multi-process test
SPLITS = [
    ("grpo", 2, 2, 4), ("hista-paper", 2, 2, 4),  # each group split 2 + 2 over two processes
    ("hista", 2, 2, 4),                           # the structure rule's stride 5: vectors travel
    ("hista-paper", 2, 4, 4),                     # group-local: one group per process
    ("hista-paper", 4, 2, 4),                     # four processes, each group split over two of them
    ("hista", 4, 4, 4),                           # four processes, group-local
    ("probe", 2, 6, 4),                           # rank 0 owns groups 0 and 1 (1 split), rank 1 group 2
    ("probe", 2, 8, 4),                           # group-local, two groups per process
]


@pytest.fixture(scope="module")
def split_runs(tmp_path_factory):
    """One launch per process count (issue 66) running every configuration of SPLITS with that
    count, one after another: each SPLITS entry -> the folder of its rank files."""
    import socket
    import subprocess
    import sys

    script = ROOT / "tests" / "helpers" / "split_groups.py"
    folders = {}
    for processes in sorted({split[1] for split in SPLITS}):
        mine = [(e, d, g) for e, n, d, g in SPLITS if n == processes]
        out = tmp_path_factory.mktemp(f"split{processes}")
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        proc = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", str(processes),
                               "--master_port", str(port), str(script), str(out),
                               *(f"{e}:{d}:{g}" for e, d, g in mine)], capture_output=True, text=True, timeout=900)
        assert proc.returncode == 0, proc.stderr[-3000:]
        folders.update({(e, processes, d, g): out / str(k) for k, (e, d, g) in enumerate(mine)})
    return folders


@pytest.mark.xdist_group("train-split")  # the tests share split_runs's launches
@pytest.mark.parametrize("estimator, processes, per_device, group", SPLITS)
def test_multi_process_advantages_equal_single_process(split_runs, estimator, processes, per_device, group):
    """CPU processes (gloo) running one training step: every rank's advantages equal those of
    the estimator run in one process on the whole batch rebuilt from all ranks' local data
    (the probe: each owner's groups fitted on one another, ``for_batch``). Group-local layouts
    move nothing between processes while advantages are computed (no collective call at all).
    Split layouts gather nothing either: only the processes sharing a group exchange, point to
    point; for Hista what travels is the moved rows' compressed vectors past the prompt, for
    the probe the completion tokens' hidden states."""
    from hista import estimators
    from hista.types import Rollout, RolloutGroup

    folder = split_runs[estimator, processes, per_device, group]
    ranks = [torch.load(folder / f"rank{r}.pt", weights_only=False) for r in range(processes)]
    rows = [row for rank in ranks for row in rank["rows"]]
    rewards = ranks[0]["rewards"]
    assert all(rank["rewards"] == rewards for rank in ranks) and len(rows) == len(rewards) == processes * per_device
    local = per_device % group == 0
    assert all(rank["local"] == local for rank in ranks)
    if local:
        assert all(rank["calls"] == [] for rank in ranks)  # nothing crossed processes
    else:  # point to point, only between a group's owner (the rank of its first row) and its other ranks
        holder = [i // per_device for i in range(len(rows))]
        owner = [(i // group * group) // per_device for i in range(len(rows))]
        for r, rank in enumerate(ranks):
            peers = {owner[i] for i in range(len(rows)) if holder[i] == r} | \
                {holder[i] for i in range(len(rows)) if owner[i] == r}
            assert rank["calls"] and {name for name, _, _ in rank["calls"]} <= \
                {"send", "recv", "send_object_list", "recv_object_list"}, rank["calls"]
            assert {peer for _, _, peer in rank["calls"]} <= peers - {r}
        sent = sum(size for rank in ranks for name, size, _ in rank["calls"] if name == "send")
        moved = [(i, row) for i, row in enumerate(rows) if holder[i] != owner[i]]
        returned = sum(row["advantages"].numel() * 4 for _, row in moved)
        if estimator.startswith("hista"):  # the moved rows' representations past the prompt, advantages back
            expected = returned
            for _, row in moved:
                rep, shared = estimators.get("hista", profile=estimator.partition("-")[2] or None).represent(Rollout(
                    prompt_ids=row["prompt_ids"], completion_ids=row["completion_ids"], hidden=row["hidden"]))
                assert 0 < shared < rep.shape[0]
                expected += rep[shared:].numel() * 4
            raw = sum(row["hidden"].numel() * row["hidden"].element_size() for _, row in moved)
            assert sent == expected and sent < raw  # compressed, no prompt part, no padding, no other rows
        elif estimator != "grpo":  # the completion tokens' hidden states of the moved rows
            completion = sum(len(row["completion_ids"]) * row["hidden"].shape[1] * row["hidden"].element_size()
                             for _, row in moved)
            assert sent == completion + returned
    name, _, profile = estimator.partition("-")
    est = estimators.get(name, profile=profile or None)
    wholes = []
    for first in range(0, len(rows), group):
        members = rows[first: first + group]
        assert len({tuple(r["prompt_ids"]) for r in members}) == 1  # a group is one prompt's rollouts
        wholes.append(RolloutGroup(rollouts=[Rollout(prompt_ids=r["prompt_ids"], completion_ids=r["completion_ids"],
                                                     reward=rw, hidden=r["hidden"])
                                             for r, rw in zip(members, rewards[first: first + group])]))
    owners = [(first // group * group) // per_device for first in range(0, len(rows), group)]
    fitted = [est] * len(wholes)
    if isinstance(est, estimators.LearnsAcrossGroups):  # each owner fits its groups on one another
        for rank in set(owners):
            mine = [k for k, o in enumerate(owners) if o == rank]
            fresh = estimators.get(name, profile=profile or None)  # each process's probe has its own history
            for k, probe in zip(mine, fresh.for_batch([wholes[k] for k in mine])):
                fitted[k] = probe
        assert any(probe.fit is not None for probe in fitted)
    for k, whole in enumerate(wholes):
        want = fitted[k].token_advantages(whole, gae_lambda=1.0, scale="group")
        for got, expected in zip((r["advantages"] for r in rows[k * group: (k + 1) * group]), want):
            torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-5)
    # a half group alone would give different advantages: the test can tell
    half = RolloutGroup(rollouts=whole.rollouts[: group // 2])
    alone = est.token_advantages(half, gae_lambda=1.0, scale="group")
    assert not torch.allclose(alone[0], rows[len(rows) - group]["advantages"], atol=1e-3)


def test_cpu_smoke_one_step_on_the_embedded_model(tmp_path, capsys):
    """The real model through the whole path (hidden-state capture, S-trace entropies)."""
    out = tmp_path / "run"
    assert main(["train", str(SMOKE), f"output_dir={out}", "advantage_estimator.name=hista", "loss.name=strace",
                 "trl.max_steps=1", "trl.per_device_train_batch_size=8", "trl.max_completion_length=24"]) == 0
    row = json.loads((out / "metrics.jsonl").read_text().splitlines()[0])
    assert row["advantages/abs_max"] >= 0 and 0.0 < row["loss/kept_frac"] <= 1.0


# ---- the batch <-> groups conversion, without TRL -----------------------------------------

def _padded_batch(prompts, completions, hidden_width=None, seed=0):
    """TRL's layout: prompts padded on the left, completions on the right."""
    p = max(len(x) for x in prompts)
    t = max(len(x) for x in completions)
    prompt_ids = torch.zeros(len(prompts), p, dtype=torch.long)
    prompt_mask = torch.zeros_like(prompt_ids)
    completion_ids = torch.zeros(len(prompts), t, dtype=torch.long)
    completion_mask = torch.zeros_like(completion_ids)
    for i, (a, b) in enumerate(zip(prompts, completions)):
        prompt_ids[i, p - len(a):], prompt_mask[i, p - len(a):] = torch.tensor(a), 1
        completion_ids[i, : len(b)], completion_mask[i, : len(b)] = torch.tensor(b, dtype=torch.long), 1
    hidden = None
    if hidden_width:
        hidden = torch.randn(len(prompts), p + t, hidden_width, generator=torch.Generator().manual_seed(seed))
    return prompt_ids, prompt_mask, completion_ids, completion_mask, hidden


def test_batch_to_groups_and_back():
    from hista import estimators
    from hista.advantages import batch_to_groups, scatter
    from hista.types import Rollout, RolloutGroup

    prompts = [[5, 6, 7], [5, 6, 7], [9], [9]]
    completions = [[1, 2, 3, 4], [8], [2, 2], []]
    rewards = torch.tensor([1.0, 0.0, 0.0, 1.0])
    prompt_ids, prompt_mask, completion_ids, completion_mask, hidden = _padded_batch(prompts, completions, 6)
    groups = batch_to_groups(prompt_ids, prompt_mask, completion_ids, completion_mask, rewards, 2,
                             problem_ids=["a", "a", "b", "b"], hidden=hidden)
    assert [g.prompt_id for g in groups] == ["a", "b"] and [len(g) for g in groups] == [2, 2]
    flat = [r for g in groups for r in g.rollouts]
    for i, r in enumerate(flat):
        assert r.prompt_ids == prompts[i] and r.completion_ids == completions[i] and r.reward == rewards[i]
        keep = torch.cat([prompt_mask[i].bool(), completion_mask[i].bool()])
        torch.testing.assert_close(r.hidden, hidden[i][keep])  # padding dropped, prompt then completion
    # the same estimator on hand-built groups gives the same [B, T] advantages
    est = estimators.get("hista", interval=2, max_k=3, min_k=1)
    got = scatter([est.token_advantages(g) for g in groups], completion_ids.shape)
    by_hand = [RolloutGroup([Rollout(prompts[i], completions[i], float(rewards[i]), hidden=flat[i].hidden)
                             for i in rows]) for rows in ([0, 1], [2, 3])]
    want = torch.zeros(4, 4)
    for g, rows in zip(by_hand, ([0, 1], [2, 3])):
        for i, a in zip(rows, est.token_advantages(g)):
            want[i, : a.numel()] = a
    torch.testing.assert_close(got, want)
    assert (got[~completion_mask.bool()] == 0).all()
    # without problem ids a group is keyed by its prompt; a bad layout is refused
    keyed = batch_to_groups(prompt_ids, prompt_mask, completion_ids, completion_mask, rewards, 2)
    assert keyed[0].prompt_id != keyed[1].prompt_id and keyed[0].prompt_id.startswith("prompt-")
    with pytest.raises(ValueError, match="groups of 3"):
        batch_to_groups(prompt_ids, prompt_mask, completion_ids, completion_mask, rewards, 3)
    with pytest.raises(ValueError, match="3 rollouts"):
        scatter([[torch.zeros(1)] * 3], (4, 4))


def test_batch_to_groups_decodes_text_when_asked(tiny):
    from hista.advantages import batch_to_groups

    ids = tiny.tokenizer(" 12 then 7", add_special_tokens=False)["input_ids"]
    args = _padded_batch([[1], [1]], [ids, ids[:2]])[:4]
    plain, decoded = (batch_to_groups(*args, torch.ones(2), 2, tokenizer=tok)[0].rollouts[0]
                      for tok in (None, tiny.tokenizer))
    assert plain.completion_text == "" and plain.offsets is None
    assert decoded.completion_text == " 12 then 7" and len(decoded.offsets) == len(ids)


# ---- capabilities decide what the trainer captures ----------------------------------------

@pytest.mark.parametrize("layer", [-1, -2, -3, 0, 1, 2])
def test_capture_takes_the_requested_layer(layer):
    from trl.trainer.utils import add_fused_lm_head

    from hista.models.capture import capture_logprob_pass
    from hista.models.loading import build_tiny

    model = build_tiny().model
    ids = torch.randint(0, 500, (2, 9))
    with torch.no_grad():
        ref = model(input_ids=ids, output_hidden_states=True).hidden_states
    add_fused_lm_head(model, outputs=("log_probs", "entropy"))
    with capture_logprob_pass(model, layer=layer) as record, torch.no_grad():
        model(input_ids=ids, labels=ids, fused_lm_head=True)
    hidden, _ = record.rows(2)
    torch.testing.assert_close(hidden, ref[layer], atol=1e-5, rtol=1e-5)
    assert not torch.allclose(ref[layer], ref[(layer + 1) % 3])  # the layers differ: the test can tell
    with pytest.raises(ValueError, match="out of range"), capture_logprob_pass(model, layer=3):
        pass


def test_trainer_hidden_states_come_from_the_estimators_layer(tmp_path, monkeypatch):
    """hista with layer=-2 gets hidden_states[-2] of the log-prob pass, not the last layer."""
    from hista.models.loading import build_tiny
    from hista.train.trainer import HistaGRPOTrainer

    seen = []
    original = HistaGRPOTrainer.batch_advantages

    def spy(self, out, hidden, problem_ids=None):
        ids = torch.cat([out["prompt_ids"], out["completion_ids"]], dim=1)
        mask = torch.cat([out["prompt_mask"], out["completion_mask"]], dim=1)
        with torch.no_grad():
            ref = self.model(input_ids=ids, attention_mask=mask, output_hidden_states=True).hidden_states
        seen.append((hidden, ref[-2], ref[-1], mask.bool()))
        return original(self, out, hidden, problem_ids)

    monkeypatch.setattr(HistaGRPOTrainer, "batch_advantages", spy)
    lm = build_tiny()
    trainer = HistaGRPOTrainer(model=lm.model, reward_funcs=[_parity_reward], train_dataset=_dataset(),
                               processing_class=lm.tokenizer, args=_config(tmp_path, "layer"),
                               advantage_estimator={"name": "hista", "layer": -2}, loss={"name": "dapo"})
    trainer.train()
    (hidden, want, last, mask), = seen
    torch.testing.assert_close(hidden[mask], want[mask], atol=1e-4, rtol=1e-4)
    assert not torch.allclose(hidden[mask], last[mask], atol=1e-2)


def test_trainer_keys_value_tables_by_problem_not_batch_slot(tmp_path):
    """numca with persist=True (its reference profile): two steps in which two problems swap
    batch slots; each problem's table holds its own rollouts of both steps."""
    from hista.models.loading import build_tiny
    from hista.train.trainer import HistaGRPOTrainer

    tiny = build_tiny()
    trainer = HistaGRPOTrainer(model=tiny.model, reward_funcs=[_parity_reward], train_dataset=_dataset(),
                               processing_class=tiny.tokenizer, args=_config(tmp_path, "keys"),
                               advantage_estimator={"name": "numca", "profile": "reference"}, loss={"name": "dapo"})
    encode = lambda text: tiny.tokenizer(text, add_special_tokens=False)["input_ids"]  # noqa: E731
    text = {"A": [" 1 and 2", " 1 and 3", " 4", " 1"], "B": [" 7 and 8", " 9", " 7", " 7 and 8"]}
    rewards = {"A": [1.0, 0.0, 1.0, 0.0], "B": [0.0, 0.0, 1.0, 1.0]}
    for order in (["A", "B"], ["B", "A"]):
        rows = [(p, k) for p in order for k in range(4)]
        prompt_ids, prompt_mask, completion_ids, completion_mask, _ = _padded_batch(
            [encode(f"problem {p}") for p, _ in rows], [encode(text[p][k]) for p, k in rows])
        out = {"prompt_ids": prompt_ids, "prompt_mask": prompt_mask, "completion_ids": completion_ids,
               "completion_mask": completion_mask}
        trainer.batch_rewards = torch.tensor([rewards[p][k] for p, k in rows])
        trainer.batch_advantages(out, None, [f"problem-{p}" for p, _ in rows])
    tables = trainer.estimator.tables
    assert set(tables) == {"problem-A", "problem-B"}
    for p in ("A", "B"):  # the empty state: 4 rollouts per step, 2 steps, this problem's rewards only
        assert tables[f"problem-{p}"].stats[frozenset()] == [8.0, 2 * sum(rewards[p])]


def test_hista_works_without_trl(tmp_path):
    """TRL is the trl extra: without it hista imports (estimators, losses, SVEB, evaluation) and
    hista train exits 2 saying how to install it."""
    import subprocess
    import sys

    script = tmp_path / "notrl.py"
    script.write_text("import sys\nsys.modules['trl'] = None  # as if TRL were not installed\n"
                      "import hista.estimators, hista.losses, hista.sveb, hista.evaluation, hista.train\n"
                      "from hista.cli import main\nsys.exit(main(sys.argv[1:]))\n")
    proc = subprocess.run([sys.executable, str(script), "train", str(SMOKE), "--dry-run"], capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 2 and "pip install 'hista[trl]'" in proc.stderr and "Traceback" not in proc.stderr


def test_evaluation_during_training_on_two_processes(tmp_path):
    """hista train under torch.distributed.run with 2 CPU processes (gloo) and an eval section:
    the main process evaluates (each step's evaluation printed once), both finish, and
    metrics.jsonl has the evaluations of steps 0, 1 and 2."""
    import socket
    import subprocess
    import sys

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    out = tmp_path / "run"
    proc = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_port", str(port),
         "-m", "hista.cli", "train", str(SMOKE), "model=tiny", f"output_dir={out}", "world_size=2",
         "trl.max_steps=2", "trl.max_completion_length=8", "trl.per_device_train_batch_size=8", "trl.save_steps=2",
         "trl.use_cpu=true", "eval.suites=builtin:arith?steps=1", "eval.every=1", "eval.limit=4",
         "eval.max_new_tokens=6"], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.count("trained 2 steps") == 2
    assert [proc.stdout.count(f"eval at step {n} ") for n in range(3)] == [1, 1, 1]
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [0, 1, 2]
    assert all("eval/builtin:arith?steps=1/avg@1" in r for r in rows)
    assert sorted(p.name for p in (out / "eval").glob("*.json")) == ["step-0.json", "step-1.json", "step-2.json"]


# ---- resume (issue 29) --------------------------------------------------------------------

RESUME_ARGS = ["model=tiny", "trl.max_completion_length=8", "trl.save_steps=1"]


def _files(out: Path) -> dict:
    return {str(p.relative_to(out)): p.read_bytes() for p in sorted(out.rglob("*")) if p.is_file()}


def _steps(out: Path) -> list[int]:
    return [json.loads(line)["step"] for line in (out / "metrics.jsonl").read_text().splitlines()]


def test_resume_at_max_steps_trains_nothing_and_writes_nothing(tmp_path, capsys):
    out = tmp_path / "run"
    args = ["train", str(SMOKE), f"output_dir={out}", *RESUME_ARGS, "trl.max_steps=2"]
    assert main(args) == 0
    before = _files(out)
    capsys.readouterr()
    assert main(args + ["resume=true"]) == 0
    assert "nothing to train" in capsys.readouterr().out
    assert _files(out) == before and not (out / "checkpoint-3").exists()
    # a final model cut short after the last checkpoint is made whole again from it, without training
    (out / "final" / "model.safetensors").write_bytes(b"cut")
    assert main(args + ["resume=true"]) == 0
    assert "wrote" in capsys.readouterr().out and _steps(out) == [1, 2]
    from hista.models import load

    assert load(str(out / "final"), device="cpu").model is not None


@pytest.mark.parametrize("damage", ["config and weights only", "truncated model.safetensors",
                                    "corrupt trainer_state.json"])
def test_resume_skips_a_checkpoint_cut_short_and_names_it(tmp_path, capsys, damage):
    out = tmp_path / "run"
    args = ["train", str(SMOKE), f"output_dir={out}", *RESUME_ARGS, "trl.max_steps=3"]
    assert main(args) == 0
    cut = out / "checkpoint-3"
    (cut / "hista-checkpoint.json").unlink()  # as a kill during the save leaves it: no marker yet
    if damage == "config and weights only":
        for file in cut.iterdir():
            if file.name not in ("config.json", "model.safetensors"):
                file.unlink()
    elif damage == "truncated model.safetensors":
        weights = cut / "model.safetensors"
        weights.write_bytes(weights.read_bytes()[:1000])
    else:
        (cut / "trainer_state.json").write_text('{"global_step": 3, "log_hist')
    capsys.readouterr()
    assert main(args + ["resume=true"]) == 0
    printed = capsys.readouterr().out
    assert f"resume: skipping {cut}" in printed and "resumed from" in printed and "checkpoint-2" in printed
    assert _steps(out) == [1, 2, 3] and (cut / "hista-checkpoint.json").is_file()


def test_overrides_may_follow_the_options(tmp_path, capsys):
    """``hista train RECIPE --dry-run key=value``, as users type it (issue 29, item 18)."""
    assert main(["train", str(SMOKE), "--dry-run", "trl.max_steps=3", f"output_dir={tmp_path / 'r'}"]) == 0
    assert "dry run" in capsys.readouterr().out
    with pytest.raises(SystemExit):
        main(["train", str(SMOKE), "--dry-run", "--no-such-option"])


def test_a_run_killed_anywhere_resumes_to_its_end(tmp_path):
    """Kill-anywhere (issue 29): 10 runs of 4 steps on the tiny model, each killed (SIGKILL) at a
    random moment, from start-up to after its end; each resumed with resume=true ends at
    trl.max_steps with one metrics row per step and a final model that loads. The kills need
    processes of their own; the resumes run in this process (issue 66: ten interpreter starts
    fewer)."""
    import os
    import random
    import signal
    import subprocess
    import sys
    import time

    from hista.models import load

    rng = random.Random(29)

    def command(out: Path, *extra: str) -> list[str]:
        return [sys.executable, "-m", "hista.cli", "train", str(SMOKE), f"output_dir={out}", *RESUME_ARGS,
                "trl.max_steps=4", "trl.per_device_train_batch_size=8", *extra]

    outs = [tmp_path / f"run{k}" for k in range(10)]
    for pair in (outs[k:k + 2] for k in range(0, 10, 2)):  # two at a time: CI has two cores
        running = [(out, subprocess.Popen(command(out), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                          env={**os.environ, "OMP_NUM_THREADS": "1"}),
                    time.time() + rng.uniform(2.0, 12.0)) for out in pair]
        while any(proc.poll() is None for _, proc, _ in running):
            for _, proc, at in running:
                if proc.poll() is None and time.time() >= at:
                    proc.send_signal(signal.SIGKILL)
            time.sleep(0.01)
        for out in pair:
            assert main(command(out, "resume=true")[3:]) == 0
            assert _steps(out) == [1, 2, 3, 4], out
            assert load(str(out / "final"), device="cpu").model is not None


# ---- rollouts from hista's engine (hista.train.rollouts) ------------------------------------

def _engine_trainer(tmp_path, name, estimator="grpo", **kw):
    from hista.models.loading import build_tiny
    from hista.train.trainer import HistaGRPOTrainer

    lm = build_tiny()
    return HistaGRPOTrainer(model=lm.model, reward_funcs=[_parity_reward], train_dataset=_dataset(),
                            processing_class=lm.tokenizer, args=_config(tmp_path, name, **kw),
                            advantage_estimator={"name": estimator}, loss={"name": "dapo"})


def test_engine_rollouts_pose_prompts_as_trl_and_give_forward_logprobs(tmp_path):
    """The engine is the default on one process without vLLM. Its rollouts start from the
    prompt ids TRL's own chat templating gives, stop at an EOS or max_completion_length, and
    their log-probs equal a fresh forward pass's log_softmax(logits / T) within 1e-4."""
    trainer = _engine_trainer(tmp_path, "e", max_completion_length=12, temperature=0.8)
    assert trainer.engine_rollouts and trainer.rollout_source == "hista's engine"
    prompts = [row["prompt"] for row in _dataset(3) for _ in range(4)]
    out = trainer.rollout_func(prompts, trainer)
    assert out["prompt_ids"] == [list(ids) for ids in trainer._tokenize_prompts(prompts)[0]]
    assert len(out["completion_ids"]) == len(prompts)
    eos = set(trainer.eos_token_ids)
    model = trainer.model
    for prompt, completion, logps in zip(out["prompt_ids"], out["completion_ids"], out["logprobs"]):
        assert 1 <= len(completion) <= 12 and len(logps) == len(completion)
        assert len(completion) == 12 or completion[-1] in eos
        assert not eos & set(completion[:-1])
        with torch.no_grad():
            logits = model(input_ids=torch.tensor([prompt + completion])).logits[0].float() / 0.8
        fresh = torch.log_softmax(logits[len(prompt) - 1: -1], -1).gather(-1, torch.tensor(completion)[:, None])[:, 0]
        torch.testing.assert_close(torch.tensor(logps), fresh, atol=1e-4, rtol=0)
    assert len({tuple(c) for c in out["completion_ids"]}) > 1  # rows of one prompt are sampled apart


def test_engine_rollouts_draw_the_first_token_from_softmax_over_temperature(tmp_path):
    """2,000 rows of one prompt, one token each, at the trainer's temperature and top-p: the
    first tokens follow softmax(logits / T) after top-p (chi-square over 4 bins of tokens ranked
    by probability, below the 0.1% critical value for 3 degrees of freedom, 16.27; seeds fixed)."""
    from transformers.generation.logits_process import TopPLogitsWarper

    trainer = _engine_trainer(tmp_path, "d", max_completion_length=1, temperature=0.3, top_p=0.9)
    prompt = _dataset(1)[0]["prompt"]
    n = 2000
    out = trainer.rollout_func([prompt] * n, trainer)
    ids = out["prompt_ids"][0]
    with torch.no_grad():
        logits = trainer.model(input_ids=torch.tensor([ids])).logits[0, -1].float() / 0.3
    probs = torch.softmax(TopPLogitsWarper(0.9)(None, logits[None])[0], -1).double()
    draws = torch.tensor([c[0] for c in out["completion_ids"]])
    assert bool((probs[draws] > 0).all())
    rank = torch.empty_like(probs, dtype=torch.long)
    rank[probs.argsort(descending=True)] = torch.arange(probs.numel())
    chi2, edges = 0.0, [0, 1, 3, 10, probs.numel()]
    for lo, hi in zip(edges, edges[1:]):
        expected = float(probs[(rank >= lo) & (rank < hi)].sum()) * n
        observed = int(((rank[draws] >= lo) & (rank[draws] < hi)).sum())
        if expected > 1e-9:
            chi2 += (observed - expected) ** 2 / expected
        else:
            assert observed == 0
    assert chi2 < 16.27, chi2


def test_engine_rollouts_train_reproducibly_and_log_their_logprob_gap(tmp_path):
    """Two runs from the same seed sample the same rollouts and end with the same weights; a
    step's rows are seeded by (seed, step, row), so steps draw apart. With Hista, whose hidden
    states come from an old-log-prob pass, the gap between the engine's log-probs and that
    pass's is logged and below 1e-4."""
    runs = []
    for k in range(2):
        trainer = _engine_trainer(tmp_path, f"r{k}", estimator="hista", max_steps=2, max_completion_length=10)
        trainer.train()
        runs.append(trainer)
    for a, b in zip(runs[0].model.state_dict().values(), runs[1].model.state_dict().values()):
        assert torch.equal(a, b)
    logs = [row for row in runs[0].state.log_history if "loss" in row]
    assert len(logs) == 2 and all(0 <= row["rollout/logprob_gap"] < 1e-4 for row in logs)
    assert logs[0]["advantages/abs_max"] > 0
    rollouts = runs[0].rollout_func
    assert rollouts.seeds(0, 4) == rollouts.seeds(0, 4) and rollouts.seeds(0, 4) != rollouts.seeds(1, 4)


def test_who_samples_the_rollouts():
    """rollout_engine=auto takes hista's engine where it can serve the run and TRL's generation
    otherwise, saying why; hista where it cannot is an error; trl always keeps TRL's."""
    from types import SimpleNamespace

    from hista.train.rollouts import choose

    plain = SimpleNamespace(use_vllm=False, top_k=0, min_p=None, repetition_penalty=1.0, generation_kwargs=None)
    assert choose("auto", plain, 1) == (True, "hista's engine")
    assert choose("trl", plain, 1)[0] is False
    for args, processes, needle in ((SimpleNamespace(**{**vars(plain), "use_vllm": True}), 1, "use_vllm"),
                                    (plain, 2, "2 processes"),
                                    (SimpleNamespace(**{**vars(plain), "top_k": 50}), 1, "trl.top_k=50"),
                                    (SimpleNamespace(**{**vars(plain), "repetition_penalty": 1.1}), 1,
                                     "repetition_penalty")):
        use, why = choose("auto", args, processes)
        assert not use and needle in why
        with pytest.raises(ValueError, match=needle):
            choose("hista", args, processes)
    assert "tools" in choose("auto", plain, 1, tools=True)[1]


# ---- exact resume past an epoch (issue 41, item 4) -------------------------------------------

def recording_trainer(folder: Path, estimator: Optional[dict] = None, **config):
    """The probe (or ``estimator``) on the tiny model for 6 steps into ``folder``: 8 problems,
    2 prompts × 2 rollouts a step (an epoch is 4 steps), rewards that vary (the weights move), a
    checkpoint every step; ``config``: more GRPOConfig fields. Returns it and what it draws:
    step -> (prompts, completion ids). tests/helpers/probe_run.py trains it in a process of its
    own."""
    from hista.models.loading import build_tiny
    from hista.train.trainer import HistaGRPOTrainer

    lm = build_tiny()
    trainer = HistaGRPOTrainer(
        model=lm.model, reward_funcs=[_parity_reward], train_dataset=_dataset(8), processing_class=lm.tokenizer,
        args=_config(folder.parent, folder.name, **{**dict(per_device_train_batch_size=4, num_generations=2,
                                                           max_steps=6, save_strategy="steps", save_steps=1),
                                                    **config}),
        advantage_estimator=estimator or {"name": "probe"}, loss={"name": "dapo"})
    drawn, engine = {}, trainer.rollout_func

    def record(prompts, trainer):
        out = engine(prompts, trainer)
        drawn[trainer.state.global_step] = ([p[-1]["content"] for p in prompts], out["completion_ids"])
        return out

    trainer.rollout_func = record
    return trainer, drawn


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory):
    """The recording trainer's run of 6 steps, uninterrupted: (trainer, what it drew)."""
    trainer, drawn = recording_trainer(tmp_path_factory.mktemp("uninterrupted") / "full")
    trainer.train()
    return trainer, drawn


def _resumed_like(uninterrupted, folder: Path, checkpoint: int, estimator: Optional[dict] = None, **config):
    """Resume the recording trainer in ``folder`` from ``checkpoint-N``: it draws a batch at the
    steps the uninterrupted run drew one after that checkpoint, each with the prompts and
    completions that run drew, and it ends with that run's weights and estimator state (the
    probe's history), bit for bit. Returns the resumed trainer."""
    full, expected = uninterrupted
    resumed, drawn = recording_trainer(folder, estimator, **config)
    resumed.train(resume_from_checkpoint=str(folder / f"checkpoint-{checkpoint}"))
    assert sorted(drawn) == [step for step in sorted(expected) if step >= checkpoint]
    for step in drawn:
        assert drawn[step] == expected[step], step
    for a, b in zip(full.model.state_dict().values(), resumed.model.state_dict().values()):
        assert torch.equal(a, b)
    _same_state(full.estimator.state_dict(), resumed.estimator.state_dict())
    return resumed


def _same_state(a, b) -> None:
    """``a`` and ``b``, estimator states of nested dicts, lists, tensors and numbers, are equal
    bit for bit."""
    assert type(a) is type(b)
    if isinstance(a, dict):
        assert a.keys() == b.keys()
        for key in a:
            _same_state(a[key], b[key])
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b)
        for x, y in zip(a, b):
            _same_state(x, y)
    elif torch.is_tensor(a):
        assert torch.equal(a, b)
    else:
        assert a == b


@pytest.mark.xdist_group("train-uninterrupted")  # these tests share one module fixture each
@pytest.mark.parametrize("checkpoint", [4, 5])
def test_a_resume_past_an_epoch_draws_what_an_uninterrupted_run_drew(uninterrupted, tmp_path, checkpoint):
    """Issue 41, item 4: 6 steps, an epoch of 4; resumed from checkpoint-4 (the epoch boundary) or
    checkpoint-5 (inside epoch 2) of a copy of the run, each later step draws what the
    uninterrupted run drew and the run ends as it did (epoch 2 used to replay epoch 1's prompt
    order, and the probe's history followed)."""
    import shutil

    full, expected = uninterrupted
    assert [expected[s][0] for s in (4, 5)] != [expected[s][0] for s in (0, 1)]  # epoch 2 is reshuffled
    shutil.copytree(Path(full.args.output_dir), tmp_path / "run")
    for step in range(checkpoint + 1, 7):
        shutil.rmtree(tmp_path / "run" / f"checkpoint-{step}")
    _resumed_like(uninterrupted, tmp_path / "run", checkpoint)


@pytest.mark.xdist_group("train-uninterrupted")
def test_a_run_killed_past_an_epoch_resumes_to_what_it_would_have_drawn(uninterrupted, tmp_path):
    """Issue 41, item 4: the same run in a process of its own (tests/helpers/probe_run.py), killed
    (SIGKILL) in the step after checkpoint-4, resumes from its newest complete checkpoint to what
    the uninterrupted run drew and ends as it did."""
    import signal
    import subprocess
    import sys
    import time

    from hista.train.checkpoints import scan

    out = tmp_path / "killed"
    run = subprocess.Popen([sys.executable, str(ROOT / "tests" / "helpers" / "probe_run.py"), str(out)],
                           stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    while not (out / "checkpoint-4" / "hista-checkpoint.json").exists() and run.poll() is None:
        time.sleep(0.01)
    run.send_signal(signal.SIGKILL)
    assert run.wait() == -signal.SIGKILL, run.stderr.read()[-2000:]
    complete, _ = scan(out, ("estimator-0.pt",))
    assert complete[-1][0] in (4, 5)
    _resumed_like(uninterrupted, out, complete[-1][0])


def test_the_prompt_order_of_an_epoch_is_trls_computed_from_seed_and_epoch():
    """Epoch e draws the (e + 1)-th permutation of a generator seeded with the run's seed (TRL's
    order in an uninterrupted run), computed from (seed, e) alone; set_epoch picks it."""
    from trl.trainer.utils import RepeatSampler

    from hista.train.sampler import EpochSampler, epoch_order

    data = list(range(7))
    trl_sampler = RepeatSampler(data, mini_repeat_count=2, batch_size=3, repeat_count=2, seed=5)
    ours = EpochSampler(data, mini_repeat_count=2, batch_size=3, repeat_count=2, seed=5)
    for epoch in range(3):
        ours.set_epoch(epoch)
        assert list(ours) == list(trl_sampler)
    ours.set_epoch(1)
    first = list(ours)
    assert first[:12] == [i for i in epoch_order(7, 5, 1)[:3] for i in (i, i)] * 2 and list(ours) == first


def test_a_checkpoint_cut_short_before_its_estimator_state_is_skipped(tmp_path):
    """Issue 41, item 5: a checkpoint without the marker whose ``trainer_state.json`` names its
    step but which lacks the probe's ``estimator-0.pt`` (or holds a cut ``critic/optimizer.pt``)
    was cut short (killed between TRL's files and hista's state): it is incomplete, not resumed
    with an empty history."""
    from hista.train.checkpoints import problem, scan
    from hista.train.run import state_files

    folder = tmp_path / "checkpoint-3"
    folder.mkdir()
    (folder / "trainer_state.json").write_text('{"global_step": 3}')
    assert problem(folder) is None  # a run whose estimator keeps no state
    assert "no estimator-0.pt" in problem(folder, ("estimator-0.pt",))
    assert scan(tmp_path, ("estimator-0.pt",))[0] == []
    torch.save({"history": []}, folder / "estimator-0.pt")
    assert problem(folder, ("estimator-0.pt",)) is None
    # the critic's folder: its optimiser state is written last, so a missing or cut one means a cut save
    critic = ("critic/optimizer.pt",)
    assert "no critic/optimizer.pt" in problem(folder, critic)
    (folder / "critic").mkdir()
    (folder / "critic" / "optimizer.pt").write_bytes(b"PK\x03\x04 cut short")
    assert "critic/optimizer.pt is cut short" in problem(folder, critic)
    torch.save({}, folder / "critic" / "optimizer.pt")
    assert problem(folder, critic) is None
    assert state_files(load_recipe(SMOKE, ["advantage_estimator.name=critic"])) == critic
    assert state_files(load_recipe(SMOKE, ["advantage_estimator.name=probe"])) == ("estimator-0.pt",)


# ---- exact resume inside a generation batch (issue 41, item 4) --------------------------------

@pytest.fixture(scope="module")
def uninterrupted_reused(tmp_path_factory):
    """The recording trainer with ``num_iterations=2`` (each generation batch trains two
    optimiser steps: batches are drawn at steps 0, 2 and 4), uninterrupted."""
    trainer, drawn = recording_trainer(tmp_path_factory.mktemp("reused") / "full", num_iterations=2)
    trainer.train()
    return trainer, drawn


@pytest.mark.xdist_group("train-uninterrupted")
def test_a_resume_inside_a_generation_batch_draws_what_an_uninterrupted_run_drew(uninterrupted_reused, tmp_path):
    """Issue 41, item 4: with ``num_iterations=2``, checkpoint-3 falls inside the batch drawn at
    step 2; resumed from it, the run trains step 3 on that batch (from the checkpoint, not drawn
    again), draws step 4's batch as the uninterrupted run did, and ends with its weights and
    probe history (TRL's buffered batch and micro-step counter were not saved: the resumed run
    drew a batch at steps 3 and 5, matching none)."""
    import shutil

    full, expected = uninterrupted_reused
    assert sorted(expected) == [0, 2, 4]
    shutil.copytree(Path(full.args.output_dir), tmp_path / "run")
    for step in range(4, 7):
        shutil.rmtree(tmp_path / "run" / f"checkpoint-{step}")
    _resumed_like(uninterrupted_reused, tmp_path / "run", 3, num_iterations=2)


@pytest.mark.xdist_group("train-uninterrupted")
def test_a_checkpoint_of_an_earlier_hista_inside_a_generation_batch_draws_it_again(uninterrupted_reused, tmp_path,
                                                                                   capsys):
    """A checkpoint written before hista kept the generation state (no generation-0.pt, a marker
    without ``generation``) still resumes: the batch it falls inside is drawn again (said on the
    console), and the next one at the step the uninterrupted run drew it, with its prompts (TRL's
    counter used to restart at 0, shifting every later batch by one step)."""
    import json
    import shutil

    full, expected = uninterrupted_reused
    run = tmp_path / "run"
    shutil.copytree(Path(full.args.output_dir), run)
    for step in range(4, 7):
        shutil.rmtree(run / f"checkpoint-{step}")
    (run / "checkpoint-3" / "generation-0.pt").unlink()
    (run / "checkpoint-3" / "hista-checkpoint.json").write_text(json.dumps({"step": 3}))
    resumed, drawn = recording_trainer(run, num_iterations=2)
    resumed.train(resume_from_checkpoint=str(run / "checkpoint-3"))
    assert "holds no generation batch (written by an earlier hista)" in capsys.readouterr().out
    assert sorted(drawn) == [3, 4] and drawn[4][0] == expected[4][0]


# ---- exact resume of an estimator that keeps state across steps (issue 41, item 4) ------------

@pytest.mark.parametrize("estimator", [{"name": "numca", "persist": True}, {"name": "numca", "profile": "reference"},
                                       {"name": "critic"}], ids=["numca-persist", "numca-reference", "critic"])
def test_an_estimator_that_keeps_state_resumes_to_what_an_uninterrupted_run_drew(tmp_path, estimator):
    """Issue 41, item 4: Numca with ``persist=True`` (its reference profile's default: value
    tables per prompt kept across steps) and the PPO baseline's critic (trained alongside the
    policy), resumed from the epoch boundary of the recording run, where every prompt comes
    back: each later step draws what the uninterrupted run drew, and the run ends with its
    weights and estimator state (Numca's tables were not checkpointed: the resumed run's
    advantages started from empty tables)."""
    import shutil

    full, expected = recording_trainer(tmp_path / "full", estimator)
    full.train()
    shutil.copytree(tmp_path / "full", tmp_path / "run")
    for step in (5, 6):
        shutil.rmtree(tmp_path / "run" / f"checkpoint-{step}")
    resumed = _resumed_like((full, expected), tmp_path / "run", 4, estimator)
    if estimator["name"] == "numca":
        assert len(full.estimator.tables) == 8  # every prompt's table is kept
    else:
        for a, b in zip(full.critic.model.state_dict().values(), resumed.critic.model.state_dict().values()):
            assert torch.equal(a, b)


# ---- prompts that do not fit the context (issue 41, item 5) ------------------------------------

def test_train_checks_the_prompts_as_the_trainer_poses_them(tmp_path, capsys):
    """``hista train`` checks each prompt's length as TRL poses it for sampling
    (:func:`hista.train.rollouts.pose`: the ids hista's engine samples from); a dry run whose
    problems would need a download says that the run checks them
    (tests/reliability/bad_inputs_engines_and_lengths.py: the refusals)."""
    from hista.train.rollouts import pose

    trainer = _engine_trainer(tmp_path, "pose", max_completion_length=4)
    prompts = [row["prompt"] for row in _dataset(3)]
    assert pose(trainer.processing_class, prompts) == trainer.rollout_func(prompts, trainer)["prompt_ids"]
    assert main(["train", str(SMOKE), "model=tiny", "tasks=hf:gsm8k", f"output_dir={tmp_path / 'r'}",
                 "--dry-run"]) == 0
    assert "a dry run does not load the problems of hf:gsm8k: the run checks" in capsys.readouterr().out


@pytest.mark.parametrize("estimator", ["grpo", "hista", "numca", "probe"])
def test_overlong_filtering_leaves_truncated_rollouts_out_of_the_loss(tmp_path, estimator):
    """DAPO's overlong filtering (TRL's mask_truncated_completions): a rollout cut at the cap
    reaches the estimator as an empty completion and gets no gradient; the step still trains."""
    from hista.models.loading import build_tiny
    from hista.train.trainer import HistaGRPOTrainer

    lm = build_tiny()
    trainer = HistaGRPOTrainer(model=lm.model, reward_funcs=[_parity_reward], train_dataset=_dataset(),
                               processing_class=lm.tokenizer,
                               args=_config(tmp_path, estimator, mask_truncated_completions=True,
                                            max_completion_length=4),
                               advantage_estimator={"name": estimator}, loss={"name": "dapo"})
    seen = []
    original = trainer.batch_advantages

    def spy(out, hidden, problem_ids=None):
        advantages = original(out, hidden, problem_ids)
        seen.append((out["completion_mask"].clone(), advantages))
        return advantages

    trainer.batch_advantages = spy
    trainer.train()
    mask, advantages = seen[0]
    truncated = mask.sum(dim=1) == 0
    assert truncated.any()  # 4 tokens: most tiny-model rollouts are cut
    assert (advantages[truncated] == 0).all()
    assert torch.isfinite(torch.tensor(trainer.state.log_history[0]["loss"]))
