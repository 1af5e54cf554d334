"""From a batch of prompts, completions and rewards to per-token advantages, for any estimator
(SPEC §3, §4, §9; docs/estimators.md "Use in your own loop").

:func:`token_advantages` is the one call a training loop of one's own makes: padded or ragged
prompt and completion ids, the rewards, a group index per row, and (for the estimators that read
hidden states) the model or the hidden states already at hand; it returns the [B, T] advantages.
Underneath, the layout functions convert a padded batch, TRL's (``prompt_ids`` [B, P] padded on
the left, ``completion_ids`` [B, T] padded on the right), into the RolloutGroups estimators read
and their advantages back (:func:`batch_to_groups`, :func:`unpad`, :func:`build_group`,
:func:`group_rows`, :func:`scatter`), and :func:`estimate` runs an estimator on a batch's groups;
hista's trainer and the verl plugin take the same path: rows cut into groups, :func:`estimate`,
:func:`scatter`.
"""

from __future__ import annotations

import hashlib
import itertools
import operator
from typing import Any, Hashable, Optional, Sequence, Union

import torch

from . import estimators
from .estimators.base import Estimator, LearnsAcrossGroups, check_finite
from .models.forward import decoder_layers, model_hidden_states
from .models.loading import context_length
from .rollout.offsets import decode_with_offsets
from .types import Rollout, RolloutGroup

__all__ = ["batch_to_groups", "build_group", "estimate", "group_rows", "scatter", "token_advantages", "unpad"]

Ids = Union[torch.Tensor, Sequence[Sequence[int]]]

# The largest |reward| token_advantages takes. Estimators compute in float32 (largest 3.4e38):
# rewards of ±3e38 overflowed a group's std (every GRPO advantage 0) and hista's values (-inf).
# Within ±1e15 even a sum of squared rewards over 3e8 rows stays finite.
REWARD_BOUND = 1e15


def batch_to_groups(
    prompt_ids: torch.Tensor,
    prompt_mask: torch.Tensor,
    completion_ids: torch.Tensor,
    completion_mask: torch.Tensor,
    rewards: torch.Tensor,
    group_size: int,
    *,
    problem_ids: Optional[Sequence[Optional[str]]] = None,
    hidden: Optional[torch.Tensor] = None,
    tokenizer: Any = None,
) -> list[RolloutGroup]:
    """Cut a padded batch into RolloutGroups of ``group_size`` consecutive rows (SPEC §3).

    ``rewards`` [B]; ``hidden`` [B, P + T, H] aligned with the columns of ``prompt_ids`` then
    ``completion_ids`` (padding dropped: a rollout gets [prompt_len + T_i, H]); ``tokenizer``
    decodes completion text and token offsets (for estimators that declare ``needs_text``).
    A group's ``prompt_id`` is its problem id (``problem_ids[row]``), so that value tables kept
    across steps follow the problem, not the batch slot; without one it is a digest of the
    prompt's token ids.
    """
    batch, width = completion_ids.shape
    if group_size < 1 or batch % group_size:
        raise ValueError(f"{batch} rows cannot be cut into groups of {group_size}")
    if rewards.numel() != batch:
        raise ValueError(f"{rewards.numel()} rewards for {batch} completions")
    if problem_ids is not None and len(problem_ids) != batch:
        raise ValueError(f"{len(problem_ids)} problem ids for {batch} completions")
    prompt_width = prompt_ids.size(1)
    if hidden is not None and hidden.shape[:2] != (batch, prompt_width + width):
        raise ValueError(f"hidden states of shape {tuple(hidden.shape)} for a batch of {batch} x "
                         f"({prompt_width} + {width}) tokens")
    prompts, completions, states = unpad(prompt_ids, prompt_mask, completion_ids, completion_mask, hidden)
    groups = []
    for start in range(0, batch, group_size):
        rows = slice(start, start + group_size)
        groups.append(build_group(prompts[rows], completions[rows], rewards[rows].tolist(),
                                  hidden=None if states is None else states[rows], tokenizer=tokenizer,
                                  problem_id=problem_ids[start] if problem_ids is not None else None))
    return groups


