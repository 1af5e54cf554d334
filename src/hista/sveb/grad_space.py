"""The parameter space a policy-gradient step is measured in, for ``hista sveb grad`` (docs/sveb.md
"Update direction"): from per-token weights over a prompt's sampled rows to the step vector
``Σ_t w_t ∇ log π(y_t | s_t)``, and from a direction to every token's first-order response to it.

Every step the instrument compares is of that form: at the first iteration of a batch the policy
is the sampling policy (ratio 1), so the recipe's loss differentiates to per-token weights on the
score gradients, and the reference gradient of expected reward is the same sum with the
leave-one-out REINFORCE weights. Two spaces:

- :class:`HeadSpace` (``params="head"``): the output layer's weight ``W`` [V, d] with the trunk's
  features fixed. ``∂ log π_τ(y | h) / ∂W = (e_y − p) hᵀ / τ`` in closed form, so a step costs
  one [V, n] x [n, d] product and no backward pass: what makes the instrument run on a CPU.
- :class:`FullSpace` (``params="all"``): every parameter, by autograd (a backward pass per step,
  a double backward per direction); for small models and GPUs.

Both are built from one prompt's rows (:class:`Rows`) and the sampling temperature τ (the
trainer's logits are divided by it too)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import torch
from torch.nn.attention import SDPBackend, sdpa_kernel

Tensor = torch.Tensor
#: rows whose tokens :class:`HeadSpace` puts through one output-layer product (one product over a
#: group's tokens is about twice as fast on a CPU as one per row; bench/grad_cost.py)
ROWS_PER_PRODUCT = 8


@dataclass
class Rows:
    """One prompt's sampled rows: the prompt's ids, each row's completion ids, and the features
    of the last hidden state (the output layer's input) at the positions that predict each
    completion token ([T_i, d] per row; only :class:`HeadSpace` reads them)."""

    prompt_ids: list[int]
    completions: list[list[int]]
    features: list[Tensor] | None = None

    def lengths(self) -> list[int]:
        return [len(c) for c in self.completions]


class HeadSpace:
    """Steps in the output layer's weight (module docstring): the softmax of every token is
    computed once, then a step over rows ``k`` with weights ``w`` is
    ``(index_add(y, w·h) − Pᵀ (w·h)) / τ`` over those rows' tokens."""

    name = "head"

    def __init__(self, model: torch.nn.Module, rows: Rows, temperature: float):
        head = model.get_output_embeddings()
        if getattr(head, "bias", None) is not None:
            raise ValueError("params='head' needs an output layer without a bias; use params='all'")
        self.weight = head.weight.detach().float()
        self.tau = float(temperature)
        self.rows = rows
        self.feats = [f.float() for f in rows.features]
        self.ids = [torch.tensor(c, dtype=torch.long) for c in rows.completions]
        self.probs: list[Tensor] = []
        self.logps: list[Tensor] = []
        self.entropies: list[Tensor] = []
        for start in range(0, len(self.ids), ROWS_PER_PRODUCT):
            chunk = range(start, min(start + ROWS_PER_PRODUCT, len(self.ids)))
            logp_all = torch.log_softmax(torch.cat([self.feats[r] for r in chunk]) @ self.weight.T / self.tau, dim=-1)
            p = logp_all.exp()
            y = torch.cat([self.ids[r] for r in chunk])
            sizes = [len(self.ids[r]) for r in chunk]
            self.probs += p.split(sizes)
            self.logps += logp_all.gather(-1, y[:, None])[:, 0].split(sizes)
            self.entropies += (-(p * logp_all).sum(-1)).split(sizes)

    def step(self, weights: dict[int, Tensor]) -> Tensor:
        """``Σ_rows Σ_t w_t ∇_W log π(y_t)``, flattened [V·d]: one product over the rows' tokens."""
        rows = list(weights)
        x = torch.cat([weights[r].float()[:, None] * self.feats[r] for r in rows])
        out = -(torch.cat([self.probs[r] for r in rows]).T @ x)
        out.index_add_(0, torch.cat([self.ids[r] for r in rows]), x)
        return out.div_(self.tau).reshape(-1)

    def response(self, rows: Sequence[int], direction: Tensor) -> dict[int, Tensor]:
        """Each token's ``∇_W log π(y_t) · direction``: how its log-probability moves, to first
        order, along ``direction`` (per row, [T_i])."""
        rows = list(rows)
        z = torch.cat([self.feats[r] for r in rows]) @ direction.reshape(self.weight.shape).T  # [tokens, V]
        ids = torch.cat([self.ids[r] for r in rows])
        moved = (z.gather(-1, ids[:, None])[:, 0] - (torch.cat([self.probs[r] for r in rows]) * z).sum(-1)) / self.tau
        return dict(zip(rows, moved.split([len(self.ids[r]) for r in rows])))

    def gram(self, rows: Sequence[int]) -> Tensor:
        """The inner products of the score gradients of every token of ``rows`` (in order), [n, n]:
        ``((e_y − p)·(e_y' − p')) (h·h') / τ²``; a step's squared norm is ``wᵀ K w``."""
        ids = torch.cat([self.ids[r] for r in rows])
        probs = torch.cat([self.probs[r] for r in rows])
        feats = torch.cat([self.feats[r] for r in rows])
        at_y = probs[:, ids]  # [t, t'] = p_t(y_t')
        outputs = (ids[:, None] == ids[None, :]).float() - at_y - at_y.T + probs @ probs.T
        return outputs * (feats @ feats.T) / self.tau ** 2

    def norm(self, weights: dict[int, Tensor], gram: Tensor) -> float:
        """The norm of the step with ``weights`` over the rows ``gram`` was made for (in order)."""
        w = torch.cat([weights[r].float() for r in weights])
        return float(w @ gram @ w).__abs__() ** 0.5


class FullSpace:
    """Steps in every parameter of ``model`` by autograd (module docstring); the model runs in
    float32 eval mode on its device, a row at a time (no padding to get wrong)."""

    name = "all"

    def __init__(self, model: torch.nn.Module, rows: Rows, temperature: float):
        self.model, self.rows, self.tau = model, rows, float(temperature)
        self.params = [p for p in model.parameters() if p.requires_grad]
        self.logps, self.entropies = [], []
        with torch.no_grad():
            for row in range(len(rows.completions)):
                logp_all = self._logp_all(row)
                y = self._ids(row)
                self.logps.append(logp_all.gather(-1, y[:, None])[:, 0].cpu())
                self.entropies.append((-(logp_all.exp() * logp_all).sum(-1)).cpu())

    def _ids(self, row: int) -> Tensor:
        return torch.tensor(self.rows.completions[row], dtype=torch.long, device=self.params[0].device)

    def _logp_all(self, row: int) -> Tensor:
        prompt, comp = self.rows.prompt_ids, self.rows.completions[row]
        ids = torch.tensor([prompt + comp], device=self.params[0].device)
        logits = self.model(input_ids=ids).logits[0, len(prompt) - 1: len(prompt) + len(comp) - 1]
        return torch.log_softmax(logits.float() / self.tau, dim=-1)

    def _token_logp(self, row: int) -> Tensor:
        return self._logp_all(row).gather(-1, self._ids(row)[:, None])[:, 0]

    def step(self, weights: dict[int, Tensor]) -> Tensor:
        out = [torch.zeros(p.numel(), device=p.device) for p in self.params]
        for row, w in weights.items():
            total = (self._token_logp(row) * w.to(self.params[0].device)).sum()
            grads = torch.autograd.grad(total, self.params, allow_unused=True)
            for acc, g in zip(out, grads):
                if g is not None:
                    acc += g.reshape(-1).float()
        return torch.cat(out).cpu()

    def gram(self, rows: Sequence[int]) -> None:
        return None  # norms come from the materialised step

    def norm(self, weights: dict[int, Tensor], gram: None) -> float:
        return float(self.step(weights).norm())

    def response(self, rows: Sequence[int], direction: Tensor) -> dict[int, Tensor]:
        with sdpa_kernel(SDPBackend.MATH):  # the fused CPU attention has no double backward
            return self._response(rows, direction)

    def _response(self, rows: Sequence[int], direction: Tensor) -> dict[int, Tensor]:
        out = {}
        pieces = torch.split(direction.to(self.params[0].device), [p.numel() for p in self.params])
        for row in rows:
            v = torch.ones(len(self.rows.completions[row]), device=self.params[0].device, requires_grad=True)
            total = (self._token_logp(row) * v).sum()
            grads = torch.autograd.grad(total, self.params, create_graph=True, allow_unused=True)
            dot = sum((g.reshape(-1) * d).sum() for g, d in zip(grads, pieces) if g is not None)
            out[row] = torch.autograd.grad(dot, v)[0].detach().cpu()
        return out


SPACES = {"head": HeadSpace, "all": FullSpace}
