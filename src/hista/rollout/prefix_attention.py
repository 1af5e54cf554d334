"""Decode-step attention that reads a prefix shared by many rows once.

The G rollouts of one prompt, and the M continuations of one SVEB state, decode together and
attend to the same prefix. Copying the prefix's keys and values to every row makes each decode
step read them once per row. Here the prefix stays one copy per distinct prefix: each decode
step attends all of a group's queries to it at once, attends each row to its own generated
tokens separately, and merges the two parts by their log-sum-exps (the shared-prefix, or
cascade, attention of FlashInfer and vLLM). The result equals attention
over the concatenated keys up to float rounding.

It is a transformers attention function (``AttentionInterface``), set on the model only for
the duration of :func:`decode_step`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional, Sequence

import torch

NAME = "hista_shared_prefix"


#: from this many prefixes with rows in a batch on, a decode step attends to all of them in one
#: batched, masked call per layer instead of one call per prefix (bench/generation.py --distinct)
BATCHED_GROUPS = 4


@dataclass
class SharedPrefix:
    """The prefixes' keys and values per layer ([P, KV heads, W, head dim], left-padded to W),
    each prefix's length, and which prefix each batch row continues. Rows of one prefix must be
    contiguous in the batch (:meth:`select` keeps their order).

    With :data:`BATCHED_GROUPS` or more prefixes in use, the rows are laid out for one batched
    call per layer: prefix g's rows take the slots g·R … g·R + R − 1 of ``slots`` (R the most
    rows any prefix has), and ``valid`` [P, W] marks each prefix's real, unpadded positions."""

    keys: list[torch.Tensor]
    values: list[torch.Tensor]
    lengths: list[int]
    prefix_of_row: list[int]
    groups: list[tuple[int, int, int]] = field(default_factory=list)
    calls: int = 0
    slots: Optional[torch.Tensor] = None
    rows_per_group: int = 0
    valid: Optional[torch.Tensor] = None

    def __post_init__(self) -> None:
        self.select(range(len(self.prefix_of_row)))

    def select(self, rows: Sequence[int]) -> None:
        """Keep the batch rows ``rows`` (in order), as the generation loop drops finished rows;
        the keys and values of prefixes left without rows are dropped too."""
        self.prefix_of_row = [self.prefix_of_row[r] for r in rows]
        used = sorted(set(self.prefix_of_row))
        if len(used) < len(self.lengths):
            index = torch.tensor(used, device=self.keys[0].device)
            self.keys = [k.index_select(0, index) for k in self.keys]
            self.values = [v.index_select(0, index) for v in self.values]
            self.lengths = [self.lengths[p] for p in used]
            renumber = {p: k for k, p in enumerate(used)}
            self.prefix_of_row = [renumber[p] for p in self.prefix_of_row]
        self.groups = []
        for row, prefix in enumerate(self.prefix_of_row):
            if self.groups and self.groups[-1][0] == prefix:
                self.groups[-1] = (prefix, self.groups[-1][1], row + 1)
            else:
                if any(g[0] == prefix for g in self.groups):
                    raise ValueError("rows of one prefix must be contiguous in the batch")
                self.groups.append((prefix, row, row + 1))
        self.slots = self.valid = None
        if len(self.groups) >= BATCHED_GROUPS and [g[0] for g in self.groups] == list(range(len(self.lengths))):
            self.rows_per_group = max(end - start for _, start, end in self.groups)
            device, width = self.keys[0].device, self.keys[0].shape[2]
            self.slots = torch.tensor([p * self.rows_per_group + row - start for p, start, end in self.groups
                                       for row in range(start, end)], device=device)
            lengths = torch.tensor(self.lengths, device=device)
            self.valid = torch.arange(width, device=device) >= width - lengths[:, None]