def unpad(prompt_ids: torch.Tensor, prompt_mask: torch.Tensor, completion_ids: torch.Tensor,
          completion_mask: torch.Tensor, hidden: Optional[torch.Tensor] = None
          ) -> tuple[list[list[int]], list[list[int]], Optional[list[torch.Tensor]]]:
    """Each row of a padded batch without its padding (SPEC §3): prompt ids (left padding
    dropped), completion ids (right padding dropped) and, with ``hidden`` [B, P + T, H], the
    row's hidden states [prompt_len + T_i, H] (None without)."""
    prompt_width = prompt_ids.size(1)
    lengths = completion_mask.sum(dim=1).long().tolist()
    prompts, completions, states = [], [], []
    for i, length in enumerate(lengths):
        keep = prompt_mask[i].bool()
        prompts.append(prompt_ids[i][keep].tolist())
        completions.append(completion_ids[i, :length].tolist())
        if hidden is not None:
            states.append(torch.cat([hidden[i, :prompt_width][keep], hidden[i, prompt_width: prompt_width + length]]))
    return prompts, completions, states if hidden is not None else None


def build_group(prompts: Sequence[Sequence[int]], completions: Sequence[Sequence[int]], rewards: Sequence[float], *,
                hidden: Optional[Sequence[torch.Tensor]] = None, problem_id: Optional[str] = None,
                tokenizer: Any = None) -> RolloutGroup:
    """One RolloutGroup from unpadded rows (SPEC §3): prompt and completion ids, rewards, and
    optionally each row's hidden states [prompt + completion, H]; ``tokenizer`` decodes text and
    offsets. Its ``prompt_id`` is ``problem_id``, else a digest of the first prompt's ids."""
    rollouts = []
    for i, (prompt, ids, reward) in enumerate(zip(prompts, completions, rewards)):
        text, offsets = decode_with_offsets(tokenizer, ids) if tokenizer is not None else ("", None)
        rollouts.append(Rollout(prompt_ids=prompt, completion_ids=ids, reward=float(reward), completion_text=text,
                                offsets=offsets, hidden=None if hidden is None else hidden[i]))
    prompt_id = str(problem_id) if problem_id is not None else _digest(rollouts[0].prompt_ids)
    return RolloutGroup(rollouts, prompt_id=prompt_id)


def scatter(per_group: Sequence[Sequence[torch.Tensor]], shape: Sequence[int], *,
            rows: Optional[Sequence[Sequence[int]]] = None, device: Optional[torch.device] = None) -> torch.Tensor:
    """The way back from groups to a batch: each group's per-rollout advantages [T_i]
    written into the batch rows ``rows`` names for the group (default: the groups' rollouts in
    consecutive rows, the order of :func:`batch_to_groups`), in a zero-padded float32 tensor of
    ``shape`` [B, T] on ``device``. Every path from a batch to advantages ends here:
    :func:`token_advantages`, hista's trainer and the verl plugin."""
    out = torch.zeros(tuple(shape), dtype=torch.float32, device=device)
    if rows is None:
        sizes = [len(group) for group in per_group]
        if sum(sizes) != out.size(0):
            raise ValueError(f"advantages for {sum(sizes)} rollouts but the batch has {out.size(0)} rows")
        ends = list(itertools.accumulate(sizes))
        rows = [range(end - size, end) for end, size in zip(ends, sizes)]
    for group_rows, advantages in zip(rows, per_group):
        for r, adv in zip(group_rows, advantages):
            out[r, : adv.numel()] = adv.to(out.device)
    return out


def _digest(token_ids: Sequence[int]) -> str:
    """A stable id for a prompt without a problem id: a digest of its token ids."""
    return "prompt-" + hashlib.sha1(",".join(map(str, token_ids)).encode()).hexdigest()[:16]


