"""How the next token is chosen (SPEC §7 sampling): transformers' ``do_sample`` with a
temperature, top-p and no top-k, or the argmax; the token's log-prob under softmax(logits / T)
before top-p (the old-policy log-prob of SPEC §3); a counter-based uniform number per row, so
that what a row draws depends on its seed and its own progress only; and where a completion
ends. Shared by every decoding loop of the transformers engine."""

from __future__ import annotations

from typing import Sequence

import numpy as np
import torch


def _top_p_filter(logits: torch.Tensor, top_p: float) -> torch.Tensor:
    """Nucleus filtering as transformers' TopPLogitsWarper does it: keep a token while the
    probability of the tokens more probable than it is below ``top_p`` (so at least the most
    probable one), drop the rest. Read off each row's 64, 256 or 1,024 most probable tokens, the
    fewest that hold ``top_p`` of every row's probability, else off the whole sorted row: the
    cost follows the nucleus where it is small, as it is at the temperatures models sample at."""
    peak = logits.amax(dim=-1, keepdim=True)
    total = (logits - peak).exp().sum(dim=-1, keepdim=True, dtype=torch.float64)
    for k in (64, 256, 1024, logits.shape[-1]):
        few = 32 * k <= logits.shape[-1]
        top = logits.topk(k, dim=-1).values if few else logits.sort(dim=-1, descending=True).values
        probs = (top - peak).double().exp() / total  # float64, as a cumulative sum near top_p needs
        if bool((probs.sum(dim=-1) >= top_p).all()) or top.shape[-1] == logits.shape[-1]:
            break
    kept = (probs.cumsum(dim=-1) - probs < top_p).sum(dim=-1, keepdim=True).clamp(min=1)
    return logits.masked_fill(logits < top.gather(-1, kept - 1), float("-inf"))


_BLOCK = 256


def uniforms(seeds: Sequence[int], steps: Sequence[int], device: torch.device | str = "cpu") -> torch.Tensor:
    """One uniform number in [0, 1) per row [B, 1] (float64; SPEC §7 sampling): row r's number
    for its ``steps[r]``-th token, from a counter-based generator (SplitMix64 of the row's seed
    and the step), so that what a row draws depends on its seed and its own progress only, not on
    the batch it runs in."""
    gamma = np.uint64(0x9E3779B97F4A7C15)

    def mix(z: np.ndarray) -> np.ndarray:
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        return z ^ (z >> np.uint64(31))

    with np.errstate(over="ignore"):
        state = mix(np.asarray(seeds, dtype=np.uint64) * gamma)
        bits = mix(state + (np.asarray(steps, dtype=np.uint64) + np.uint64(1)) * gamma)
    return torch.from_numpy((bits >> np.uint64(11)).astype(np.float64) * 2.0 ** -53).to(device).view(-1, 1)


def draw(probs: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
    """One token per row of ``probs`` [B, V] by inverse-CDF sampling with the row's uniform
    number ``u`` [B, 1] (:func:`uniforms`), in two levels: ``u`` picks a block of 256 tokens
    from the rows' cumulative block sums, then the
    token inside the block from that block's cumulative probabilities (both float64, so that
    no probability is lost to rounding). Draws exactly from ``probs`` (a zero-probability token
    is never chosen), like ``torch.multinomial``, at a fraction of its cost on CPU, which draws V
    exponentials per row; the two levels spare a float64 cumulative sum over the vocabulary
    (SPEC §7 sampling)."""
    rows, size = probs.shape
    blocks = -(-size // _BLOCK)
    tiles = probs if size % _BLOCK == 0 else torch.nn.functional.pad(probs, (0, blocks * _BLOCK - size))
    tiles = tiles.reshape(rows, blocks, _BLOCK)
    cdf = tiles.sum(dim=-1, dtype=torch.float64).cumsum(dim=-1)
    u = u.to(torch.float64) * cdf[:, -1:]
    block = torch.searchsorted(cdf, u, right=True).clamp(max=blocks - 1)
    start = torch.where(block > 0, cdf.gather(1, (block - 1).clamp(min=0)), 0.0)
    inside = tiles.gather(1, block[:, :, None].expand(-1, -1, _BLOCK))[:, 0]
    token = torch.searchsorted(start + inside.double().cumsum(dim=-1), u, right=True)
    if bool((token >= _BLOCK).any()):  # rounding put u past the block's sum: its last token of positive probability
        last = _BLOCK - 1 - (inside.flip(-1) > 0).to(torch.uint8).argmax(dim=-1, keepdim=True)
        token = torch.where(token >= _BLOCK, last, token)
    return block * _BLOCK + token


def pick(logits: torch.Tensor, temperature: float, top_p: float, u: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The next token of every row [B, 1] from its float32 ``logits`` [B, V] and its uniform
    number ``u`` [B, 1], and the token's log-prob under softmax(logits / temperature) before
    top-p, the old-policy log-prob of SPEC §3: transformers' ``do_sample`` with
    ``temperature``, ``top_p`` and no top-k, or the argmax when ``temperature`` is 0."""
    logits = logits / max(temperature, 1e-6)
    logp = torch.log_softmax(logits, dim=-1)
    if temperature > 0:
        chosen = draw(logp.exp() if top_p >= 1.0 else _top_p_filter(logits, top_p).softmax(dim=-1), u)
    else:
        chosen = logp.argmax(dim=-1, keepdim=True)  # the argmax of the logits, read off the same pass
    return chosen, logp.gather(-1, chosen)


def completion_length(tokens: Sequence[int], eos: Sequence[int]) -> int:
    """The number of tokens up to and including the first EOS (later positions are
    padding)."""
    for k, t in enumerate(tokens):
        if t in eos:
            return k + 1
    return len(tokens)