def flash(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, scale: float,
          mask: Optional[torch.Tensor] = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Attention output and log-sum-exp of the scores per query ([N, heads, L]), from the CPU
    kernel that ``scaled_dot_product_attention`` uses (which returns no log-sum-exp itself),
    with an optional additive ``mask`` broadcast over the scores."""
    return torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(query, key, value, attn_mask=mask,
                                                                      scale=scale)


def attention(module, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, attention_mask,
               scaling: Optional[float] = None, dropout: float = 0.0, shared_prefix: Optional[SharedPrefix] = None,
               **kwargs) -> tuple[torch.Tensor, None]:
    """Attention of ``query`` [B, H, 1, D] over the row's shared prefix and its own ``key`` /
    ``value`` [B, KV, S, D] (the tokens it generated, the current one included): each part is
    attended separately and the two are weighted by their shares of the softmax mass (SPEC §7:
    each distinct prefix is encoded once; registered as transformers' attention interface)."""
    if shared_prefix is None:
        from transformers.integrations.sdpa_attention import sdpa_attention_forward

        return sdpa_attention_forward(module, query, key, value, attention_mask, dropout=dropout, scaling=scaling,
                                      **kwargs)
    if query.shape[2] != 1 or kwargs.get("sliding_window") or kwargs.get("softcap"):
        raise ValueError("shared-prefix attention handles one new token per row, full attention, no softcap")
    batch, heads, _, dim = query.shape
    q = query.reshape(batch, key.shape[1], heads // key.shape[1], dim)  # the query heads that share one KV head
    mixed = attend(q, key, value, shared_prefix, module.layer_idx, scaling if scaling is not None else dim ** -0.5)
    shared_prefix.calls += 1
    return mixed.reshape(batch, 1, heads, dim), None


def attend(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, prefix: SharedPrefix, layer: int,
           scale: float) -> torch.Tensor:
    """Attention [B, KV, R, D] of ``query`` [B, KV, R, D] (the R query heads of each KV head) over
    each row's prefix in layer ``layer`` of ``prefix`` and its own ``key`` / ``value``
    [B, KV, S, D]: each part attended separately, the two weighted by their shares of the
    softmax mass. The prefix part is one call per prefix, or one batched call for all
    of them when ``prefix`` lays its rows out so (:data:`BATCHED_GROUPS`)."""
    kv_heads, dim = key.shape[1], query.shape[-1]
    own, own_lse = flash(query, key, value, scale)
    keys, values = prefix.keys[layer], prefix.values[layer]
    if prefix.slots is not None:
        out, lse = _batched(query, keys, values, prefix, scale)
    else:
        outs, lses = [], []
        for source, start, end in prefix.groups:
            # all of the group's queries against its prefix (the valid, right end of the padded prefix)
            rows = query[start:end].transpose(0, 1).reshape(1, kv_heads, -1, dim)
            first = keys.shape[2] - prefix.lengths[source]
            out, lse = flash(rows, keys[source : source + 1, :, first:], values[source : source + 1, :, first:],
                              scale)
            outs.append(out.view(kv_heads, end - start, -1, dim).transpose(0, 1))
            lses.append(lse.view(kv_heads, end - start, -1).transpose(0, 1))
        out, lse = (torch.cat(outs), torch.cat(lses)) if len(outs) > 1 else (outs[0], lses[0])
    # the prefix's share of the softmax mass is sigmoid(lse - own_lse); merged in float32, returned
    # in the model's dtype (a bfloat16 model's parts are bfloat16, their log-sum-exps float32)
    share = torch.sigmoid(lse.float() - own_lse.float()).unsqueeze(-1)
    return torch.lerp(own.float(), out.float(), share).to(own.dtype)


def _batched(query: torch.Tensor, keys: torch.Tensor, values: torch.Tensor, prefix: SharedPrefix,
             scale: float) -> tuple[torch.Tensor, torch.Tensor]:
    """Attention output [B, KV, R, D] and log-sum-exp [B, KV, R] of every row's queries over its
    prefix, all prefixes in one masked call: prefix g's rows are gathered into its R·rows slots
    (empty slots attend too and are dropped), padding positions are masked."""
    batch, kv_heads, heads, dim = query.shape
    count, per = keys.shape[0], prefix.rows_per_group
    grid = query.new_zeros(count * per, kv_heads, heads, dim).index_copy_(0, prefix.slots, query)
    grid = grid.view(count, per, kv_heads, heads, dim).transpose(1, 2).reshape(count, kv_heads, per * heads, dim)
    scores = torch.matmul(grid, keys.transpose(-1, -2)).mul_(scale)
    scores.masked_fill_(~prefix.valid[:, None, None, :], float("-inf"))
    lse = torch.logsumexp(scores, dim=-1)
    out = torch.matmul(scores.sub_(lse.unsqueeze(-1)).exp_(), values)
    out = out.view(count, kv_heads, per, heads, dim).transpose(1, 2).reshape(count * per, kv_heads, heads, dim)
    lse = lse.view(count, kv_heads, per, heads).transpose(1, 2).reshape(count * per, kv_heads, heads)
    return out.index_select(0, prefix.slots), lse.index_select(0, prefix.slots)


def supported(model: torch.nn.Module) -> bool:
    """Whether ``model``'s decode steps can use shared-prefix attention: its KV cache has only
    full-attention layers and it is not set to a flash or flex kernel."""
    from transformers.cache_utils import DynamicCache, DynamicLayer

    implementation = getattr(model.config, "_attn_implementation", None)
    layers = DynamicCache(config=model.config).layers
    full = bool(layers) and all(type(layer) is DynamicLayer for layer in layers)
    return (full and implementation in ("sdpa", "eager") and next(model.parameters()).device.type == "cpu"
            and hasattr(torch.ops.aten, "_scaled_dot_product_flash_attention_for_cpu"))


def decode_step(model: torch.nn.Module, tokens: torch.Tensor, position: torch.Tensor, cache, cache_arg: str,
                prefix: SharedPrefix) -> torch.Tensor:
    """The float32 next-token logits [B, V] of one decode step that feeds ``tokens`` [B, 1] at
    ``position`` [B, 1], with ``cache`` holding each row's generated tokens and ``prefix`` the
    prefixes. Raises if a layer of the model did not attend through this module."""
    from transformers import AttentionInterface

    AttentionInterface.register(NAME, attention)
    previous, before = model.config._attn_implementation, prefix.calls
    model.config._attn_implementation = NAME
    try:
        # a 4D mask is passed through untouched; the prefix's padding is in ``prefix``
        placeholder = torch.ones(1, 1, 1, 1, dtype=torch.bool, device=tokens.device)
        logits = model(input_ids=tokens, attention_mask=placeholder, position_ids=position, use_cache=True,
                       logits_to_keep=1, shared_prefix=prefix, **{cache_arg: cache}).logits[:, -1].float()
    finally:
        model.config._attn_implementation = previous
    if prefix.calls - before != len(prefix.keys):
        raise RuntimeError(f"{type(model).__name__}: {prefix.calls - before} of {len(prefix.keys)} layers attended "
                           "through transformers' attention interface; shared-prefix decoding needs all of them")
    return logits
