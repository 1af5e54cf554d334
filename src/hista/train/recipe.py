"""Training recipes: YAML files with ``key=value`` overrides, validated before any model loads.

A recipe has these top-level keys (all but ``model`` and ``tasks`` optional)::

    model: smollm2-135m-instruct        # alias, local path or Hugging Face id
    tasks: builtin:arith?steps=1        # a task spec, or a list of them (a mix)
    problems: 64                        # how many problems per source (null: all)
    seed: 0
    output_dir: runs/cpu-smoke
    world_size: 1                       # processes the recipe is laid out for (batch checks)
    allow_split_groups: false           # true: accept groups that span processes (gathered)
    advantage_estimator: {name: grpo, gae_lambda: 1.0, scale: group, ...}
    loss: {name: dapo, eps_low: 0.2, eps_high: 0.28, ...}
    trl: {...}                          # any other GRPOConfig field
    rollout_engine: auto                # auto, hista or trl: who samples the rollouts
                                        # (hista.train.rollouts)
    dynamic_sampling: {max_rounds: 4}   # DAPO's: train on groups with unequal rewards only
                                        # (false, true or a mapping; default: true for the
                                        # dapo loss; hista.train.dynamic)
    pool_filter: {band: [0.15, 0.75], samples: 20}   # keep the problems the base policy
                                        # solves that often (hista.train.pool)
    packed_loss: true                   # the loss forward without padding (hista.train.packing)
    eval: {suites: builtin, every: 25}  # optional: evaluate the policy during training
                                        # (hista.train.evaluate)
    accelerate_config: configs/accelerate/zero2.yaml   # how to launch it on many GPUs
    base: ../common.yaml                # optional: start from another recipe (path relative
                                        # to this file); sections merge key by key
"""

from __future__ import annotations

import dataclasses
import functools
import math
import os
import re
import typing
from pathlib import Path
from typing import Any, Callable, Optional, Union

import yaml

from .. import yamlio
from ..errors import InputError
from ..jsonio import read_input
from ..rollout.config import SYSTEM_PROMPT
from .dynamic import resolve as resolve_dynamic
from .limits import UNSUPPORTED, untrainable
from .pool import resolve as resolve_pool
from .rollouts import ROLLOUT_ENGINES, choose
from .typecheck import kind, type_error

#: GRPOConfig fields the recipe sets from its own sections; writing them under ``trl`` would
#: either clash or be ignored, so it is an error that says where they belong.
OWNED = {
    "loss_type": "loss.name", "epsilon": "loss.eps_low", "epsilon_high": "loss.eps_high / loss.cap",
    "beta": "loss.beta", "importance_sampling_level": "loss.name (gspo)", "scale_rewards": "advantage_estimator.scale",
    "top_entropy_quantile": "loss.top_entropy_fraction (strace)", "output_dir": "output_dir (top level)",
    "seed": "seed (top level)",
}
#: The ``trl`` fields that must be numbers (not null): the batch arithmetic and the rollouts' cache.
TRL_NUMBERS = ("per_device_train_batch_size", "gradient_accumulation_steps", "num_generations",
               "max_completion_length")
#: Splits the built-in task generators know.
SPLITS = ("train", "test", "validation")
#: GRPOConfig settings whose validity depends on the machine (a GPU with bf16 / tf32). A recipe
#: laid out for ``accelerate launch`` is validated without them; the run checks them where it runs.
MACHINE_SETTINGS = {"bf16": False, "bf16_full_eval": False, "tf32": None}


# ---- ranges ------------------------------------------------------------------------------

def _finite(v: float) -> bool:
    return math.isfinite(v)


#: Range checks of top-level recipe fields, applied after the type check (null passes where
#: the type allows it): field -> (check, what it must be).
RECIPE_RANGES: dict[str, tuple[Callable[[Any], bool], str]] = {
    "model": (lambda v: bool(v.strip()), "must be a model alias, local path or Hugging Face id, not empty"),
    "tasks": (lambda v: (bool(v.strip()) if isinstance(v, str) else bool(v) and all(s.strip() for s in v)),
              "must be a task spec or a non-empty list of task specs"),
    "problems": (lambda v: v >= 1, "must be >= 1 (or null: all)"),
    "split": (lambda v: v in SPLITS, f"must be one of {', '.join(SPLITS)}"),
    "seed": (lambda v: 0 <= v < 2**32, "must lie in [0, 2**32)"),
    "output_dir": (lambda v: bool(v.strip()), "must not be empty"),
    "world_size": (lambda v: v >= 1, "must be a positive integer"),
    "accelerate_config": (lambda v: bool(v.strip()), "must be a file path (or null)"),
    "rollout_engine": (lambda v: v in ROLLOUT_ENGINES, f"must be one of {', '.join(ROLLOUT_ENGINES)} "
                       "(auto: hista's engine where it can serve the run)"),
}

