"""The PPO critic as a value model (SPEC §4.5): a causal-LM backbone plus a linear head H → 1
(``model``: :class:`~hista.critic.model.ValueModel`, its folders), its regression on GAE(λ)
targets of rollouts (``fit``) and the critic trained alongside a policy (``online``). It knows
nothing of SVEB: training critics on SVEB cases and finding the critic of a case live in
:mod:`hista.sveb.critic_training` and :mod:`hista.sveb.critics`; the GAE math in
:mod:`hista.estimators.gae`. Nothing is imported here: the model code loads transformers
when it is used."""
