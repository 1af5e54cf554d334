"""The PPO critic (SPEC §4.5): a value model (a causal-LM backbone plus a linear head H → 1),
its GAE(λ) regression targets, its training on SVEB rollouts (PPO-1 cross-fitted by problem,
PPO-N on the cases' own problems) and the critics ``sveb eval`` reads.

Reading order: ``targets`` (pure tensor math), ``model`` (:class:`ValueModel`), ``train``
(fitting, and ``hista critic train``), ``store`` (finding the critic that scores a case).
Only ``targets`` is imported here: the model code loads transformers when it is used.
"""

from .targets import gae_advantages, gae_targets

__all__ = ["gae_advantages", "gae_targets"]