#: Range checks of common GRPOConfig fields, applied after the type check: field -> (check, text).
TRL_RANGES: dict[str, tuple[Callable[[Any], bool], str]] = {
    "max_steps": (lambda v: v >= 1 or v == -1, "must be >= 1, or -1 (train for num_train_epochs)"),
    "learning_rate": (lambda v: _finite(v) and v >= 0, "must be a finite number >= 0"),
    "temperature": (lambda v: _finite(v) and v > 0, "must be > 0"),
    "top_p": (lambda v: 0 < v <= 1, "must lie in (0, 1]"),
    "max_completion_length": (lambda v: v >= 1, "must be >= 1"),
    "max_prompt_length": (lambda v: v >= 1, "must be >= 1 (or null)"),
    "num_train_epochs": (lambda v: _finite(v) and v > 0, "must be > 0"),
    "per_device_train_batch_size": (lambda v: v >= 1, "must be >= 1"),
    "gradient_accumulation_steps": (lambda v: v >= 1, "must be >= 1"),
    "steps_per_generation": (lambda v: v >= 1, "must be >= 1 (or null)"),
    "generation_batch_size": (lambda v: v >= 1, "must be >= 1 (or null)"),
    "num_generations": (lambda v: v >= 2, "must be >= 2: a group needs at least 2 rollouts"),
    "num_iterations": (lambda v: v >= 1, "must be >= 1"),
    "save_steps": (lambda v: _finite(v) and v > 0, "must be > 0"),
    "logging_steps": (lambda v: _finite(v) and v > 0, "must be > 0"),
    "warmup_ratio": (lambda v: 0 <= v <= 1, "must lie in [0, 1]"),
    "warmup_steps": (lambda v: _finite(v) and v >= 0, "must be >= 0"),
    "weight_decay": (lambda v: _finite(v) and v >= 0, "must be a finite number >= 0"),
    "max_grad_norm": (lambda v: v >= 0, "must be >= 0"),
}


def require_trl():
    """The ``trl`` module, or an InputError that says how to install it: training needs the
    ``trl`` extra, the rest of hista does not."""
    try:
        import trl
    except ImportError:
        raise InputError("hista train needs TRL: pip install 'hista[trl]' (setup.sh installs it)",
                         field="trl") from None
    return trl


@functools.cache
def trl_defaults() -> dict[str, Any]:
    """GRPOConfig's default for each of its fields (those with a plain default)."""
    return {f.name: f.default for f in dataclasses.fields(require_trl().GRPOConfig)
            if f.default is not dataclasses.MISSING}


def _check(value: Any, hint: Any, ranges: dict, name: str) -> Optional[str]:
    """The type error or range error of one value, or None."""
    problem = type_error(value, hint)
    if problem is None and value is not None and name in ranges:
        check, text = ranges[name]
        try:
            ok = check(value)
        except TypeError:  # a value of a type the annotation did not tell
            ok = False
        if not ok:
            problem = f"{value!r}: {text}"
    return problem