def estimate(est: Estimator, groups: Sequence[RolloutGroup], *, gae_lambda: Optional[float] = None,
             scale: Optional[str] = None, batch_std: Optional[float] = None) -> list[list[torch.Tensor]]:
    """Each group's per-token advantages under ``est`` (SPEC §4): an estimator that learns
    across groups (the probe) is fitted for each group on the batch's other groups and its own
    history first (``for_batch``, which then adds the batch to that history). ``gae_lambda`` and
    ``scale`` default to the estimator's own (1.0; its ``default_scale``, else ``group``);
    ``batch_std`` is the reward std over the batch, for ``scale="batch"``."""
    fitted = est.for_batch(groups) if isinstance(est, LearnsAcrossGroups) else [est] * len(groups)
    gae_lambda = est.default_gae_lambda() if gae_lambda is None else float(gae_lambda)
    scale = scale or est.default_scale or "group"
    return [e.token_advantages(g, gae_lambda=gae_lambda, scale=scale, batch_std=batch_std)
            for e, g in zip(fitted, groups)]


def token_advantages(estimator: Union[str, Estimator], prompt_ids: Ids, completion_ids: Ids,
                     rewards: Union[torch.Tensor, Sequence[float]], groups: Sequence[Hashable], *,
                     prompt_mask: Optional[torch.Tensor] = None, completion_mask: Optional[torch.Tensor] = None,
                     model: Optional[torch.nn.Module] = None,
                     hidden: Optional[Union[torch.Tensor, Sequence[torch.Tensor]]] = None, tokenizer: Any = None,
                     gae_lambda: Optional[float] = None, scale: Optional[str] = None,
                     batch_size: int = 8) -> torch.Tensor:
    """Per-token advantages [B, T] of a batch under ``estimator`` (SPEC §3, §4; docs/estimators.md
    "Use in your own loop"), float32 on the CPU, zero past each completion's end.

    - ``estimator``: a registered name (``"grpo"``, ``"numca"``, ``"hista"``, ``"probe"``,
      ``"blend"``) or an estimator object (``hista.estimators.get(name, **config)``). The probe
      learns from earlier batches: pass the same object every step to keep its history.
    - ``prompt_ids`` and ``completion_ids``: tensors [B, P] and [B, T] with ``prompt_mask`` and
      ``completion_mask`` (TRL's layout: prompts padded on the left, completions on the right;
      without a mask every position counts), or lists of B token-id lists. T is the width of
      ``completion_ids``, or the longest completion for lists.
    - ``rewards``: B finite numbers. ``groups``: B hashable keys, one per row; the rows with one
      key are the rollouts of one prompt, compared with each other (in any order; at least two
      per group). A key is also the group's ``prompt_id``.
    - For an estimator that reads hidden states (``hista``, ``probe``): ``hidden``, the states
      of its layer (:meth:`Estimator.hidden_layer`), [B, P + T, H] aligned with the padded
      prompt and completion columns, or B tensors [P_i + T_i, H]; or ``model``, a transformers
      causal LM run here once, without its output head, under no_grad, each group's prompt
      encoded once (:func:`hista.models.forward.model_hidden_states`; micro-batches of
      ``batch_size`` completions).
    - ``tokenizer``: for an estimator that reads the completions' text (``numca``): text and
      token offsets are decoded from the ids, never re-tokenised.
    - ``gae_lambda``, ``scale``: as :func:`estimate`; ``batch`` scaling uses the std of ``rewards``.

    Bad input raises a ValueError whose message starts with the argument: lengths that differ;
    ids that are not integers (lists of ints, or tensors of an integer dtype), negative, past
    the vocabulary of the model or tokenizer that reads them, or rows (prompt + completion)
    longer than the model's context, or an empty prompt for the model; masks of another shape,
    not 0/1, or completions not padded on the right; rewards that are not real numbers, not
    finite or beyond ±``REWARD_BOUND`` (1e15); a group key that is not hashable or a group of
    one row; hidden states of another shape or not finite; a layer the model does not have; a
    ``batch_size`` that is not a positive int; or a model, hidden states or tokenizer the
    estimator needs and did not get.
    """
    est = estimators.get(estimator) if isinstance(estimator, str) else estimator
    _check_served(est)
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise ValueError(f"batch_size: expected a positive int (completions per micro-batch of the model's pass), "
                         f"got {batch_size!r}")
    batch = _Batch.of(prompt_ids, completion_ids, prompt_mask, completion_mask)
    reward = _rewards(rewards, len(batch.prompts))
    members = group_rows(groups, len(batch.prompts))
    if est.needs_text:
        if tokenizer is None:
            raise ValueError(f"tokenizer: {est.name} reads the completions' text; pass the tokenizer that made the ids")
        batch.check_ids(len(tokenizer), "the tokenizer")
    states = batch.states(est, hidden, model, batch_size, tokenizer) if est.needs_hidden else None
    built = batch.groups(members, reward, states, tokenizer if est.needs_text else None)
    batch_std = float(reward.std()) if reward.numel() > 1 else 0.0
    per_group = estimate(est, built, gae_lambda=gae_lambda, scale=scale, batch_std=batch_std)
    return scatter(per_group, (len(batch.prompts), batch.width), rows=list(members.values()))


