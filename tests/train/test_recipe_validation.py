"""Recipe validation (SPEC §9): every bad value is an InputError located by file, line and
dotted field, and a dry run refuses what a run would refuse; a run that fails before it starts
leaves an earlier run's files as they were."""

import importlib.util
import json
import os
from pathlib import Path

import pytest
import torch
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hista.cli import main
from hista.errors import InputError
from hista.train import Recipe, load_recipe
from hista.train.run import check_output_dir, train

ROOT = Path(__file__).resolve().parents[2]
REAL_RECIPES = sorted(p for p in (ROOT / "recipes").rglob("*.yaml") if p.name not in ("base.yaml", "common.yaml"))
NO_CUDA = not torch.cuda.is_available()

#: a minimal CPU recipe: the tiny model, 1 step of 1 prompt x 4 rollouts, 8 completion tokens
MINIMAL = {
    "model": "tiny",
    "tasks": "builtin:arith?steps=1",
    "problems": "8",
    "seed": "0",
    "output_dir": "{out}",
    "advantage_estimator": {"name": "grpo", "gae_lambda": "1.0"},
    "loss": {"name": "dapo"},
    "trl": {"max_steps": "1", "per_device_train_batch_size": "4", "num_generations": "4",
            "max_completion_length": "8", "save_steps": "1", "learning_rate": "1.0e-4", "bf16": "false",
            "activation_checkpointing": "false"},
}


def render(changes: dict) -> tuple[str, dict[str, int]]:
    """YAML text of MINIMAL with ``changes`` (dotted key -> YAML text, None: drop the key)
    applied, and the line of each dotted key."""
    data = json.loads(json.dumps(MINIMAL))
    for dotted, raw in changes.items():
        *parents, leaf = dotted.split(".")
        node = data
        for part in parents:
            node = node.setdefault(part, {})
        if raw is None:
            node.pop(leaf, None)
        else:
            node[leaf] = raw
    lines, where = [], {}

    def emit(node: dict, indent: str, prefix: str) -> None:
        for key, value in node.items():
            where[prefix + key] = len(lines) + 1
            if isinstance(value, dict):
                lines.append(f"{indent}{key}:")
                emit(value, indent + "  ", f"{prefix}{key}.")
            else:
                lines.append(f"{indent}{key}: {value}")

    emit(data, "", "")
    return "\n".join(lines) + "\n", where


def write_recipe(tmp_path: Path, changes: dict = None, name: str = "r.yaml") -> tuple[Path, dict[str, int]]:
    text, where = render(changes or {})
    path = tmp_path / name
    path.write_text(text.replace("{out}", str(tmp_path / "run")).replace("{tmp}", str(tmp_path)))
    return path, where


@pytest.fixture
def configs(tmp_path):
    """Accelerate configs for the accelerate_config cases."""
    (tmp_path / "four.yaml").write_text("distributed_type: DEEPSPEED\nnum_processes: 4\n")
    (tmp_path / "none.yaml").write_text("distributed_type: DEEPSPEED\n")
    (tmp_path / "latin1.yaml").write_bytes(b"num_processes: 1\n# caf\xe9\n")
    return tmp_path