@dataclasses.dataclass
class Recipe:
    """One training run: model, data, estimator, loss and TRL settings. Every field
    is type- and range-checked when the recipe is built (``RECIPE_RANGES``); ``validate`` checks
    the sections and locates errors in the recipe file."""

    model: str
    tasks: Union[str, list[str]]
    problems: Optional[int] = None
    split: str = "train"
    seed: int = 0
    output_dir: str = "runs/train"
    world_size: int = 1
    allow_split_groups: bool = False
    system_prompt: str = SYSTEM_PROMPT
    resume: bool = False
    accelerate_config: Optional[str] = None
    rollout_engine: str = "auto"
    dynamic_sampling: Union[bool, dict, None] = None
    pool_filter: Union[bool, dict, None] = None
    packed_loss: bool = True
    advantage_estimator: dict = dataclasses.field(default_factory=lambda: {"name": "grpo"})
    loss: dict = dataclasses.field(default_factory=lambda: {"name": "dapo"})
    trl: dict = dataclasses.field(default_factory=dict)
    eval: Optional[dict] = None
    source: str = "<recipe>"
    #: where each dotted key was written: (file, line); for error messages, not configuration
    lines: dict = dataclasses.field(default_factory=dict, repr=False, compare=False)

    def __post_init__(self) -> None:
        hints = typing.get_type_hints(Recipe)
        for f in dataclasses.fields(self):
            if f.name in ("source", "lines"):
                continue
            problem = _check(getattr(self, f.name), hints[f.name], RECIPE_RANGES, f.name)
            if problem is not None:
                raise self.error(f.name, problem)

    def error(self, field: str, message: str) -> InputError:
        """An InputError about ``field`` (a dotted key), located at the file and line where the
        recipe sets it (the recipe file itself when the key came from an override or a default)."""
        path, line = self.lines.get(field, (self.source, None))
        return InputError(message, path=path, line=line, field=field)

    def to_dict(self) -> dict:
        out = dataclasses.asdict(self)
        out.pop("source")
        out.pop("lines")
        return out

    @property
    def task_specs(self) -> list[str]:
        return [self.tasks] if isinstance(self.tasks, str) else list(self.tasks)

    @property
    def is_launch_plan(self) -> bool:
        """Whether the recipe is laid out for ``accelerate launch`` (an accelerate config or
        several processes): a plan for other machines, whose precision settings (bf16, tf32)
        are checked where it runs, not where it is validated."""
        return self.accelerate_config is not None or self.world_size > 1

    @functools.cached_property
    def estimator(self) -> Any:
        """The recipe's estimator, built once from its ``advantage_estimator`` section (less
        ``gae_lambda`` and ``scale``, which are the run's): validation, the checks before a run,
        and the trainer all read this one object. Raises what :func:`hista.estimators.get`
        raises (not cached then)."""
        from .. import estimators

        section = {"name": "grpo", **self.advantage_estimator}
        cfg = {k: v for k, v in section.items() if k not in ("gae_lambda", "scale")}
        return estimators.get(cfg.pop("name"), **cfg)

    @functools.cached_property
    def policy_loss(self) -> Any:
        """The recipe's policy loss, built once from its ``loss`` section (its configuration
        checked and completed with the loss's defaults): validation, the GRPOConfig and the
        trainer read this one object. Raises what :func:`hista.losses.get` raises (not cached
        then)."""
        from .. import losses

        cfg = dict(self.loss)
        return losses.get(cfg.pop("name", "dapo"), **cfg)

    @functools.cached_property
    def evaluation(self) -> Any:
        """The recipe's ``eval`` section parsed once (:func:`hista.train.evaluate.parse`, a
        ``TrainEval``), or None when the recipe evaluates nothing during training. Raises the
        InputError the parse raises (not cached then)."""
        if self.eval is None:
            return None
        from .evaluate import parse

        return parse(self.eval)

    def estimator_config(self) -> dict:
        """The advantage_estimator section with the defaults filled in: ``gae_lambda`` the
        estimator's (1.0; the critic's ``lam`` for ``critic``), and ``scale`` the estimator's
        own (``critic``: unscaled) or else the scaling the loss declares (``advantage_scale``:
        unscaled for Dr. GRPO, SPEC §5; the group std for the others)."""
        from ..losses import lookup

        cfg = {"name": "grpo", **self.advantage_estimator}
        try:
            est = self.estimator
        except (ValueError, TypeError):
            est = None  # validate says what is wrong
        cfg.setdefault("gae_lambda", est.default_gae_lambda() if est is not None else 1.0)
        cfg.setdefault("scale", (est is not None and est.default_scale)
                       or lookup(self.loss.get("name", "dapo")).advantage_scale)
        return cfg

    def trl_setting(self, key: str) -> Any:
        """The recipe's ``trl.KEY``, or GRPOConfig's default when the recipe leaves it out: what
        the run's GRPOConfig holds, for the readers that need one setting before (or without)
        building it."""
        return self.trl[key] if key in self.trl else trl_defaults()[key]

    def batch_layout(self) -> dict:
        """Batch arithmetic of TRL: rollouts per optimiser step and per generation
        batch, prompts per generation batch, rows per process of a generation batch, and
        whether the layout is group-local (every group on one process: one process, or rows per
        process a multiple of G, since TRL emits a prompt's G rollouts back to back and each
        process gets a contiguous slice). Raises InputError when they do not divide."""
        t = {key: self.trl_setting(key) for key in (*TRL_NUMBERS, "steps_per_generation", "generation_batch_size")}
        per_step = t["per_device_train_batch_size"] * t["gradient_accumulation_steps"] * self.world_size
        steps = t.get("steps_per_generation") or t["gradient_accumulation_steps"]
        if t.get("generation_batch_size") is not None:
            if t.get("steps_per_generation") is not None:
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
        rows = gen // self.world_size
        return {"rollouts_per_optimizer_step": per_step, "generation_batch": gen, "prompts_per_generation": gen // g,
                "num_generations": g, "rows_per_process": rows, "group_local": self.world_size == 1 or rows % g == 0}

    def grpo_config(self, *, portable: bool = False):
        """The TRL GRPOConfig of this recipe, built as a run on this machine builds it.
        Whatever GRPOConfig refuses becomes an InputError naming the ``trl`` field where it can
        be told; bf16 on a machine without a CUDA GPU gets a message that says what to change.
        ``portable``: leave out the settings that depend on the machine (``MACHINE_SETTINGS``),
        to check the rest of a recipe meant for other machines."""
        GRPOConfig = require_trl().GRPOConfig

        loss = self.policy_loss.config
        kwargs = {"output_dir": self.output_dir, "seed": self.seed, "beta": float(loss.get("beta", 0.0)),
                  "logging_steps": 1, "report_to": "none", "save_strategy": "steps", "save_steps": 50,
                  "disable_tqdm": False, **self.trl}
        # TRL reads these to size its own buffers and warnings; the loss itself is hista's.
        kwargs["loss_type"] = "dapo" if loss.get("aggregation") == "token-mean" else "grpo"
        kwargs["epsilon"] = float(loss.get("eps_low", 0.2))
        kwargs["epsilon_high"] = float(loss.get("eps_high", loss.get("cap", 0.2)))
        if portable:
            kwargs.update(MACHINE_SETTINGS)
        try:
            return GRPOConfig(**kwargs)
        except Exception as exc:  # noqa: BLE001 - every refusal of these user settings is an input error
            raise self._config_error(exc) from None

    def _config_error(self, exc: Exception) -> InputError:
        """GRPOConfig's refusal as an InputError about the ``trl`` field it concerns."""
        text = str(exc)
        if "support bf16" in text:
            if self.trl.get("bf16") or self.trl.get("bf16_full_eval"):
                key = "bf16" if self.trl.get("bf16") else "bf16_full_eval"
                return self.error(f"trl.{key}", f"{key} needs a CUDA GPU with bf16 support; this machine has none: "
                                  f"remove trl.{key} for CPU runs (or set trl.use_cpu: true to train in bf16 on "
                                  "the CPU)")
            return self.error("trl.bf16", "TRL turns bf16 on when trl.bf16 is not set, and bf16 needs a CUDA GPU "
                              "with bf16 support; this machine has none: set trl.bf16: false for CPU runs")
        field = "trl"
        named = [k for k in self.trl if re.search(rf"(?<![A-Za-z0-9_]){re.escape(str(k))}(?![A-Za-z0-9_])", text)]
        if not named:  # "nope is not a valid SchedulerType": the field is the one holding that value
            named = [k for k, v in self.trl.items() if isinstance(v, str) and v.strip()
                     and re.search(rf"(?<![A-Za-z0-9_]){re.escape(v)}(?![A-Za-z0-9_])", text)]
        if len(named) == 1:
            field = f"trl.{named[0]}"
        kind = "" if isinstance(exc, ValueError) else f"{type(exc).__name__}: "
        return self.error(field, f"GRPOConfig refuses these settings: {kind}{text}")


