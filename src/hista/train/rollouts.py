"""Training rollouts from hista's own engine (docs/training.md "Where rollouts
come from").

TRL's ``GRPOTrainer`` takes a ``rollout_func(prompts, trainer)`` that replaces its generation.
:class:`EngineRollouts` is one: it poses each prompt with the chat template TRL would have used
(TRL's own ``_tokenize_prompts``), samples one completion per prompt row with
:func:`hista.rollout.engine.sample_continuations` (each distinct prompt encoded once, Llama-family
models on CPU by continuous batching) with the trainer's temperature, top-p,
``max_completion_length`` and EOS ids, and returns the completions with their log-probs under
softmax(logits / temperature), which equal a fresh forward pass within float rounding.

Row r of the generation batch at optimiser step s is seeded by ``(seed, s, r)`` (and by the
round of dynamic sampling, for its extra rounds), so a run is reproducible on one machine and a
resumed run draws what the uninterrupted run drew.

:func:`choose` decides whether a run uses it: ``rollout_engine: auto`` (the default) uses the
engine on one process without vLLM when TRL's sampling settings are ones the engine has
(temperature, top-p; no top-k, min-p, repetition penalty, extra generation kwargs or tools), and
TRL's own generation otherwise; ``hista`` requires the engine and ``trl`` keeps TRL's.
"""

from __future__ import annotations

import contextlib
from typing import Any, Iterator, Optional

from ..sharding import derive_seed

#: The values of the recipe's ``rollout_engine``.
ROLLOUT_ENGINES = ("auto", "hista", "trl")

#: GRPOConfig sampling settings the engine does not have: field -> its neutral value.
NEUTRAL_SAMPLING = {"top_k": (0, None), "min_p": (None, 0.0), "repetition_penalty": (1.0,),
                    "generation_kwargs": (None, {}), "use_transformers_paged": (False,),
                    "use_transformers_continuous_batching": (False,), "cache_implementation": (None,)}


def engine_refusal(args: Any, num_processes: int, tools: bool = False, multimodal: bool = False) -> Optional[str]:
    """Why hista's engine cannot produce this run's rollouts, or None when it can:
    vLLM generation, several processes, tools or environments, a multimodal processor, or a
    GRPOConfig sampling setting the engine does not have (:data:`NEUTRAL_SAMPLING`)."""
    if getattr(args, "use_vllm", False):
        return "trl.use_vllm is true: vLLM generates the rollouts"
    if num_processes > 1:
        return f"the run has {num_processes} processes: each generates its own slice with TRL's generation"
    if tools or multimodal:
        return "the run uses tools or a multimodal processor, which only TRL's generation handles"
    for field, neutral in NEUTRAL_SAMPLING.items():
        value = getattr(args, field, neutral[0])
        if value not in neutral:
            return f"trl.{field}={value!r} is a sampling setting the engine does not have"
    return None


def choose(setting: str, args: Any, num_processes: int, tools: bool = False,
           multimodal: bool = False) -> tuple[bool, str]:
    """Whether the run's rollouts come from hista's engine, and why, for the recipe's
    ``rollout_engine`` setting (``auto``, ``hista``, ``trl``). ``hista`` where the engine
    cannot serve the run raises a ValueError that says why."""
    if setting == "trl":
        return False, "rollout_engine=trl: TRL's generation"
    refusal = engine_refusal(args, num_processes, tools, multimodal)
    if refusal is None:
        return True, "hista's engine"
    if setting == "hista":
        raise ValueError(f"rollout_engine=hista, but {refusal}; set rollout_engine=auto or trl")
    return False, f"TRL's generation ({refusal})"


def pose(tokenizer: Any, prompts: list, chat_template_kwargs: Optional[dict] = None) -> list[list[int]]:
    """The token ids of each prompt as TRL's GRPOTrainer poses it for generation (its
    ``_tokenize_prompts`` for a text-only run without tools): a conversational prompt
    through the tokenizer's chat template with the generation prompt and
    ``chat_template_kwargs`` (GRPOConfig's), a plain one tokenized as it is. The engine samples
    from exactly these ids (:class:`EngineRollouts` calls TRL's own), and ``hista train`` checks
    their length against the model's context before it loads the model."""
    if not prompts:
        return []
    if isinstance(prompts[0], list):  # conversational: TRL's is_conversational
        tokenized = tokenizer.apply_chat_template(conversation=prompts, tools=None, chat_template=None,
                                                  add_generation_prompt=True, tokenize=True, return_dict=True,
                                                  **(chat_template_kwargs or {}))
    else:
        tokenized = tokenizer(text=prompts)
    return [list(map(int, ids)) for ids in tokenized["input_ids"]]


@contextlib.contextmanager
def sampling_policy(trainer) -> Iterator[Any]:
    """The trainer's policy, unwrapped and in eval mode, for sampling between optimiser steps: its
    oneDNN-packed weights are dropped first (:func:`hista.models.packed.forget`;
    a fused optimiser moves the weights without a trace the packed copies see), and its training
    mode is restored afterwards. Engine rollouts and evaluation during training sample so."""
    from ..models.packed import forget

    model = trainer.accelerator.unwrap_model(trainer.model)
    training = model.training
    model.eval()
    forget(model)
    try:
        yield model
    finally:
        model.train(training)


class EngineRollouts:
    """TRL's ``rollout_func``: one completion per prompt row from hista's engine, the whole
    generation batch decoded together (module docstring). ``seed``: the run's seed."""

    def __init__(self, seed: int):
        self.seed = int(seed)

    def seeds(self, step: int, rows: int, round_: int = 0) -> list[int]:
        """The sampling seed of each row of the generation batch drawn at optimiser ``step``
        (``round_``: the extra generation round of dynamic sampling, 0 for the batch itself)."""
        if round_:
            return [derive_seed(self.seed, "rollout", step, "round", round_, r) for r in range(rows)]
        return [derive_seed(self.seed, "rollout", step, r) for r in range(rows)]

    def __call__(self, prompts: list, trainer) -> dict:
        from ..rollout.engine import sample_continuations

        prompt_ids, _, _ = trainer._tokenize_prompts(prompts)  # the chat template TRL would have used
        prompt_ids = [list(map(int, ids)) for ids in prompt_ids]
        distinct: dict[tuple[int, ...], int] = {}
        sources = [distinct.setdefault(tuple(ids), len(distinct)) for ids in prompt_ids]
        eos = list(trainer.eos_token_ids)
        pad = trainer._tokenizer.pad_token_id
        with sampling_policy(trainer) as model:
            out = sample_continuations(
                model, [list(p) for p in distinct], sources, max_new_tokens=trainer.max_completion_length,
                temperature=float(trainer.temperature), top_p=float(trainer.top_p), eos=eos,
                pad=eos[0] if pad is None else pad,
                seeds=self.seeds(trainer.state.global_step, len(sources), getattr(trainer, "sampling_round", 0)))
        return {"prompt_ids": prompt_ids, "completion_ids": [tokens for tokens, _ in out],
                "logprobs": [logps for _, logps in out]}


def logprob_gap(sampled, forward, mask) -> float:
    """The largest absolute difference between the engine's log-probs and a forward pass's
    (tensors [B, T]) over the completion tokens ``mask`` selects (SPEC §7: they agree up to
    float rounding); 0 when there are none."""
    gap = (sampled - forward).abs()[mask.bool()]
    return float(gap.max()) if gap.numel() else 0.0
