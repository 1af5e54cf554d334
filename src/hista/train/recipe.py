"""Training recipes: YAML files with ``key=value`` overrides, validated before any model loads
(SPEC §9, §11).

A recipe has these top-level keys (all but ``model`` and ``tasks`` optional)::

    model: smollm2-135m-instruct        # alias, local path or Hugging Face id
    tasks: builtin:arith?steps=1        # a task spec, or a list of them (a mix)
    problems: 64                        # how many problems per source (null: all)
    seed: 0
    output_dir: runs/cpu-smoke
    world_size: 1                       # processes the recipe is laid out for (batch checks)
    advantage_estimator: {name: grpo, gae_lambda: 1.0, scale: group, ...}
    loss: {name: dapo, eps_low: 0.2, eps_high: 0.28, ...}
    trl: {...}                          # any other GRPOConfig field
    accelerate_config: configs/accelerate/zero2.yaml   # how to launch it on many GPUs
    base: ../common.yaml                # optional: start from another recipe (path relative
                                        # to this file); sections merge key by key
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any, Optional, Union

import yaml

from ..errors import InputError
from ..rollout.engine import SYSTEM_PROMPT

#: GRPOConfig fields the recipe sets from its own sections; writing them under ``trl`` would
#: either clash or be ignored, so it is an error that says where they belong.
OWNED = {
    "loss_type": "loss.name", "epsilon": "loss.eps_low", "epsilon_high": "loss.eps_high / loss.cap",
    "beta": "loss.beta", "importance_sampling_level": "loss.name (gspo)", "scale_rewards": "advantage_estimator.scale",
    "top_entropy_quantile": "loss.top_entropy_fraction (strace)", "output_dir": "output_dir (top level)",
    "seed": "seed (top level)",
}
#: TRL's defaults for the fields the batch arithmetic needs.
TRL_DEFAULTS = {"per_device_train_batch_size": 8, "gradient_accumulation_steps": 1, "num_generations": 8}


@dataclasses.dataclass
class Recipe:
    """One training run (SPEC §9): model, data, estimator, loss and TRL settings."""

    model: str
    tasks: Union[str, list]
    problems: Optional[int] = None
    split: str = "train"
    seed: int = 0
    output_dir: str = "runs/train"
    world_size: int = 1
    system_prompt: str = SYSTEM_PROMPT
    resume: bool = False
    accelerate_config: Optional[str] = None
    advantage_estimator: dict = dataclasses.field(default_factory=lambda: {"name": "grpo"})
    loss: dict = dataclasses.field(default_factory=lambda: {"name": "dapo"})
    trl: dict = dataclasses.field(default_factory=dict)
    source: str = "<recipe>"

    def to_dict(self) -> dict:
        out = dataclasses.asdict(self)
        out.pop("source")
        return out

    @property
    def task_specs(self) -> list[str]:
        return [self.tasks] if isinstance(self.tasks, str) else list(self.tasks)

    def estimator_config(self) -> dict:
        """The advantage_estimator section with the scale default filled in: the scaling the
        loss declares (``advantage_scale``: unscaled for Dr. GRPO, SPEC §5; the group std for
        the others)."""
        from ..losses import lookup

        cfg = {"name": "grpo", "gae_lambda": 1.0, **self.advantage_estimator}
        cfg.setdefault("scale", lookup(self.loss.get("name", "dapo")).advantage_scale)
        return cfg

    def batch_layout(self) -> dict:
        """Batch arithmetic of TRL (SPEC §9): rollouts per optimiser step and per generation
        batch, prompts per generation batch. Raises InputError when they do not divide."""
        t = {**TRL_DEFAULTS, **self.trl}
        per_step = t["per_device_train_batch_size"] * t["gradient_accumulation_steps"] * self.world_size
        steps = t.get("steps_per_generation") or t["gradient_accumulation_steps"]
        if t.get("generation_batch_size") is not None:
            if "steps_per_generation" in t:
                raise InputError("set trl.generation_batch_size or trl.steps_per_generation, not both",
                                 field="trl.generation_batch_size")
            gen = t["generation_batch_size"]
        else:
            gen = t["per_device_train_batch_size"] * self.world_size * steps
        g = t["num_generations"]
        if g < 2:
            raise InputError(f"num_generations={g}: a group needs at least 2 rollouts", field="trl.num_generations")
        if gen % g:
            raise InputError(
                f"the generation batch ({gen} rollouts = per_device_train_batch_size "
                f"{t['per_device_train_batch_size']} x world_size {self.world_size} x steps_per_generation {steps}) "
                f"is not a multiple of num_generations ({g})", field="trl.num_generations")
        micro = t["per_device_train_batch_size"] * self.world_size
        if gen % micro:
            raise InputError(f"generation_batch_size {gen} is not a multiple of per_device_train_batch_size x "
                             f"world_size ({micro})", field="trl.generation_batch_size")
        return {"rollouts_per_optimizer_step": per_step, "generation_batch": gen, "prompts_per_generation": gen // g,
                "num_generations": g}

    def grpo_config(self):
        """The TRL GRPOConfig of this recipe (SPEC §9)."""
        from trl import GRPOConfig

        from ..losses import default_config

        loss = {**default_config(self.loss["name"]), **self.loss}
        kwargs = {"output_dir": self.output_dir, "seed": self.seed, "beta": float(loss.get("beta", 0.0)),
                  "logging_steps": 1, "report_to": "none", "save_strategy": "steps", "save_steps": 50,
                  "disable_tqdm": False, **self.trl}
        # TRL reads these to size its own buffers and warnings; the loss itself is hista's.
        kwargs["loss_type"] = "dapo" if loss.get("aggregation") == "token-mean" else "grpo"
        kwargs["epsilon"] = float(loss.get("eps_low", 0.2))
        kwargs["epsilon_high"] = float(loss.get("eps_high", loss.get("cap", 0.2)))
        return GRPOConfig(**kwargs)


def untrainable(estimator, loss) -> Optional[tuple[str, str]]:
    """Why training cannot run this estimator and loss (SPEC §9), as (recipe field, message),
    from what they declare: an estimator that needs Monte-Carlo continuations or a learned model,
    a loss that needs reference log-probs without a KL term (TRL computes them only when beta >
    0). None when it can."""
    if estimator.needs_continuations or estimator.needs_model:
        what = "Monte-Carlo continuations of every state" if estimator.needs_continuations else "a learned model"
        return "advantage_estimator.name", f"estimator {estimator.name!r} needs {what}, which training does not provide"
    if loss.needs_ref_logp and loss.config["beta"] == 0.0:
        return "loss.beta", f"loss {loss.name!r} needs reference log-probs, which TRL computes only when beta > 0"
    return None


def _lines(text: str) -> dict[str, int]:
    """Line (1-based) of each dotted key in a YAML mapping, for error messages."""
    lines: dict[str, int] = {}

    def walk(node, prefix: str) -> None:
        if isinstance(node, yaml.MappingNode):
            for key, value in node.value:
                name = f"{prefix}{key.value}"
                lines[name] = key.start_mark.line + 1
                walk(value, name + ".")

    try:
        walk(yaml.compose(text), "")
    except yaml.YAMLError:
        pass
    return lines


def _set(data: dict, dotted: str, value: Any) -> None:
    parts = dotted.split(".")
    node = data
    for part in parts[:-1]:
        node = node.setdefault(part, {})
        if not isinstance(node, dict):
            raise InputError(f"cannot set {dotted}: {part} is not a mapping", field=dotted)
    node[parts[-1]] = value


def _merge(base: dict, top: dict) -> dict:
    out = dict(base)
    for key, value in top.items():
        out[key] = _merge(out[key], value) if isinstance(value, dict) and isinstance(out.get(key), dict) else value
    return out


def _read(path: Path, seen: tuple = ()) -> tuple[dict, dict[str, int]]:
    """The mapping of one recipe file with its ``base`` chain merged in, and key lines."""
    try:
        text = path.read_text()
    except OSError as exc:
        raise InputError(f"cannot read recipe: {exc.strerror}", path=str(path)) from None
    try:
        data = yaml.safe_load(text) or {}
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        raise InputError(f"not valid YAML: {getattr(exc, 'problem', exc)}", path=str(path),
                         line=None if mark is None else mark.line + 1) from None
    if not isinstance(data, dict):
        raise InputError("a recipe is a YAML mapping", path=str(path))
    lines = _lines(text)
    base = data.pop("base", None)
    if base is not None:
        base_path = (path.parent / str(base)).resolve()
        if base_path in seen:
            raise InputError(f"base {base!r} includes itself", path=str(path), line=lines.get("base"), field="base")
        if not base_path.exists():
            raise InputError(f"base recipe {base_path} does not exist", path=str(path), line=lines.get("base"),
                             field="base")
        parent, _ = _read(base_path, seen + (base_path,))
        data = _merge(parent, data)
    return data, lines


def load_recipe(path: Union[str, Path], overrides: Optional[list[str]] = None) -> Recipe:
    """Read a YAML recipe (merged over its ``base`` recipes), apply ``key=value`` overrides
    (dotted keys, YAML values), and validate it: unknown keys, estimator and loss parameters,
    TRL fields, batch arithmetic (SPEC §9). Errors are InputErrors naming the file, line and
    field."""
    path = Path(path)
    data, lines = _read(path)
    for item in overrides or []:
        key, sep, raw = item.partition("=")
        if not sep or not key:
            raise InputError(f"override {item!r} is not key=value", field=item)
        _set(data, key.strip(), yaml.safe_load(raw) if raw else "")
        lines.pop(key.strip(), None)
    return validate(data, source=str(path), lines=lines)


def validate(data: dict, *, source: str = "<recipe>", lines: Optional[dict[str, int]] = None) -> Recipe:
    """Build a Recipe from a mapping and check every field (SPEC §9)."""
    import trl
    from trl import GRPOConfig

    from .. import estimators, losses, tasks

    lines = lines or {}

    def fail(field: str, message: str) -> InputError:
        return InputError(message, path=source, line=lines.get(field), field=field)

    fields = {f.name for f in dataclasses.fields(Recipe)} - {"source"}
    for key in data:
        if key not in fields:
            raise fail(key, f"unknown key; valid: {', '.join(sorted(fields))}")
    for key in ("model", "tasks"):
        if not data.get(key):
            raise fail(key, "required")
    for section in ("advantage_estimator", "loss", "trl"):
        if section in data and not isinstance(data[section], dict):
            raise fail(section, "must be a mapping")
    recipe = Recipe(**data, source=source)
    for spec in recipe.task_specs:
        try:
            tasks.check_spec(spec)
        except InputError as exc:
            raise fail("tasks", exc.message) from None
    try:
        loss = losses.get(recipe.loss.get("name"), **{k: v for k, v in recipe.loss.items() if k != "name"})
    except (ValueError, TypeError) as exc:
        raise fail("loss", str(exc)) from None
    est = recipe.estimator_config()
    params = {k: v for k, v in est.items() if k not in ("name", "gae_lambda", "scale")}
    try:
        estimator = estimators.get(est["name"], **params)
    except (ValueError, TypeError) as exc:
        raise fail("advantage_estimator", str(exc)) from None
    refusal = untrainable(estimator, loss)
    if refusal is not None:
        raise fail(*refusal)
    if est["scale"] not in ("group", "batch", "none"):
        raise fail("advantage_estimator.scale", f"{est['scale']!r}; valid: group, batch, none")
    if not 0.0 <= float(est["gae_lambda"]) <= 1.0:
        raise fail("advantage_estimator.gae_lambda", "must lie in [0, 1]")
    known = {f.name for f in dataclasses.fields(GRPOConfig)}
    for key in recipe.trl:
        if key in OWNED:
            raise fail(f"trl.{key}", f"set by the recipe; use {OWNED[key]}")
        if key not in known:
            raise fail(f"trl.{key}", f"not a GRPOConfig field (TRL {trl.__version__})")
    if not isinstance(recipe.world_size, int) or recipe.world_size < 1:
        raise fail("world_size", "must be a positive integer")
    if recipe.accelerate_config and Path(recipe.accelerate_config).is_file():
        launch = yaml.safe_load(Path(recipe.accelerate_config).read_text()) or {}
        if launch.get("num_processes") != recipe.world_size:
            raise fail("world_size", f"{recipe.world_size}, but {recipe.accelerate_config} launches "
                       f"{launch.get('num_processes')} processes")
    try:
        recipe.batch_layout()
    except InputError as exc:
        raise fail(exc.field or "trl", exc.message) from None
    return recipe