def check_rollout_engine(recipe: Recipe, config: Any) -> None:
    """Refuse ``rollout_engine: hista`` where hista's engine cannot serve the run, by
    the choice the trainer makes (:func:`hista.train.rollouts.choose`) on the run's GRPOConfig
    ``config`` and ``world_size`` processes: vLLM, several processes, or a sampling setting the
    engine does not have (top-k, min-p, a repetition penalty, generation kwargs, a cache
    implementation, paged generation). An InputError about ``rollout_engine`` that names the
    ``trl`` setting, so that a dry run refuses what the run refuses."""
    try:
        choose(recipe.rollout_engine, config, recipe.world_size)
    except ValueError as exc:
        raise recipe.error("rollout_engine", str(exc)) from None


def check_model(recipe: Recipe) -> Optional[str]:
    """Check the recipe against the model's configuration, before anything loads: the
    hidden layer the estimator reads must exist (an InputError naming
    ``advantage_estimator.layer``), and ``trl.max_completion_length`` and the pool filter's
    ``pool_filter.max_new_tokens`` must fit the model's context (``max_position_embeddings``; an
    InputError naming the field: the rollouts' cache is reserved for that many positions). The
    configuration is read only when there is something to check. Returns a note when it cannot be read here (a hub id
    neither reachable nor cached), else None."""
    from ..models.loading import context_length, model_config

    estimator = recipe.estimator
    caps = {"trl.max_completion_length": recipe.trl.get("max_completion_length"),
            "pool_filter.max_new_tokens": (recipe.pool_filter or {}).get("max_new_tokens")}
    if not estimator.needs_hidden and not any(caps.values()):
        return None
    config = model_config(recipe.model)
    if config is None:
        return (f"note: the configuration of {recipe.model} cannot be read here; its depth and context are not "
                "checked before it loads")
    layers = getattr(config, "num_hidden_layers", None)
    if estimator.needs_hidden and isinstance(layers, int):
        layer = estimator.hidden_layer(layers)
        if not -(layers + 1) <= layer <= layers:
            raise recipe.error("advantage_estimator.layer", f"layer {layer} does not exist in {recipe.model}: it has "
                               f"{layers} decoder layers, hidden states {-(layers + 1)} to {layers}")
    context = context_length(config)
    for field, cap in caps.items():
        if context is not None and cap is not None and cap > context:
            raise recipe.error(field, f"{cap} does not fit the context of {recipe.model}: {context} positions "
                               "(max_position_embeddings) for the prompt and the completion together")
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
    except (yaml.YAMLError, RecursionError):
        pass
    return lines