# (changes, field, needle); the line is the line of the field's key when the recipe writes it
BAD = [
    ({"tasks": "42"}, "tasks", "expected a string or a list of strings, got an integer"),
    ({"tasks": "[]"}, "tasks", "non-empty list"),
    ({"tasks": "[builtin:arith, 3]"}, "tasks", "a list of strings"),
    ({"tasks": "builtin:nope"}, "tasks", "nope"),
    ({"model": "3"}, "model", "expected a string"),
    ({"model": '""'}, "model", "not empty"),
    ({"output_dir": "[a]"}, "output_dir", "expected a string"),
    ({"system_prompt": "[a]"}, "system_prompt", "expected a string"),
    ({"split": "dev"}, "split", "train, test, validation"),
    ({"problems": "0"}, "problems", ">= 1"),
    ({"problems": "true"}, "problems", "expected an integer or null, got a boolean"),
    ({"seed": "-1"}, "seed", "[0, 2**32)"),
    ({"seed": '"0"'}, "seed", "expected an integer, got a string"),
    ({"world_size": "0"}, "world_size", "positive"),
    ({"world_size": "true"}, "world_size", "expected an integer"),
    ({"resume": '"no"'}, "resume", "expected true or false, got a string ('no')"),
    ({"resume": "1"}, "resume", "expected true or false, got an integer"),
    ({"bogus": "1"}, "bogus", "unknown key"),
    ({"accelerate_config": "3"}, "accelerate_config", "expected a string or null"),
    ({"accelerate_config": "{tmp}/missing.yaml"}, "accelerate_config", "is not a file"),
    ({"accelerate_config": "{tmp}/none.yaml"}, "accelerate_config", "num_processes"),
    ({"accelerate_config": "{tmp}/latin1.yaml"}, "accelerate_config", "not UTF-8"),
    ({"accelerate_config": "{tmp}/four.yaml"}, "world_size", "launches 4 processes"),
    ({"advantage_estimator.gae_lambda": '"x"'}, "advantage_estimator.gae_lambda", "expected a number, got a string"),
    ({"advantage_estimator.gae_lambda": "1.5"}, "advantage_estimator.gae_lambda", "[0, 1]"),
    ({"advantage_estimator.scale": "std"}, "advantage_estimator.scale", "group, batch, none"),
    ({"advantage_estimator.name": "hista", "advantage_estimator.alpha": "x"}, "advantage_estimator.alpha",
     "expected a number"),
    ({"advantage_estimator.name": "critic9"}, "advantage_estimator", "critic9"),
    ({"loss.eps_low": '"a"'}, "loss.eps_low", "expected a number, got a string"),
    ({"loss.eps_low": "-0.1"}, "loss", "eps_low"),
    ({"loss.name": "nope"}, "loss.name", "unknown loss"),
    ({"loss": "5"}, "loss", "must be a mapping"),
    ({"trl": "[1]"}, "trl", "must be a mapping"),
    ({"trl.per_device_train_batch_size": '"8"'}, "trl.per_device_train_batch_size",
     "expected an integer, got a string ('8')"),
    ({"trl.max_steps": "-3"}, "trl.max_steps", "-1"),
    ({"trl.max_steps": "2.5"}, "trl.max_steps", "expected an integer"),
    ({"trl.max_steps": "true"}, "trl.max_steps", "expected an integer, got a boolean"),
    ({"trl.learning_rate": "fast"}, "trl.learning_rate", "expected a number, got a string"),
    ({"trl.learning_rate": "1e-5"}, "trl.learning_rate", "1.0e-5"),
    ({"trl.learning_rate": ".inf"}, "trl.learning_rate", "finite"),
    ({"trl.learning_rate": ".nan"}, "trl.learning_rate", "NaN"),
    ({"trl.temperature": "-1"}, "trl.temperature", "> 0"),
    ({"trl.top_p": "1.5"}, "trl.top_p", "(0, 1]"),
    ({"trl.max_completion_length": "-16"}, "trl.max_completion_length", ">= 1"),
    ({"trl.max_completion_length": "null"}, "trl.max_completion_length", "not null (TRL's default is 512)"),
    ({"trl.num_train_epochs": "0"}, "trl.num_train_epochs", "> 0"),
    ({"trl.gradient_accumulation_steps": "0"}, "trl.gradient_accumulation_steps", ">= 1"),
    ({"trl.steps_per_generation": "0"}, "trl.steps_per_generation", ">= 1"),
    ({"trl.generation_batch_size": "0"}, "trl.generation_batch_size", ">= 1"),
    ({"trl.num_generations": "1"}, "trl.num_generations", "at least 2"),
    ({"trl.num_generations": "3"}, "trl.num_generations", "multiple of num_generations"),
    ({"trl.save_steps": "0"}, "trl.save_steps", "> 0"),
    ({"trl.logging_steps": "0"}, "trl.logging_steps", "> 0"),
    ({"trl.warmup_steps": "-1"}, "trl.warmup_steps", ">= 0"),
    ({"trl.weight_decay": "-0.1"}, "trl.weight_decay", ">= 0"),
    ({"trl.max_grad_norm": "-1"}, "trl.max_grad_norm", ">= 0"),
    ({"trl.bf16": '"yes"'}, "trl.bf16", "expected true or false or null, got a string"),
    ({"trl.fp16": "true", "trl.bf16": "true"}, "trl.fp16", "at most one"),
    ({"trl.report_to": "[1]"}, "trl.report_to", "a list of strings"),
    ({"trl.lr_scheduler_type": "nope"}, "trl.lr_scheduler_type", "SchedulerType"),
    ({"trl.optim": "nope"}, "trl.optim", "OptimizerNames"),
    ({"trl.entropy_coef": "0.1"}, "trl.entropy_coef", "no effect"),
    ({"trl.epsilon": "0.3"}, "trl.epsilon", "loss.eps_low"),
    ({"trl.not_a_field": "1"}, "trl.not_a_field", "not a GRPOConfig field"),
    ({"trl.accelerator_config": "{tmp}/missing.json"}, "trl.accelerator_config", "FileNotFoundError"),
]
#: what this machine cannot run (refused only where it crashes: without CUDA)
BAD_ON_CPU = [
    ({"trl.bf16": "true"}, "trl.bf16", "bf16 needs a CUDA GPU"),
    ({"trl.bf16": "null"}, "trl.bf16", "TRL turns bf16 on"),
    ({"trl.bf16": None}, "trl.bf16", "set trl.bf16: false"),
    ({"trl.tf32": "true"}, "trl.tf32", "tf32"),
]
CASES = BAD + ([] if not NO_CUDA else BAD_ON_CPU)


