"""Sample and verify groups of rollouts for problem records (SPEC §3)."""

from __future__ import annotations

from typing import Sequence

from tqdm.auto import tqdm

from ..rewards import verify
from ..types import Rollout, RolloutGroup
from .engines import Engine


def score(problem: dict, rollouts: Sequence[Rollout]) -> None:
    """Set every rollout's reward with the problem's verifier against its answer."""
    for r in rollouts:
        r.reward = verify(problem["verifier"], r.completion_text, problem["answer"])


def sample_groups(
    engine: Engine, problems: Sequence[dict], n: int, *, seed: int = 0, progress: bool = True
) -> list[RolloutGroup]:
    """Sample ``n`` rollouts per problem record and set each rollout's reward with the
    problem's verifier; one RolloutGroup per problem, in order."""
    with tqdm(total=len(problems) * n, desc="sampling", unit="seq", disable=not progress) as bar:
        rollouts = engine.generate([p["problem"] for p in problems], n, seed=seed, progress=bar.update)
    groups = []
    for problem, group in zip(problems, rollouts):
        score(problem, group)
        groups.append(RolloutGroup(group, prompt_id=problem["id"], problem=dict(problem)))
    return groups


def policy_accuracy(
    engine: Engine, problems: Sequence[dict], n: int, *, seed: int = 0, progress: bool = True
) -> list[float]:
    """Mean reward of ``n`` samples per problem: the accuracy used by the difficulty filter
    (paper: keep 0.1-0.8 of 20)."""
    groups = sample_groups(engine, problems, n, seed=seed, progress=progress)
    return [float(g.rewards.mean()) if len(g) else 0.0 for g in groups]