def _set(data: dict, dotted: str, value: Any, source: str) -> None:
    parts = dotted.split(".")
    node = data
    for part in parts[:-1]:
        node = node.setdefault(part, {})
        if not isinstance(node, dict):
            raise InputError(f"cannot set {dotted}: {part} is not a mapping", path=source, field=dotted)
    node[parts[-1]] = value


def _merge(base: dict, top: dict) -> dict:
    out = dict(base)
    for key, value in top.items():
        out[key] = _merge(out[key], value) if isinstance(value, dict) and isinstance(out.get(key), dict) else value
    return out


def _text(path: Path) -> str:
    """A recipe or config file as text: UTF-8, errors located; a FIFO or device is refused at
    once, never read (:func:`hista.jsonio.read_input`)."""
    raw = read_input(path, "recipe")
    try:
        return raw.decode("utf-8").removeprefix("\ufeff")
    except UnicodeDecodeError as exc:
        raise InputError(f"not UTF-8 text (byte {raw[exc.start]:#04x} at offset {exc.start})", path=str(path),
                         line=raw[:exc.start].count(b"\n") + 1) from None


def _yaml(text: str, path: str) -> Any:
    return yamlio.load(text, path=path, what="the recipe")


def _read(path: Path, seen: tuple = ()) -> tuple[dict, dict[str, tuple[str, int]]]:
    """The mapping of one recipe file with its ``base`` chain merged in, and where each dotted
    key was written (file, line)."""
    text = _text(path)
    data = _yaml(text, str(path))
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise InputError(f"a recipe is a YAML mapping, not {kind(data)}", path=str(path))
    where = {key: (str(path), line) for key, line in _lines(text).items()}
    base = data.pop("base", None)
    if base is not None:
        if not isinstance(base, str) or not base.strip():
            raise InputError(f"expected a path to another recipe, got {kind(base)}", path=str(path),
                             line=where.get("base", (None, None))[1], field="base")
        base_path = Path(os.path.normpath(path.parent / base))
        line = where.get("base", (None, None))[1]
        if base_path.resolve() in seen:
            raise InputError(f"base {base!r} includes itself", path=str(path), line=line, field="base")
        if not base_path.is_file():
            raise InputError(f"base recipe {base_path} does not exist", path=str(path), line=line, field="base")
        parent, parent_where = _read(base_path, seen + (base_path.resolve(),))
        data = _merge(parent, data)
        where = {**parent_where, **where}
    where.pop("base", None)
    return data, where