def test_trl_defaults_are_trl_s():
    """A recipe's TRL setting is its own or GRPOConfig's default: what the batch arithmetic, the
    prompt-length check and `sveb grad --recipe` read is what the run's GRPOConfig holds."""
    from trl import GRPOConfig

    recipe = load_recipe(ROOT / "recipes" / "cpu-smoke.yaml")  # sets some of them, leaves the others to TRL
    config = GRPOConfig(output_dir="unused", report_to="none", use_cpu=True)
    for key in ("per_device_train_batch_size", "gradient_accumulation_steps", "num_generations",
                "max_completion_length", "temperature", "max_grad_norm", "mask_truncated_completions"):
        expected = recipe.trl[key] if key in recipe.trl else getattr(config, key)
        assert recipe.trl_setting(key) == expected, key


def _ids(case):
    return ",".join(f"{k}={v}" for k, v in case[0].items())


@pytest.mark.parametrize("changes, field, needle", CASES, ids=[_ids(c) for c in CASES])
def test_bad_recipe_is_a_located_input_error(tmp_path, configs, changes, field, needle):
    path, where = write_recipe(tmp_path, changes)
    with pytest.raises(InputError) as err:
        load_recipe(path)
    exc = err.value
    assert exc.field == field and needle in exc.message, str(exc)
    assert str(path) in str(exc) and f"field '{field}'" in str(exc)
    if field in where:
        assert exc.line == where[field] and f"{path}:{where[field]}:" in str(exc)


