"""The vLLM rollout engine: the same contract as :class:`~hista.rollout.GenerateEngine`
on vLLM's offline ``LLM``, for GPUs.

Requests are token-id prompts, one request per sample, each with its own seed derived from the
call's seed, the prompt's index and the sample's index, so that a sample does not depend on the
batch it ran in (reproducible on the same hardware and vLLM version). Prefix caching is on:
the continuations of one SVEB state, and the rollouts of one prompt, share their prefix's KV
cache. Log-probs are vLLM's ``processed_logprobs``: log p(token) under softmax(logits /
temperature), the old-policy log-probs of SPEC §3. vLLM computes them after top-p, hista before
it, so this engine takes ``top_p`` 1 only. At temperature 0 (greedy) the sampling distribution
is a point mass and every log-prob is 0. Text and character offsets come from hista's own
decoding of the token ids (:func:`hista.rollout.offsets.decode_with_offsets`), as with the
transformers engine.

The request building (:func:`request_settings`) and the output parsing
(:func:`completion_of`) are plain functions, tested on CPU against vLLM's own output classes
when vLLM can be imported and against ``tests/data/vllm_outputs.json`` otherwise. Only
:class:`VLLMEngine` needs vLLM and a CUDA GPU.
"""

from __future__ import annotations

import copy
import shutil
import tempfile
import weakref
from pathlib import Path
from typing import Any, Callable, Optional, Sequence

from ..errors import InputError
from ..models import EMBEDDED, LoadedModel, prepare_embedded
from ..types import Rollout
from .config import SamplingConfig, sample_seeds
from .engine import PosesProblems, eos_ids
from .offsets import decode_with_offsets

#: Fraction of the GPU's memory vLLM may take (weights, activations and KV cache).
GPU_MEMORY_UTILIZATION = 0.85


def check_available() -> Any:
    """The imported ``vllm`` module, or an InputError (exit 2 in the CLI) naming what is missing:
    the package (``pip install 'hista[vllm]'``) or a CUDA GPU."""
    try:
        import vllm
    except ImportError as exc:
        raise InputError(f"the vllm engine needs the vllm package, which is not installed ({exc}); install it on a "
                         "GPU machine with: pip install 'hista[vllm]'", field="engine") from None
    import torch

    if not torch.cuda.is_available():
        raise InputError(f"the vllm engine needs a CUDA GPU and this machine has none that torch {torch.__version__} "
                         "can use; use --engine hf here", field="engine")
    return vllm


def check_config(config: SamplingConfig) -> None:
    """An InputError naming ``top_p`` unless it is 1: vLLM reports log-probs after top-p and
    hista's old-policy log-probs are before it (SPEC §3, §7; module docstring)."""
    if config.top_p < 1.0:
        raise InputError(f"the vllm engine takes top_p 1 only, got {config.top_p}: vLLM reports log-probs after "
                         "top-p and hista's old-policy log-probs are before it (use --engine hf for top-p)",
                         field="top_p")


def request_settings(config: SamplingConfig, *, seed: int, eos: Sequence[int], max_new_tokens: int) -> dict:
    """The keyword arguments of vLLM's ``SamplingParams`` for one request: one sample,
    the config's temperature (0 = greedy), no top-k or top-p, stop at the model's EOS ids (kept
    in the token ids), the sampled token's log-prob when sampling, no detokenisation (hista
    decodes the ids itself). ``top_p`` below 1 raises an InputError (:func:`check_config`)."""
    check_config(config)
    sampling = config.temperature > 0
    return {"n": 1, "temperature": float(config.temperature), "top_p": 1.0, "seed": int(seed),
            "max_tokens": int(max_new_tokens), "stop_token_ids": sorted(int(i) for i in eos), "ignore_eos": False,
            "logprobs": 0 if sampling else None, "detokenize": False, "skip_special_tokens": False}


def _logprob_value(position: Any, token: int, k: int) -> float:
    """The sampled token's log-prob at one position of vLLM's per-position logprobs (a mapping
    token id -> ``Logprob``); a ValueError naming the position when it is absent."""
    entry = position.get(token) if position is not None else None
    if entry is None:
        raise ValueError(f"vLLM returned no log-prob for the sampled token {token} at completion position {k}")
    value = entry.logprob if hasattr(entry, "logprob") else entry["logprob"]
    return float(value)


def completion_of(output: Any, *, eos: Sequence[int], greedy: bool) -> tuple[list[int], list[float]]:
    """The completion ids (up to and including the first EOS) and per-token log-probs of one
    vLLM ``CompletionOutput`` (SPEC §3). ``output.logprobs`` holds, per generated token, a
    mapping from token id to ``Logprob`` that includes the sampled token (``logprobs=0``); a
    greedy request has none and its log-probs are 0. A ValueError when the output lacks the
    sampled tokens' log-probs."""
    tokens = [int(t) for t in output.token_ids]
    stops = set(int(i) for i in eos)
    end = next((k + 1 for k, t in enumerate(tokens) if t in stops), len(tokens))
    tokens = tokens[:end]
    if greedy:
        return tokens, [0.0] * len(tokens)
    positions = output.logprobs
    if positions is None or len(positions) < len(tokens):
        have = 0 if positions is None else len(positions)
        raise ValueError(f"vLLM returned log-probs for {have} of {len(tokens)} completion tokens (was the request "
                         "made with logprobs=0?)")
    return tokens, [_logprob_value(positions[k], t, k) for k, t in enumerate(tokens)]