def load_recipe(path: Union[str, Path], overrides: Optional[list[str]] = None) -> Recipe:
    """Read a YAML recipe (merged over its ``base`` recipes), apply ``key=value`` overrides
    (dotted keys, YAML values), and validate it (``validate``). Errors are InputErrors
    naming the file, line and field."""
    path = Path(path)
    data, where = _read(path, (path.resolve(),))
    for item in overrides or []:
        key, sep, raw = item.partition("=")
        key = key.strip()
        if not sep or not key:
            raise InputError(f"override {item!r} is not key=value", path=str(path), field=item)
        value = yamlio.load(raw, path=str(path), field=key, what=f"override {item[:60]!r}: the value") if raw else \
            ""
        _set(data, key, value, str(path))
        for name in [n for n in where if n == key or n.startswith(key + ".")]:
            del where[name]  # the override replaced what the file says there
    return validate(data, source=str(path), lines=where)


def _param_hints(fn_or_class: Any) -> dict[str, Any]:
    try:
        return typing.get_type_hints(fn_or_class)
    except Exception:  # noqa: BLE001 - an annotation that does not resolve is simply not checked
        return {}


def validate(data: dict, *, source: str = "<recipe>",
             lines: Optional[dict[str, Union[int, tuple[str, int]]]] = None) -> Recipe:
    """Build a Recipe from a mapping and check every field, so that what passes here
    is what a run accepts: the type and range of each top-level field; the estimator and the
    loss and the types of their parameters; task specs (without downloading); each ``trl``
    value against the type of its GRPOConfig field and the range of the common ones; the
    accelerate config; the ``eval`` section (``hista.train.evaluate.parse``); the batch
    arithmetic, and a group-local layout unless ``allow_split_groups``; and finally the
    GRPOConfig itself, built as the run builds it (on this machine, or without its precision
    settings for a recipe laid out for ``accelerate launch``, see ``Recipe.is_launch_plan``).
    ``lines``: where each dotted key was written, as a line of ``source`` or a (file, line)
    pair."""
    trl = require_trl()
    where = {k: (v if isinstance(v, tuple) else (source, v)) for k, v in (lines or {}).items()}
    recipe = _build(data, source, where)
    _check_tasks(recipe)
    loss = _check_loss(recipe)
    estimator = _check_estimator(recipe)
    refusal = untrainable(estimator, loss)
    if refusal is not None:
        raise recipe.error(*refusal)
    _resolve_sampling(recipe)
    _check_trl(recipe, trl)
    _check_accelerate(recipe, estimator)
    _check_eval(recipe)
    _check_layout(recipe)
    _check_run_config(recipe)
    return recipe


def _build(data: Any, source: str, where: dict[str, tuple[str, int]]) -> Recipe:
    """The Recipe of a mapping whose keys and sections have the right shape; its errors located
    through ``where`` (from here on, ``Recipe.error`` locates them the same way)."""
    def fail(field: str, message: str) -> InputError:
        path, line = where.get(field, (source, None))
        return InputError(message, path=path, line=line, field=field)

    if not isinstance(data, dict):
        raise InputError(f"a recipe is a YAML mapping, not {kind(data)}", path=source)
    fields = {f.name for f in dataclasses.fields(Recipe)} - {"source", "lines"}
    for key in data:
        if key not in fields:
            raise fail(str(key), f"unknown key; valid: {', '.join(sorted(fields))}")
    for key in ("model", "tasks"):
        if data.get(key) is None:
            raise fail(key, "required")
    for section in ("advantage_estimator", "loss", "trl", "eval"):
        if section in data and not (section == "eval" and data[section] is None):  # eval: null = none
            if not isinstance(data[section], dict):
                raise fail(section, f"must be a mapping, not {kind(data[section])}")
            for key in data[section]:
                if not isinstance(key, str):
                    raise fail(f"{section}.{key}", f"keys must be strings, not {kind(key)}")
    try:
        return Recipe(**data, source=source, lines=where)
    except InputError as exc:
        raise fail(exc.field, exc.message) from None