@pytest.mark.parametrize("changes, field, needle", CASES, ids=[_ids(c) for c in CASES])
def test_dry_run_refuses_what_a_run_refuses(tmp_path, configs, capsys, changes, field, needle):
    path, _ = write_recipe(tmp_path, changes)
    assert main(["train", str(path), "--dry-run"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("hista: error: ") and needle in err and "Traceback" not in err


@pytest.mark.parametrize("path", REAL_RECIPES, ids=lambda p: str(p.relative_to(ROOT / "recipes")))
def test_dry_run_accepts_every_shipped_recipe(path, tmp_path, monkeypatch, capsys):
    """GPU recipes too, on a machine without a GPU: their bf16 is checked where they are
    launched (Recipe.is_launch_plan), and the dry run says so in a note."""
    monkeypatch.chdir(ROOT)  # accelerate_config paths are relative to the repository root
    assert main(["train", str(path.relative_to(ROOT)), f"output_dir={tmp_path / 'run'}", "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "dry run: the recipe is valid" in out
    recipe = load_recipe(path.relative_to(ROOT))
    assert recipe.is_launch_plan == ("gpu" in path.parts)
    if NO_CUDA and recipe.trl.get("bf16"):
        assert "note: " in out and "bf16 needs a CUDA GPU" in out


def test_a_launch_plans_other_grpo_settings_are_still_checked(tmp_path, monkeypatch):
    monkeypatch.chdir(ROOT)
    gpu = "recipes/gpu/qwen2.5-1.5b-math/dapo-hista.yaml"
    with pytest.raises(InputError) as err:
        load_recipe(gpu, ["trl.lr_scheduler_type=nope"])
    assert err.value.field == "trl.lr_scheduler_type"


@pytest.mark.skipif(not NO_CUDA, reason="a machine without CUDA")
def test_a_launch_plan_on_this_machine_is_refused_by_the_run_before_the_output_dir(tmp_path, monkeypatch):
    monkeypatch.chdir(ROOT)
    out = tmp_path / "run"
    recipe = load_recipe("recipes/gpu/qwen2.5-1.5b-math/dapo-hista.yaml", [f"output_dir={out}"])
    with pytest.raises(InputError, match="bf16 needs a CUDA GPU") as err:
        train(recipe)
    assert err.value.field == "trl.bf16" and "common.yaml:15:" in str(err.value)
    assert not out.exists()


@pytest.mark.skipif(not NO_CUDA, reason="a machine without CUDA")
def test_bf16_on_the_cpu_is_accepted_where_it_trains():
    """bf16 with use_cpu trains on the CPU (autocast), and fp16 does too: neither is refused."""
    load_recipe(ROOT / "recipes" / "cpu-smoke.yaml", ["trl.bf16=true", "trl.use_cpu=true"])
    load_recipe(ROOT / "recipes" / "cpu-smoke.yaml", ["trl.fp16=true"])


# ---- files, overrides, bases ----------------------------------------------------------------

def test_non_utf8_recipe_names_the_file_and_line(tmp_path):
    path = tmp_path / "r.yaml"
    path.write_bytes(b"model: tiny\ntasks: builtin:arith\nsystem_prompt: caf\xe9\n")
    with pytest.raises(InputError) as err:
        load_recipe(path)
    assert err.value.path == str(path) and err.value.line == 3 and "UTF-8" in err.value.message


@pytest.mark.parametrize("text, needle", [
    ("model: tiny\ntasks: [builtin:arith\n", "not valid YAML"),
    ("- a\n- b\n", "a recipe is a YAML mapping"),
    ("base: [1]\nmodel: tiny\ntasks: builtin:arith\n", "a path to another recipe"),
    ("base: missing.yaml\nmodel: tiny\ntasks: builtin:arith\n", "does not exist"),
    ("base: r.yaml\nmodel: tiny\ntasks: builtin:arith\n", "includes itself"),
])
def test_bad_recipe_files(tmp_path, text, needle):
    path = tmp_path / "r.yaml"
    path.write_text(text)
    with pytest.raises(InputError, match=needle) as err:
        load_recipe(path)
    assert str(path) in str(err.value)


def test_a_directory_is_not_a_recipe(tmp_path):
    with pytest.raises(InputError, match="is a directory, not a regular file"):
        load_recipe(tmp_path)


@pytest.mark.parametrize("override, field, needle", [
    ("trl.max_steps=[", "trl.max_steps", "not valid YAML"),
    ("loss.lam={a", "loss.lam", "not valid YAML"),
    ("model.size=3", "model.size", "model is not a mapping"),
    ("noequals", "noequals", "not key=value"),
    ("resume=no!", "resume", "expected true or false"),
])
def test_bad_overrides_name_the_key(tmp_path, override, field, needle):
    path, _ = write_recipe(tmp_path)
    with pytest.raises(InputError) as err:
        load_recipe(path, [override])
    assert err.value.field == field and needle in str(err.value) and str(path) in str(err.value)


def test_an_override_replaces_the_files_line(tmp_path):
    """An overridden key is no longer where the file writes it: no line for it."""
    path, _ = write_recipe(tmp_path)
    with pytest.raises(InputError) as err:
        load_recipe(path, ["trl.max_steps=-3"])
    assert err.value.line is None and f"{path}: field 'trl.max_steps'" in str(err.value)


def test_an_error_in_a_base_recipe_names_the_base_file_and_line(tmp_path):
    (tmp_path / "common.yaml").write_text("trl:\n  bf16: false\n  temperature: -0.5\n")
    (tmp_path / "top.yaml").write_text("base: common.yaml\nmodel: tiny\ntasks: builtin:arith\n")
    with pytest.raises(InputError) as err:
        load_recipe(tmp_path / "top.yaml")
    assert err.value.field == "trl.temperature" and f"{tmp_path / 'common.yaml'}:3:" in str(err.value)


def test_the_recipe_dataclass_checks_its_fields():
    with pytest.raises(InputError, match="expected true or false") as err:
        Recipe(model="tiny", tasks="builtin:arith", resume="no")
    assert err.value.field == "resume"
    assert Recipe(model="tiny", tasks=["builtin:arith", "builtin:choice"]).resume is False


@pytest.mark.skipif(importlib.util.find_spec("reasoning_gym") is None,
                    reason="the gym extra (pip install 'hista[gym]') brings reasoning-gym")
def test_a_dry_run_draws_the_problems_of_a_gym_task(tmp_path, capsys):
    """Issue 62 (F16): the dry run draws a gym task's ``problems`` problems as the run does, so a
    task whose options allow fewer distinct questions is refused before a run (count_bits with
    max_n=3 has two in the train split)."""
    path, _ = write_recipe(tmp_path, {"tasks": "gym:count_bits?max_n=3", "problems": "2"})
    assert main(["train", str(path), "--dry-run"]) == 0
    path, where = write_recipe(tmp_path, {"tasks": "gym:count_bits?max_n=3", "problems": "3"})
    assert main(["train", str(path), "--dry-run"]) == 2
    assert f"{path}:{where['tasks']}: field 'tasks': gym:count_bits?max_n=3: could not draw problem 2" in \
        capsys.readouterr().err

# ---- the output folder ----------------------------------------------------------------------

def _earlier_run(out: Path) -> dict[str, bytes]:
    """An earlier run's files: metrics, a checkpoint, a final model; returns their bytes."""
    (out / "checkpoint-5").mkdir(parents=True)
    (out / "checkpoint-5" / "trainer_state.json").write_text('{"global_step": 5}')
    (out / "final").mkdir()
    (out / "final" / "config.json").write_text("{}")
    (out / "metrics.jsonl").write_text("".join(json.dumps({"step": s, "reward": 0.5}) + "\n" for s in (1, 2, 3)))
    return _snapshot(out)


def _snapshot(out: Path) -> dict[str, bytes]:
    return {str(p.relative_to(out)): p.read_bytes() for p in sorted(out.rglob("*")) if p.is_file()}


def test_output_dir_that_is_a_file_is_refused(tmp_path, capsys):
    (tmp_path / "run").write_text("not a folder")
    path, _ = write_recipe(tmp_path)
    with pytest.raises(InputError, match="is not a folder") as err:
        check_output_dir(load_recipe(path))
    assert err.value.field == "output_dir" and str(path) in str(err.value)
    assert main(["train", str(path), "--dry-run"]) == 2
    path, _ = write_recipe(tmp_path, {"output_dir": "{tmp}/run/below"}, name="r2.yaml")
    assert main(["train", str(path), "--dry-run"]) == 2
    assert "which is not a folder" in capsys.readouterr().err


def test_an_earlier_run_is_refused_unless_resumed_or_overwritten(tmp_path, capsys):
    out = tmp_path / "run"
    before = _earlier_run(out)
    path, _ = write_recipe(tmp_path)
    assert main(["train", str(path), "--dry-run"]) == 2
    err = capsys.readouterr().err
    assert (f"{out} holds an earlier run (metrics.jsonl, checkpoint-5, final): set resume=true to continue it, "
            "pass --overwrite to replace it, or choose another output_dir") in err
    assert main(["train", str(path), "resume=true", "--dry-run"]) == 0
    assert main(["train", str(path), "--dry-run", "--overwrite"]) == 0
    assert "would start from step 0 and replace the earlier run" in capsys.readouterr().out
    assert main(["train", str(path), "resume=true", "--dry-run", "--overwrite"]) == 2
    assert "choose one" in capsys.readouterr().err
    assert main(["train", str(path)]) == 2  # a real run: refused before it loads anything
    assert _snapshot(out) == before and not (out / "recipe.yaml").exists()


def test_resume_without_a_complete_checkpoint_starts_from_step_0(tmp_path, capsys):
    """Issue 29: a run killed before its first complete checkpoint resumes from step 0 (it said
    so before, and refused); its files are replaced once training starts."""
    out = tmp_path / "run"
    out.mkdir()
    (out / "metrics.jsonl").write_text('{"step": 1}\n')
    (out / "checkpoint-1").mkdir()
    (out / "checkpoint-1" / "config.json").write_text("{}")  # a save cut short: no trainer state, no marker
    path, _ = write_recipe(tmp_path)
    assert main(["train", str(path), "resume=true", "--dry-run"]) == 0
    assert "no complete checkpoint to continue from: the run would start from step 0" in capsys.readouterr().out
    empty, _ = write_recipe(tmp_path, {"output_dir": "{tmp}/empty"}, name="r2.yaml")
    assert main(["train", str(empty), "resume=true", "--dry-run"]) == 0  # nothing there: starts from step 0


def test_a_bad_task_file_leaves_the_earlier_run_untouched(tmp_path):
    """--overwrite, but the JSONL task file is bad by the time the run reads it: the earlier
    run's metrics (and everything else) are byte-identical."""
    out = tmp_path / "run"
    before = _earlier_run(out)
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text('{"problem": "1 + 1 = ?", "answer": "2"}\n')
    path, _ = write_recipe(tmp_path, {"tasks": f"jsonl:{tasks}"})
    recipe = load_recipe(path)
    tasks.write_text('{"problem": "1 + 1 = ?", "answer": "2"}\n{"problem": \n')
    with pytest.raises(InputError) as err:
        train(recipe, overwrite=True)
    assert str(tasks) in str(err.value)
    assert _snapshot(out) == before and not (out / "recipe.yaml").exists()
    assert main(["train", str(path), "--overwrite"]) == 2  # and through the CLI (validation reads it)
    assert _snapshot(out) == before


@pytest.mark.skipif(not NO_CUDA, reason="a machine without CUDA")
def test_bf16_on_a_cpu_rerun_leaves_the_earlier_run_untouched(tmp_path, capsys):
    out = tmp_path / "run"
    before = _earlier_run(out)
    path, _ = write_recipe(tmp_path, {"trl.bf16": "true"})
    assert main(["train", str(path), "--overwrite"]) == 2
    assert "bf16 needs a CUDA GPU" in capsys.readouterr().err
    assert _snapshot(out) == before


def test_a_model_that_fails_to_load_leaves_the_earlier_run_untouched(tmp_path, monkeypatch):
    import hista.train.run as run

    def broken(recipe):
        raise InputError("no such model", field="model")

    monkeypatch.setattr(run, "load_policy", broken)
    out = tmp_path / "run"
    before = _earlier_run(out)
    path, _ = write_recipe(tmp_path)
    with pytest.raises(InputError, match="no such model"):
        train(load_recipe(path), overwrite=True)
    assert _snapshot(out) == before


def test_overwrite_replaces_the_earlier_run_once_training_starts(tmp_path, capsys):
    out = tmp_path / "run"
    _earlier_run(out)
    path, _ = write_recipe(tmp_path)
    assert main(["train", str(path), "--overwrite"]) == 0
    assert "removed metrics.jsonl, checkpoint-5, final" in capsys.readouterr().out
    steps = [json.loads(line)["step"] for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert steps == [1]
    assert sorted(p.name for p in out.glob("checkpoint-*")) == ["checkpoint-1"]
    assert (out / "final" / "config.json").read_text() != "{}"
    assert yaml.safe_load((out / "recipe.yaml").read_text())["model"] == "tiny"



def test_a_readme_the_run_did_not_write_is_refused_and_trls_model_card_is_replaced(tmp_path, capsys):
    """Issue 62 (F14): TRL writes its model card to OUTPUT_DIR/README.md at every checkpoint; a
    README.md there that is not one is a user's file (the folder is likely a project, not a run
    folder) and the run, its dry run too, is refused naming it, before anything is written."""
    from trl.trainer.utils import generate_model_card

    out = tmp_path / "run"
    out.mkdir()
    path, _ = write_recipe(tmp_path)
    for text in ("# My project\n\nnotes\n", "---\ntags: [mine]\n---\n# notes\n", "---\ntags: trl\n---\n"):
        (out / "README.md").write_text(text)
        assert main(["train", str(path), "--dry-run"]) == 2
        err = capsys.readouterr().err
        assert "field 'output_dir'" in err and f"{out / 'README.md'} is not the model card TRL writes there" in err
        assert main(["train", str(path)]) == 2
        assert sorted(p.name for p in out.iterdir()) == ["README.md"] and (out / "README.md").read_text() == text
    generate_model_card(base_model=None, model_name="run", hub_model_id=None, dataset_name=None,
                        tags=["trl", "grpo"], wandb_url=None, trackio_url=None,
                        trainer_name="GRPO").save(out / "README.md")  # an earlier run's card
    assert main(["train", str(path), "--dry-run"]) == 0


@pytest.mark.parametrize("where", ["pool/accuracy.jsonl", "pool.new/t.jsonl", "final/t.jsonl", "eval/t.jsonl",
                                   "checkpoint-3/t.jsonl", "recipe.yaml", "metrics.jsonl"])
@pytest.mark.parametrize("reader", ["tasks", "eval.suites"])
def test_an_input_in_the_run_folder_that_the_run_writes_is_refused(tmp_path, capsys, where, reader):
    """Issue 62 (F15): a task file (of the training tasks or of the evaluation suites) that is a
    file the run writes, or lies in a folder it writes and replaces, is refused before anything
    is written; one elsewhere in the folder is read."""
    out = tmp_path / "run"
    task = out / where
    task.parent.mkdir(parents=True)
    task.write_text('{"problem": "What is 1 + 1?", "answer": "2"}\n')
    changes = {"tasks": f"jsonl:{task}"} if reader == "tasks" else {"eval.suites": f"jsonl:{task}", "eval.every": "1"}
    path, _ = write_recipe(tmp_path, changes)
    assert main(["train", str(path), "--dry-run"]) == 2
    assert str(task) in capsys.readouterr().err
    task.rename(out / "t.jsonl")
    if task.parent != out:
        task.parent.rmdir()  # an empty final/ would be an earlier run
    changes = {key: value.replace(str(task), str(out / "t.jsonl")) for key, value in changes.items()}
    path, _ = write_recipe(tmp_path, changes)
    assert main(["train", str(path), "--dry-run"]) == 0

# ---- fuzzing ----------------------------------------------------------------------------

_SCALARS = (st.none() | st.booleans() | st.integers(-10, 10) | st.integers() | st.floats()
            | st.text(max_size=12) | st.sampled_from(["builtin:arith", "tiny", "grpo", "dapo", "hista", "1e-5",
                                                     "train", "no", "-1", ""]))
_VALUES = st.recursive(_SCALARS, lambda inner: st.lists(inner, max_size=3)
                       | st.dictionaries(st.text(max_size=6), inner, max_size=3), max_leaves=6)
_NEAR = (st.integers(-2, 64) | st.floats(-1.0, 2.0) | st.booleans() | st.none()
         | st.sampled_from(["constant", "linear", "none", "tensorboard", "colocate", "8", "1.0e-5"]))
_TRL_KEYS = ["max_steps", "learning_rate", "temperature", "top_p", "top_k", "max_completion_length",
             "num_train_epochs", "per_device_train_batch_size", "gradient_accumulation_steps", "steps_per_generation",
             "generation_batch_size", "num_generations", "num_iterations", "save_steps", "logging_steps",
             "warmup_steps", "weight_decay", "max_grad_norm", "bf16", "fp16", "lr_scheduler_type", "report_to",
             "use_vllm", "vllm_mode", "epsilon", "entropy_coef", "not_a_field"]
_SECTION = st.dictionaries(st.sampled_from(["name", "gae_lambda", "scale", "alpha", "eps_low", "eps_high", "cap",
                                            "lam", "beta", "aggregation", "profile", "layer"]),
                           st.sampled_from(["grpo", "hista", "numca", "dapo", "strace", "cispo", "group", "none",
                                            "token-mean", "reference"]) | _NEAR | _VALUES, max_size=3)
_TRL = st.fixed_dictionaries({"bf16": st.just(False) | _VALUES},
                             optional={k: _NEAR | _VALUES for k in _TRL_KEYS if k != "bf16"})
_TASKS = st.sampled_from(["builtin:arith?steps=1", "builtin:choice", ["builtin:arith", "builtin:choice"]])
_RECIPES = st.fixed_dictionaries(
    {"model": st.just("tiny") | _VALUES, "tasks": _TASKS | _VALUES, "trl": _TRL | _VALUES},
    optional={"problems": _NEAR | _VALUES, "seed": _NEAR | _VALUES,
              "split": st.sampled_from(["train", "test"]) | _VALUES,
              "resume": _NEAR | _VALUES, "world_size": _NEAR | _VALUES, "system_prompt": _VALUES,
              "output_dir": _VALUES, "accelerate_config": _VALUES, "advantage_estimator": _SECTION | _VALUES,
              "loss": _SECTION | _VALUES})


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(doc=_RECIPES.map(lambda d: yaml.safe_dump(d, allow_unicode=True)) | st.text(max_size=200)
       | st.binary(max_size=80).map(lambda b: b.decode("latin-1")))
def test_any_recipe_text_loads_or_is_an_input_error(tmp_path_factory, doc):
    path = tmp_path_factory.mktemp("fuzz") / "r.yaml"
    path.write_text(doc, encoding="utf-8")
    environ = dict(os.environ)
    try:
        recipe = load_recipe(path)
    except InputError:
        return
    finally:
        os.environ.clear()
        os.environ.update(environ)
    assert isinstance(recipe, Recipe)


@settings(max_examples=50, deadline=None)
@given(data=st.binary(max_size=60))
def test_any_recipe_bytes_load_or_are_an_input_error(tmp_path_factory, data):
    path = tmp_path_factory.mktemp("bytes") / "r.yaml"
    path.write_bytes(data)
    try:
        assert isinstance(load_recipe(path), Recipe)
    except InputError:
        pass