def _check_served(est: Estimator) -> None:
    """Refuse an estimator that needs more than a batch holds (:func:`hista.estimators.refusal`)."""
    what = estimators.refusal("token_advantages", est)
    if what is not None:
        raise ValueError(f"estimator: {est.name} needs {what}; token_advantages serves the estimators that read the "
                         "batch and hidden states (grpo, numca, hista, probe)")


class _Batch:
    """A batch's rows without padding, and its padded tensors when it came as tensors."""

    def __init__(self, prompts: list[list[int]], completions: list[list[int]], width: int,
                 padded: Optional[tuple[torch.Tensor, ...]] = None):
        self.prompts, self.completions, self.width, self.padded = prompts, completions, width, padded

    @classmethod
    def of(cls, prompt_ids: Ids, completion_ids: Ids, prompt_mask: Optional[torch.Tensor],
           completion_mask: Optional[torch.Tensor]) -> "_Batch":
        """The rows of masked tensors (padding dropped) or of id lists, their lengths and shapes checked."""
        if isinstance(prompt_ids, torch.Tensor) != isinstance(completion_ids, torch.Tensor):
            raise ValueError("prompt_ids, completion_ids: give both as tensors (with masks) or both as lists of "
                             "id lists")
        if not isinstance(prompt_ids, torch.Tensor):
            if prompt_mask is not None or completion_mask is not None:
                raise ValueError("prompt_mask, completion_mask: only with tensors; lists of id lists hold no padding")
            prompts, completions = _id_lists("prompt_ids", prompt_ids), _id_lists("completion_ids", completion_ids)
            if len(prompts) != len(completions):
                raise ValueError(f"completion_ids: {len(completions)} completions for {len(prompts)} prompts")
            return cls(prompts, completions, max((len(c) for c in completions), default=0)).check_ids()
        for name, ids in (("prompt_ids", prompt_ids), ("completion_ids", completion_ids)):
            if ids.dim() != 2:
                raise ValueError(f"{name}: expected a [B, width] tensor, got shape {tuple(ids.shape)}")
            if ids.dtype == torch.bool or ids.is_floating_point() or ids.is_complex():
                raise ValueError(f"{name}: expected token ids of an integer dtype, got {ids.dtype} (a float tensor "
                                 "may already have rounded them: bfloat16 holds integers exactly only up to 256)")
        if completion_ids.size(0) != prompt_ids.size(0):
            raise ValueError(f"completion_ids: {completion_ids.size(0)} rows for {prompt_ids.size(0)} prompts")
        masks = []
        for name, mask, ids in (("prompt_mask", prompt_mask, prompt_ids),
                                ("completion_mask", completion_mask, completion_ids)):
            mask = torch.ones_like(ids) if mask is None else mask
            if tuple(mask.shape) != tuple(ids.shape):
                raise ValueError(f"{name}: shape {tuple(mask.shape)}, but the ids are {tuple(ids.shape)}")
            other = (mask != 0) & (mask != 1)
            if bool(other.any()):
                raise ValueError(f"{name}: holds {mask[other][0].item()}; a mask is bool or holds only 0 and 1")
            masks.append(mask.cpu())
        if bool((masks[1][:, 1:] > masks[1][:, :-1]).any()):
            raise ValueError("completion_mask: a completion's tokens come first in its row (padding on the right)")
        padded = (prompt_ids.cpu(), masks[0], completion_ids.cpu(), masks[1])
        prompts, completions, _ = unpad(*padded)
        return cls(prompts, completions, completion_ids.size(1), padded).check_ids()

    def check_ids(self, vocab: Optional[int] = None, reader: str = "") -> "_Batch":
        """This batch, after refusing a negative id and, with ``vocab``, an id at or past it (the
        vocabulary of ``reader``); one min and max per row."""
        for name, rows in (("prompt_ids", self.prompts), ("completion_ids", self.completions)):
            for r, row in enumerate(rows):
                low, high = (min(row), max(row)) if row else (0, 0)
                if low < 0 or (vocab is not None and high >= vocab):
                    within = f"[0, {vocab}), the vocabulary of {reader}" if vocab is not None else "0 or more"
                    raise ValueError(f"{name}: row {r} holds id {low if low < 0 else high}; token ids are {within}")
        return self

    def states(self, est: Estimator, hidden: Any, model: Optional[torch.nn.Module], batch_size: int,
               tokenizer: Any) -> list[torch.Tensor]:
        """Each row's hidden states [P_i + T_i, H] of ``est``'s layer: from ``hidden``, or one
        no-grad pass of ``model`` in eval mode (its mode is restored after)."""
        if hidden is None:
            if model is None:
                raise ValueError(f"model: {est.name} reads hidden states; pass the model (run once here) or hidden=")
            return _finite(self._model_states(est, model, batch_size, tokenizer), "model")
        return _finite(self._given_states(hidden), "hidden")

    def _model_states(self, est: Estimator, model: torch.nn.Module, batch_size: int,
                      tokenizer: Any) -> list[torch.Tensor]:
        """The rows' states from one pass of ``model``, after checking that it can read them: a
        prompt token per row, ids within its embeddings, rows within its context."""
        empty = next((r for r, prompt in enumerate(self.prompts) if not prompt), None)
        if empty is not None:
            raise ValueError(f"prompt_ids: row {empty} is empty; the model's pass encodes each prompt first and "
                             "needs at least one prompt token (e.g. BOS)")
        self.check_ids(model.get_input_embeddings().num_embeddings, "the model")
        context = context_length(model.config) or float("inf")
        for r, (prompt, completion) in enumerate(zip(self.prompts, self.completions)):
            if len(prompt) + len(completion) > context:
                raise ValueError(f"completion_ids: row {r} holds {len(prompt)} prompt + {len(completion)} completion "
                                 f"tokens, past the model's context of {context} positions (max_position_embeddings)")
        layer = est.hidden_layer(decoder_layers(model))
        training = model.training
        model.eval()  # no dropout in the states
        try:
            return model_hidden_states(model, self.prompts, self.completions, layer=layer, batch_size=batch_size,
                                       pad=getattr(tokenizer, "pad_token_id", None) or 0)
        except IndexError as exc:
            raise ValueError(f"model: {est.name}: {exc}") from None
        finally:
            model.train(training)

    def _given_states(self, hidden: Any) -> list[torch.Tensor]:
        """The rows' states from the caller's ``hidden``, its shape checked against the ids."""
        rows = len(self.prompts)
        if isinstance(hidden, torch.Tensor):
            if self.padded is None:
                raise ValueError("hidden: a [B, P + T, H] tensor goes with padded id tensors; with lists of ids give "
                                 "a list of [P_i + T_i, H] tensors")
            width = self.padded[0].size(1) + self.padded[2].size(1)
            if hidden.dim() != 3 or tuple(hidden.shape[:2]) != (rows, width):
                raise ValueError(f"hidden: shape {tuple(hidden.shape)}; expected [{rows}, {width}, H], the columns "
                                 "of prompt_ids then completion_ids")
            return unpad(*self.padded, hidden)[2]
        states = list(hidden)
        if len(states) != rows:
            raise ValueError(f"hidden: {len(states)} tensors for {rows} rows")
        for r, (state, prompt, completion) in enumerate(zip(states, self.prompts, self.completions)):
            if state.dim() != 2 or state.size(0) != len(prompt) + len(completion):
                raise ValueError(f"hidden[{r}]: shape {tuple(state.shape)}; expected [{len(prompt) + len(completion)}, "
                                 "H], the row's prompt and completion tokens")
        return states

    def groups(self, members: dict[Hashable, list[int]], reward: torch.Tensor,
               states: Optional[list[torch.Tensor]], tokenizer: Any) -> list[RolloutGroup]:
        """One RolloutGroup per key (its ``prompt_id``), rows in batch order; ``tokenizer`` decodes text."""
        return [build_group([self.prompts[r] for r in rows], [self.completions[r] for r in rows],
                            reward[rows].tolist(), hidden=None if states is None else [states[r] for r in rows],
                            problem_id=str(key), tokenizer=tokenizer)
                for key, rows in members.items()]