def _check_tasks(recipe: Recipe) -> None:
    """Each task spec checked without downloading, so that a bad source fails before a run."""
    from .. import tasks

    for spec in recipe.task_specs:
        try:
            tasks.check_spec(spec)
        except InputError as exc:  # a task file's own error keeps its file, line and field
            raise recipe.error("tasks", str(exc) if exc.path else exc.message) from None


def _check_loss(recipe: Recipe) -> Any:
    """The recipe's loss: its name, the types of its parameters, then its own range checks."""
    from .. import losses

    name = recipe.loss.setdefault("name", "dapo")
    if not isinstance(name, str) or name not in losses.names():
        raise recipe.error("loss.name", f"unknown loss {name!r}; valid: {', '.join(losses.names())}")
    own = _param_hints(losses.lookup(name))
    hints = {"aggregation": str, "max_len": Optional[int], "beta": float,
             **{k: own.get(k, Any) for k in losses.default_config(name) if k != "aggregation"}}
    for key, value in recipe.loss.items():
        if key in hints and key != "name" and (problem := type_error(value, hints[key])) is not None:
            raise recipe.error(f"loss.{key}", problem)
    try:
        return recipe.policy_loss
    except (ValueError, TypeError) as exc:
        raise recipe.error("loss", str(exc) if not isinstance(exc, InputError) else exc.message) from None


def _check_estimator(recipe: Recipe) -> Any:
    """The recipe's estimator: gae_lambda and scale, the types of its parameters, then its own
    checks."""
    from .. import estimators

    est = recipe.estimator_config()
    lam = est["gae_lambda"]
    if (problem := type_error(lam, float)) is not None:
        raise recipe.error("advantage_estimator.gae_lambda", problem)
    if not 0.0 <= lam <= 1.0:
        raise recipe.error("advantage_estimator.gae_lambda", f"{lam!r}: must lie in [0, 1]")
    if not isinstance(est["scale"], str) or est["scale"] not in ("group", "batch", "none"):
        raise recipe.error("advantage_estimator.scale", f"{est['scale']!r}; valid: group, batch, none")
    params = {k: v for k, v in est.items() if k not in ("name", "gae_lambda", "scale")}
    try:
        cls = estimators.estimator_class(est["name"], params.get("profile"))
    except (ValueError, TypeError):
        cls = None  # estimators.get below says what is wrong
    if cls is not None:
        hints = _param_hints(cls.config_class)
        for key, value in params.items():
            if key in hints and (problem := type_error(value, hints[key])) is not None:
                raise recipe.error(f"advantage_estimator.{key}", problem)
    try:
        return recipe.estimator
    except (ValueError, TypeError) as exc:
        if not isinstance(exc, InputError):
            raise recipe.error("advantage_estimator", str(exc)) from None
        named = f"advantage_estimator.{exc.field}" if exc.field in params else "advantage_estimator"
        raise recipe.error(named, exc.message) from None


def _resolve_sampling(recipe: Recipe) -> None:
    """Dynamic sampling and the pool filter resolved in place, written as the run uses them:
    recipe.yaml says whether a run sampled dynamically."""
    try:
        recipe.dynamic_sampling = resolve_dynamic(recipe.dynamic_sampling, recipe.loss["name"])
    except ValueError as exc:
        raise recipe.error("dynamic_sampling", str(exc)) from None
    try:
        recipe.pool_filter = resolve_pool(recipe.pool_filter)
    except ValueError as exc:
        raise recipe.error("pool_filter", str(exc)) from None


def _check_trl(recipe: Recipe, trl: Any) -> None:
    """The ``trl`` section: field names, then each value against its GRPOConfig annotation and
    the common ranges, so that a typo or a setting hista ignores is refused before a run."""
    GRPOConfig = trl.GRPOConfig
    known = {f.name for f in dataclasses.fields(GRPOConfig)}
    trl_hints = _param_hints(GRPOConfig)
    for key, value in recipe.trl.items():
        if key in OWNED:
            raise recipe.error(f"trl.{key}", f"set by the recipe; use {OWNED[key]}")
        if key not in known:
            raise recipe.error(f"trl.{key}", f"not a GRPOConfig field (TRL {trl.__version__})")
        if key in UNSUPPORTED and value != UNSUPPORTED[key][0]:
            raise recipe.error(f"trl.{key}", f"{value!r} has no effect with hista's losses: {UNSUPPORTED[key][1]}")
        if value is None and key in TRL_NUMBERS:  # the batch arithmetic and the rollouts' cache need numbers
            raise recipe.error(f"trl.{key}", f"must be a number, not null (TRL's default is {trl_defaults()[key]})")
        problem = _check(value, trl_hints.get(key, Any), TRL_RANGES, key)
        if problem is not None:
            raise recipe.error(f"trl.{key}", problem)
    if recipe.trl.get("bf16") and recipe.trl.get("fp16"):
        raise recipe.error("trl.fp16", "set at most one of trl.bf16 and trl.fp16")