def model_source(lm: LoadedModel) -> str:
    """What vLLM loads for ``lm``: the embedded model's safetensors folder, a local
    path, or a Hugging Face id; the in-memory ``tiny`` model is saved to a temporary folder,
    removed when ``lm`` is collected or the process exits."""
    if lm.name == EMBEDDED:
        return str(prepare_embedded(progress=False))
    if Path(lm.name).exists():
        return str(Path(lm.name).resolve())
    if lm.name == "tiny":
        folder = Path(tempfile.mkdtemp(prefix="hista-tiny-"))
        lm.model.save_pretrained(folder)
        lm.tokenizer.save_pretrained(folder)
        weakref.finalize(lm, shutil.rmtree, folder, ignore_errors=True)
        return str(folder)
    return lm.name


class VLLMEngine(PosesProblems):
    """The vLLM rollout engine (GPU; SPEC §7; module docstring): ``generate`` and
    ``generate_from_ids`` as :class:`~hista.rollout.GenerateEngine`'s, with ``lm`` giving the
    tokenizer (chat template, offsets), the model's name and revision. ``batch_size`` is not
    used: vLLM schedules its own batches. ``tensor_parallel_size`` splits the model over that
    many GPUs. Construction raises an InputError without vLLM or a GPU, or with top_p < 1."""

    name = "vllm"

    def __init__(self, lm: LoadedModel, config: Optional[SamplingConfig] = None, *, tensor_parallel_size: int = 1):
        self.lm = lm
        self.config = config or SamplingConfig()
        self.tensor_parallel_size = tensor_parallel_size
        check_config(self.config)  # before loading
        vllm = check_available()
        self._version = vllm.__version__
        source = model_source(lm)
        revision = None if Path(source).exists() or lm.revision == lm.name else lm.revision
        self.llm = vllm.LLM(model=source, tokenizer=source, revision=revision, seed=0, enable_prefix_caching=True,
                            tensor_parallel_size=tensor_parallel_size, logprobs_mode="processed_logprobs",
                            gpu_memory_utilization=GPU_MEMORY_UTILIZATION)
        self._sampling_params = vllm.SamplingParams
        self._tokens_prompt = vllm.TokensPrompt

    def identity(self) -> dict:
        """Which engine samples, for result files: name, vLLM and torch versions and
        the tensor-parallel size; builds and evaluations refuse to mix identities."""
        import torch

        return {"name": self.name, "vllm": self._version, "torch": torch.__version__,
                "tensor_parallel_size": self.tensor_parallel_size}

    def with_config(self, config: SamplingConfig) -> "VLLMEngine":
        """This engine (the same loaded vLLM model) with other sampling settings."""
        check_config(config)
        other = copy.copy(self)
        other.config = config
        return other

    def generate_from_ids(self, prompts: Sequence[Sequence[int]], n: int, *, seed: int = 0,
                          prompt_seeds: Optional[Sequence[int]] = None,
                          progress: Optional[Callable[[int], None]] = None,
                          on_group: Optional[Callable[[int, list[Rollout]], None]] = None,
                          prompt_texts: Optional[Sequence[str]] = None,
                          max_new_tokens: Optional[int] = None) -> list[list[Rollout]]:
        """Sample ``n`` continuations of each token-id prompt, all in one vLLM call, one
        request per sample seeded as every engine seeds it
        (:func:`hista.rollout.config.sample_seeds`); ``progress(k)`` gets the number of sequences
        and ``on_group(i, rollouts)`` every prompt's samples when the call returns."""
        prompts = [list(p) for p in prompts]
        texts = list(prompt_texts) if prompt_texts is not None else [""] * len(prompts)
        eos = eos_ids(self.lm)
        cap = max_new_tokens if max_new_tokens is not None else self.config.max_new_tokens
        rows = [(i, j) for i in range(len(prompts)) for j in range(n)]
        seeds = sample_seeds(len(prompts), n, seed, prompt_seeds)
        params = [self._sampling_params(**request_settings(self.config, seed=s, eos=eos, max_new_tokens=cap))
                  for s in seeds]
        outputs = self.llm.generate([self._tokens_prompt(prompt_token_ids=prompts[i]) for i, _ in rows], params,
                                    use_tqdm=False)
        out: list[list[Rollout]] = [[] for _ in prompts]
        for (i, _), request in zip(rows, outputs):
            completion, logprobs = completion_of(request.outputs[0], eos=eos, greedy=self.config.temperature == 0)
            text, offsets = decode_with_offsets(self.lm.tokenizer, completion)
            out[i].append(Rollout(prompt_ids=prompts[i], completion_ids=completion, completion_text=text,
                                  offsets=offsets, prompt_text=texts[i], logprobs=logprobs))
        if progress:
            progress(len(rows))
        for i, group in enumerate(out):
            if on_group:
                on_group(i, group)
        return out