def _id_lists(name: str, rows: Any) -> list[list[int]]:
    """``rows``, B sequences of token ids, as lists of ints; a row holding a float, a string or
    anything else that is not an integer raises ValueError naming ``name``."""
    out: list[list[int]] = []
    row: Any = rows
    try:
        for row in rows:
            out.append([operator.index(i) for i in row])
    except TypeError:
        raise ValueError(f"{name}: expected lists of int token ids (or a [B, width] integer tensor); row {len(out)} "
                         f"is {row!r:.80}") from None
    return out


def _finite(states: list[torch.Tensor], what: str) -> list[torch.Tensor]:
    """``states``, after refusing a row that holds a NaN or an infinite value (``what`` names their source)."""
    for r, state in enumerate(states):
        if not bool(torch.isfinite(state).all()):
            raise ValueError(f"{what}: the hidden states of row {r} hold {int((~torch.isfinite(state)).sum())} "
                             "non-finite values; they must be finite")
    return states


def _rewards(rewards: Union[torch.Tensor, Sequence[float]], rows: int) -> torch.Tensor:
    """The rewards as a float32 CPU vector of one finite real number per row within ±REWARD_BOUND."""
    try:
        if isinstance(rewards, torch.Tensor) and rewards.is_complex():
            raise TypeError
        reward = torch.as_tensor(rewards, dtype=torch.float64).flatten().cpu()
    except (TypeError, ValueError):
        raise ValueError(f"rewards: expected {rows} real numbers, got {rewards!r:.80}") from None
    if reward.numel() != rows:
        raise ValueError(f"rewards: {reward.numel()} rewards for {rows} completions")
    big = check_finite(reward, "rewards").abs() > REWARD_BOUND
    if bool(big.any()):
        raise ValueError(f"rewards: holds {reward[big][0].item():g}, beyond ±{REWARD_BOUND:g}; advantages are "
                         "computed in float32, where sums and spreads of rewards near its limit (3.4e38) overflow: "
                         "rescale them")
    return reward.float()