def _check_accelerate(recipe: Recipe, estimator: Any) -> None:
    """The accelerate config, when there is one: it launches ``world_size`` processes, and it
    shards the policy (ZeRO-3) only where neither evaluation nor the estimator's critic needs
    the whole weights."""
    from ..estimators import critic_trains_with_policy

    if recipe.accelerate_config is None:
        return
    config = Path(recipe.accelerate_config)
    launch = _launch_config(recipe, config)
    processes = launch.get("num_processes") if isinstance(launch, dict) else None
    if isinstance(processes, bool) or not isinstance(processes, int):
        raise recipe.error("accelerate_config", f"{config} does not set num_processes (an integer)")
    if processes != recipe.world_size:
        raise recipe.error("world_size", f"{recipe.world_size}, but {config} launches {processes} processes")
    deepspeed = launch.get("deepspeed_config")  # launch is a mapping: it has num_processes
    zero = deepspeed.get("zero_stage") if isinstance(deepspeed, dict) else None
    if recipe.eval is not None and zero == 3:
        raise recipe.error("eval", f"{config} shards the policy's weights (ZeRO-3), and evaluation during training "
                           "generates on the main process alone: launch with ZeRO-2, or evaluate the checkpoints "
                           "with hista eval")
    if critic_trains_with_policy(estimator) and zero == 3:
        raise recipe.error("accelerate_config", f"{config} shards the policy's weights (ZeRO-3), and the "
                           f"{estimator.name!r} estimator copies them into its critic: launch with ZeRO-2 "
                           "(configs/accelerate/zero2-4gpus.yaml: 4 GPUs)")


def _launch_config(recipe: Recipe, config: Path) -> Any:
    """What the accelerate config file ``config`` holds; its errors are about
    ``accelerate_config``."""
    if not config.is_file():
        raise recipe.error("accelerate_config", f"{config} is not a file (paths are relative to the current "
                           "directory, as for accelerate launch)")
    try:
        return _yaml(_text(config), str(config))
    except InputError as exc:
        raise recipe.error("accelerate_config", f"{config}: {exc.message}") from None


def _check_eval(recipe: Recipe) -> None:
    """The ``eval`` section, parsed as the run parses it, its errors located in the section."""
    try:
        _ = recipe.evaluation
    except InputError as exc:
        raise recipe.error(f"eval.{exc.field}" if exc.field else "eval", exc.message) from None


def _check_layout(recipe: Recipe) -> None:
    """The batch arithmetic, and a group-local layout unless ``allow_split_groups``."""
    try:
        layout = recipe.batch_layout()
    except InputError as exc:
        raise recipe.error(exc.field or "trl", exc.message) from None
    if not layout["group_local"] and not recipe.allow_split_groups:
        raise recipe.error(
            "trl.per_device_train_batch_size",
            f"groups of {layout['num_generations']} rollouts span processes: each of the {recipe.world_size} "
            f"processes holds {layout['rows_per_process']} rows of a generation batch (per_device_train_batch_"
            "size x steps_per_generation), not a multiple of num_generations; make it one, so that every group "
            "is estimated where it lies, or set allow_split_groups: true to send each group's rows to the "
            "process holding its first row (their completion tokens' hidden states included)")


def _check_run_config(recipe: Recipe) -> None:
    """GRPOConfig as the run builds it (without the machine's settings for a launch plan), then
    the rollout engine the run would choose with it."""
    try:
        config = recipe.grpo_config()
    except InputError:
        if not recipe.is_launch_plan:
            raise
        config = recipe.grpo_config(portable=True)  # this machine cannot run it; the rest must still hold
    check_rollout_engine(recipe, config)