def group_rows(groups: Sequence[Hashable], count: int, *, singles: bool = False) -> dict[Hashable, list[int]]:
    """The batch rows of each group key (``groups``: one key for each of ``count`` rows), keys in
    order of first appearance (SPEC §3): what :func:`token_advantages` and the verl plugin cut a
    batch by. A group of one row is refused unless ``singles`` (verl's batches without a ``uid``:
    a row is its own group)."""
    keys = groups.tolist() if isinstance(groups, torch.Tensor) else list(groups)
    if len(keys) != count:
        raise ValueError(f"groups: {len(keys)} group keys for {count} completions (one per row)")
    members: dict[Hashable, list[int]] = {}
    for row, key in enumerate(keys):
        try:
            if isinstance(key, torch.Tensor):  # hashed by identity: equal keys would not meet
                raise TypeError
            members.setdefault(key, []).append(row)
        except TypeError:
            raise ValueError(f"groups: the key of row {row} is {key!r:.60}, which does not hash by value; give "
                             "one key per row, e.g. a str or an int (the prompt's index), or a 1-D tensor") from None
    single = [key for key, rows in members.items() if len(rows) < 2]
    if single and not singles:
        raise ValueError(f"groups: group {single[0]!r} has one row ({len(single)} such group(s)); an advantage "
                         "compares a rollout with the other rollouts of its prompt, so a group needs two or more")
    return members
